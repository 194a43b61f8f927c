//! A segment's `PollFd` in tokio's reactor, beside other sources in one `select!`.
//!
//! `ImportSegment::pollfd` (and `ExportSegment::pollfd`) hand out the segment's event
//! descriptor (`rsm_memseg_get_pollfd`): readable while a signal is pending. Wrapped in
//! `tokio::io::unix::AsyncFd` it is one more source for a task's `select!`, next to a timer
//! and a channel, with no task parked in `wait_signal`.
//!
//! - The **pinger** (exporter) writes a counter into its segment and signals, then waits for
//!   the importer's answer, `--pings` times, at an interval; then it says goodbye (counter 0).
//! - The **ponger** (importer) runs one loop: the `PollFd` (a ping: read the counter, answer),
//!   a 25 ms timer (a heartbeat), and a channel fed by another task (local work), until the
//!   goodbye.
//!
//! ```text
//! RSM_NODE_ID=30 cargo run --example pollfd_select -- --role pinger --pings 20
//! RSM_NODE_ID=31 cargo run --example pollfd_select -- --role ponger --server 30 --pings 20
//! ```

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args};
use rsm::{ExportFlags, Perm, PollFd, SignalFlags};
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

const USAGE: &str = "pollfd_select --role pinger [--pings N] | --role ponger --server ID \
                     [--pings N]  [--controller C] [--config FILE] [--segment ID]";

const DEFAULT_SEGMENT: u32 = 0x50_4600;

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    match args.role.as_deref() {
        Some("pinger") => pinger(&args).await,
        Some("ponger") => ponger(&args).await,
        _ => Err(format!("--role pinger or --role ponger\n{USAGE}").into()),
    }
}

/// The exporter: pings, and awaits each answer (here with plain `wait_signal`).
async fn pinger(a: &Args) -> Result<(), AnyError> {
    let pings: u64 = a.get("pings", 20);
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = ctrl.export(4096, ExportFlags::empty())?;
    let id = seg.publish(a.segment(DEFAULT_SEGMENT), &[]).await?;
    println!(
        "pinger: node {}, segment {id:#x} on {}",
        node.id().get(),
        ctrl.name()
    );
    println!("pinger: ready");
    common::wait_for_importers(&seg, 1, Duration::from_secs(30)).await?;
    for i in 1..=pings {
        seg.write_at(0, &i.to_le_bytes())?;
        seg.signal(SignalFlags::empty()).await?;
        seg.wait_signal(Some(Duration::from_secs(10))).await?;
        // Leave the ponger's timer and channel some room between pings.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("pinger: {pings} pings answered");
    // The last word is the pinger's: counter 0 says goodbye. (Had the ponger left right after
    // its last answer, that answer could have been lost: a disconnect travels by the side
    // channel and may overtake a signal still on its way, which is then dropped.)
    seg.write_at(0, &0u64.to_le_bytes())?;
    seg.signal(SignalFlags::empty()).await?;
    common::wait_until_alone(&seg, Duration::from_secs(10)).await;
    seg.destroy().await?;
    node.shutdown().await;
    println!("pinger: ok");
    Ok(())
}

/// The importer: one `select!` loop over the segment's `PollFd`, a timer and a channel.
async fn ponger(a: &Args) -> Result<(), AnyError> {
    let pings: u64 = a.get("pings", 20);
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = a.import_server(&ctrl, DEFAULT_SEGMENT, Perm::RDWR).await?;
    println!("ponger: node {} connected", node.id().get());

    // The descriptor joins tokio's reactor. AsyncFd is edge-triggered: after a wake-up, take
    // signals with try_consume until none is left, and only then clear the readiness
    // (try_io does that when the closure reports WouldBlock), so no signal is left behind.
    // SAFETY: the PollFd owns its hold on the segment's event descriptor: the descriptor stays
    // open, and as_raw_fd returns the same one, for as long as the PollFd lives, and the
    // AsyncFd owns the PollFd (it deregisters before dropping it).
    let pollfd: AsyncFd<PollFd> =
        unsafe { AsyncFd::register_with_interest(seg.pollfd()?, Interest::READABLE) }
            .map_err(std::io::Error::from)?;

    // Another source: local work arriving on a channel from another task.
    let (tx, mut work) = mpsc::channel::<String>(16);
    let feeder = tokio::spawn(async move {
        for n in 0.. {
            tokio::time::sleep(Duration::from_millis(40)).await;
            if tx.send(format!("job {n}")).await.is_err() {
                break;
            }
        }
    });
    let mut heartbeat = tokio::time::interval(Duration::from_millis(25));
    let overall = tokio::time::sleep(Duration::from_secs(30));
    tokio::pin!(overall);

    let (mut answered, mut ticks, mut jobs) = (0u64, 0u64, 0u64);
    let mut goodbye = false;
    while !goodbye {
        tokio::select! {
            guard = pollfd.readable() => {
                let mut guard = guard?;
                // One pending signal, consumed; WouldBlock when none was (clears readiness).
                let got = guard.try_io(|fd| {
                    if fd.get_ref().try_consume() {
                        Ok(())
                    } else {
                        Err(std::io::ErrorKind::WouldBlock.into())
                    }
                });
                if let Ok(Ok(())) = got {
                    let counter = seg.get64(0, 1).await?[0];
                    if counter == 0 {
                        goodbye = true; // the pinger is done
                        continue;
                    }
                    answered += 1;
                    if counter != answered {
                        return Err(format!("ping {answered} read counter {counter}").into());
                    }
                    seg.signal(SignalFlags::empty()).await?;
                }
            }
            _ = heartbeat.tick() => ticks += 1,
            Some(_job) = work.recv() => jobs += 1,
            () = &mut overall => return Err("the pings did not end within 30 s".into()),
        }
    }
    if answered != pings {
        return Err(format!("{answered} pings came, {pings} expected").into());
    }
    println!(
        "ponger: {answered} pings through the PollFd, {ticks} timer ticks, {jobs} channel messages"
    );
    feeder.abort();
    // The PollFd must be released before the disconnect (RSMERR_POLLFD_IN_USE otherwise).
    drop(pollfd);
    seg.disconnect().await?;
    node.shutdown().await;
    println!("ponger: ok");
    Ok(())
}
