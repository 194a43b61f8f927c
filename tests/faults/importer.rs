//! The importer child: a node on `CTRL` that imports segment [`SEGID`] of node `EXPORTER`
//! and, told to, runs one kind of operation in a loop until stopped or its exporter is lost.
//! It says `acked a b c d` every 20 ms while a loop runs (writes or fetch-adds acknowledged
//! per lane), so the parent knows what must have landed when it kills this process.

use crate::common::{self, say};
use crate::records::{self, LANES, SIZE, SLOT};
use crate::shared::{BOUND, Kind, PUB_ID, SEGID, Shared, timed};
use rsm::{Controller, ImportSegment, NodeId, Perm, SegmentId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A loop under way: its stop flag, tasks and tally.
struct Running {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    tally: Shared,
}

impl Running {
    /// Lets the tasks end by themselves for up to `wait`, then stops the rest.
    async fn stop(mut self, wait: Duration) -> String {
        let deadline = tokio::time::Instant::now() + wait;
        while self.tasks.iter().any(|t| !t.is_finished()) && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.tasks.retain(|t| !t.is_finished());
        self.tally.lock().unwrap().left = self.tasks.len() as u64;
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            // A task still in an await past its bound has been tallied as a hang by then.
            if tokio::time::timeout(BOUND + Duration::from_secs(1), t)
                .await
                .is_err()
            {
                self.tally.lock().unwrap().hang("a loop did not stop");
            }
        }
        self.tally.lock().unwrap().line()
    }
}

/// Everything a loop task needs.
#[derive(Clone)]
struct Ctx {
    kind: Kind,
    imp: ImportSegment,
    ctrl: Controller,
    exporter: NodeId,
    stop: Arc<AtomicBool>,
    tally: Shared,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Tallies a failure; whether the loop should end (its exporter is gone).
    fn failed(&self, e: &rsm::Error) -> bool {
        self.tally.lock().unwrap().failure(e, self.kind);
        e.is_unreachable()
    }

    fn ok(&self) {
        self.tally.lock().unwrap().ops += 1;
    }

    fn data_error(&self, what: String) {
        self.tally.lock().unwrap().data_error(what);
    }
}

pub fn importer_role() {
    let rt = common::runtime();
    let ctrl_name = common::arg("CTRL");
    let exporter = NodeId(common::arg("EXPORTER").parse().unwrap());
    let node = rt.block_on(common::node(common::arg("NODE_ID").parse().unwrap()));
    let ctrl = rt.block_on(node.controller(&ctrl_name)).unwrap();
    say("ready");
    let mut imp: Option<ImportSegment> = None;
    let mut running: Option<Running> = None;
    while let Some(cmd) = common::next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["connect"] => {
                let answer = rt.block_on(async {
                    if let Some(old) = imp.take() {
                        if tokio::time::timeout(BOUND, old.disconnect()).await.is_err() {
                            return "hang disconnect".to_string();
                        }
                    }
                    match tokio::time::timeout(
                        BOUND,
                        ctrl.import(exporter, SegmentId(SEGID), Perm::RDWR),
                    )
                    .await
                    {
                        Ok(Ok(i)) => {
                            imp = Some(i);
                            "connected".to_string()
                        }
                        Ok(Err(e)) => format!("err {e}"),
                        Err(_) => "hang import".to_string(),
                    }
                });
                say(answer);
            }
            ["run", kind, base] => {
                let (Some(kind), Some(imp)) = (Kind::parse(kind), imp.clone()) else {
                    say("err not connected or unknown kind");
                    continue;
                };
                let ctx = Ctx {
                    kind,
                    imp,
                    ctrl: ctrl.clone(),
                    exporter,
                    stop: Arc::new(AtomicBool::new(false)),
                    tally: Shared::default(),
                };
                running = Some(start(&rt, ctx, base.parse().unwrap()));
                say("running");
            }
            ["stop", ms] => match running.take() {
                Some(r) => {
                    let wait = Duration::from_millis(ms.parse().unwrap());
                    say(rt.block_on(r.stop(wait)))
                }
                None => say("err nothing runs"),
            },
            ["check", seq] => {
                let seq: u64 = seq.parse().unwrap();
                let answer = match &imp {
                    None => "err not connected".to_string(),
                    Some(i) => rt.block_on(check(i, seq)),
                };
                say(answer);
            }
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    if let Some(r) = running.take() {
        rt.block_on(r.stop(Duration::ZERO));
    }
    rt.block_on(async {
        if let Some(i) = imp.take() {
            let _ = tokio::time::timeout(BOUND, i.disconnect()).await;
        }
        drop(ctrl);
        let _ = tokio::time::timeout(BOUND, node.shutdown()).await;
    });
}

/// Writes record `seq` to the check slot and reads it back.
async fn check(imp: &ImportSegment, seq: u64) -> String {
    let slot = records::CHECK_SLOT;
    let work = async {
        imp.put(records::offset(slot), records::record(seq, slot))
            .await
            .map_err(|e| e.into_parts().0)?;
        let (_, back) = imp
            .get(records::offset(slot), vec![0u8; SLOT])
            .await
            .map_err(|e| e.into_parts().0)?;
        Ok::<_, rsm::Error>(records::check(&back, slot))
    };
    match tokio::time::timeout(BOUND, work).await {
        Ok(Ok(Some(s))) if s == seq => "ok".to_string(),
        Ok(Ok(other)) => format!("err read back {other:?}"),
        Ok(Err(e)) => format!("err {e}"),
        Err(_) => "hang".to_string(),
    }
}

fn start(rt: &tokio::runtime::Runtime, ctx: Ctx, base: u64) -> Running {
    let acked: Arc<[AtomicU64; LANES]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    match ctx.kind {
        Kind::Put | Kind::Putv | Kind::Atomics => {
            for lane in 0..LANES {
                let (ctx, acked) = (ctx.clone(), Arc::clone(&acked));
                tasks.push(rt.spawn(async move {
                    if ctx.kind == Kind::Atomics {
                        adds(ctx, lane, &acked[lane]).await
                    } else {
                        writes(ctx, lane, base, &acked[lane]).await
                    }
                }));
            }
        }
        Kind::Barrier => {
            let (ctx, acked) = (ctx.clone(), Arc::clone(&acked));
            tasks.push(rt.spawn(async move { barriers(ctx, base, &acked).await }));
        }
        Kind::Get | Kind::Getv | Kind::Rebind => {
            for lane in 0..LANES {
                let ctx = ctx.clone();
                tasks.push(rt.spawn(async move { reads(ctx, lane).await }));
            }
        }
        Kind::Map => tasks.push(rt.spawn(maps(ctx.clone()))),
        Kind::Signal => tasks.push(rt.spawn(signals(ctx.clone()))),
        Kind::Wait => tasks.push(rt.spawn(waits(ctx.clone()))),
        Kind::Publish => tasks.push(rt.spawn(imports(ctx.clone(), PUB_ID, false))),
        Kind::Unpublish => tasks.push(rt.spawn(imports(ctx.clone(), SEGID, true))),
    }
    // The progress line: what the parent may count on once this process is killed.
    let (stop, progress) = (Arc::clone(&ctx.stop), Arc::clone(&acked));
    rt.spawn(async move {
        let mut said = [0u64; LANES];
        while !stop.load(Ordering::Relaxed) {
            let now: [u64; LANES] = std::array::from_fn(|i| progress[i].load(Ordering::Acquire));
            if now != said {
                said = now;
                let words: Vec<String> = now.iter().map(u64::to_string).collect();
                say(format!("acked {}", words.join(" ")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    Running {
        stop: ctx.stop,
        tasks,
        tally: ctx.tally,
    }
}

/// Lane `lane`'s writes in order, one at a time: record `base + n + 1` to its `n`-th slot.
async fn writes(ctx: Ctx, lane: usize, base: u64, acked: &AtomicU64) {
    let mut n = 0u64;
    while !ctx.stopped() {
        let slot = records::lane_slot(lane, n);
        let rec = records::record(base + n + 1, slot);
        let at = records::offset(slot);
        let put = async {
            if ctx.kind == Kind::Putv {
                let entries = rec
                    .chunks(SLOT / 4)
                    .enumerate()
                    .map(|(i, c)| rsm::SgEntry::buffer(c.to_vec(), at + (i * SLOT / 4) as u64))
                    .collect();
                ctx.imp.putv(entries, rsm::SgFlags::empty()).await.result
            } else {
                ctx.imp
                    .put(at, rec)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.into_parts().0)
            }
        };
        match timed(&ctx.tally, ctx.kind.name(), put).await {
            None => return,
            Some(Ok(())) => {
                n += 1;
                acked.store(n, Ordering::Release);
                ctx.ok();
            }
            Some(Err(e)) => {
                if ctx.failed(&e) {
                    return;
                }
            }
        }
    }
}

/// Lane `lane`'s fetch-adds on its counter: each must return one more than the last.
async fn adds(ctx: Ctx, lane: usize, acked: &AtomicU64) {
    let mut last: Option<u64> = None;
    while !ctx.stopped() {
        let add = ctx.imp.fetch_add(records::counter(lane), 1u64);
        match timed(&ctx.tally, "fetch_add", add).await {
            None => return,
            Some(Ok(prev)) => {
                if let Some(l) = last.filter(|&l| prev != l + 1) {
                    ctx.data_error(format!("lane {lane}: fetch_add returned {prev} after {l}"));
                }
                last = Some(prev);
                acked.store(prev + 1, Ordering::Release);
                ctx.ok();
            }
            Some(Err(e)) => {
                if ctx.failed(&e) {
                    return;
                }
            }
        }
    }
}

/// Explicit barriers around one write to every lane, repeated; a write counts once its
/// barrier closed.
async fn barriers(ctx: Ctx, base: u64, acked: &[AtomicU64; LANES]) {
    let setup = ctx
        .imp
        .set_mode(rsm::BarrierMode::Explicit)
        .and_then(|()| ctx.imp.init_barrier());
    let b = match setup {
        Ok(b) => b,
        Err(e) => {
            ctx.failed(&e);
            return;
        }
    };
    let mut n = 0u64;
    while !ctx.stopped() {
        if let Err(e) = b.open() {
            if ctx.failed(&e) {
                return;
            }
            continue;
        }
        let puts = (0..LANES).map(|lane| {
            let slot = records::lane_slot(lane, n);
            ctx.imp
                .put(records::offset(slot), records::record(base + n + 1, slot))
        });
        let work = async {
            for r in futures::future::join_all(puts).await {
                r.map_err(|e| e.into_parts().0)?;
            }
            b.close().await
        };
        match timed(&ctx.tally, "barrier", work).await {
            None => return,
            Some(Ok(())) => {
                n += 1;
                for a in acked {
                    a.store(n, Ordering::Release);
                }
                ctx.ok();
            }
            Some(Err(e)) => {
                // A failed put leaves the barrier open: close it before the next round.
                let _ = timed(&ctx.tally, "barrier close", b.close()).await;
                if ctx.failed(&e) {
                    return;
                }
            }
        }
    }
}

/// Reads of lane `lane`'s slots: every read that succeeds holds a whole record.
async fn reads(ctx: Ctx, lane: usize) {
    let mut n = 0u64;
    while !ctx.stopped() {
        let slot = records::lane_slot(lane, n);
        let at = records::offset(slot);
        n += 1;
        let get = async {
            if ctx.kind == Kind::Getv {
                let entries = (0..4)
                    .map(|i| rsm::SgEntry::buffer(vec![0u8; SLOT / 4], at + (i * SLOT / 4) as u64))
                    .collect();
                let out = ctx.imp.getv(entries, rsm::SgFlags::empty()).await;
                out.result.map(|()| {
                    out.entries
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(|e| e.into_buffer().unwrap_or_default())
                        .collect::<Vec<u8>>()
                })
            } else {
                ctx.imp
                    .get(at, vec![0u8; SLOT])
                    .await
                    .map(|(_, b)| b)
                    .map_err(|e| e.into_parts().0)
            }
        };
        match timed(&ctx.tally, ctx.kind.name(), get).await {
            None => return,
            Some(Ok(bytes)) => {
                if records::check(&bytes, slot).is_none() {
                    ctx.data_error(format!(
                        "{} of slot {slot} read a torn record",
                        ctx.kind.name()
                    ));
                }
                ctx.ok();
            }
            Some(Err(e)) => {
                if ctx.failed(&e) {
                    return;
                }
            }
        }
    }
}

/// Map the segment, read a record through the mapping, unmap (loopback).
async fn maps(ctx: Ctx) {
    let mut n = 0u64;
    while !ctx.stopped() {
        let slot = records::lane_slot((n % LANES as u64) as usize, n / LANES as u64);
        n += 1;
        let read = (|| {
            let m = ctx.imp.map(0, SIZE, Perm::READ, rsm::MapAt::Anywhere)?;
            let mut buf = vec![0u8; SLOT];
            m.read(records::offset(slot) as usize, &mut buf)?;
            m.unmap()?;
            Ok::<_, rsm::Error>(buf)
        })();
        match read {
            Ok(bytes) => {
                if records::check(&bytes, slot).is_none() {
                    ctx.data_error(format!("map read a torn record in slot {slot}"));
                }
                ctx.ok();
            }
            Err(e) => {
                if ctx.failed(&e) {
                    return;
                }
            }
        }
        tokio::task::yield_now().await;
    }
}

async fn signals(ctx: Ctx) {
    while !ctx.stopped() {
        match timed(
            &ctx.tally,
            "signal",
            ctx.imp.signal(rsm::SignalFlags::empty()),
        )
        .await
        {
            None => return,
            Some(Ok(())) => ctx.ok(),
            Some(Err(e)) => {
                if ctx.failed(&e) {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn waits(ctx: Ctx) {
    while !ctx.stopped() {
        let wait = ctx.imp.wait_signal(Some(Duration::from_millis(500)));
        match timed(&ctx.tally, "wait_signal", wait).await {
            None => return,
            Some(Ok(_)) => ctx.ok(),
            Some(Err(e)) => {
                if ctx.failed(&e) {
                    return;
                }
            }
        }
    }
}

/// Imports of segment `id` racing with the exporter's publish loop: each import reads a
/// record (the main segment's records, if `records`) until it fails, then disconnects.
async fn imports(ctx: Ctx, id: u32, records: bool) {
    let mut n = 0u64;
    while !ctx.stopped() {
        let import = ctx.ctrl.import(ctx.exporter, SegmentId(id), Perm::RDWR);
        let imp = match timed(&ctx.tally, "import", import).await {
            None => return,
            Some(Ok(i)) => i,
            Some(Err(e)) => {
                ctx.failed(&e);
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        ctx.ok();
        // A few reads, or until the import is revoked.
        for _ in 0..if records { 50 } else { 1 } {
            let slot = if records {
                records::lane_slot((n % LANES as u64) as usize, n / LANES as u64)
            } else {
                0
            };
            n += 1;
            let get = imp.get(records::offset(slot), vec![0u8; SLOT]);
            match timed(&ctx.tally, "get", get).await {
                None => return,
                Some(Ok((_, bytes))) => {
                    if records && records::check(&bytes, slot).is_none() {
                        ctx.data_error(format!("get of slot {slot} read a torn record"));
                    }
                    ctx.ok();
                }
                Some(Err(e)) => {
                    ctx.failed(&e.into_parts().0);
                    break;
                }
            }
            if ctx.stopped() {
                break;
            }
        }
        if timed(&ctx.tally, "disconnect", imp.disconnect())
            .await
            .is_none()
        {
            return;
        }
    }
}
