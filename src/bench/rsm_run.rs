//! The rsm side's measurement loops: the same warm-up, sample counts and windows as the
//! baseline's, over [`RsmInitiator::put`] and [`RsmInitiator::get`].

use super::BenchError;
use super::RowSpec;
use super::cli::{Mode, Op};
use super::report::Progress;
use super::rsm_side::RsmInitiator;
use super::stats::Summary;
use crate::Result;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::time::Instant;

/// One awaited operation at offset 0 of the imported segment.
async fn one(init: &RsmInitiator, op: Op, buf: Vec<u8>) -> (Result<()>, Option<Vec<u8>>) {
    match op {
        Op::Put => init.put(0, buf).await,
        Op::Get => init.get(0, buf).await,
        Op::Signal => (init.signal_round_trip().await, Some(buf)),
    }
}

fn returned(res: Result<()>, buf: Option<Vec<u8>>) -> Result<Vec<u8>, BenchError> {
    res?;
    buf.ok_or_else(|| BenchError::Peer("a completed operation kept its buffer".into()))
}

/// Measures one row. `bufs` holds one buffer of `spec.size` bytes per slot (one in latency
/// mode, the window in bandwidth mode) and holds them again afterwards, so the caller can
/// check what gets brought.
pub(crate) async fn measure(
    init: &RsmInitiator,
    spec: &RowSpec,
    bufs: &mut Vec<Vec<u8>>,
    progress: &mut Progress,
) -> Result<Summary, BenchError> {
    match spec.mode {
        Mode::Latency => {
            let (warmup, n) = (spec.warmup(), spec.timed());
            let mut buf = bufs
                .pop()
                .ok_or_else(|| BenchError::Usage("no buffer".into()))?;
            let mut samples = Vec::with_capacity(n);
            progress.phase("rsm", "warm-up");
            for i in 0..warmup + n {
                let t0 = Instant::now();
                let (res, back) = one(init, spec.op, buf).await;
                let dt = t0.elapsed();
                buf = returned(res, back)?;
                if i >= warmup {
                    samples.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                    if samples.len() % 64 == 0 || samples.len() == n {
                        progress.tick("rsm", samples.len(), n);
                    }
                }
            }
            bufs.push(buf);
            Ok(Summary::from_latency(&mut samples, spec.size))
        }
        Mode::Bandwidth => {
            progress.phase("rsm", "warm-up");
            stream(init, spec.op, spec.warmup(), bufs, &mut |_| {}).await?;
            let total = spec.timed();
            let t0 = Instant::now();
            stream(init, spec.op, total, bufs, &mut |done| {
                progress.tick("rsm", done, total)
            })
            .await?;
            Ok(Summary::from_bandwidth(
                t0.elapsed(),
                total as u64,
                spec.size,
            ))
        }
    }
}

/// `total` operations with one in flight per buffer of `bufs`.
async fn stream(
    init: &RsmInitiator,
    op: Op,
    total: usize,
    bufs: &mut Vec<Vec<u8>>,
    tick: &mut dyn FnMut(usize),
) -> Result<(), BenchError> {
    let mut in_flight = FuturesUnordered::new();
    let mut posted = 0usize;
    while posted < total {
        let Some(b) = bufs.pop() else { break };
        in_flight.push(one(init, op, b));
        posted += 1;
    }
    let mut done = 0usize;
    while let Some((res, back)) = in_flight.next().await {
        // On an error the other futures are dropped with `in_flight`: rsm keeps their
        // buffers until the provider is done with them.
        let buf = returned(res, back)?;
        done += 1;
        if done % 256 == 0 || done == total {
            tick(done);
        }
        if posted < total {
            in_flight.push(one(init, op, buf));
            posted += 1;
        } else {
            bufs.push(buf);
        }
    }
    Ok(())
}
