//! Posting a remote atomic on the engine's endpoint (DESIGN.md §13).

use super::{Engine, PostOutcome, outcome};
use crate::fabric::atomic::AtomicKind;
use crate::fabric::ffi;
use crate::reactor::plan::{AT_COMPARE, AT_RESULT, AtomicPost};
use std::sync::atomic::Ordering;

impl Engine {
    /// Posts the remote atomic `a` on the value at `addr`/`key` of `dest`; its buffer at
    /// `buf` holds the operand, the compare value and room for the result (`plan.rs`).
    ///
    /// # Safety
    /// As `Endpoint::fetch_atomic`, for the `ATOMIC_BUF` bytes at `buf` (`plan.rs`), all covered by
    /// `desc` where the domain wants descriptors.
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
        let at = |o: usize| buf.wrapping_add(o);
        let (dt, op) = (a.datatype, a.op);
        // SAFETY: forwarded contract; the three places lie in the buffer.
        outcome(unsafe {
            match a.kind {
                AtomicKind::Update => self
                    .ep
                    .atomic(buf, desc, dest, addr, key, dt, op, ctx, a.flags),
                AtomicKind::Fetch => self.ep.fetch_atomic(
                    buf,
                    desc,
                    at(AT_RESULT),
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
                    desc,
                    at(AT_COMPARE),
                    desc,
                    at(AT_RESULT),
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
