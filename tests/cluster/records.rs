//! The workload of the network-fault tests (`netfaults.rs`), run by an importing node
//! process: three workers, each with its own import of one exporter's segment and its own
//! share of its slots, put records one at a time, two in a vector and 64 in one put, and
//! read acknowledged ones back singly and gathered, every await bounded, until the parent
//! stops them. Each record carries its
//! sequence number, its slot and a checksum, so a misplaced, torn or stale record shows;
//! the ledger remembers, per slot, the last record put there and whether the put was
//! acknowledged, and `verify` reads every acknowledged one back through a fresh import.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rsm::{ImportSegment, NodeId, Perm, SegmentId, SgEntry, SgFlags};

/// A record's size: its slot's size too.
pub const RECORD: usize = 4096;

/// Longer than anything may take: an await still pending after it is a hang.
const HANG: Duration = Duration::from_secs(12);

/// Record `seq` for `slot`: sequence, slot, pattern, and the FNV-1a of what precedes it.
pub fn record(seq: u64, slot: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(RECORD);
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&slot.to_le_bytes());
    r.extend_from_slice(&crate::common::pattern(seq, RECORD - 24));
    let sum = crate::common::checksum(&r);
    r.extend_from_slice(&sum.to_le_bytes());
    r
}

/// What is wrong with `buf` as record `seq` of `slot`, if anything.
pub fn wrong(buf: &[u8], seq: u64, slot: u64) -> Option<String> {
    if buf.len() != RECORD {
        return Some(format!("slot {slot}: {} bytes", buf.len()));
    }
    let (body, sum) = buf.split_at(RECORD - 8);
    if crate::common::checksum(body).to_le_bytes() != sum {
        return Some(format!("slot {slot}: checksum differs (torn or corrupted)"));
    }
    let got = u64::from_le_bytes(body[..8].try_into().unwrap());
    let at = u64::from_le_bytes(body[8..16].try_into().unwrap());
    if (got, at) != (seq, slot) {
        return Some(format!(
            "slot {slot}: record {got} of slot {at}, expected {seq}"
        ));
    }
    None
}

/// Workers, each with its own import and its own share of the slots, so that several
/// operations are in flight when a fault strikes.
const WORKERS: u64 = 3;

/// Records in a bulk put (256 KiB).
const BULK: u64 = 64;

/// One worker's slots `base..base + len`: per slot, the last record put there and whether
/// its put was acknowledged.
pub struct Ledger {
    slots: HashMap<u64, (u64, bool)>,
    next: u64,
    base: u64,
    len: u64,
    /// Slots whose last put failed: put again first, as an application retries a write.
    retry: Vec<u64>,
}

impl Ledger {
    /// The ledgers of the workers, sharing `slots` slots.
    fn split(slots: u64) -> Vec<Ledger> {
        let len = slots / WORKERS;
        (0..WORKERS)
            .map(|w| Ledger {
                slots: HashMap::new(),
                next: 0,
                base: w * len,
                len,
                retry: Vec::new(),
            })
            .collect()
    }
}

/// What a run of the workload saw.
#[derive(Default)]
pub struct Tally {
    acked: u64,
    gets: u64,
    imports: u64,
    errors: BTreeMap<String, u64>,
    hangs: u64,
    /// Wrong records read, and the first few of them.
    bad_n: u64,
    bad: Vec<String>,
    max_err_ms: u128,
    max_ok_ms: u128,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.acked += o.acked;
        self.gets += o.gets;
        self.imports += o.imports;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.hangs += o.hangs;
        self.bad_n += o.bad_n;
        for b in o.bad {
            if self.bad.len() < 8 {
                self.bad.push(b);
            }
        }
        self.max_err_ms = self.max_err_ms.max(o.max_err_ms);
        self.max_ok_ms = self.max_ok_ms.max(o.max_ok_ms);
    }

    fn ok(&mut self, took: Duration) {
        self.max_ok_ms = self.max_ok_ms.max(took.as_millis());
    }

    fn error(&mut self, e: &rsm::Error, took: Duration) {
        *self.errors.entry(e.name().to_string()).or_default() += 1;
        self.max_err_ms = self.max_err_ms.max(took.as_millis());
    }

    fn bad(&mut self, what: String) {
        eprintln!("records: {what}");
        self.bad_n += 1;
        if self.bad.len() < 8 {
            self.bad.push(what);
        }
    }

    /// `acked=N gets=N imports=N hangs=N bad=N maxerr=MS maxok=MS errors=NAME:N,...`
    pub fn line(&self) -> String {
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        format!(
            "acked={} gets={} imports={} hangs={} bad={} maxerr={} maxok={} errors={}",
            self.acked,
            self.gets,
            self.imports,
            self.hangs,
            self.bad_n,
            self.max_err_ms,
            self.max_ok_ms,
            if errors.is_empty() {
                "-".into()
            } else {
                errors.join(",")
            },
        )
    }
}

/// Where the records go: a controller of this node, and the exporter's segment.
#[derive(Clone)]
pub struct Target {
    pub ctrl: rsm::Controller,
    pub node: u32,
    pub seg: u32,
    pub slots: u64,
    /// Whether a lost import is held until a new one works (as an application's handle
    /// would be) or dropped at once (the last drop closes the fabric connection to the peer).
    pub hold_lost: bool,
}

impl Target {
    /// An import within [`HANG`]: `None` after counting the error or the hang.
    async fn import(&self, tally: &mut Tally) -> Option<ImportSegment> {
        let started = Instant::now();
        let imp = self
            .ctrl
            .import(NodeId(self.node), SegmentId(self.seg), Perm::RDWR);
        match tokio::time::timeout(HANG, imp).await {
            Ok(Ok(imp)) => {
                tally.imports += 1;
                tally.ok(started.elapsed());
                Some(imp)
            }
            Ok(Err(e)) => {
                tally.error(&e, started.elapsed());
                None
            }
            Err(_) => {
                tally.hangs += 1;
                None
            }
        }
    }
}

/// A running workload: stop it with [`Running::stop`].
pub struct Running {
    stop: Arc<AtomicBool>,
    /// Puts acknowledged since the parent said the network healed (`heal`).
    pub after_heal: Arc<AtomicU64>,
    /// Puts acknowledged since the start.
    pub acked: Arc<AtomicU64>,
    healed: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Ledger, Tally)>>,
}

impl Running {
    /// Starts the workers on `target`, continuing their `ledgers`.
    pub fn start(target: Target, ledgers: Vec<Ledger>) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let after_heal = Arc::new(AtomicU64::new(0));
        let acked = Arc::new(AtomicU64::new(0));
        let healed = Arc::new(AtomicBool::new(false));
        let tasks = ledgers
            .into_iter()
            .map(|ledger| {
                tokio::spawn(run(
                    target.clone(),
                    ledger,
                    Arc::clone(&stop),
                    Arc::clone(&healed),
                    Arc::clone(&after_heal),
                    Arc::clone(&acked),
                ))
            })
            .collect();
        Running {
            stop,
            after_heal,
            acked,
            healed,
            tasks,
        }
    }

    /// The parent says the network is whole again: count acknowledged puts from now on.
    pub fn heal(&self) {
        self.healed.store(true, Ordering::SeqCst);
    }

    /// Stops the workload and returns its ledger and tally (`None` if it did not end within
    /// twice the hang bound: a hang of the workload itself).
    pub async fn stop(self) -> Option<(Vec<Ledger>, Tally)> {
        self.stop.store(true, Ordering::SeqCst);
        let all = futures::future::join_all(self.tasks);
        let done = tokio::time::timeout(2 * HANG, all).await.ok()?;
        let mut ledgers = Vec::new();
        let mut tally = Tally::default();
        for out in done {
            let (ledger, t) = out.ok()?;
            ledgers.push(ledger);
            tally.merge(t);
        }
        Some((ledgers, tally))
    }
}

/// One await of the workload, bounded: `Some(result)` or `None` for a hang.
async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(HANG, f).await.ok()
}

async fn run(
    target: Target,
    mut ledger: Ledger,
    stop: Arc<AtomicBool>,
    healed: Arc<AtomicBool>,
    after_heal: Arc<AtomicU64>,
    all_acked: Arc<AtomicU64>,
) -> (Ledger, Tally) {
    let mut tally = Tally::default();
    let mut imp: Option<ImportSegment> = None;
    // The lost import, held until a new one works, as an application's handle would be.
    let mut lost: Option<ImportSegment> = None;
    let mut round = 0u64;
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let Some(i) = imp.clone() else {
            imp = target.import(&mut tally).await;
            if imp.is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            } else {
                lost = None;
            }
            continue;
        };
        round += 1;
        let started = Instant::now();
        let outcome = match round % 16 {
            0 | 8 => get_one(&i, &ledger, round, &mut tally).await,
            1 | 9 => getv_two(&i, &ledger, round, &mut tally).await,
            2 | 10 => putv_two(&i, &mut ledger, &mut tally).await,
            3 => put_bulk(&i, &mut ledger, &mut tally).await,
            _ => put_one(&i, &mut ledger, &mut tally).await,
        };
        match outcome {
            Some(Ok(acked)) => {
                tally.ok(started.elapsed());
                all_acked.fetch_add(acked, Ordering::SeqCst);
                if healed.load(Ordering::SeqCst) {
                    after_heal.fetch_add(acked, Ordering::SeqCst);
                }
            }
            Some(Err(e)) => {
                tally.error(&e, started.elapsed());
                if e.is_unreachable() || e.is_disconnected() {
                    // A lost import stays lost: the next round imports again.
                    lost = imp.take().filter(|_| target.hold_lost);
                }
            }
            None => tally.hangs += 1,
        }
    }
    drop(lost);
    (ledger, tally)
}

/// The next record's sequence and slot, marked as not (yet) acknowledged.
fn next(ledger: &mut Ledger) -> (u64, u64) {
    let seq = ledger.next;
    ledger.next += 1;
    let slot = ledger.retry.pop().unwrap_or(ledger.base + seq % ledger.len);
    ledger.slots.insert(slot, (seq, false));
    (seq, slot)
}

/// An acknowledged slot chosen by `round`, with its record's sequence.
fn acked_slot(ledger: &Ledger, round: u64) -> Option<(u64, u64)> {
    let n = ledger.len;
    let start = round.wrapping_mul(0x9e37_79b9_7f4a_7c15) % n;
    (0..n)
        .filter_map(|k| {
            let slot = ledger.base + (start + k) % n;
            match ledger.slots.get(&slot) {
                Some(&(seq, true)) => Some((slot, seq)),
                _ => None,
            }
        })
        .next()
}

type Step = Option<rsm::Result<u64>>;

async fn put_one(i: &ImportSegment, l: &mut Ledger, tally: &mut Tally) -> Step {
    let (seq, slot) = next(l);
    let Some(out) = bounded(i.put(slot * RECORD as u64, record(seq, slot))).await else {
        l.retry.push(slot);
        return None;
    };
    Some(match out {
        Ok(_) => {
            l.slots.insert(slot, (seq, true));
            tally.acked += 1;
            Ok(1)
        }
        Err(e) => {
            l.retry.push(slot);
            Err(e.into_parts().0)
        }
    })
}

async fn putv_two(i: &ImportSegment, l: &mut Ledger, tally: &mut Tally) -> Step {
    let (a, sa) = next(l);
    let (b, sb) = next(l);
    let entries = vec![
        SgEntry::buffer(record(a, sa), sa * RECORD as u64),
        SgEntry::buffer(record(b, sb), sb * RECORD as u64),
    ];
    let Some(out) = bounded(i.putv(entries, SgFlags::empty())).await else {
        l.retry.extend([sb, sa]);
        return None;
    };
    Some(match out.result {
        Ok(()) => {
            l.slots.insert(sa, (a, true));
            l.slots.insert(sb, (b, true));
            tally.acked += 2;
            Ok(2)
        }
        Err(e) => {
            l.retry.extend([sb, sa]);
            Err(e)
        }
    })
}

/// [`BULK`] records in consecutive slots, in one put.
async fn put_bulk(i: &ImportSegment, l: &mut Ledger, tally: &mut Tally) -> Step {
    let first = l.next;
    let start = l.base + first % (l.len - BULK);
    let mut data = Vec::with_capacity(BULK as usize * RECORD);
    for k in 0..BULK {
        data.extend_from_slice(&record(first + k, start + k));
        l.slots.insert(start + k, (first + k, false));
    }
    l.next += BULK;
    let Some(out) = bounded(i.put(start * RECORD as u64, data)).await else {
        l.retry.extend((start..start + BULK).rev());
        return None;
    };
    Some(match out {
        Ok(_) => {
            for k in 0..BULK {
                l.slots.insert(start + k, (first + k, true));
            }
            tally.acked += BULK;
            Ok(BULK)
        }
        Err(e) => {
            l.retry.extend((start..start + BULK).rev());
            Err(e.into_parts().0)
        }
    })
}

async fn get_one(i: &ImportSegment, l: &Ledger, round: u64, tally: &mut Tally) -> Step {
    let Some((slot, seq)) = acked_slot(l, round) else {
        return Some(Ok(0));
    };
    let out = bounded(i.get(slot * RECORD as u64, vec![0u8; RECORD])).await?;
    Some(match out {
        Ok((_, buf)) => {
            tally.gets += 1;
            if let Some(w) = wrong(&buf, seq, slot) {
                tally.bad(format!("get {w}"));
            }
            Ok(0)
        }
        Err(e) => Err(e.into_parts().0),
    })
}

async fn getv_two(i: &ImportSegment, l: &Ledger, round: u64, tally: &mut Tally) -> Step {
    let (Some((s1, q1)), Some((s2, q2))) = (acked_slot(l, round), acked_slot(l, round + 1)) else {
        return Some(Ok(0));
    };
    let entries = vec![
        SgEntry::buffer(vec![0u8; RECORD], s1 * RECORD as u64),
        SgEntry::buffer(vec![0u8; RECORD], s2 * RECORD as u64),
    ];
    let out = bounded(i.getv(entries, SgFlags::empty())).await?;
    if let Err(e) = out.result {
        return Some(Err(e));
    }
    tally.gets += 1;
    let bufs: Vec<Option<Vec<u8>>> = out
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(SgEntry::into_buffer)
        .collect();
    for (k, (slot, seq)) in [(s1, q1), (s2, q2)].into_iter().enumerate() {
        match bufs.get(k).cloned().flatten() {
            Some(buf) => {
                if let Some(w) = wrong(&buf, seq, slot) {
                    tally.bad(format!("getv {w}"));
                }
            }
            None => tally.bad(format!("getv: entry {k} came back without its buffer")),
        }
    }
    Some(Ok(0))
}

/// A fresh import for reading back, within 20 s while the network recovers.
async fn import_within(target: &Target, tally: &mut Tally) -> Option<ImportSegment> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(imp) = target.import(tally).await {
            return Some(imp);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads every acknowledged record back through a fresh import: `verified N bad M hangs H
/// lost L` and the first problems. An import lost meanwhile (a busy host can miss the
/// liveness bound) is made again, at most 3 times, and the slot read again: only a wrong
/// record, a hang or a failure other than a loss counts against the data.
pub async fn verify(target: &Target, ledgers: &[Ledger]) -> String {
    let mut tally = Tally::default();
    let Some(mut imp) = import_within(target, &mut tally).await else {
        return format!("noimport {}", tally.line());
    };
    let (mut checked, mut lost) = (0u64, 0u64);
    let mut slots: Vec<(&u64, &(u64, bool))> = ledgers.iter().flat_map(|l| &l.slots).collect();
    slots.sort();
    for (&slot, &(seq, acked)) in slots {
        if !acked {
            continue;
        }
        loop {
            match bounded(imp.get(slot * RECORD as u64, vec![0u8; RECORD])).await {
                Some(Ok((_, buf))) => {
                    checked += 1;
                    if let Some(w) = wrong(&buf, seq, slot) {
                        tally.bad(format!("verify {w}"));
                    }
                }
                Some(Err(e)) if e.error().is_unreachable() && lost < 3 => {
                    lost += 1;
                    eprintln!("records: verify lost its import: {}", e.error());
                    match import_within(target, &mut tally).await {
                        Some(i) => imp = i,
                        None => return format!("noimport {}", tally.line()),
                    }
                    continue;
                }
                Some(Err(e)) => tally.bad(format!("verify get slot {slot}: {}", e.error().name())),
                None => tally.hangs += 1,
            }
            break;
        }
    }
    let _ = bounded(imp.disconnect()).await;
    let mut line = format!(
        "verified {checked} bad {} hangs {} lost {lost}",
        tally.bad_n, tally.hangs
    );
    for b in &tally.bad {
        line.push_str(&format!("; {b}"));
    }
    line
}

/// The workload's state in the node process: the ledger between runs, the running one.
#[derive(Default)]
pub struct Records {
    pub ledger: Option<Vec<Ledger>>,
    pub running: Option<Running>,
    pub target: Option<Target>,
}

/// `work start CTRL NODE SEG SLOTS hold|drop` (what a worker does with a lost import), `work acked`
/// (puts acknowledged since `start`), `work heal`, `work healed` (puts acknowledged since
/// `heal`), `work stop` (the tally's line) and `work verify`.
pub async fn command(node: &rsm::Node, rec: &Mutex<Records>, words: &[&str]) -> String {
    match words {
        ["start", ctrl, id, seg, slots, lost] => {
            let ctrl = match node.controller(ctrl).await {
                Ok(c) => c,
                Err(e) => return format!("err {} 0", e.name()),
            };
            let target = Target {
                ctrl,
                node: id.parse().unwrap(),
                seg: seg.parse().unwrap(),
                slots: slots.parse().unwrap(),
                hold_lost: *lost == "hold",
            };
            let mut r = rec.lock().unwrap();
            let ledger = r
                .ledger
                .take()
                .unwrap_or_else(|| Ledger::split(target.slots));
            r.running = Some(Running::start(target.clone(), ledger));
            r.target = Some(target);
            "ok".into()
        }
        ["heal"] => match &rec.lock().unwrap().running {
            Some(r) => {
                r.heal();
                "ok".into()
            }
            None => "idle".into(),
        },
        ["acked"] => match &rec.lock().unwrap().running {
            Some(r) => r.acked.load(Ordering::SeqCst).to_string(),
            None => "idle".into(),
        },
        ["healed"] => match &rec.lock().unwrap().running {
            Some(r) => r.after_heal.load(Ordering::SeqCst).to_string(),
            None => "idle".into(),
        },
        ["stop"] => {
            let running = rec.lock().unwrap().running.take();
            let Some(running) = running else {
                return "idle".into();
            };
            match running.stop().await {
                Some((ledger, tally)) => {
                    rec.lock().unwrap().ledger = Some(ledger);
                    let mut line = format!("done {}", tally.line());
                    for b in &tally.bad {
                        line.push_str(&format!("; {b}"));
                    }
                    line
                }
                None => "hang".into(),
            }
        }
        ["verify"] => {
            let (target, ledger) = {
                let mut r = rec.lock().unwrap();
                (r.target.clone(), r.ledger.take())
            };
            let (Some(target), Some(ledger)) = (target, ledger) else {
                return "idle".into();
            };
            let line = verify(&target, &ledger).await;
            rec.lock().unwrap().ledger = Some(ledger);
            line
        }
        other => format!("unknown work command {other:?}"),
    }
}
