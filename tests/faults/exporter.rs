//! The exporter child: a node on `CTRL` exporting [`SIZE`] bytes (rebindable) filled with
//! records and published as [`SEGID`]; told to, it runs its side of one kind of operation
//! in a loop (waits, signals, publishes, unpublishes, rebinds) until stopped, and reports
//! what its memory holds.

use crate::common::{self, say};
use crate::records::{self, LANES, RECORD_SLOTS, SIZE, SLOT};
use crate::shared::{BOUND, Kind, PUB_ID, SEGID, Shared, timed};
use rsm::{Controller, ExportFlags, ExportSegment, SegmentId, SegmentMemory};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub fn exporter_role() {
    let rt = common::runtime();
    let node = rt.block_on(common::node(common::arg("NODE_ID").parse().unwrap()));
    let ctrl = rt.block_on(node.controller(&common::arg("CTRL"))).unwrap();
    let seg = ctrl.export(SIZE, ExportFlags::ALLOW_REBIND).unwrap();
    for slot in 0..RECORD_SLOTS {
        seg.write_at(records::offset(slot), &records::record(0, slot))
            .unwrap();
    }
    rt.block_on(seg.publish(SegmentId(SEGID), &[])).unwrap();
    say("ready");
    let mut running: Option<(Arc<AtomicBool>, tokio::task::JoinHandle<()>, Shared)> = None;
    while let Some(cmd) = common::next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["run", kind] => {
                let Some(kind) = Kind::parse(kind) else {
                    say("err unknown kind");
                    continue;
                };
                let stop = Arc::new(AtomicBool::new(false));
                let tally = Shared::default();
                let task = rt.spawn(side(
                    kind,
                    ctrl.clone(),
                    seg.clone(),
                    Arc::clone(&stop),
                    Arc::clone(&tally),
                ));
                running = Some((stop, task, tally));
                say("running");
            }
            ["stop"] => {
                let Some((stop, task, tally)) = running.take() else {
                    say("err nothing runs");
                    continue;
                };
                stop.store(true, Ordering::Relaxed);
                let limit = BOUND + Duration::from_secs(1);
                let ended = rt.block_on(async { tokio::time::timeout(limit, task).await });
                if ended.is_err() {
                    tally
                        .lock()
                        .unwrap()
                        .hang("the exporter's loop did not stop");
                }
                // The unpublish loop may have stopped between its unpublish and publish.
                if seg.id().is_none() {
                    if let Err(e) = rt.block_on(seg.publish(SegmentId(SEGID), &[])) {
                        tally.lock().unwrap().failure(&e, Kind::Unpublish);
                    }
                }
                let line = tally.lock().unwrap().line();
                say(line);
            }
            ["records"] => say(report(&seg)),
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    rt.block_on(async {
        let _ = tokio::time::timeout(BOUND, seg.destroy()).await;
        drop(ctrl);
        let _ = tokio::time::timeout(BOUND, node.shutdown()).await;
    });
}

/// `records <seq or -> x RECORD_SLOTS counters <c> x LANES`; torn slots are then mended
/// (record 0) so later rounds read whole records everywhere.
fn report(seg: &ExportSegment) -> String {
    let mut words = vec!["records".to_string()];
    let mut buf = vec![0u8; SLOT];
    for slot in 0..RECORD_SLOTS {
        seg.read_at(records::offset(slot), &mut buf).unwrap();
        match records::check(&buf, slot) {
            Some(s) => words.push(s.to_string()),
            None => {
                words.push("-".into());
                seg.write_at(records::offset(slot), &records::record(0, slot))
                    .unwrap();
            }
        }
    }
    words.push("counters".into());
    for lane in 0..LANES {
        let mut c = [0u8; 8];
        seg.read_at(records::counter(lane), &mut c).unwrap();
        words.push(u64::from_le_bytes(c).to_string());
    }
    words.join(" ")
}

/// The exporter's side of `kind` until `stop`.
async fn side(
    kind: Kind,
    ctrl: Controller,
    seg: ExportSegment,
    stop: Arc<AtomicBool>,
    tally: Shared,
) {
    let stopped = || stop.load(Ordering::Relaxed);
    let failed = |e: &rsm::Error| tally.lock().unwrap().failure(e, kind);
    let ok = || tally.lock().unwrap().ops += 1;
    while !stopped() {
        match kind {
            Kind::Signal => {
                let wait = seg.wait_signal(Some(Duration::from_millis(500)));
                match timed(&tally, "wait_signal", wait).await {
                    None => return,
                    Some(Ok(_)) => ok(),
                    Some(Err(e)) => failed(&e),
                }
            }
            Kind::Wait => {
                match timed(&tally, "signal", seg.signal(rsm::SignalFlags::empty())).await {
                    None => return,
                    Some(Ok(())) => ok(),
                    Some(Err(e)) => failed(&e),
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Kind::Publish => {
                let work = async {
                    let s = ctrl.export(2 * SLOT, ExportFlags::empty())?;
                    s.write_at(0, &records::record(0, 0))?;
                    let published = s.publish(SegmentId(PUB_ID), &[]).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    s.destroy().await?;
                    published.map(|_| ())
                };
                match timed(&tally, "publish", work).await {
                    None => return,
                    Some(Ok(())) => ok(),
                    Some(Err(e)) => failed(&e),
                }
            }
            Kind::Unpublish => {
                match timed(&tally, "unpublish", seg.unpublish()).await {
                    None => return,
                    Some(Ok(())) => ok(),
                    Some(Err(e)) => failed(&e),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                match timed(&tally, "publish", seg.publish(SegmentId(SEGID), &[])).await {
                    None => return,
                    Some(Ok(_)) => ok(),
                    Some(Err(e)) => failed(&e),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Kind::Rebind => {
                // On loopback a memfd segment takes memfd memory only.
                let rebound = if ctrl.is_loopback() {
                    match rsm::SharedMemory::new(SIZE) {
                        Ok(mem) => timed(&tally, "rebind", rebind(&seg, mem)).await,
                        Err(e) => Some(Err(e)),
                    }
                } else {
                    timed(&tally, "rebind", rebind(&seg, common::Pages::new(SIZE, 0))).await
                };
                match rebound {
                    None => return,
                    Some(Ok(())) => ok(),
                    Some(Err(e)) => failed(&e),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The importer's operations; this side only lives.
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Rebinds `seg` to `mem` holding a copy of its records.
async fn rebind<M: SegmentMemory>(seg: &ExportSegment, mem: M) -> rsm::Result<()> {
    // SAFETY: the memory is this function's alone until handed to rebind, and SIZE long.
    let bytes = unsafe { std::slice::from_raw_parts_mut(mem.as_ptr(), SIZE) };
    seg.read_at(0, bytes)?;
    seg.rebind(mem).await
}
