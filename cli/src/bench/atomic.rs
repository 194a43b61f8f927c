//! The rows of `--op fetch-add|cswap|add`: one u64 per slot of the window (slot `i` at
//! offset `8 i`), each slot's operations one after another on its own word, the words
//! starting from a pattern the peer fills. A row verifies when every fetch-add and cswap
//! returned the value its slot's word held (cswap: so every swap happened) and the peer's
//! words end at their start plus their slot's count.
//!
//! The rsm side awaits [`RsmInitiator::atomic`]; the libfabric baseline is
//! `Baseline::atomic_run` (`raw/atomic.rs`); on loopback the baseline is
//! [`CpuAtomics`]: the same instruction rsm's CPU path makes, on a page mapped twice.

use super::child::PeerProcess;
use super::cli::{Mode, Op};
use super::pattern;
use super::proto::{Command, Target};
use super::raw::Baseline;
use super::report::Progress;
use super::rsm_side::RsmInitiator;
use super::stats::Summary;
use super::{BenchError, RowSpec};
use crate::sys::shm::{SharedMap, sealed_memfd};
use futures::future::join_all;
use rsm::{Error, Result};
use rustix::fd::AsFd;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The words' starting values for `slots` slots from `seed`.
fn start_words(seed: u64, slots: usize) -> Vec<u64> {
    pattern::pattern(seed, slots * 8)
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// The checksum the peer's words must have after `counts` operations per slot.
fn expected_sum(start: &[u64], counts: &[u64]) -> u64 {
    let bytes: Vec<u8> = start
        .iter()
        .enumerate()
        .flat_map(|(i, &w)| {
            let n = counts.get(i).copied().unwrap_or(0);
            w.wrapping_add(n).to_ne_bytes()
        })
        .collect();
    pattern::fnv1a64(&bytes)
}

/// Operations per slot: `total` dealt in turn.
fn dealt(total: usize, slots: usize) -> Vec<usize> {
    (0..slots)
        .map(|i| total / slots + usize::from(i < total % slots))
        .collect()
}

/// One rsm row.
pub(crate) async fn rsm_row(
    init: &RsmInitiator,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    seed: u64,
    progress: &mut Progress,
) -> Result<(Summary, bool), BenchError> {
    let slots = spec.slots().max(1);
    progress.phase("rsm", "preparing");
    peer.expect_ok(&Command::Fill {
        seed,
        len: slots * 8,
        target: Target::Rsm,
    })?;
    init.settle_atomics().await?;
    let start = start_words(seed, slots);
    let (warmup, n) = (spec.warmup(), spec.timed());
    let hits = std::cell::Cell::new(true);
    let counts: RefCell<Vec<u64>> = RefCell::new(vec![0; slots]);
    let summary = match spec.mode {
        Mode::Latency => {
            let mut cur = start[0];
            let mut samples = Vec::with_capacity(n);
            progress.phase("rsm", "warm-up");
            for i in 0..warmup + n {
                let t0 = Instant::now();
                let prev = init.atomic(spec.op, 0, cur).await?;
                let dt = t0.elapsed();
                hits.set(hits.get() && prev == cur);
                cur = cur.wrapping_add(1);
                if i >= warmup {
                    samples.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                    if samples.len() % 64 == 0 || samples.len() == n {
                        progress.tick("rsm", samples.len(), n);
                    }
                }
            }
            counts.borrow_mut()[0] = (warmup + n) as u64;
            Summary::from_latency(&mut samples, 8)
        }
        Mode::Bandwidth => {
            let lanes = |total: usize, base: &[u64]| {
                let per = dealt(total, slots);
                let (hits, counts) = (&hits, &counts);
                join_all(per.into_iter().enumerate().map(move |(slot, k)| {
                    let mut cur = base[slot];
                    async move {
                        for _ in 0..k {
                            let prev = init.atomic(spec.op, 8 * slot as u64, cur).await?;
                            hits.set(hits.get() && prev == cur);
                            cur = cur.wrapping_add(1);
                            counts.borrow_mut()[slot] += 1;
                        }
                        Ok::<(), Error>(())
                    }
                }))
            };
            progress.phase("rsm", "warm-up");
            for r in lanes(warmup, &start).await {
                r?;
            }
            let after: Vec<u64> = start
                .iter()
                .zip(counts.borrow().iter())
                .map(|(w, c)| w.wrapping_add(*c))
                .collect();
            let t0 = Instant::now();
            for r in lanes(n, &after).await {
                r?;
            }
            progress.tick("rsm", n, n);
            Summary::from_bandwidth(t0.elapsed(), n as u64, 8)
        }
    };
    progress.phase("rsm", "verifying");
    let sum = peer.sum(&Command::Sum {
        len: slots * 8,
        target: Target::Rsm,
    })?;
    let ok = hits.get() && sum == expected_sum(&start, &counts.borrow());
    Ok((summary, ok))
}

/// One libfabric baseline row.
pub(crate) fn baseline_row(
    b: &mut Baseline,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    seed: u64,
    progress: &mut Progress,
) -> Result<(Summary, bool), BenchError> {
    let slots = spec.slots().max(1);
    progress.phase("baseline", "preparing");
    peer.expect_ok(&Command::Fill {
        seed,
        len: slots * 8,
        target: Target::Raw,
    })?;
    let start = start_words(seed, slots);
    // rsm's engines poll on for their idle window after rsm's last operation: let them
    // sleep first, as the put rows do.
    std::thread::sleep(rsm::test_util::longest_idle_window() * 2);
    peer.expect_ok(&Command::Progress)?;
    progress.phase("baseline", "warm-up");
    let (warmup, n) = (spec.warmup(), spec.timed());
    let warm = b.atomic_run(spec.op, slots, &start, warmup, None, &mut |_| {})?;
    let after: Vec<u64> = start
        .iter()
        .zip(&warm.counts)
        .map(|(w, c)| w.wrapping_add(*c))
        .collect();
    let mut samples = Vec::with_capacity(n);
    let t0 = Instant::now();
    let timed = b.atomic_run(
        spec.op,
        slots,
        &after,
        n,
        (spec.mode == Mode::Latency).then_some(&mut samples),
        &mut |done| progress.tick("baseline", done, n),
    )?;
    let wall = t0.elapsed();
    let summary = match spec.mode {
        Mode::Latency => Summary::from_latency(&mut samples, 8),
        Mode::Bandwidth => Summary::from_bandwidth(wall, n as u64, 8),
    };
    progress.phase("baseline", "verifying");
    // This command also ends the peer's polling.
    let sum = peer.sum(&Command::Sum {
        len: slots * 8,
        target: Target::Raw,
    })?;
    let counts: Vec<u64> = warm
        .counts
        .iter()
        .zip(&timed.counts)
        .map(|(a, b)| a + b)
        .collect();
    let ok = warm.hits && timed.hits && sum == expected_sum(&start, &counts);
    Ok((summary, ok))
}

/// The loopback baseline: CPU atomics on a shared page mapped twice in this process, one
/// word per slot, as rsm's CPU path makes them on its mapping of the exporter's memfd.
pub(crate) struct CpuAtomics {
    map: SharedMap,
    /// The same page again, for the check.
    other: SharedMap,
}

impl CpuAtomics {
    pub(crate) fn open() -> Result<Self> {
        let page = crate::sys::limits::page_size();
        let fail = |e: std::io::Error| Error::insufficient_mem().detail(format!("{e}"));
        let fd = sealed_memfd("rsm-bench-atomics", page as u64).map_err(fail)?;
        let map = SharedMap::map(fd.as_fd(), 0, page, true, None).map_err(fail)?;
        let other = SharedMap::map(fd.as_fd(), 0, page, true, None).map_err(fail)?;
        Ok(CpuAtomics { map, other })
    }

    fn word(&self, slot: usize) -> &AtomicU64 {
        let at = 8 * (slot % 512);
        // SAFETY: 8-byte aligned inside the page the mapping keeps alive while `self`
        // lives; every access to it is atomic.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(at).cast()) }
    }

    fn once(&self, op: Op, slot: usize, cur: u64) -> u64 {
        let w = self.word(slot);
        match op {
            Op::Cswap => match w.compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(v) | Err(v) => v,
            },
            Op::FetchAdd => w.fetch_add(1, Ordering::SeqCst),
            _ => {
                w.fetch_add(1, Ordering::SeqCst);
                cur
            }
        }
    }

    /// Measures one row and checks it as rsm's rows are.
    pub(crate) fn row(
        &self,
        spec: &RowSpec,
        seed: u64,
        progress: &mut Progress,
    ) -> (Summary, bool) {
        let slots = spec.slots().clamp(1, 512);
        let start = start_words(seed, slots);
        for (i, &v) in start.iter().enumerate() {
            self.word(i).store(v, Ordering::SeqCst);
        }
        let mut cur = start.clone();
        let mut hits = true;
        let mut counts = vec![0u64; slots];
        let (warmup, n) = (spec.warmup(), spec.timed());
        progress.phase("baseline", "warm-up");
        let mut step = |i: usize| {
            let slot = i % slots;
            hits &= self.once(spec.op, slot, cur[slot]) == cur[slot];
            cur[slot] = cur[slot].wrapping_add(1);
            counts[slot] += 1;
        };
        for i in 0..warmup {
            step(i);
        }
        let summary = match spec.mode {
            Mode::Latency => {
                let mut samples = Vec::with_capacity(n);
                for i in 0..n {
                    let t0 = Instant::now();
                    step(warmup + i);
                    samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                }
                Summary::from_latency(&mut samples, 8)
            }
            Mode::Bandwidth => {
                let t0 = Instant::now();
                for i in 0..n {
                    step(warmup + i);
                }
                Summary::from_bandwidth(t0.elapsed(), n as u64, 8)
            }
        };
        progress.phase("baseline", "verifying");
        let ok = hits
            && (0..slots).all(|i| {
                // SAFETY: as in `word`, through the second mapping of the same page.
                let seen = unsafe {
                    AtomicU64::from_ptr(self.other.as_ptr().add(8 * i).cast())
                        .load(Ordering::SeqCst)
                };
                seen == start[i].wrapping_add(counts[i])
            });
        (summary, ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deals_and_sums() {
        assert_eq!(dealt(10, 4), vec![3, 3, 2, 2]);
        let start = start_words(7, 2);
        let a = expected_sum(&start, &[1, 2]);
        assert_ne!(a, expected_sum(&start, &[2, 1]));
        assert_eq!(
            expected_sum(&start, &[0, 0]),
            pattern::fnv1a64(&pattern::pattern(7, 16))
        );
    }
}
