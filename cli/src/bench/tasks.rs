//! `--tasks N`: rsm's side of a put or get bandwidth row from N tokio tasks on the
//! multi-thread runtime, each awaiting its own operations one after the other (own buffer,
//! own offset: task `i` moves bytes `i * size ..` of the peer's segment), the row's
//! operations split over them: how a service with many independent callers drives rsm,
//! against the one task keeping a window in flight of the plain window row. The baseline
//! keeps its window of `--window` operations. rsm's p99 and p99.9 are those of each awaited
//! operation as its task saw it (every other task's turn included), timed in a round of
//! their own after the timed one.

use super::child::PeerProcess;
use super::cli::{BarrierArg, Mode, Op};
use super::pagebuf::PageBuf;
use super::pattern;
use super::proto::{Command, Target};
use super::report::Progress;
use super::rsm_side::{Lane, RsmInitiator};
use super::stats::{Summary, nearest_rank};
use super::{BenchError, RowSpec};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most tasks a row may have.
pub(crate) const MAX_TASKS: usize = 4096;

/// The tasks asked for, if the row can have them: put and get bandwidth rows with the
/// implicit barrier only.
pub(crate) fn check(
    op: Op,
    mode: Mode,
    tasks: Option<u32>,
    barrier: BarrierArg,
) -> Result<Option<usize>, BenchError> {
    let Some(n) = tasks else { return Ok(None) };
    let n = n as usize;
    let usage = |s: String| Err(BenchError::Usage(s));
    if !(1..=MAX_TASKS).contains(&n) {
        return usage(format!("--tasks is 1 to {MAX_TASKS}, not {n}"));
    }
    if !matches!(op, Op::Put | Op::Get) {
        return usage(format!(
            "--tasks applies to --op put and get (each task awaits its own), not {op}"
        ));
    }
    if mode != Mode::Bandwidth {
        return usage(
            "--tasks applies to --mode bandwidth (latency has one operation in flight)".into(),
        );
    }
    if barrier == BarrierArg::Explicit {
        return usage("--tasks applies to puts with the implicit barrier".into());
    }
    Ok(Some(n))
}

/// Task `i`'s share of `total` operations over `tasks`: the first `total % tasks` take one
/// more.
fn share(total: usize, tasks: usize, i: usize) -> usize {
    total / tasks + usize::from(i < total % tasks)
}

/// One round of rsm's side of the row with `tasks` tasks. `seeds`: the local buffers' and
/// the peer's patterns. Verified when the peer's `tasks * size` bytes hold the local pattern
/// in every task's range (put), or every task's buffer holds its range of the peer's (get).
pub(crate) async fn rsm_row(
    init: &RsmInitiator,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    tasks: usize,
    (local_seed, remote_seed): (u64, u64),
    progress: &mut Progress,
    corrupt: bool,
) -> Result<(Summary, bool), BenchError> {
    let (size, write) = (spec.size, spec.op.writes());
    let span = size * tasks;
    progress.phase("rsm", "preparing");
    peer.expect_ok(&Command::Fill {
        seed: remote_seed,
        len: span,
        target: Target::Rsm,
    })?;
    let local = pattern::pattern(local_seed, size);
    let bufs = (0..tasks).map(|_| PageBuf::copy_of(&local)).collect();
    let lane = init.lane();
    progress.phase("rsm", "warm-up");
    let (_, bufs, _) = run(&lane, write, size, bufs, spec.warmup(), false).await?;
    let total = spec.timed();
    progress.tick("rsm", 0, total);
    let (took, bufs, _) = run(&lane, write, size, bufs, total, false).await?;
    progress.tick("rsm", total, total);
    // The tails in a round of their own: two clock reads an operation would slow the rate
    // (a loopback put costs about as much as one).
    progress.phase("rsm", "tails");
    let (_, mut bufs, mut waits) = run(&lane, write, size, bufs, total, true).await?;
    let summary = with_tails(
        Summary::from_bandwidth(took, total as u64, size),
        &mut waits,
    );
    progress.phase("rsm", "verifying");
    let ok = if write {
        if corrupt {
            peer.expect_ok(&Command::Corrupt {
                offset: size / 2,
                target: Target::Rsm,
            })?;
        }
        let want = local.repeat(tasks);
        peer.sum(&Command::Sum {
            len: span,
            target: Target::Rsm,
        })? == pattern::fnv1a64(&want)
    } else {
        if let (true, Some(b)) = (corrupt, bufs.first_mut()) {
            b[size / 2] ^= 0xFF;
        }
        let want = pattern::pattern(remote_seed, span);
        bufs.len() == tasks && bufs.iter().zip(want.chunks(size)).all(|(b, w)| b[..] == *w)
    };
    Ok((summary, ok))
}

/// `summary` (the rate) with the p99 and p99.9 of `waits_ns`, each awaited operation's time
/// as its task saw it (sorted in place); unchanged without any.
fn with_tails(mut summary: Summary, waits_ns: &mut [u64]) -> Summary {
    if !waits_ns.is_empty() {
        waits_ns.sort_unstable();
        summary.p99_us = Some(nearest_rank(waits_ns, 99.0) as f64 / 1e3);
        summary.p999_us = Some(nearest_rank(waits_ns, 99.9) as f64 / 1e3);
    }
    summary
}

/// `total` operations from one task per buffer of `bufs` (task `i` at offset `i * size`),
/// timed from the start, given once every task waits for it, to the last task's end; the
/// buffers come back in order. The start's time is taken before it is given and each task
/// notes its own end: where operations complete inline (loopback, shm's copies) the tasks
/// can finish before this task is awake again. With `each`, every task also times each of
/// its awaited operations (into an array made before the start), and all of those come back.
async fn run(
    lane: &Lane,
    write: bool,
    size: usize,
    bufs: Vec<PageBuf>,
    total: usize,
    each: bool,
) -> Result<(Duration, Vec<PageBuf>, Vec<u64>), BenchError> {
    let n = bufs.len();
    let ready = Arc::new(tokio::sync::Barrier::new(n + 1));
    let start = Arc::new(tokio::sync::Semaphore::new(0));
    let handles: Vec<_> = bufs
        .into_iter()
        .enumerate()
        .map(|(i, buf)| {
            let (lane, ready, start) = (lane.clone(), Arc::clone(&ready), Arc::clone(&start));
            let (offset, count) = ((i * size) as u64, share(total, n, i));
            tokio::spawn(async move {
                let mut waits = Vec::with_capacity(if each { count } else { 0 });
                ready.wait().await;
                drop(start.acquire().await);
                let mut buf = buf;
                for _ in 0..count {
                    if each {
                        let t = Instant::now();
                        buf = lane.transfer(write, offset, buf).await?;
                        waits.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
                    } else {
                        buf = lane.transfer(write, offset, buf).await?;
                    }
                }
                Ok::<_, rsm::Error>((buf, Instant::now(), waits))
            })
        })
        .collect();
    ready.wait().await;
    let t0 = Instant::now();
    start.add_permits(n);
    let mut back = Vec::with_capacity(n);
    let mut all_waits = Vec::with_capacity(if each { total } else { 0 });
    let mut end = t0;
    let mut pending = handles.into_iter();
    while let Some(h) = pending.next() {
        let done = match h.await {
            Ok(r) => r.map_err(BenchError::from),
            Err(e) => Err(BenchError::Peer(format!("a task ended: {e}"))),
        };
        match done {
            Ok((buf, at, waits)) => {
                back.push(buf);
                all_waits.extend_from_slice(&waits);
                end = end.max(at);
            }
            Err(e) => {
                // The run fails: the other tasks have nothing left to measure.
                pending.for_each(|h| h.abort());
                return Err(e);
            }
        }
    }
    Ok((end - t0, back, all_waits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_row() {
        for (total, tasks) in [(20_000, 64), (10, 64), (64, 64), (1, 1), (2001, 7)] {
            let shares: Vec<usize> = (0..tasks).map(|i| share(total, tasks, i)).collect();
            assert_eq!(shares.iter().sum::<usize>(), total, "{total} over {tasks}");
            let (lo, hi) = (shares.iter().min(), shares.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1));
        }
    }

    #[test]
    fn tails_are_of_the_awaited_operations_and_keep_the_rate() {
        let rate = Summary::from_bandwidth(Duration::from_millis(1), 1000, 8);
        let mut waits: Vec<u64> = (1..=1000).rev().map(|i| i * 1000).collect();
        let s = with_tails(rate.clone(), &mut waits);
        assert_eq!((s.p99_us, s.p999_us), (Some(990.0), Some(999.0)));
        assert_eq!((s.median_us, s.ops), (rate.median_us, rate.ops));
        assert_eq!(with_tails(rate.clone(), &mut []), rate);
    }

    #[test]
    fn tasks_fit_put_and_get_bandwidth_rows_only() {
        let ok = |op, mode, n, barrier| check(op, mode, n, barrier).map_err(|e| e.to_string());
        let (bw, lat, imp) = (Mode::Bandwidth, Mode::Latency, BarrierArg::Implicit);
        assert_eq!(ok(Op::Put, lat, None, imp).unwrap(), None);
        assert_eq!(ok(Op::Put, bw, Some(64), imp).unwrap(), Some(64));
        assert_eq!(ok(Op::Get, bw, Some(4096), imp).unwrap(), Some(4096));
        let bad = [
            (Op::Put, lat, Some(64), imp, "--mode bandwidth"),
            (Op::Put, bw, Some(4097), imp, "1 to 4096"),
            (Op::Put, bw, Some(0), imp, "1 to 4096"),
            (Op::Putv, bw, Some(8), imp, "not putv"),
            (Op::FetchAdd, bw, Some(8), imp, "not fetch-add"),
            (Op::Round, lat, Some(8), imp, "not round"),
            (
                Op::Put,
                bw,
                Some(8),
                BarrierArg::Explicit,
                "implicit barrier",
            ),
        ];
        for (op, mode, n, barrier, why) in bad {
            let e = ok(op, mode, n, barrier).unwrap_err();
            assert!(e.contains(why), "{op} {mode} {n:?}: {e}");
        }
    }
}
