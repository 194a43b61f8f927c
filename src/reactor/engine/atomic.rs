//! Posting a remote atomic on the engine's endpoint (DESIGN.md §13).

use super::{Engine, PostOutcome, outcome};
use crate::fabric::atomic::AtomicKind;
use crate::fabric::ffi;
use crate::reactor::plan::AtomicPost;
use std::sync::atomic::Ordering;

impl Engine {
    /// Posts the remote atomics `a` on the `a.count` values from `addr`/`key` of `dest`;
    /// the buffer at `buf` holds the operands, and the compare values and room for the
    /// results where `a` says (`plan.rs`).
    ///
    /// # Safety
    /// As `Endpoint::fetch_atomic`, for the buffer's operands, compare values and results,
    /// all covered by `desc` where the domain wants descriptors.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn post_atomic(
        &self,
        a: AtomicPost,
        buf: *mut u8,
        desc: *mut libc::c_void,
        dest: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        ctx: *mut ffi::fi_context2,
    ) -> PostOutcome {
        if self.stop.load(Ordering::SeqCst) {
            return PostOutcome::Closed;
        }
        let at = |o: u32| buf.wrapping_add(o as usize);
        let (dt, op, n) = (a.datatype, a.op, a.count as usize);
        // SAFETY: forwarded contract; the three places lie in the buffer.
        outcome(unsafe {
            match a.kind {
                AtomicKind::Update => self
                    .ep
                    .atomic(buf, n, desc, dest, addr, key, dt, op, ctx, a.flags),
                AtomicKind::Fetch => self.ep.fetch_atomic(
                    buf,
                    n,
                    desc,
                    at(a.result_at),
                    desc,
                    dest,
                    addr,
                    key,
                    dt,
                    op,
                    ctx,
                ),
                AtomicKind::Compare => self.ep.compare_atomic(
                    buf,
                    n,
                    desc,
                    at(a.compare_at),
                    desc,
                    at(a.result_at),
                    desc,
                    dest,
                    addr,
                    key,
                    dt,
                    op,
                    ctx,
                ),
            }
        })
    }
}
