//! One conformance suite for every data path (DESIGN.md §2.2, the data-path interface):
//! the same tests, generic over the controller, on loopback, shm0, tcp0 and sockets0, in
//! implicit and explicit barrier mode. A new operation on an import adds its test here
//! (DESIGN.md §2.2, "Where to make a change"; the remote fill is the worked example). Two
//! nodes of this process: one exports, the other imports, so that each test reaches the
//! exporter's memory directly to check what landed.

mod common;

use rsm::{BarrierMode, ExportFlags, Perm, SgEntry, SgFlags};
use std::time::Duration;

/// The segment's size: a few pages, and more than one 64 KiB copy slice.
const SIZE: usize = 256 * 1024;

/// An exporter and an importer of its segment on `ctrl`, the import in `mode`.
struct Pair {
    rt: tokio::runtime::Runtime,
    // Dropped last: the import, the export, then the nodes.
    imp: rsm::ImportSegment,
    exp: rsm::ExportSegment,
    _nodes: (rsm::Node, rsm::Node),
    mode: BarrierMode,
    ctrl: &'static str,
}

fn pair(ctrl: &'static str, mode: BarrierMode) -> Pair {
    common::logs();
    let rt = common::runtime();
    let (exp, imp, nodes) = rt.block_on(async {
        let (a, b, a_id) = common::two_nodes().await;
        let ca = a.controller(ctrl).await.expect("the exporter's controller");
        let exp = ca.export(SIZE, ExportFlags::empty()).expect("export");
        let id = exp.publish(None, &[]).await.expect("publish");
        let cb = b.controller(ctrl).await.expect("the importer's controller");
        let imp = cb
            .import(rsm::NodeId(a_id), id, Perm::RDWR)
            .await
            .expect("import");
        imp.set_mode(mode).expect("barrier mode");
        (exp, imp, (a, b))
    });
    Pair {
        rt,
        imp,
        exp,
        _nodes: nodes,
        mode,
        ctrl,
    }
}

impl Pair {
    /// Runs `f` on the import; in explicit mode inside an open barrier, closed after it.
    fn covered<T>(&self, f: impl AsyncFnOnce(&rsm::ImportSegment) -> T) -> T {
        self.rt.block_on(async {
            match self.mode {
                BarrierMode::Implicit => f(&self.imp).await,
                BarrierMode::Explicit => {
                    let bar = self.imp.init_barrier().expect("barrier");
                    bar.open().expect("open");
                    let out = f(&self.imp).await;
                    bar.close().await.expect("close");
                    out
                }
            }
        })
    }

    /// The exporter's bytes at `offset`.
    fn landed(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        self.exp
            .read_at(offset as u64, &mut buf)
            .expect("read the export");
        buf
    }

    fn name(&self) -> String {
        format!("{} {:?}", self.ctrl, self.mode)
    }
}

/// Put lands what it wrote, get reads what the exporter wrote, at every size and offset
/// from one byte to several copy slices.
fn put_and_get(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let cases: [(u64, usize); 6] = [
        (0, 1),
        (1, 7),
        (8, 8),
        (4093, 4096),
        (65_535, 65_539),
        (0, SIZE),
    ];
    for (i, &(off, len)) in cases.iter().enumerate() {
        let data = common::pattern(i as u64 + 1, len);
        let (n, back) = p
            .covered(async |imp| imp.put(off, data.clone()).await)
            .unwrap_or_else(|e| panic!("{}: put {len} at {off}: {e}", p.name()));
        assert_eq!(
            (n, &back),
            (len, &data),
            "{}: the buffer comes back",
            p.name()
        );
        assert!(
            p.landed(off as usize, len) == data,
            "{}: put {len} at {off} landed",
            p.name()
        );
        let fresh = common::pattern(100 + i as u64, len);
        p.exp.write_at(off, &fresh).expect("write the export");
        let (n, got) = p
            .covered(async |imp| imp.get(off, vec![0u8; len]).await)
            .unwrap_or_else(|e| panic!("{}: get {len} at {off}: {e}", p.name()));
        assert_eq!(n, len);
        assert!(got == fresh, "{}: get {len} at {off}", p.name());
    }
}

/// A fill writes its byte over the whole range and nothing beside it, across several of
/// the 64 KiB it writes from; one past the segment is refused.
fn fill(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let name = p.name();
    p.exp
        .write_at(0, &vec![0x11; SIZE])
        .expect("write the export");
    let (off, len) = (5u64, 200_003usize);
    p.covered(async |imp| imp.fill(off, len, 0xab).await)
        .unwrap_or_else(|e| panic!("{name}: fill: {e}"));
    let all = p.landed(0, SIZE);
    let (a, b) = (off as usize, off as usize + len);
    assert!(
        all[..a].iter().all(|&x| x == 0x11),
        "{name}: before the range"
    );
    assert!(all[a..b].iter().all(|&x| x == 0xab), "{name}: the range");
    assert!(
        all[b..].iter().all(|&x| x == 0x11),
        "{name}: after the range"
    );
    p.covered(async |imp| imp.fill(7, 0, 0xcd).await)
        .unwrap_or_else(|e| panic!("{name}: an empty fill: {e}"));
    let e =
        p.rt.block_on(p.imp.fill(SIZE as u64 - 10, 11, 0xcd))
            .unwrap_err();
    assert_eq!(e.name(), "RSMERR_BAD_LENGTH", "{name}");
    assert_eq!(
        p.landed(SIZE - 10, 10),
        vec![0x11; 10],
        "{name}: nothing landed"
    );
}

/// A vector's entries land in order, and a getv reads each back into its own buffer.
fn vectors(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let piece = 3000;
    // Apart from one another (RMA orders no overlapping writes), some unaligned, in no
    // order.
    let at = |i: usize| ((7 - i) * 12_288 + (i % 2) * 5) as u64;
    let entries: Vec<SgEntry<Vec<u8>>> = (0..8)
        .map(|i| SgEntry::buffer(common::pattern(i as u64, piece), at(i)))
        .collect();
    let out = p.covered(async |imp| imp.putv(entries, SgFlags::empty()).await);
    out.result
        .unwrap_or_else(|e| panic!("{}: putv: {e}", p.name()));
    for i in 0..8 {
        assert!(
            p.landed(at(i) as usize, piece) == common::pattern(i as u64, piece),
            "{}: putv entry {i}",
            p.name()
        );
    }
    let entries: Vec<SgEntry<Vec<u8>>> = (0..8)
        .map(|i| SgEntry::buffer(vec![0u8; piece], at(i)))
        .collect();
    let out = p.covered(async |imp| imp.getv(entries, SgFlags::empty()).await);
    out.result
        .unwrap_or_else(|e| panic!("{}: getv: {e}", p.name()));
    let entries = out.entries.expect("the entries come back");
    for (i, e) in entries.into_iter().enumerate() {
        let got = e.into_buffer().expect("a buffer entry");
        assert!(
            got == common::pattern(i as u64, piece),
            "{}: getv entry {i}",
            p.name()
        );
    }
}

/// Atomics are performed once each, on every path, and read back by the exporter.
fn atomics(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let name = p.name();
    p.rt.block_on(async {
        for i in 0..10u64 {
            let before = p.imp.fetch_add(64, 3u64).await.unwrap_or_else(|e| {
                panic!("{name}: fetch_add {i}: {e}");
            });
            assert_eq!(before, 3 * i, "{name}: fetch_add {i} saw the ones before");
        }
        assert_eq!(p.imp.compare_swap(64, 30u64, 7).await.expect("cswap"), 30);
        assert_eq!(p.imp.compare_swap(64, 30u64, 9).await.expect("cswap"), 7);
        assert_eq!(p.imp.atomic_load::<u64>(64).await.expect("load"), 7);
    });
    assert_eq!(
        p.exp.atomic_load::<u64>(64).expect("the exporter's load"),
        7
    );
}

/// Typed values (DESIGN.md §14) are their bytes at any offset, as put and get move them; a
/// versioned record written through the import is the exporter's, and in explicit barrier
/// mode its write is refused (`RSMERR_BAD_MODE`) while its read works.
fn values(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let name = p.name();
    let words = [0x0102_0304_0506_0708u64, 9, u64::MAX];
    p.covered(async |imp| imp.put_values(4093, &words).await)
        .unwrap_or_else(|e| panic!("{name}: put_values: {e}"));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert!(p.landed(4093, 24) == bytes, "{name}: put_values landed");
    p.exp.write_value(8191, &[7u16, 8, 9]).expect("write_value");
    let got = p.covered(async |imp| imp.get_value::<[u16; 3]>(8191).await);
    assert_eq!(got.expect("get_value"), [7, 8, 9], "{name}");
    let got = p.covered(async |imp| imp.get_values::<u64>(4093, 3).await);
    assert_eq!(got.expect("get_values"), words, "{name}");
    p.rt.block_on(async {
        let wrote = p.imp.write_versioned(12_288, &words).await;
        match mode {
            BarrierMode::Implicit => assert_eq!(wrote.expect("write_versioned"), 2, "{name}"),
            BarrierMode::Explicit => {
                assert_eq!(wrote.unwrap_err().name(), "RSMERR_BAD_MODE", "{name}");
                p.exp
                    .write_versioned(12_288, &words)
                    .expect("the exporter writes");
            }
        }
        let rec = p.imp.read_versioned::<[u64; 3]>(12_288).await;
        let rec = rec.unwrap_or_else(|e| panic!("{name}: read_versioned: {e}"));
        assert_eq!((rec.version, rec.value), (2, words), "{name}");
    });
    assert_eq!(
        p.exp
            .read_versioned::<[u64; 3]>(12_288)
            .expect("read")
            .value,
        words
    );
}

/// What an access may not do is refused before anything moves, with its RSMERR code.
fn refusals(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let name = p.name();
    p.rt.block_on(async {
        let e = p.imp.put(SIZE as u64, vec![1u8]).await.unwrap_err();
        assert_eq!(e.error().name(), "RSMERR_BAD_OFFSET", "{name}");
        let e = p.imp.get(SIZE as u64 - 4, vec![0u8; 8]).await.unwrap_err();
        assert_eq!(e.error().name(), "RSMERR_BAD_LENGTH", "{name}");
        let e = p.imp.fetch_add(3, 1u64).await.unwrap_err();
        assert_eq!(e.name(), "RSMERR_BAD_MEM_ALIGNMENT", "{name}");
    });
    assert!(
        p.landed(SIZE - 8, 8).iter().all(|&b| b == 0),
        "{name}: nothing landed"
    );
}

/// A withdrawn segment fails the importer's next operations with `CONN_ABORTED`, and its
/// disconnect returns at once.
fn withdrawal(ctrl: &'static str, mode: BarrierMode) {
    let p = pair(ctrl, mode);
    let name = p.name();
    p.rt.block_on(async {
        p.imp.put(0, vec![5u8; 64]).await.expect("put");
        p.exp.unpublish().await.expect("unpublish");
        let e = p.imp.put(0, vec![6u8; 64]).await.unwrap_err();
        assert_eq!(e.error().name(), "RSMERR_CONN_ABORTED", "{name}");
        let e = p.imp.fetch_add(8, 1u64).await.unwrap_err();
        assert_eq!(e.name(), "RSMERR_CONN_ABORTED", "{name}");
        let t = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(5), p.imp.clone().disconnect())
            .await
            .expect("disconnect returns")
            .expect("disconnect");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{name}: {:?}",
            t.elapsed()
        );
    });
    assert!(
        p.landed(0, 64).iter().all(|&b| b == 5),
        "{name}: the late put did not land"
    );
}

/// Every test on every controller, in both modes.
macro_rules! conformance {
    ($($ctrl:ident: $name:literal),* $(,)?) => {
        $(
            mod $ctrl {
                use super::*;
                #[test]
                fn put_and_get_implicit() { put_and_get($name, BarrierMode::Implicit) }
                #[test]
                fn put_and_get_explicit() { put_and_get($name, BarrierMode::Explicit) }
                #[test]
                fn fill_implicit() { fill($name, BarrierMode::Implicit) }
                #[test]
                fn fill_explicit() { fill($name, BarrierMode::Explicit) }
                #[test]
                fn vectors_implicit() { vectors($name, BarrierMode::Implicit) }
                #[test]
                fn vectors_explicit() { vectors($name, BarrierMode::Explicit) }
                #[test]
                fn atomics_implicit() { atomics($name, BarrierMode::Implicit) }
                #[test]
                fn atomics_explicit() { atomics($name, BarrierMode::Explicit) }
                #[test]
                fn values_implicit() { values($name, BarrierMode::Implicit) }
                #[test]
                fn values_explicit() { values($name, BarrierMode::Explicit) }
                #[test]
                fn refusals_implicit() { refusals($name, BarrierMode::Implicit) }
                #[test]
                fn refusals_explicit() { refusals($name, BarrierMode::Explicit) }
                #[test]
                fn withdrawal_implicit() { withdrawal($name, BarrierMode::Implicit) }
                #[test]
                fn withdrawal_explicit() { withdrawal($name, BarrierMode::Explicit) }
            }
        )*
    };
}

conformance! {
    loopback: "loopback",
    shm0: "shm0",
    tcp0: "tcp0",
    sockets0: "sockets0",
}

/// Two nodes of one process on shm0, one importing the other's segment, again and again,
/// ended by dropping them in either order: libfabric 1.17's shm reaches a peer of the same
/// process through that peer's own region, which its close frees (a vector still holding it
/// wrote into freed memory at its own close, and the dead-peer recovery read it: one run of
/// this suite in ten segfaulted).
#[test]
fn shm_nodes_of_one_process_end_in_either_order() {
    for round in 0..20 {
        let rt = common::runtime();
        let (a, b, imp, exp) = rt.block_on(async {
            let (a, b, a_id) = common::two_nodes().await;
            let ca = a.controller("shm0").await.expect("a's shm0");
            let exp = ca.export(SIZE, ExportFlags::empty()).expect("export");
            let id = exp.publish(None, &[]).await.expect("publish");
            let cb = b.controller("shm0").await.expect("b's shm0");
            let imp = cb
                .import(rsm::NodeId(a_id), id, Perm::RDWR)
                .await
                .expect("import");
            imp.put(0, vec![1u8; 4096]).await.expect("put");
            imp.fetch_add(64, 1u64).await.expect("fetch_add");
            (a, b, imp, exp)
        });
        drop((imp, exp));
        if round % 2 == 0 {
            drop((a, b));
        } else {
            drop((b, a));
        }
        drop(rt);
    }
}
