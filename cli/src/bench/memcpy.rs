//! The `loopback` controller's baseline: `memcpy` between two mappings of one shared buffer
//! (a memfd mapped twice in this process), with the rsm side's slots, window, warm-up and
//! sample counts. A put copies slot `i` (in the first mapping) to offset 0 of the target
//! region (in the second); a get copies the other way. This is the most any same-host
//! shared-memory path can do, so `ratio` says what rsm's checks and futures cost.

use super::RowSpec;
use super::cli::{Mode, Op};
use super::pattern::pattern;
use super::raw::round_up;
use super::report::Progress;
use super::stats::{BATCH, Batches, Summary};
use crate::sys::shm::{SharedMap, sealed_memfd};
use rsm::{Error, Result};
use rustix::fd::AsFd;
use std::time::Instant;

pub(crate) struct MemcpyBaseline {
    /// The buffer as the "importer" maps it: the slots live here, from `stride` on.
    local: SharedMap,
    /// The same buffer mapped again: the target region is its first `stride` bytes.
    remote: SharedMap,
    stride: usize,
    slots: usize,
}

impl MemcpyBaseline {
    /// A buffer for the target region and `slots` slots of up to `max` bytes each.
    pub(crate) fn open(max: usize, slots: usize) -> Result<Self> {
        let page = crate::sys::limits::page_size();
        let stride = round_up(max.max(1), page);
        let total = stride * (slots + 1);
        let fail = |e: std::io::Error| Error::insufficient_mem().detail(format!("{e}"));
        let fd = sealed_memfd("rsm-bench-memcpy", total as u64).map_err(fail)?;
        let local = SharedMap::map(fd.as_fd(), 0, total, true, None).map_err(fail)?;
        let remote = SharedMap::map(fd.as_fd(), 0, total, true, None).map_err(fail)?;
        Ok(MemcpyBaseline {
            local,
            remote,
            stride,
            slots,
        })
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: slot i < slots lies within the mapping (stride * (slots + 1) bytes).
        unsafe { self.local.as_ptr().add(self.stride * (1 + i % self.slots)) }
    }

    fn fill(&self, at: *mut u8, seed: u64, size: usize) {
        let p = pattern(seed, size);
        // SAFETY: at is the target region or a slot, each stride >= size bytes.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), at, size) };
    }

    fn holds(&self, at: *const u8, seed: u64, size: usize) -> bool {
        // SAFETY: as in fill; the buffer is not written while this reads.
        let have = unsafe { std::slice::from_raw_parts(at, size) };
        have == pattern(seed, size).as_slice()
    }

    fn once(&self, op: Op, i: usize, size: usize) {
        let (slot, target) = (self.slot(i), self.remote.as_ptr());
        // SAFETY: the slot and the target region are distinct stride-sized ranges of one
        // buffer (seen through two mappings), each at least size bytes.
        unsafe {
            match op {
                Op::Put
                | Op::Putv
                | Op::Signal
                | Op::FetchAdd
                | Op::Cswap
                | Op::Add
                | Op::Round => std::ptr::copy_nonoverlapping(slot, target, size),
                Op::Get | Op::Getv => std::ptr::copy_nonoverlapping(target, slot, size),
            }
        }
    }

    /// Measures one row and checks that the data moved as rsm's rows do.
    pub(crate) fn row(
        &self,
        spec: &RowSpec,
        seed: u64,
        progress: &mut Progress,
    ) -> (Summary, bool) {
        let (size, op) = (spec.size, spec.op);
        let slots = spec.slots().min(self.slots).max(1);
        let (local_seed, remote_seed) = match op {
            Op::Put | Op::Putv | Op::Signal | Op::FetchAdd | Op::Cswap | Op::Add | Op::Round => {
                (seed, !seed)
            }
            Op::Get | Op::Getv => (!seed, seed),
        };
        progress.phase("baseline", "preparing");
        self.fill(self.remote.as_ptr(), remote_seed, size);
        for i in 0..slots {
            self.fill(self.slot(i), local_seed, size);
        }
        let (warmup, n) = (spec.warmup(), spec.timed());
        progress.phase("baseline", "warm-up");
        let summary = match spec.mode {
            Mode::Latency => {
                for i in 0..warmup {
                    self.once(op, i, size);
                }
                let mut samples = Vec::with_capacity(n);
                for i in 0..n {
                    let t0 = Instant::now();
                    self.once(op, i, size);
                    samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                }
                Summary::from_latency(&mut samples, size)
            }
            Mode::Bandwidth => {
                for i in 0..warmup {
                    self.once(op, i % slots, size);
                }
                let mut batches = Batches::new(n);
                let t0 = Instant::now();
                for i in 0..n {
                    self.once(op, i % slots, size);
                    if (i + 1) % BATCH == 0 {
                        batches.note(i + 1);
                    }
                }
                let took = t0.elapsed();
                batches.tails(Summary::from_bandwidth(took, n as u64, size))
            }
        };
        progress.phase("baseline", "verifying");
        let ok = match op {
            Op::Put | Op::Putv | Op::Signal | Op::FetchAdd | Op::Cswap | Op::Add | Op::Round => {
                self.holds(self.remote.as_ptr(), seed, size)
            }
            Op::Get | Op::Getv => (0..slots).all(|i| self.holds(self.slot(i), seed, size)),
        };
        (summary, ok)
    }
}
