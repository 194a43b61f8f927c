//! The atomics' baseline: `fi_fetch_atomic` (fetch-add), `fi_compare_atomic` (cswap) and
//! `fi_atomicmsg` with `FI_DELIVERY_COMPLETE` (add) on one u64 per slot of the peer's
//! buffer, busy-polled, with the slots' operand, compare value and result in the local
//! registration (what rsm's operation buffer holds).

use super::{Baseline, STALL, index_in, op_failed, stalled};
use crate::bench::cli::Op;
use rsm::{Error, Result};
use rsm_fabric::endpoint::PostError;
use rsm_fabric::ffi;
use std::collections::VecDeque;
use std::time::Instant;

/// What an atomic run did: per slot, how many operations it made, and whether every
/// compare-and-swap found the value it expected.
pub(crate) struct AtomicRun {
    pub(crate) counts: Vec<u64>,
    pub(crate) hits: bool,
}

impl Baseline {
    /// The u64 the slot's operations act on: word `slot` of the peer's buffer.
    fn word(&self, slot: usize) -> u64 {
        self.remote.base + 8 * slot as u64
    }

    /// Posts `op` for `slot`, whose word is believed to hold `cur`.
    fn post_atomic(&mut self, op: Op, slot: usize, cur: u64) -> std::result::Result<(), PostError> {
        let at = slot * self.stride;
        let (buf, cmp, res) = (
            self.local.ptr(at),
            self.local.ptr(at + 8),
            self.local.ptr(at + 16),
        );
        let next = if op == Op::Cswap {
            cur.wrapping_add(1)
        } else {
            1
        };
        // SAFETY: the slot's first 24 bytes lie in the local registration; nothing in
        // flight reads or writes them (one operation per slot), so they are written here
        // before the post and read after its completion.
        unsafe {
            buf.cast::<u64>().write_unaligned(next);
            cmp.cast::<u64>().write_unaligned(cur);
        }
        let desc = self.local.desc();
        let ctx = self.ctxs[slot * self.parts].get();
        let (dt, r) = (ffi::fi_datatype_FI_UINT64, self.remote);
        let word = self.word(slot);
        // For the three posts: the slot's bytes and context stay allocated and untouched
        // until the completion for `ctx` is read (Drop leaks them if it never is); `desc`
        // is the registration covering them.
        let posted = match op {
            // SAFETY: see above.
            Op::FetchAdd => unsafe {
                self.raw.ep.fetch_atomic(
                    buf,
                    1,
                    desc,
                    res,
                    desc,
                    r.addr,
                    word,
                    r.key,
                    dt,
                    ffi::fi_op_FI_SUM,
                    ctx,
                )
            },
            // SAFETY: see above.
            Op::Cswap => unsafe {
                self.raw.ep.compare_atomic(
                    buf,
                    1,
                    desc,
                    cmp,
                    desc,
                    res,
                    desc,
                    r.addr,
                    word,
                    r.key,
                    dt,
                    ffi::fi_op_FI_CSWAP,
                    ctx,
                )
            },
            // SAFETY: see above.
            _ => unsafe {
                self.raw.ep.atomic(
                    buf,
                    1,
                    desc,
                    r.addr,
                    word,
                    r.key,
                    dt,
                    ffi::fi_op_FI_SUM,
                    ctx,
                    u64::from(ffi::FI_DELIVERY_COMPLETE),
                )
            },
        };
        if posted.is_ok() {
            self.in_flight += 1;
            self.posted[slot * self.parts] = true;
        }
        posted
    }

    /// The previous value a completed operation of `slot` fetched.
    fn fetched(&self, slot: usize) -> u64 {
        // SAFETY: inside the registration; the operation completed, so the provider wrote
        // the result and touches the slot no more.
        unsafe {
            self.local
                .ptr(slot * self.stride + 16)
                .cast::<u64>()
                .read_unaligned()
        }
    }

    /// Reads completions; the slots whose operation completed.
    fn reap(&mut self, op: Op, out: &mut Vec<usize>) -> Result<()> {
        self.comps.clear();
        match self.raw.cq.read(&mut self.comps) {
            Ok(_) => {}
            Err(rsm_fabric::CqReadError::Entry(e)) => return Err(op_failed(op, e.failure)),
            Err(rsm_fabric::CqReadError::Failed(f)) => return Err(op_failed(op, f)),
        }
        for e in &self.comps {
            let Some(index) = index_in(&self.ctxs, e.context).filter(|&i| self.posted[i]) else {
                return Err(Error::barrier_failure().detail("a completion of no atomic"));
            };
            self.posted[index] = false;
            self.in_flight -= 1;
            out.push(index / self.parts);
        }
        if self.comps.is_empty() {
            self.empty_polls = self.empty_polls.wrapping_add(1);
            if self.empty_polls % super::YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
            // Auto-progress providers (sockets): sleep on the fd, as `poll` does, so their
            // own threads have the cores.
            if let Some(fd) = self.idle_fd {
                if self.raw.cq.trywait() {
                    super::wait_readable(fd, std::time::Duration::from_millis(10));
                }
            }
        } else {
            self.empty_polls = 0;
        }
        Ok(())
    }

    /// `total` operations with `window` slots in flight, each slot's operations one after
    /// another on its own word (starting from `start[slot]`); `tick` now and then. With a
    /// window of 1 every operation's time is pushed to `samples`.
    pub(crate) fn atomic_run(
        &mut self,
        op: Op,
        window: usize,
        start: &[u64],
        total: usize,
        mut samples: Option<&mut Vec<u64>>,
        tick: &mut dyn FnMut(usize),
    ) -> Result<AtomicRun> {
        let window = window.clamp(1, self.slots().min(start.len()));
        let mut cur: Vec<u64> = start[..window].to_vec();
        let mut counts = vec![0u64; window];
        let mut hits = true;
        let mut free: VecDeque<usize> = (0..window).collect();
        let mut began = vec![Instant::now(); window];
        let (mut posted, mut done) = (0usize, 0usize);
        let mut reaped = Vec::with_capacity(window);
        let mut last = Instant::now();
        while done < total {
            while posted < total {
                let Some(slot) = free.pop_front() else { break };
                began[slot] = Instant::now();
                match self.post_atomic(op, slot, cur[slot]) {
                    Ok(()) => posted += 1,
                    Err(PostError::Again | PostError::Connecting { .. }) => {
                        free.push_front(slot);
                        break;
                    }
                    Err(PostError::Failed(f)) => return Err(op_failed(op, f)),
                }
            }
            reaped.clear();
            self.reap(op, &mut reaped)?;
            for &slot in &reaped {
                if let Some(s) = samples.as_deref_mut() {
                    let dt = began[slot].elapsed();
                    s.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                }
                match op {
                    Op::Cswap | Op::FetchAdd => {
                        hits &= self.fetched(slot) == cur[slot];
                    }
                    _ => {}
                }
                cur[slot] = cur[slot].wrapping_add(1);
                counts[slot] += 1;
                free.push_back(slot);
                done += 1;
                if done % 256 == 0 || done == total {
                    tick(done);
                }
                last = Instant::now();
            }
            if reaped.is_empty() && last.elapsed() > STALL {
                return Err(stalled(op, "no completion"));
            }
        }
        Ok(AtomicRun { counts, hits })
    }
}
