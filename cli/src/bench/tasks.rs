//! `--tasks N`: rsm's side of a put or get bandwidth row from N tokio tasks on the
//! multi-thread runtime, each awaiting its own operations one after the other (own buffer,
//! own offset: task `i` moves bytes `i * size ..` of the peer's segment), the row's
//! operations split over them: how a service with many independent callers drives rsm,
//! against the one task keeping a window in flight of the plain window row. The baseline
//! keeps its window of `--window` operations.

use super::child::PeerProcess;
use super::cli::{BarrierArg, Mode, Op};
use super::pagebuf::PageBuf;
use super::pattern;
use super::proto::{Command, Target};
use super::report::Progress;
use super::rsm_side::{Lane, RsmInitiator};
use super::stats::Summary;
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
    let (_, bufs) = run(&lane, write, size, bufs, spec.warmup()).await?;
    let total = spec.timed();
    progress.tick("rsm", 0, total);
    let (took, mut bufs) = run(&lane, write, size, bufs, total).await?;
    progress.tick("rsm", total, total);
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
    Ok((Summary::from_bandwidth(took, total as u64, size), ok))
}

/// `total` operations from one task per buffer of `bufs` (task `i` at offset `i * size`),
/// timed from the start, given once every task waits for it, to the last task's end; the
/// buffers come back in order. The start's time is taken before it is given and each task
/// notes its own end: where operations complete inline (loopback, shm's copies) the tasks
/// can finish before this task is awake again.
async fn run(
    lane: &Lane,
    write: bool,
    size: usize,
    bufs: Vec<PageBuf>,
    total: usize,
) -> Result<(Duration, Vec<PageBuf>), BenchError> {
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
                ready.wait().await;
                drop(start.acquire().await);
                let mut buf = buf;
                for _ in 0..count {
                    buf = lane.transfer(write, offset, buf).await?;
                }
                Ok::<_, rsm::Error>((buf, Instant::now()))
            })
        })
        .collect();
    ready.wait().await;
    let t0 = Instant::now();
    start.add_permits(n);
    let mut back = Vec::with_capacity(n);
    let mut end = t0;
    let mut pending = handles.into_iter();
    while let Some(h) = pending.next() {
        let done = match h.await {
            Ok(r) => r.map_err(BenchError::from),
            Err(e) => Err(BenchError::Peer(format!("a task ended: {e}"))),
        };
        match done {
            Ok((buf, at)) => {
                back.push(buf);
                end = end.max(at);
            }
            Err(e) => {
                // The run fails: the other tasks have nothing left to measure.
                pending.for_each(|h| h.abort());
                return Err(e);
            }
        }
    }
    Ok((end - t0, back))
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
