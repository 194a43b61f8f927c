//! Remote atomics (`fi_atomic.h`): which (operation, type) pairs a domain or endpoint
//! performs itself, and the three posts, `fi_atomicmsg`, `fi_fetch_atomic` and
//! `fi_compare_atomic`, each on one value.

use super::{domain::Domain, endpoint::Endpoint, ffi};
use crate::post::PostError;

/// Which of the three atomic calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicKind {
    /// `fi_atomic`: no result.
    Update,
    /// `fi_fetch_atomic`: the previous value comes back.
    Fetch,
    /// `fi_compare_atomic`: a conditional swap with a compare operand.
    Compare,
}

impl AtomicKind {
    /// The `fi_query_atomic` flag that asks about this kind.
    fn query_flag(self) -> u64 {
        match self {
            AtomicKind::Update => 0,
            AtomicKind::Fetch => ffi::FI_FETCH_ATOMIC,
            AtomicKind::Compare => ffi::FI_COMPARE_ATOMIC,
        }
    }
}

impl Domain {
    /// How many values of `datatype` one `kind` post of `op` takes, if the provider
    /// performs it at all (`fi_query_atomic`).
    ///
    /// ```no_run
    /// # fn f(d: &rsm_fabric::Domain) {
    /// use rsm_fabric::{atomic::AtomicKind, ffi};
    /// let native = d
    ///     .query_atomic(AtomicKind::Fetch, ffi::fi_datatype_FI_UINT64, ffi::fi_op_FI_SUM)
    ///     .is_some();
    /// # }
    /// ```
    pub fn query_atomic(
        &self,
        kind: AtomicKind,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
    ) -> Option<usize> {
        let mut attr = ffi::fi_atomic_attr::default();
        // SAFETY: the domain is alive and attr is a valid out-parameter.
        let ret = unsafe {
            ffi::fi_query_atomic(self.as_ptr(), datatype, op, &mut attr, kind.query_flag())
        };
        (ret == 0 && attr.count > 0).then_some(attr.count)
    }
}

impl Endpoint {
    /// How many values of `datatype` one `kind` post of `op` takes on this endpoint
    /// (`fi_atomicvalid`, `fi_fetch_atomicvalid`, `fi_compare_atomicvalid`); `None` where it
    /// performs none, and on connected endpoints, whose providers here have no atomics.
    pub fn atomic_valid(
        &self,
        kind: AtomicKind,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
    ) -> Option<usize> {
        let fid = self.bindable_fid()?;
        let mut count = 0usize;
        // SAFETY: the endpoint is open (bindable_fid says so) and count a valid out-parameter;
        // the calls only read the endpoint's attributes.
        let ret = unsafe {
            match kind {
                AtomicKind::Update => ffi::fi_atomicvalid(fid, datatype, op, &mut count),
                AtomicKind::Fetch => ffi::fi_fetch_atomicvalid(fid, datatype, op, &mut count),
                AtomicKind::Compare => ffi::fi_compare_atomicvalid(fid, datatype, op, &mut count),
            }
        };
        (ret == 0 && count > 0).then_some(count)
    }

    /// Posts `op` with the `count` values at `buf` on as many values of `datatype` from
    /// `addr`/`key` of `dest` (each atomic by itself), without a result (`fi_atomicmsg`),
    /// completed as `flags` asks (`FI_DELIVERY_COMPLETE` to be performed at the target when
    /// it completes).
    ///
    /// # Safety
    /// The `count` values at `buf` must stay readable and `context` valid and unmoved until
    /// the completion for `context` has been read or the endpoint is closed; `desc` is the
    /// descriptor of a registration covering them, or NULL where the provider needs none.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn atomic(
        &self,
        buf: *const u8,
        count: usize,
        desc: *mut libc::c_void,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
        context: *mut ffi::fi_context2,
        flags: u64,
    ) -> std::result::Result<(), PostError> {
        self.post_raw(dest, "fi_atomicmsg", |ep, peer| {
            let iov = ffi::fi_ioc {
                addr: buf as *mut _,
                count,
            };
            let mut desc = desc;
            let rma = ffi::fi_rma_ioc { addr, count, key };
            let msg = ffi::fi_msg_atomic {
                msg_iov: &iov,
                desc: &mut desc,
                iov_count: 1,
                addr: peer,
                rma_iov: &rma,
                rma_iov_count: 1,
                datatype,
                op,
                context: context.cast(),
                data: 0,
            };
            // SAFETY: msg and what it points to live across the call (the provider copies
            // them); the caller keeps buf and context alive until the completion; the
            // endpoint is kept open meanwhile by `post_raw`.
            unsafe { ffi::fi_atomicmsg(ep, &msg, flags | u64::from(ffi::FI_COMPLETION)) }
        })
    }

    /// Posts `op` with the `count` values at `buf` on as many values from `addr`/`key` of
    /// `dest`; the previous values land at `result` (`fi_fetch_atomic`).
    ///
    /// # Safety
    /// As for [`Endpoint::atomic`]; the `count` values at `result` must stay writable and
    /// untouched by anyone else until the completion, with `result_desc` their descriptor
    /// (or NULL).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn fetch_atomic(
        &self,
        buf: *const u8,
        count: usize,
        desc: *mut libc::c_void,
        result: *mut u8,
        result_desc: *mut libc::c_void,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
        context: *mut ffi::fi_context2,
    ) -> std::result::Result<(), PostError> {
        self.post_raw(dest, "fi_fetch_atomic", |ep, peer| {
            // SAFETY: the caller keeps buf, result and context alive until the completion;
            // the endpoint is kept open meanwhile by `post_raw`.
            unsafe {
                ffi::fi_fetch_atomic(
                    ep,
                    buf.cast(),
                    count,
                    desc,
                    result.cast(),
                    result_desc,
                    peer,
                    addr,
                    key,
                    datatype,
                    op,
                    context.cast(),
                )
            }
        })
    }

    /// Posts the conditional swaps `op` (the `count` operands at `buf`, compare values at
    /// `compare`) on as many values from `addr`/`key` of `dest`; the previous values land
    /// at `result` (`fi_compare_atomic`).
    ///
    /// # Safety
    /// As for [`Endpoint::fetch_atomic`], and the `count` values at `compare` stay readable
    /// until the completion, with `compare_desc` their descriptor (or NULL).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn compare_atomic(
        &self,
        buf: *const u8,
        count: usize,
        desc: *mut libc::c_void,
        compare: *const u8,
        compare_desc: *mut libc::c_void,
        result: *mut u8,
        result_desc: *mut libc::c_void,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
        context: *mut ffi::fi_context2,
    ) -> std::result::Result<(), PostError> {
        self.post_raw(dest, "fi_compare_atomic", |ep, peer| {
            // SAFETY: the caller keeps the three buffers and the context alive until the
            // completion; the endpoint is kept open meanwhile by `post_raw`.
            unsafe {
                ffi::fi_compare_atomic(
                    ep,
                    buf.cast(),
                    count,
                    desc,
                    compare.cast(),
                    compare_desc,
                    result.cast(),
                    result_desc,
                    peer,
                    addr,
                    key,
                    datatype,
                    op,
                    context.cast(),
                )
            }
        })
    }
}
