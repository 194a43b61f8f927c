//! Typed put and get (docs/rsmapi.md §4.4, DESIGN.md, decision 4) across real processes: a child exports a
//! segment and dumps its bytes, this process imports it and uses put8..put64 and
//! get8..get64, on every local libfabric controller. With the `fault-injection` feature, an
//! exporter that announces the other byte order shows the swap.

mod common;

use common::*;
use rsm::{ByteOrder, ImportSegment, Node, Perm};

const SIZE: usize = 4096;

/// The entry every child role runs through; a no-op in the parent's own test run.
#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

struct Setup {
    rt: tokio::runtime::Runtime,
    peer: Peer,
    node: Node,
    imp: ImportSegment,
    exporter_id: u32,
    segid: u32,
}

impl Setup {
    /// The exporter's bytes at `off`, as hex.
    fn dump(&mut self, off: u64, len: usize) -> String {
        self.peer.ask(&format!("dump {off} {len}"))
    }

    fn write(&mut self, off: u64, bytes: &[u8]) {
        assert_eq!(self.peer.ask(&format!("write {off} {}", hex(bytes))), "ok");
    }

    fn import(&self, ctrl: &str, perm: Perm) -> ImportSegment {
        self.rt.block_on(async {
            let c = self.node.controller(ctrl).await.unwrap();
            c.import(
                rsm::NodeId(self.exporter_id),
                rsm::SegmentId(self.segid),
                perm,
            )
            .await
            .unwrap()
        })
    }

    fn shutdown(self) {
        self.rt.block_on(self.node.shutdown());
    }
}

/// An exporter child (announcing `announce` as its byte order, if given) and an import of
/// its segment from a node that announces `importer_announces`.
fn setup_with(ctrl: &str, announce: Option<&str>, importer_announces: Option<ByteOrder>) -> Setup {
    let exporter_id = fresh_node_id();
    let mut args = vec![
        ("NODE_ID", exporter_id.to_string()),
        ("CTRL", ctrl.to_string()),
        ("SIZE", SIZE.to_string()),
    ];
    if let Some(order) = announce {
        args.push(("ANNOUNCE", order.to_string()));
    }
    let peer = Peer::start("role_entry", "exporter", &args);
    let ready = peer.recv();
    let segid: u32 = ready
        .strip_prefix("ready ")
        .expect("ready line")
        .parse()
        .unwrap();
    let rt = runtime();
    let (node, imp) = rt.block_on(async {
        let builder = Node::builder().ignore_environment().id(fresh_node_id() + 1);
        let builder = match importer_announces {
            None => builder,
            #[cfg(feature = "fault-injection")]
            Some(order) => builder.announce_byte_order(order),
            #[cfg(not(feature = "fault-injection"))]
            Some(_) => panic!("announcing needs the fault-injection feature"),
        };
        let node = builder.start().await.unwrap();
        let c = node.controller(ctrl).await.unwrap();
        let imp = c
            .import(rsm::NodeId(exporter_id), rsm::SegmentId(segid), Perm::RDWR)
            .await
            .unwrap();
        (node, imp)
    });
    assert_eq!(imp.len(), SIZE as u64);
    Setup {
        rt,
        peer,
        node,
        imp,
        exporter_id,
        segid,
    }
}

fn setup(ctrl: &str) -> Setup {
    setup_with(ctrl, None, None)
}

fn ne_bytes<const N: usize, T: Copy>(values: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| f(v)).collect()
}

fn values_round_trip(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl);
    assert_eq!(s.imp.exporter_byte_order(), ByteOrder::native());
    let v8: Vec<u8> = (1..=13).collect();
    let v16 = [0x0102u16, 0xfffe, 0, 0x8000, 0x1234];
    let v32 = [0x0102_0304u32, 0xdead_beef, 0, u32::MAX];
    let v64 = [0x0102_0304_0506_0708u64, u64::MAX, 0, 0x8000_0000_0000_0001];

    s.rt.block_on(s.imp.put8(3, &v8)).unwrap();
    s.rt.block_on(s.imp.put16(64, &v16)).unwrap();
    s.rt.block_on(s.imp.put32(128, &v32)).unwrap();
    s.rt.block_on(s.imp.put64(256, &v64)).unwrap();

    // The exporter (same host, so the same byte order) holds the native representation.
    assert_eq!(s.dump(3, v8.len()), hex(&v8), "{ctrl}: put8");
    assert_eq!(
        s.dump(64, 10),
        hex(&ne_bytes(&v16, u16::to_ne_bytes)),
        "{ctrl}: put16"
    );
    assert_eq!(
        s.dump(128, 16),
        hex(&ne_bytes(&v32, u32::to_ne_bytes)),
        "{ctrl}: put32"
    );
    assert_eq!(
        s.dump(256, 32),
        hex(&ne_bytes(&v64, u64::to_ne_bytes)),
        "{ctrl}: put64"
    );
    if cfg!(target_endian = "little") {
        assert_eq!(s.dump(128, 4), "04030201", "{ctrl}: little-endian host");
    }

    assert_eq!(
        s.rt.block_on(s.imp.get8(3, v8.len())).unwrap(),
        v8,
        "{ctrl}"
    );
    assert_eq!(
        s.rt.block_on(s.imp.get16(64, v16.len())).unwrap(),
        v16,
        "{ctrl}"
    );
    assert_eq!(
        s.rt.block_on(s.imp.get32(128, v32.len())).unwrap(),
        v32,
        "{ctrl}"
    );
    assert_eq!(
        s.rt.block_on(s.imp.get64(256, v64.len())).unwrap(),
        v64,
        "{ctrl}"
    );

    // What the exporter writes locally reads back as native items.
    s.write(512, &0x1122_3344_5566_7788u64.to_ne_bytes());
    assert_eq!(
        s.rt.block_on(s.imp.get64(512, 1)).unwrap(),
        [0x1122_3344_5566_7788],
        "{ctrl}"
    );
    assert_eq!(
        s.rt.block_on(s.imp.get32(512, 2)).unwrap(),
        [
            u32::from_ne_bytes(
                0x1122_3344_5566_7788u64.to_ne_bytes()[..4]
                    .try_into()
                    .unwrap()
            ),
            u32::from_ne_bytes(
                0x1122_3344_5566_7788u64.to_ne_bytes()[4..]
                    .try_into()
                    .unwrap()
            ),
        ],
        "{ctrl}"
    );

    // The last items of the segment, and the futures run on spawned tasks (they borrow
    // nothing).
    let imp = s.imp.clone();
    let last = s.rt.block_on(async move {
        let values = vec![7u64, 8];
        let put = imp.put64(SIZE as u64 - 16, &values);
        drop(values);
        tokio::spawn(put).await.unwrap().unwrap();
        tokio::spawn(imp.get64(SIZE as u64 - 16, 2)).await.unwrap()
    });
    assert_eq!(last.unwrap(), [7, 8], "{ctrl}");
    s.shutdown();
}

fn code<T: std::fmt::Debug>(r: rsm::Result<T>) -> i32 {
    r.expect_err("the access is refused").code()
}

fn checks_come_in_order(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl);
    let end = SIZE as u64;
    let rt = &s.rt;
    let imp = &s.imp;

    // Alignment (RSMERR_BAD_MEM_ALIGNMENT) for 16/32/64, puts and gets; none for 8 bits.
    for off in [1u64, 3, 5, 7] {
        assert_eq!(
            code(rt.block_on(imp.put16(off, &[1]))),
            17,
            "{ctrl}: put16 at {off}"
        );
        assert_eq!(
            code(rt.block_on(imp.get16(off, 1))),
            17,
            "{ctrl}: get16 at {off}"
        );
    }
    for off in [1u64, 2, 3, 6] {
        assert_eq!(
            code(rt.block_on(imp.put32(off, &[1]))),
            17,
            "{ctrl}: put32 at {off}"
        );
        assert_eq!(
            code(rt.block_on(imp.get32(off, 1))),
            17,
            "{ctrl}: get32 at {off}"
        );
    }
    for off in [1u64, 2, 4, 12] {
        assert_eq!(
            code(rt.block_on(imp.put64(off, &[1]))),
            17,
            "{ctrl}: put64 at {off}"
        );
        assert_eq!(
            code(rt.block_on(imp.get64(off, 1))),
            17,
            "{ctrl}: get64 at {off}"
        );
    }
    rt.block_on(imp.put8(1, &[0x5a])).unwrap();
    assert_eq!(rt.block_on(imp.get8(1, 1)).unwrap(), [0x5a]);
    // Alignment comes before bounds, and before the count.
    assert_eq!(code(rt.block_on(imp.put32(end + 1, &[1]))), 17, "{ctrl}");
    assert_eq!(
        code(rt.block_on(imp.get64(end + 4, usize::MAX))),
        17,
        "{ctrl}"
    );
    assert_eq!(
        code(rt.block_on(imp.put16(1, &[]))),
        17,
        "{ctrl}: also for 0 items"
    );

    // Bounds: at or past the end is BAD_OFFSET, across it BAD_LENGTH.
    assert_eq!(code(rt.block_on(imp.put32(end, &[1]))), 18, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.put64(end + 8, &[1]))), 18, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.get16(end, 1))), 18, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.get8(u64::MAX, 1))), 18, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.put32(end - 4, &[1, 2]))), 20, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.put8(end - 1, &[1, 2]))), 20, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.get64(end - 8, 2))), 20, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.get16(0, SIZE / 2 + 1))), 20, "{ctrl}");
    // A count whose byte length overflows is BAD_LENGTH, not a huge allocation.
    assert_eq!(code(rt.block_on(imp.get64(0, usize::MAX))), 20, "{ctrl}");
    assert_eq!(
        code(rt.block_on(imp.get32(8, usize::MAX / 4 + 1))),
        20,
        "{ctrl}"
    );
    assert_eq!(
        code(rt.block_on(imp.get16(0, usize::MAX / 2))),
        20,
        "{ctrl}"
    );
    // ... unless the offset is already past the end.
    assert_eq!(
        code(rt.block_on(imp.get64(end + 8, usize::MAX))),
        18,
        "{ctrl}"
    );
    let e = rt.block_on(imp.get64(0, usize::MAX)).unwrap_err();
    assert!(e.to_string().contains("overflow"), "{e}");
    assert!(e.to_string().contains("get64"), "{e}");

    // The edges themselves are fine.
    rt.block_on(imp.put64(end - 8, &[u64::MAX])).unwrap();
    assert_eq!(rt.block_on(imp.get64(end - 8, 1)).unwrap(), [u64::MAX]);
    assert_eq!(rt.block_on(imp.get8(0, SIZE)).unwrap().len(), SIZE);

    // Zero items: success, nothing moves, but the other checks still apply.
    s.write(0, &[0xee; 8]);
    let rt = &s.rt;
    let imp = &s.imp;
    rt.block_on(imp.put32(0, &[])).unwrap();
    rt.block_on(imp.put64(end, &[])).unwrap();
    assert_eq!(rt.block_on(imp.get32(end, 0)).unwrap(), Vec::<u32>::new());
    assert_eq!(rt.block_on(imp.get8(0, 0)).unwrap(), Vec::<u8>::new());
    assert_eq!(code(rt.block_on(imp.put32(end + 4, &[]))), 18, "{ctrl}");
    assert_eq!(code(rt.block_on(imp.get16(end + 2, 0))), 18, "{ctrl}");
    assert_eq!(
        s.dump(0, 8),
        "eeeeeeeeeeeeeeee",
        "{ctrl}: nothing was written"
    );

    // Permission: a read-only connection refuses typed puts, after alignment and before
    // bounds, and still reads.
    let ro = s.import(ctrl, Perm::READ);
    let rt = &s.rt;
    for r in [
        rt.block_on(ro.put8(0, &[1])),
        rt.block_on(ro.put16(0, &[1])),
        rt.block_on(ro.put32(0, &[1])),
        rt.block_on(ro.put64(0, &[1])),
        rt.block_on(ro.put32(0, &[])),
        rt.block_on(ro.put32(end, &[1])),
        rt.block_on(ro.put64(end + 8, &[1, 2])),
    ] {
        assert_eq!(code(r), 27, "{ctrl}: PERM_DENIED");
    }
    assert_eq!(
        code(rt.block_on(ro.put32(2, &[1]))),
        17,
        "{ctrl}: alignment first"
    );
    assert_eq!(
        rt.block_on(ro.get64(0, 1)).unwrap(),
        [u64::from_ne_bytes([0xee; 8])],
        "{ctrl}"
    );
    assert_eq!(
        s.dump(0, 8),
        "eeeeeeeeeeeeeeee",
        "{ctrl}: the refused puts wrote nothing"
    );

    // After a disconnect: the handle is gone (alignment is still checked first).
    let ro2 = ro.clone();
    s.rt.block_on(ro.disconnect()).unwrap();
    assert_eq!(
        code(s.rt.block_on(ro2.get32(0, 1))),
        5,
        "{ctrl}: BAD_SEG_HNDL"
    );
    assert_eq!(code(s.rt.block_on(ro2.get32(1, 1))), 17, "{ctrl}");
    s.shutdown();
}

#[test]
fn tcp_values_round_trip() {
    values_round_trip("tcp0");
}
#[test]
fn shm_values_round_trip() {
    values_round_trip("shm0");
}
#[test]
fn sockets_values_round_trip() {
    values_round_trip("sockets0");
}

#[test]
fn tcp_checks_come_in_order() {
    checks_come_in_order("tcp0");
}
#[test]
fn shm_checks_come_in_order() {
    checks_come_in_order("shm0");
}
#[test]
fn sockets_checks_come_in_order() {
    checks_come_in_order("sockets0");
}

/// An exporter that announces the other byte order: typed accesses swap, plain ones do not.
#[cfg(feature = "fault-injection")]
fn swaps_for_the_other_byte_order(ctrl: &str) {
    let _serial = serial();
    let (other, name) = match ByteOrder::native() {
        ByteOrder::Little => (ByteOrder::Big, "big"),
        ByteOrder::Big => (ByteOrder::Little, "little"),
    };
    let mut s = setup_with(ctrl, Some(name), None);
    assert_eq!(s.imp.exporter_byte_order(), other, "{ctrl}");
    // The bytes as an exporter of `other` order stores the values natively.
    let repr = |be: Vec<u8>| {
        if other == ByteOrder::Big {
            hex(&be)
        } else {
            hex(&be.into_iter().rev().collect::<Vec<_>>())
        }
    };

    s.rt.block_on(s.imp.put32(0, &[0x0102_0304])).unwrap();
    assert_eq!(s.dump(0, 4), repr(vec![1, 2, 3, 4]), "{ctrl}: put32");
    assert_eq!(s.rt.block_on(s.imp.get32(0, 1)).unwrap(), [0x0102_0304]);

    s.rt.block_on(s.imp.put16(8, &[0x0102])).unwrap();
    assert_eq!(s.dump(8, 2), repr(vec![1, 2]), "{ctrl}: put16");
    assert_eq!(s.rt.block_on(s.imp.get16(8, 1)).unwrap(), [0x0102]);

    s.rt.block_on(s.imp.put64(16, &[0x0102_0304_0506_0708]))
        .unwrap();
    assert_eq!(
        s.dump(16, 8),
        repr(vec![1, 2, 3, 4, 5, 6, 7, 8]),
        "{ctrl}: put64"
    );
    assert_eq!(
        s.rt.block_on(s.imp.get64(16, 1)).unwrap(),
        [0x0102_0304_0506_0708]
    );

    // Several items: each swapped in place, not the array reversed.
    s.rt.block_on(s.imp.put32(32, &[0x0a0b_0c0d, 0x1122_3344]))
        .unwrap();
    assert_eq!(
        s.dump(32, 8),
        format!(
            "{}{}",
            repr(vec![0x0a, 0x0b, 0x0c, 0x0d]),
            repr(vec![0x11, 0x22, 0x33, 0x44])
        ),
        "{ctrl}"
    );
    assert_eq!(
        s.rt.block_on(s.imp.get32(32, 2)).unwrap(),
        [0x0a0b_0c0d, 0x1122_3344]
    );

    // 8-bit items and plain bytes never swap.
    s.rt.block_on(s.imp.put8(48, &[1, 2, 3, 4])).unwrap();
    assert_eq!(s.dump(48, 4), "01020304", "{ctrl}: put8");
    let (res, _) = common::split(s.rt.block_on(s.imp.put(56, vec![1u8, 2, 3, 4])));
    res.unwrap();
    assert_eq!(s.dump(56, 4), "01020304", "{ctrl}: put");
    let (res, got) = common::split(s.rt.block_on(s.imp.get(0, vec![0u8; 4])));
    res.unwrap();
    assert_eq!(hex(&got.unwrap()), repr(vec![1, 2, 3, 4]), "{ctrl}: get");
    // What the exporter stores natively reads back as its value.
    s.write(64, &unhex(&repr(vec![0xca, 0xfe, 0xba, 0xbe])));
    assert_eq!(s.rt.block_on(s.imp.get32(64, 1)).unwrap(), [0xcafe_babe]);
    s.shutdown();
}

#[cfg(feature = "fault-injection")]
#[test]
fn tcp_swaps_for_the_other_byte_order() {
    swaps_for_the_other_byte_order("tcp0");
}
#[cfg(feature = "fault-injection")]
#[test]
fn shm_swaps_for_the_other_byte_order() {
    swaps_for_the_other_byte_order("shm0");
}
#[cfg(feature = "fault-injection")]
#[test]
fn sockets_swaps_for_the_other_byte_order() {
    swaps_for_the_other_byte_order("sockets0");
}

/// Only the exporter's byte order matters: an importer that announces the other order still
/// stores in the exporter's, and an exporter announcing its real order changes nothing.
#[cfg(feature = "fault-injection")]
#[test]
fn tcp_only_the_exporters_byte_order_counts() {
    let _serial = serial();
    let (other, native) = match ByteOrder::native() {
        ByteOrder::Little => (ByteOrder::Big, "little"),
        ByteOrder::Big => (ByteOrder::Little, "big"),
    };
    let mut s = setup_with("tcp0", Some(native), Some(other));
    assert_eq!(s.imp.exporter_byte_order(), ByteOrder::native());
    s.rt.block_on(s.imp.put32(0, &[0x0102_0304])).unwrap();
    assert_eq!(s.dump(0, 4), hex(&0x0102_0304u32.to_ne_bytes()));
    assert_eq!(s.rt.block_on(s.imp.get32(0, 1)).unwrap(), [0x0102_0304]);
    s.shutdown();
}

// The same checks on the loopback controller.
#[test]
fn loopback_values_round_trip() {
    values_round_trip("loopback");
}
#[test]
fn loopback_checks_come_in_order() {
    checks_come_in_order("loopback");
}
#[cfg(feature = "fault-injection")]
#[test]
fn loopback_swaps_for_the_other_byte_order() {
    swaps_for_the_other_byte_order("loopback");
}
