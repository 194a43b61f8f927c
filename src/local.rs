//! Local memory handles (docs/rsmapi.md §4.8): local buffers registered once with a controller, so
//! scatter/gather operations ([`crate::ImportSegment::putv`], [`crate::ImportSegment::getv`])
//! can use them again and again without registering them each time.

use crate::backend::fabric::Registration;
use crate::backend::path::ExportPath;
use crate::controller::Controller;
use crate::memory::{Memory, SegmentMemory};
use crate::sys::mem::Mapping;
use crate::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A local memory handle (`rsm_localmemory_handle_t`): memory registered with one
/// controller, for the local side of scatter/gather entries.
///
/// Cheap to clone; all clones are one handle. [`LocalMemory::free`] frees the handle: later
/// uses of any clone fail with `RSMERR_BAD_LOCALMEM_HNDL`, and the registration and the
/// memory are released when the last operation that uses them has completed.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// let node = rsm::Node::builder().ignore_environment().id(9530).start().await?;
/// let ctrl = node.controller("tcp0").await?;
/// let mem = ctrl.local_memory(8192).await?;
/// mem.write_at(100, b"gather me")?;
/// let mut back = [0u8; 9];
/// mem.read_at(100, &mut back)?;
/// assert_eq!(&back, b"gather me");
/// mem.free()?;
/// node.shutdown().await;
/// # Ok::<_, rsm::Error>(())
/// # })?;
/// # Ok(()) }
/// ```
///
/// **Drop.** The last handle's drop (or [`LocalMemory::free`]) closes the registration once
/// no operation in flight uses it.
#[derive(Clone)]
pub struct LocalMemory {
    inner: Arc<Inner>,
}

struct Inner {
    /// Closed before the memory is freed (fields drop in order).
    reg: Option<Registration>,
    mem: Memory,
    /// The bytes the handle covers (an rsm allocation is rounded up to whole pages).
    len: usize,
    controller: u64,
    controller_name: String,
    freed: AtomicBool,
}

impl std::fmt::Debug for LocalMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMemory")
            .field("controller", &self.inner.controller_name)
            .field("len", &self.inner.len)
            .field("freed", &self.inner.freed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Controller {
    /// Creates a local memory handle over `len` bytes `rsm` allocates
    /// (`rsm_create_localmemory_handle`): page-aligned, zeroed, registered with this
    /// controller for scatter/gather entries. `RSMERR_BAD_LENGTH` for 0 bytes,
    /// `RSMERR_INSUFFICIENT_MEM` when the memory cannot be had (naming the locked-memory
    /// limit when that is the cause).
    ///
    /// Registering may take long for a large handle (the provider, for some the kernel, pins
    /// and maps the pages): on a libfabric controller the allocation and the registration
    /// run on a blocking thread of the node's runtime, not on the caller's.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves the work to finish on the node's thread, where
    /// the handle it made is freed at once (the registration closes before the memory goes).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let node = rsm::Node::builder().ignore_environment().id(9531).start().await?;
    /// let ctrl = node.controller("tcp0").await?;
    /// assert_eq!(ctrl.local_memory(0).await.unwrap_err().name(), "RSMERR_BAD_LENGTH");
    /// let mem = ctrl.local_memory(100).await?;
    /// assert_eq!(mem.len(), 100);
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    pub async fn local_memory(&self, len: usize) -> Result<LocalMemory> {
        let ctrl = self.clone();
        self.off_thread(move || LocalMemory::allocate(&ctrl, len))
            .await
    }

    /// Creates a local memory handle over memory the caller hands over
    /// (`rsm_create_localmemory_handle` with the caller's `vaddr`), which must start on a
    /// page boundary (`RSMERR_BAD_ADDR`) and hold at least one byte (`RSMERR_BAD_LENGTH`).
    /// `rsm` owns the memory from now on, and drops it after the handle was freed and the
    /// last operation using it completed.
    ///
    /// The registration may take long, and runs off the caller's thread, as in
    /// [`Controller::local_memory`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// let node = rsm::Node::builder().ignore_environment().id(9532).start().await?;
    /// let ctrl = node.controller("tcp0").await?;
    /// // An empty Vec's dangling address is not page-aligned.
    /// let e = ctrl.local_memory_from(Vec::<u8>::new()).await.unwrap_err();
    /// assert_eq!(e.name(), "RSMERR_BAD_ADDR");
    /// let mem = ctrl.local_memory_from(rsm::SharedMemory::new(4096)?).await?;
    /// assert_eq!(mem.len(), 4096);
    /// node.shutdown().await;
    /// # Ok::<_, rsm::Error>(())
    /// # })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Controller::local_memory`]: a dropped future's handle is freed on
    /// the node's thread, and with it `mem`.
    pub async fn local_memory_from<M: SegmentMemory>(&self, mem: M) -> Result<LocalMemory> {
        let ctrl = self.clone();
        self.off_thread(move || LocalMemory::adopt(&ctrl, mem))
            .await
    }

    /// Runs `make` (which registers memory) on a blocking thread of the node's runtime;
    /// on `loopback`, which registers nothing, here.
    async fn off_thread(
        &self,
        make: impl FnOnce() -> Result<LocalMemory> + Send + 'static,
    ) -> Result<LocalMemory> {
        const OP: &str = "create_localmemory_handle";
        let node = self.context(OP)?;
        if !self.path().registers() {
            return make();
        }
        node.runtime().spawn_blocking(make).await.map_err(|e| {
            Error::interrupted()
                .op(OP)
                .controller(self.name())
                .detail(format!("the node's task ended: {e}"))
        })?
    }
}

impl LocalMemory {
    /// `len` bytes `rsm` allocates: page-aligned, zeroed, rounded up to whole pages.
    pub(crate) fn allocate(ctrl: &Controller, len: usize) -> Result<Self> {
        const OP: &str = "create_localmemory_handle";
        let ctx = |e: Error| e.op(OP).controller(ctrl.name()).length(len as u64);
        if len == 0 {
            return Err(ctx(
                Error::bad_length().detail("a handle covers at least one byte")
            ));
        }
        let page = crate::sys::limits::page_size();
        let rounded = len
            .checked_next_multiple_of(page)
            .ok_or_else(|| ctx(Error::insufficient_mem().detail("the length overflows")))?;
        let mapping = Mapping::new(rounded).map_err(ctx)?;
        Self::register(ctrl, Memory::Own(mapping), len)
    }

    /// Memory the caller hands over; its address must be page-aligned.
    pub(crate) fn adopt<M: SegmentMemory>(ctrl: &Controller, mem: M) -> Result<Self> {
        const OP: &str = "create_localmemory_handle";
        let mem = Memory::caller(mem);
        let (ptr, len) = (mem.as_ptr(), mem.len());
        let ctx = |e: Error| e.op(OP).controller(ctrl.name()).length(len as u64);
        let page = crate::sys::limits::page_size();
        // The original checks the address first, then the length.
        if ptr.is_null() || ptr as usize % page != 0 {
            return Err(ctx(Error::bad_addr().detail(format!(
                "the address {ptr:p} is not a multiple of the page size ({page})"
            ))));
        }
        if len == 0 {
            return Err(ctx(
                Error::bad_length().detail("a handle covers at least one byte")
            ));
        }
        Self::register(ctrl, mem, len)
    }

    fn register(ctrl: &Controller, mem: Memory, len: usize) -> Result<Self> {
        // SAFETY: the registration is declared before the memory in `Inner`, so it closes
        // first; operations that use it hold the handle until they complete.
        let reg = unsafe { ctrl.path().register_local(&mem, len) }
            .map_err(|e| registration_error(e, len).controller(ctrl.name()))?;
        Ok(LocalMemory {
            inner: Arc::new(Inner {
                reg,
                mem,
                len,
                controller: ctrl.serial(),
                controller_name: ctrl.name().to_string(),
                freed: AtomicBool::new(false),
            }),
        })
    }

    /// The handle's length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the handle covers no bytes (never true).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The controller the memory is registered with.
    pub fn controller_name(&self) -> &str {
        &self.inner.controller_name
    }

    /// Copies `src` into the memory at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check("localmemory_write", offset, src.len())?;
        self.inner.mem.write_at(offset, src);
        Ok(())
    }

    /// Copies from the memory at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check("localmemory_read", offset, dst.len())?;
        self.inner.mem.read_at(offset, dst);
        Ok(())
    }

    /// The start of the memory.
    ///
    /// # Safety
    /// Scatter/gather operations read and write the memory while they are in flight; a
    /// caller that forms references from this pointer must make sure none is in flight
    /// over the range, and must not use the pointer after the last clone was dropped.
    pub unsafe fn as_ptr(&self) -> *mut u8 {
        self.inner.mem.as_ptr()
    }

    /// Frees the handle (`rsm_free_localmemory_handle`): later uses of this handle fail
    /// with `RSMERR_BAD_LOCALMEM_HNDL`. Operations in flight keep the registration and the
    /// memory until they complete. Freeing a handle twice (through a clone) is
    /// `RSMERR_BAD_LOCALMEM_HNDL`.
    pub fn free(self) -> Result<()> {
        if self.inner.freed.swap(true, Ordering::SeqCst) {
            return Err(Error::bad_localmem_hndl()
                .op("free_localmemory_handle")
                .controller(self.inner.controller_name.clone())
                .detail("the handle was freed already"));
        }
        Ok(())
    }

    fn check(&self, op: &'static str, offset: usize, len: usize) -> Result<()> {
        if self.inner.freed.load(Ordering::SeqCst) {
            return Err(Error::bad_localmem_hndl()
                .op(op)
                .detail("the handle was freed"));
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.inner.len)
        {
            return Err(Error::bad_length()
                .op(op)
                .offset(offset as u64)
                .length(len as u64)
                .detail(format!("the handle covers {} bytes", self.inner.len)));
        }
        Ok(())
    }

    /// The local range `offset..offset+len` for an operation on `controller`, with the
    /// descriptor of its registration; the errors of a bad scatter/gather entry.
    pub(crate) fn range(
        &self,
        controller: u64,
        offset: usize,
        len: usize,
    ) -> Result<(*mut u8, *mut libc::c_void)> {
        if self.inner.freed.load(Ordering::SeqCst) {
            return Err(Error::bad_localmem_hndl().detail("the local memory handle was freed"));
        }
        if self.inner.controller != controller {
            return Err(Error::bad_localmem_hndl().detail(format!(
                "the local memory handle belongs to controller {}",
                self.inner.controller_name
            )));
        }
        if offset > self.inner.len {
            return Err(Error::bad_addr().detail(format!(
                "local offset {offset} lies past the handle's {} bytes",
                self.inner.len
            )));
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.inner.len)
        {
            return Err(Error::bad_length().detail(format!(
                "local offset {offset} + length {len} runs past the handle's {} bytes",
                self.inner.len
            )));
        }
        let desc = self
            .inner
            .reg
            .as_ref()
            .map_or(std::ptr::null_mut(), |r| r.desc());
        // In bounds: checked above.
        Ok((self.inner.mem.as_ptr().wrapping_add(offset), desc))
    }
}

/// A refused registration: `RSMERR_INSUFFICIENT_MEM` when the kernel ran out of lockable
/// memory (providers that pin pages are bound by `RLIMIT_MEMLOCK`), else the provider's error.
fn registration_error(e: Error, len: usize) -> Error {
    let no_mem = e.fabric_failure().is_some_and(|f| {
        f.errno == libc::ENOMEM || f.errno == libc::EAGAIN || f.errno == libc::EPERM
    });
    if !no_mem {
        return e;
    }
    let limit = crate::sys::limits::memlock_limit()
        .map_or_else(|| "unlimited".to_string(), |l| format!("{l} bytes"));
    Error::insufficient_mem().length(len as u64).detail(format!(
        "the provider could not register {len} bytes: the locked-memory limit \
         (RLIMIT_MEMLOCK, `ulimit -l`) is {limit}"
    ))
}
