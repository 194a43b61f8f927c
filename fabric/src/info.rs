//! `fi_getinfo`, its hints, and the descriptions it returns.

use super::{error::fi_failure, ffi};
use crate::{Error, Result};
use std::ffi::{CStr, CString};
use std::ptr;

/// The registration modes `rsm` honours on a reliable datagram endpoint (DESIGN.md
/// §5.1): descriptors for local buffers, virtual or offset addressing,
/// allocated memory only, the provider's keys, and registrations bound to the endpoint.
pub const RDM_MR_MODES: u32 = ffi::FI_MR_LOCAL
    | ffi::FI_MR_VIRT_ADDR
    | ffi::FI_MR_ALLOCATED
    | ffi::FI_MR_PROV_KEY
    | ffi::FI_MR_ENDPOINT;

/// The modes honoured on connected endpoints: all but `FI_MR_ENDPOINT`.
pub const MSG_MR_MODES: u32 = RDM_MR_MODES & !ffi::FI_MR_ENDPOINT;

/// Hints for `fi_getinfo`, allocated with `fi_allocinfo` and freed with `fi_freeinfo` (which
/// also frees the strings we `strdup` into it).
pub struct Hints {
    ptr: *mut ffi::fi_info,
}

impl Hints {
    /// Hints for what every `rsm` controller needs: a reliable datagram endpoint with RMA in
    /// both directions, thread safety, and the memory-registration modes `rsm` honours.
    pub fn rsm_rdm() -> Result<Self> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with its attribute structs allocated,
        // or NULL.
        let ptr = unsafe { ffi::fi_allocinfo() };
        if ptr.is_null() {
            return Err(Error::insufficient_mem().op("fi_allocinfo"));
        }
        let hints = Hints { ptr };
        // SAFETY: ptr and its attribute pointers were just allocated by fi_allocinfo and are
        // exclusively ours.
        unsafe {
            let info = &mut *hints.ptr;
            info.caps = u64::from(
                ffi::FI_RMA
                    | ffi::FI_READ
                    | ffi::FI_WRITE
                    | ffi::FI_REMOTE_READ
                    | ffi::FI_REMOTE_WRITE,
            );
            // rsm gives every operation a 64-byte context, so both context modes are honoured.
            info.mode = ffi::FI_CONTEXT | ffi::FI_CONTEXT2;
            (*info.ep_attr).type_ = ffi::fi_ep_type_FI_EP_RDM;
            let dom = &mut *info.domain_attr;
            dom.threading = ffi::fi_threading_FI_THREAD_SAFE;
            dom.mr_mode = RDM_MR_MODES as i32;
        }
        Ok(hints)
    }

    /// The same needs on a connected endpoint (`FI_EP_MSG`): the tcp provider's own RMA,
    /// without rxm's pre-posted receive buffers (see `connected.rs`).
    pub fn rsm_msg() -> Result<Self> {
        let hints = Self::rsm_rdm()?;
        // SAFETY: ep_attr and domain_attr were allocated by fi_allocinfo and are exclusively
        // ours. A connected controller has an endpoint per peer, and a registration can be
        // bound to one endpoint only: no `FI_MR_ENDPOINT` here.
        unsafe {
            (*(*hints.ptr).ep_attr).type_ = ffi::fi_ep_type_FI_EP_MSG;
            (*(*hints.ptr).domain_attr).mr_mode = MSG_MR_MODES as i32;
        }
        Ok(hints)
    }

    /// The hints for a controller's provider: tcp's connected endpoints for `tcp`, a
    /// reliable datagram endpoint for the others; restricted to that provider.
    pub fn for_provider(name: &str) -> Result<Self> {
        let mut hints = if name == "tcp" {
            Self::rsm_msg()?
        } else {
            Self::rsm_rdm()?
        };
        hints.provider(name)?;
        Ok(hints)
    }

    /// Restricts the answer to one provider (`tcp;ofi_rxm`, `shm`, ...).
    pub fn provider(&mut self, name: &str) -> Result<&mut Self> {
        let s = dup_cstr(name)?;
        // SAFETY: fabric_attr was allocated by fi_allocinfo; the old name (NULL or our strdup)
        // is freed and replaced by a malloc'ed copy that fi_freeinfo frees.
        unsafe {
            let fa = &mut *(*self.ptr).fabric_attr;
            libc::free(fa.prov_name.cast());
            fa.prov_name = s;
        }
        Ok(self)
    }

    /// Restricts the answer to one domain (`lo`, `shm`, ...).
    pub fn domain(&mut self, name: &str) -> Result<&mut Self> {
        let s = dup_cstr(name)?;
        // SAFETY: as in `provider`, for domain_attr.name.
        unsafe {
            let da = &mut *(*self.ptr).domain_attr;
            libc::free(da.name.cast());
            da.name = s;
        }
        Ok(self)
    }

    /// Asks that an RMA read after an RMA write to the same target sees the write
    /// (`FI_ORDER_RMA_RAW`): the fence of a put on providers without real delivery
    /// completion relies on it.
    pub fn read_after_write(&mut self) -> &mut Self {
        // SAFETY: tx_attr was allocated by fi_allocinfo and is exclusively ours.
        unsafe { (*(*self.ptr).tx_attr).msg_order |= ffi::FI_ORDER_RMA_RAW };
        self
    }

    /// Asks for remote atomics too (`FI_ATOMIC`): only providers that perform them answer.
    pub fn atomics(&mut self) -> &mut Self {
        // SAFETY: the fi_info was allocated by fi_allocinfo and is exclusively ours.
        unsafe { (*self.ptr).caps |= u64::from(ffi::FI_ATOMIC) };
        self
    }

    /// Asks for transmit and receive queues of at most `tx` and `rx` entries: rxm pre-posts
    /// a receive buffer per receive entry, which an endpoint that carries only atomics
    /// does not need thousands of.
    pub fn queue_sizes(&mut self, tx: usize, rx: usize) -> &mut Self {
        // SAFETY: tx_attr and rx_attr were allocated by fi_allocinfo and are exclusively ours.
        unsafe {
            (*(*self.ptr).tx_attr).size = tx;
            (*(*self.ptr).rx_attr).size = rx;
        }
        self
    }

    /// Asks for a provider progress thread for data (`FI_PROGRESS_AUTO`).
    #[allow(dead_code)] // chosen by measurement in the reactor
    pub fn auto_progress(&mut self) -> &mut Self {
        // SAFETY: domain_attr was allocated by fi_allocinfo and is exclusively ours.
        unsafe { (*(*self.ptr).domain_attr).data_progress = ffi::fi_progress_FI_PROGRESS_AUTO };
        self
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        // SAFETY: ptr came from fi_allocinfo and is freed once, here.
        unsafe { ffi::fi_freeinfo(self.ptr) };
    }
}

fn dup_cstr(s: &str) -> Result<*mut libc::c_char> {
    let c = CString::new(s)
        .map_err(|_| Error::bad_addr().detail(format!("{s:?} contains a NUL byte")))?;
    // SAFETY: c is a valid NUL-terminated string; strdup copies it into malloc'ed memory.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(Error::insufficient_mem().op("strdup"));
    }
    Ok(p)
}

/// The list `fi_getinfo` returned; freed with `fi_freeinfo`.
pub struct InfoList {
    head: *mut ffi::fi_info,
}

impl InfoList {
    /// `fi_getinfo` with `node` as the local source address (`FI_SOURCE`), so that tcp and
    /// sockets answer with the domain of that interface (`lo` for 127.0.0.1) instead of the
    /// first one they find. No domain is an empty list, not an error.
    pub fn get(hints: &Hints, source_node: Option<&str>) -> Result<Self> {
        let node = source_node
            .map(CString::new)
            .transpose()
            .map_err(|_| Error::bad_addr().detail("source address contains a NUL byte"))?;
        let mut head = ptr::null_mut();
        let flags = if node.is_some() { ffi::FI_SOURCE } else { 0 };
        // SAFETY: node is NULL or a valid C string, service is NULL, hints is a valid fi_info
        // we own, and head receives a list we then own.
        let ret = unsafe {
            ffi::fi_getinfo(
                ffi::FI_HEADER_VERSION,
                node.as_ref().map_or(ptr::null(), |n| n.as_ptr()),
                ptr::null(),
                flags,
                hints.ptr,
                &mut head,
            )
        };
        if ret == -(ffi::FI_ENODATA as i32) {
            return Ok(InfoList {
                head: ptr::null_mut(),
            });
        }
        if ret != 0 {
            return Err(Error::insufficient_resources()
                .op("get_controller")
                .fabric(fi_failure("fi_getinfo", ret as isize)));
        }
        Ok(InfoList { head })
    }

    /// The entries, in the provider's order of preference.
    pub fn iter(&self) -> impl Iterator<Item = InfoRef<'_>> {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            // SAFETY: cur is an element of the list we own, alive as long as &self.
            let r = unsafe { &*cur };
            cur = r.next;
            Some(InfoRef { raw: r })
        })
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.head.is_null() {
            // SAFETY: head came from fi_getinfo and is freed once, here.
            unsafe { ffi::fi_freeinfo(self.head) };
        }
    }
}

/// One entry of an [`InfoList`], borrowed.
#[derive(Clone, Copy)]
pub struct InfoRef<'a> {
    raw: &'a ffi::fi_info,
}

/// One owned description (a `fi_dupinfo` copy), kept by the objects opened from it.
pub struct Info {
    ptr: *mut ffi::fi_info,
}

// SAFETY: an Info is never written after fi_dupinfo; libfabric only reads it.
unsafe impl Send for Info {}
// SAFETY: as above, shared read-only access.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: ptr came from fi_dupinfo and is freed once, here.
        unsafe { ffi::fi_freeinfo(self.ptr) };
    }
}

impl Info {
    /// Takes ownership of a description libfabric handed over (a connection request's).
    ///
    /// # Safety
    /// `ptr` must be a valid `fi_info` (one element) that nothing else frees.
    pub unsafe fn from_raw(ptr: *mut ffi::fi_info) -> Info {
        Info { ptr }
    }

    /// The borrowed view of this description.
    pub fn view(&self) -> InfoRef<'_> {
        // SAFETY: ptr is a valid fi_info owned by self, alive as long as the borrow.
        let raw = unsafe { &*self.ptr };
        InfoRef { raw }
    }

    /// The raw `fi_info`, for the calls that open objects from it.
    pub fn as_ptr(&self) -> *mut ffi::fi_info {
        self.ptr
    }
}

fn cstr_field(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric's string fields are NUL-terminated C strings owned by the fi_info.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl<'a> InfoRef<'a> {
    /// A copy that outlives the list (`fi_dupinfo`), with `next` cleared.
    pub fn dup(&self) -> Result<Info> {
        // SAFETY: raw is a valid fi_info; fi_dupinfo deep-copies it (one element, next = NULL).
        let ptr = unsafe { ffi::fi_dupinfo(self.raw) };
        if ptr.is_null() {
            return Err(Error::insufficient_mem().op("fi_dupinfo"));
        }
        Ok(Info { ptr })
    }

    fn domain_attr(&self) -> &'a ffi::fi_domain_attr {
        // SAFETY: fi_getinfo fills domain_attr for every entry it returns.
        unsafe { &*self.raw.domain_attr }
    }
    fn fabric_attr(&self) -> &'a ffi::fi_fabric_attr {
        // SAFETY: fi_getinfo fills fabric_attr for every entry it returns.
        unsafe { &*self.raw.fabric_attr }
    }
    fn tx_attr(&self) -> &'a ffi::fi_tx_attr {
        // SAFETY: fi_getinfo fills tx_attr for every entry it returns.
        unsafe { &*self.raw.tx_attr }
    }
    fn ep_attr(&self) -> &'a ffi::fi_ep_attr {
        // SAFETY: fi_getinfo fills ep_attr for every entry it returns.
        unsafe { &*self.raw.ep_attr }
    }

    /// The provider, such as `tcp;ofi_rxm`.
    pub fn provider(&self) -> String {
        cstr_field(self.fabric_attr().prov_name)
    }
    /// The fabric name, such as `127.0.0.1/32`.
    pub fn fabric_name(&self) -> String {
        cstr_field(self.fabric_attr().name)
    }
    /// The domain name, such as `lo`.
    pub fn domain_name(&self) -> String {
        cstr_field(self.domain_attr().name)
    }
    /// Whether the provider addresses endpoints by IP (socket address formats).
    pub fn is_ip(&self) -> bool {
        let f = self.raw.addr_format;
        f == ffi::FI_SOCKADDR_IN || f == ffi::FI_SOCKADDR_IN6 || f == ffi::FI_SOCKADDR
    }

    /// The address format (`FI_SOCKADDR_IN`, `FI_ADDR_STR`, ...) of the domain's endpoints.
    pub fn addr_format(&self) -> u32 {
        self.raw.addr_format
    }

    /// The capabilities (`FI_RMA`, `FI_ATOMIC`, ...).
    pub fn caps(&self) -> u64 {
        self.raw.caps
    }
    /// Whether the provider uses the memory of each operation's context (`FI_CONTEXT` or
    /// `FI_CONTEXT2` in the mode it answered with); otherwise a context is only a value it
    /// hands back in the completion.
    pub fn uses_op_context(&self) -> bool {
        self.raw.mode & (ffi::FI_CONTEXT | ffi::FI_CONTEXT2) != 0
    }
    /// The memory-registration mode bits (`FI_MR_*`).
    pub fn mr_mode(&self) -> i32 {
        self.domain_attr().mr_mode
    }
    /// Bytes in a registration key.
    pub fn mr_key_size(&self) -> usize {
        self.domain_attr().mr_key_size
    }
    /// How many registrations the domain holds.
    pub fn mr_cnt(&self) -> usize {
        self.domain_attr().mr_cnt
    }
    /// Bytes of remote completion data.
    pub fn cq_data_size(&self) -> usize {
        self.domain_attr().cq_data_size
    }
    /// Whether the provider moves data without the application reading its queue. tcp's
    /// connected endpoints claim `FI_PROGRESS_AUTO` in 1.17 but start no thread: their data
    /// moves only inside reads of the completion queue (measured: a delivery-complete write
    /// to a target that stopped reading its queue for 2 s completed 2 s later).
    pub fn data_progress_auto(&self) -> bool {
        self.domain_attr().data_progress == ffi::fi_progress_FI_PROGRESS_AUTO
            && !(self.is_msg() && self.provider() == "tcp")
    }
    /// The largest message (and RMA transfer) in bytes.
    pub fn max_msg_size(&self) -> usize {
        self.ep_attr().max_msg_size
    }
    /// Whether the endpoint type is reliable datagram (`FI_EP_RDM`).
    pub fn is_rdm(&self) -> bool {
        self.ep_attr().type_ == ffi::fi_ep_type_FI_EP_RDM
    }
    /// A connection-oriented endpoint (`FI_EP_MSG`): peers are connected, not addressed.
    pub fn is_msg(&self) -> bool {
        self.ep_attr().type_ == ffi::fi_ep_type_FI_EP_MSG
    }
    /// The largest write the provider copies at once.
    pub fn inject_size(&self) -> usize {
        self.tx_attr().inject_size
    }
    /// Transmit queue depth.
    pub fn tx_size(&self) -> usize {
        self.tx_attr().size
    }
    /// Local buffers per operation.
    pub fn iov_limit(&self) -> usize {
        self.tx_attr().iov_limit
    }
    /// Remote ranges per operation.
    pub fn rma_iov_limit(&self) -> usize {
        self.tx_attr().rma_iov_limit
    }

    /// The destination address's bytes (a connection request's: the connecting peer's
    /// socket address), empty when there is none.
    pub fn dest_addr(&self) -> &[u8] {
        let (p, len) = (self.raw.dest_addr, self.raw.dest_addrlen);
        if p.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: dest_addr points to dest_addrlen bytes owned by the fi_info, which
        // outlives the borrow of self.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
    }

    /// The local source address, formatted: `ip:port` for socket formats, the provider's
    /// string for `FI_ADDR_STR`, `None` for formats rsm does not know.
    pub fn source_address(&self) -> Option<String> {
        let (p, len) = (self.raw.src_addr, self.raw.src_addrlen);
        if p.is_null() || len == 0 {
            return None;
        }
        // SAFETY: src_addr points to src_addrlen bytes owned by the fi_info.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
        match self.raw.addr_format {
            f if f == ffi::FI_SOCKADDR_IN || f == ffi::FI_SOCKADDR_IN6 || f == ffi::FI_SOCKADDR => {
                sockaddr_to_string(bytes)
            }
            f if f == ffi::FI_ADDR_STR => {
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
            }
            _ => None,
        }
    }
}

/// Formats a `sockaddr_in`/`sockaddr_in6` held in `bytes`, checking its length first.
fn sockaddr_to_string(bytes: &[u8]) -> Option<String> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    let family = u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]);
    let port = u16::from_be_bytes([*bytes.get(2)?, *bytes.get(3)?]);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = bytes.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::from((Ipv4Addr::from(ip), port)).to_string())
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = bytes.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::from((Ipv6Addr::from(ip), port)).to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getinfo_lists_rdm_rma_domains_on_loopback() {
        let hints = Hints::rsm_rdm().unwrap();
        let list = InfoList::get(&hints, Some("127.0.0.1")).unwrap();
        let provs: Vec<String> = list.iter().map(|i| i.provider()).collect();
        assert!(provs.iter().any(|p| p == "tcp;ofi_rxm"), "{provs:?}");
        for i in list.iter() {
            assert!(i.is_rdm());
            assert!(i.caps() & u64::from(ffi::FI_RMA) != 0);
            if i.provider() == "tcp;ofi_rxm" {
                assert_eq!(i.domain_name(), "lo");
            }
        }
        let copy = list.iter().next().unwrap().dup().unwrap();
        assert_eq!(copy.view().provider(), provs[0]);
    }

    #[test]
    fn hints_restrict_the_provider() {
        let mut hints = Hints::rsm_rdm().unwrap();
        hints.provider("shm").unwrap();
        let list = InfoList::get(&hints, None).unwrap();
        assert!(list.iter().all(|i| i.provider() == "shm"));
        let mut none = Hints::rsm_rdm().unwrap();
        none.provider("no-such-provider").unwrap();
        assert_eq!(InfoList::get(&none, None).unwrap().iter().count(), 0);
    }
}
