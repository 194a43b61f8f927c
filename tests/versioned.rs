//! Typed values and versioned records (DESIGN.md §14) between two nodes of this process, on
//! loopback, shm0 and tcp0: the exporter writes records in a loop while importers read them
//! (with get and, on loopback, through a mapping), and the other way round; two importers
//! race to write one record; typed values round trip; and the refusals have their codes.
//! Every value is derived from its writer's count, so a torn read shows.

mod common;

use futures::FutureExt;
use rsm::{ExportFlags, ExportSegment, ImportSegment, MapAt, Perm, Versioned};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A feature-cache slot: 64 bytes.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Slot([u64; 8]);

/// The value of a writer's `n`-th write: every word derived from `n` (0 is the zeroed one).
fn slot(n: u64) -> Slot {
    Slot(std::array::from_fn(|i| n.wrapping_mul(i as u64 + 1)))
}

/// The writer's count a value was made from; panics on a torn value.
fn count_of(r: &Versioned<Slot>, what: &str) -> u64 {
    let n = r.value.0[0];
    assert_eq!(
        r.value,
        slot(n),
        "{what}: a torn value at version {}",
        r.version
    );
    assert_eq!(r.version % 2, 0, "{what}: an odd version");
    n
}

const SLOTS: usize = 8;
const STRIDE: usize = Versioned::<Slot>::STRIDE;
const SIZE: usize = 64 * 1024;
const RUN: Duration = Duration::from_millis(800);
/// How long a loop goes on past `RUN` for its minimum count, on a loaded host.
const LIMIT: Duration = Duration::from_secs(10);

/// Whether a loop started at `start` goes on: for `RUN`, then until `enough` (or `LIMIT`).
fn going(start: Instant, enough: bool) -> bool {
    let t = start.elapsed();
    t < RUN || (!enough && t < LIMIT)
}

fn at(i: usize) -> u64 {
    (i * STRIDE) as u64
}

struct Pair {
    rt: tokio::runtime::Runtime,
    imp: ImportSegment,
    ro: ImportSegment,
    exp: ExportSegment,
    _nodes: (rsm::Node, rsm::Node),
}

fn pair(ctrl: &'static str) -> Pair {
    common::logs();
    let rt = common::runtime();
    let (exp, imp, ro, nodes) = rt.block_on(async {
        let (a, b, a_id) = common::two_nodes().await;
        let (exp, imp) = common::export_and_import(&a, &b, ctrl, SIZE, ExportFlags::empty()).await;
        let ro = b
            .controller(ctrl)
            .await
            .unwrap()
            .import(rsm::NodeId(a_id), exp.id().unwrap(), Perm::READ)
            .await
            .unwrap();
        (exp, imp, ro, (a, b))
    });
    Pair {
        rt,
        imp,
        ro,
        exp,
        _nodes: nodes,
    }
}

/// Reads the slots round and round with `read` for `RUN`: no torn value, each slot's
/// version equal to twice its single writer's count and never going down. Returns the reads
/// and how many of them found a slot at a newer version than the last read of it.
async fn remote_reads(imp: &ImportSegment, what: &str) -> (usize, usize) {
    let (mut last, mut reads, mut newer) = ([0u64; SLOTS], 0, 0);
    let start = Instant::now();
    while going(start, newer >= 5) {
        let i = reads % SLOTS;
        let r: Versioned<Slot> = imp.read_versioned(at(i)).await.expect(what);
        let n = count_of(&r, what);
        assert_eq!(r.version, 2 * n, "{what}: the version is not its value's");
        assert!(r.version >= last[i], "{what}: slot {i} went back");
        newer += usize::from(r.version > last[i]);
        last[i] = r.version;
        reads += 1;
    }
    (reads, newer)
}

/// The exporter writes the slots round and round (pausing after each round, so that a
/// remote read of three round trips mostly finds its slot still) while the importer reads them
/// through a read-write import (atomic loads of the word), a read-only one (gets of it) and,
/// on loopback, a mapping read in a tight loop.
fn exporter_writes_importers_read(ctrl: &'static str) {
    let p = pair(ctrl);
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Duration::from_micros(if ctrl == "loopback" { 200 } else { 2000 });
    let writer = {
        let (exp, stop) = (p.exp.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                for i in 0..SLOTS {
                    let v = exp.write_versioned(at(i), &slot(n)).unwrap();
                    assert_eq!(v, 2 * n);
                }
                // Longer than most remote reads take, so that most find their slot still.
                std::thread::sleep(pause);
            }
            n
        })
    };
    let mapped = (ctrl == "loopback").then(|| {
        let map = p.imp.map(0, SIZE, Perm::READ, MapAt::Anywhere).unwrap();
        std::thread::spawn(move || {
            let (mut last, mut reads) = ([0u64; SLOTS], 0usize);
            let start = Instant::now();
            while going(start, reads >= 1000) {
                let i = reads % SLOTS;
                let r: Versioned<Slot> = map.read_versioned(i * STRIDE).unwrap();
                let n = count_of(&r, "mapping");
                assert_eq!(r.version, 2 * n);
                assert!(r.version >= last[i]);
                last[i] = r.version;
                reads += 1;
                if reads % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(10));
                }
            }
            reads
        })
    });
    // Two tasks, so that neither starves the other (a loop of operations that complete in
    // their first poll never yields).
    let ((reads, newer), (ro_reads, ro_newer)) = p.rt.block_on(async {
        let (imp, ro) = (p.imp.clone(), p.ro.clone());
        let rw = tokio::spawn(async move { remote_reads(&imp, "read-write import").await });
        let ro = tokio::spawn(async move { remote_reads(&ro, "read-only import").await });
        (rw.await.unwrap(), ro.await.unwrap())
    });
    let map_reads = mapped.map(|t| t.join().unwrap());
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().unwrap();
    eprintln!(
        "{ctrl}: {writes} rounds written; {reads} reads ({newer} newer), {ro_reads} read-only \
         ({ro_newer} newer), mapping {map_reads:?}"
    );
    assert!(writes >= 5, "{ctrl}: the writer made {writes} rounds");
    assert!(newer >= 5, "{ctrl}: {reads} reads, {newer} newer");
    assert!(
        ro_newer >= 5,
        "{ctrl}: {ro_reads} read-only, {ro_newer} newer"
    );
    assert!(
        map_reads.is_none_or(|n| n >= 1000),
        "{ctrl}: {map_reads:?} mapped reads"
    );
}

#[test]
fn exporter_writes_importers_read_on_loopback() {
    exporter_writes_importers_read("loopback");
}

#[test]
fn exporter_writes_importers_read_on_shm0() {
    exporter_writes_importers_read("shm0");
}

#[test]
fn exporter_writes_importers_read_on_tcp0() {
    exporter_writes_importers_read("tcp0");
}

/// The importer writes the first slots (and, on loopback, a mapping writes the others)
/// while the exporter reads every slot locally in a tight loop.
fn importer_writes_exporter_reads(ctrl: &'static str) {
    let p = pair(ctrl);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (exp, stop) = (p.exp.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut last, mut reads, mut newer) = ([0u64; 2 * SLOTS], 0usize, 0usize);
            while !stop.load(Ordering::Relaxed) {
                let i = reads % (2 * SLOTS);
                let r: Versioned<Slot> = exp.read_versioned(at(i)).unwrap();
                let n = count_of(&r, "exporter");
                assert_eq!(r.version, 2 * n, "the exporter: slot {i}");
                assert!(r.version >= last[i], "the exporter: slot {i} went back");
                newer += usize::from(r.version > last[i]);
                last[i] = r.version;
                reads += 1;
                if reads % 16 == 0 {
                    std::thread::sleep(Duration::from_micros(10));
                }
            }
            (reads, newer)
        })
    };
    let mapped = (ctrl == "loopback").then(|| {
        let map = p.imp.map(0, SIZE, Perm::RDWR, MapAt::Anywhere).unwrap();
        std::thread::spawn(move || {
            let (mut n, start) = (0u64, Instant::now());
            while going(start, n >= 5) {
                n += 1;
                for i in SLOTS..2 * SLOTS {
                    assert_eq!(map.write_versioned(i * STRIDE, &slot(n)).unwrap(), 2 * n);
                }
                std::thread::sleep(Duration::from_micros(10));
            }
            n
        })
    });
    let rounds = p.rt.block_on(async {
        let (mut n, start) = (0u64, Instant::now());
        while going(start, n >= 5) {
            n += 1;
            for i in 0..SLOTS {
                let v = p.imp.write_versioned(at(i), &slot(n)).await.unwrap();
                assert_eq!(v, 2 * n);
            }
        }
        n
    });
    let map_rounds = mapped.map(|t| t.join().unwrap());
    stop.store(true, Ordering::Relaxed);
    let (reads, newer) = reader.join().unwrap();
    eprintln!("{ctrl}: {rounds} rounds, mapping {map_rounds:?}; {reads} reads ({newer} newer)");
    assert!(rounds >= 5, "{ctrl}: {rounds} rounds");
    assert!(
        reads >= 100 && newer >= 5,
        "{ctrl}: {reads} reads, {newer} newer"
    );
    let last: Versioned<Slot> = p.exp.read_versioned(at(SLOTS - 1)).unwrap();
    assert_eq!(last.version, 2 * rounds);
}

#[test]
fn importer_writes_exporter_reads_on_loopback() {
    importer_writes_exporter_reads("loopback");
}

#[test]
fn importer_writes_exporter_reads_on_shm0() {
    importer_writes_exporter_reads("shm0");
}

#[test]
fn importer_writes_exporter_reads_on_tcp0() {
    importer_writes_exporter_reads("tcp0");
}

/// Two importers' tasks and the exporter write one record at once: their claims exclude
/// each other, so no write is lost (the version counts them all) and no read is torn.
fn writers_race(ctrl: &'static str) {
    let p = pair(ctrl);
    let rec = at(3);
    const EACH: u64 = 100;
    let (local, remote) = p.rt.block_on(async {
        let write = |w: u64| {
            let imp = p.imp.clone();
            async move {
                for k in 1..=EACH {
                    imp.write_versioned(rec, &slot(w << 32 | k)).await.unwrap();
                    let r = imp.read_versioned::<Slot>(rec).await.unwrap();
                    count_of(&r, "a racing writer");
                }
            }
        };
        let exp = p.exp.clone();
        // On shm0 the provider performs remote atomics itself, which the exporter's CPU
        // accesses are not promised to be atomic with (DESIGN.md §13): no local writer there.
        let local = if ctrl == "shm0" { 0 } else { EACH };
        let exporter = tokio::task::spawn_blocking(move || {
            for k in 1..=local {
                exp.write_versioned(rec, &slot(3 << 32 | k)).unwrap();
                count_of(&exp.read_versioned(rec).unwrap(), "the exporter");
            }
        });
        let ((), (), done) = futures::join!(
            tokio::spawn(write(1)).map(Result::unwrap),
            tokio::spawn(write(2)).map(Result::unwrap),
            exporter
        );
        done.unwrap();
        (local, 2 * EACH)
    });
    let r: Versioned<Slot> = p.exp.read_versioned(rec).unwrap();
    count_of(&r, "the end");
    assert_eq!(r.version, 2 * (local + remote), "{ctrl}: a lost write");
}

#[test]
fn writers_race_on_loopback() {
    writers_race("loopback");
}

#[test]
fn writers_race_on_shm0() {
    writers_race("shm0");
}

#[test]
fn writers_race_on_tcp0() {
    writers_race("tcp0");
}

#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Point {
    x: f64,
    y: f64,
    tag: u32,
    pad: u32,
}

/// Values and slices of values round trip through put and get, the exporter's accessors
/// and a mapping, at aligned and unaligned offsets; the refusals have their codes.
fn values(ctrl: &'static str) {
    let p = pair(ctrl);
    let pt = Point {
        x: 1.5,
        y: -2.25,
        tag: 7,
        pad: 0,
    };
    let code = |r: rsm::Result<()>| r.unwrap_err().code();
    p.rt.block_on(async {
        let (imp, ro, exp) = (&p.imp, &p.ro, &p.exp);
        imp.put_value(40, &pt).await.unwrap();
        assert_eq!(imp.get_value::<Point>(40).await.unwrap(), pt);
        assert_eq!(exp.read_value::<Point>(40).unwrap(), pt);
        assert_eq!(ro.get_value::<Point>(40).await.unwrap(), pt);
        // Unaligned, and slices.
        imp.put_values(1001, &[1u32, 2, 3]).await.unwrap();
        assert_eq!(imp.get_values::<u32>(1001, 3).await.unwrap(), [1, 2, 3]);
        assert_eq!(exp.read_values::<u32>(1001, 3).unwrap(), [1, 2, 3]);
        exp.write_values(2003, &[pt, pt]).unwrap();
        assert_eq!(imp.get_values::<Point>(2003, 2).await.unwrap(), [pt, pt]);
        exp.write_value(3001, &0x0102_0304_0506_0708u64).unwrap();
        assert_eq!(
            imp.get_value::<u64>(3001).await.unwrap(),
            0x0102_0304_0506_0708
        );
        assert!(imp.get_values::<u64>(0, 0).await.unwrap().is_empty());
        imp.put_values::<u64>(0, &[]).await.unwrap();

        // Bounds, permission, alignment, overflow.
        let end = SIZE as u64;
        assert_eq!(code(imp.put_value(end - 8, &pt).await), 20);
        assert_eq!(code(imp.put_value(end + 8, &pt).await), 18);
        assert_eq!(
            imp.get_value::<Point>(end - 4).await.unwrap_err().code(),
            20
        );
        let huge = imp.get_values::<Point>(0, usize::MAX / 4).await;
        assert_eq!(huge.unwrap_err().code(), 20);
        assert_eq!(code(ro.put_value(0, &pt).await), 27);
        assert_eq!(exp.read_value::<Point>(end - 4).unwrap_err().code(), 20);
        assert_eq!(exp.write_value(end, &1u8).unwrap_err().code(), 18);
        assert_eq!(
            exp.read_values::<u64>(8, usize::MAX).unwrap_err().code(),
            20
        );

        let rec = 4096;
        assert_eq!(code(ro.write_versioned(rec, &pt).await.map(drop)), 27);
        assert_eq!(code(imp.write_versioned(rec + 4, &pt).await.map(drop)), 17);
        assert_eq!(
            code(imp.read_versioned::<Point>(rec + 4).await.map(drop)),
            17
        );
        assert_eq!(code(exp.write_versioned(rec + 4, &pt).map(drop)), 17);
        assert_eq!(code(exp.read_versioned::<Point>(end - 8).map(drop)), 20);
        assert_eq!(
            code(imp.read_versioned::<Point>(end - 8).await.map(drop)),
            20
        );
        let v = imp.write_versioned(rec, &pt).await.unwrap();
        assert_eq!(v, 2);
        let back = ro.read_versioned::<Point>(rec).await.unwrap();
        assert_eq!((back.version, back.value), (2, pt));
        assert_eq!(exp.read_versioned::<Point>(rec).unwrap().value, pt);
        // The record's word is the sequence, in the exporter's byte order.
        assert_eq!(exp.atomic_load::<u64>(rec).unwrap(), 2);

        // Explicit barrier mode cannot order a versioned write.
        imp.set_mode(rsm::BarrierMode::Explicit).unwrap();
        assert_eq!(code(imp.write_versioned(rec, &pt).await.map(drop)), 25);
        imp.set_mode(rsm::BarrierMode::Implicit).unwrap();
    });
    if ctrl == "loopback" {
        let map = p.imp.map(0, 8192, Perm::RDWR, MapAt::Anywhere).unwrap();
        map.write_value(5, &pt).unwrap();
        assert_eq!(map.read_value::<Point>(5).unwrap(), pt);
        assert_eq!(p.exp.read_value::<Point>(5).unwrap(), pt);
        assert_eq!(map.read_value::<Point>(8192 - 8).unwrap_err().code(), 18);
        assert_eq!(map.read_versioned::<Point>(4100).unwrap_err().code(), 17);
        assert_eq!(map.read_versioned::<Point>(4096).unwrap().value, pt);
        assert_eq!(map.write_versioned(4096, &pt).unwrap(), 4);
        drop(map);
        let ro_map = p.imp.map(0, 8192, Perm::READ, MapAt::Anywhere).unwrap();
        assert_eq!(ro_map.write_value(0, &1u8).unwrap_err().code(), 27);
        assert_eq!(ro_map.write_versioned(4096, &pt).unwrap_err().code(), 27);
    }
}

#[test]
fn values_on_loopback() {
    values("loopback");
}

#[test]
fn values_on_shm0() {
    values("shm0");
}

#[test]
fn values_on_tcp0() {
    values("tcp0");
}

/// A writer that stopped between its claim and its release leaves the word odd: reads and
/// writes give up with `RSMERR_TIMEOUT` after `VERSIONED_TIMEOUT`, and an even word above
/// it lets the record be written again.
#[test]
fn a_record_left_odd_times_out_and_recovers() {
    let p = pair("loopback");
    let rec = 8192;
    p.exp.atomic_store(rec, 5u64).unwrap();
    let started = Instant::now();
    p.rt.block_on(async {
        let (r, w) = futures::join!(
            p.imp.read_versioned::<Slot>(rec),
            p.imp.write_versioned(rec + 72, &slot(1)),
        );
        assert_eq!(r.unwrap_err().code(), 42);
        assert_eq!(w.unwrap(), 2, "another record is free");
    });
    let e = p.exp.read_versioned::<Slot>(rec).unwrap_err();
    assert_eq!(e.code(), 42);
    assert!(e.to_string().contains("stayed odd"), "{e}");
    assert!(started.elapsed() >= rsm::VERSIONED_TIMEOUT * 2);
    p.exp.atomic_store(rec, 6u64).unwrap();
    assert_eq!(p.exp.write_versioned(rec, &slot(4)).unwrap(), 8);
    let r = p.rt.block_on(p.imp.read_versioned::<Slot>(rec)).unwrap();
    assert_eq!((r.version, r.value), (8, slot(4)));
}

/// On shm0 a non-fetching atomic write (`ImportSegment::atomic` with `AtomicOp::Write`) made
/// by one task while another task's compare-and-swap is in flight on the same word: posted
/// plainly, libfabric 1.17's shm let the word go back (every run of four); rsm posts it
/// fetching (DESIGN.md §13).
#[test]
fn shm0_non_fetching_write_beside_compare_swap() {
    let p = pair("shm0");
    let word = 64;
    let went_back = p.rt.block_on(async {
        let task = |imp: ImportSegment, exp: ExportSegment| {
            tokio::spawn(async move {
                let (mut went_back, end) = (0, Instant::now() + Duration::from_secs(3));
                for _ in 0..200 {
                    let mut seq = 0u64;
                    let claimed = loop {
                        if Instant::now() > end {
                            return went_back + 1000; // stuck: a claim nobody releases
                        }
                        if seq % 2 == 0 {
                            let old = imp.compare_swap(word, seq, seq + 1).await.unwrap();
                            if old == seq {
                                break seq;
                            }
                            seq = old;
                        } else {
                            seq = imp.atomic_load::<u64>(word).await.unwrap();
                        }
                    };
                    imp.put(word + 8, vec![1u8; 64]).await.unwrap();
                    imp.atomic(word, rsm::AtomicOp::Write, claimed + 2)
                        .await
                        .unwrap();
                    went_back += usize::from(exp.atomic_load::<u64>(word).unwrap() < claimed + 2);
                }
                went_back
            })
        };
        let a = task(p.imp.clone(), p.exp.clone());
        let b = task(p.imp.clone(), p.exp.clone());
        a.await.unwrap() + b.await.unwrap()
    });
    let word = p.exp.atomic_load::<u64>(word).unwrap();
    assert_eq!((went_back, word), (0, 800), "the word went back");
}
