//! Peers that die mid-operation and come back under the same node id (DESIGN.md §8, "Peer
//! loss"): every await ends within its bound, a lost import disconnects at once, the
//! restarted peer is usable at once, and nothing crashes.

mod common;

use common::{Peer, exporter_role, fresh_node_id, role, runtime, serial};
use rsm::{NodeId, Perm, SegmentId};
use std::time::{Duration, Instant};

#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

const KIB: usize = 1024;

/// How many kill-and-restart rounds a scenario runs (`RSM_FAULT_RUNS`, default `default`).
fn runs(default: usize) -> usize {
    std::env::var("RSM_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start_exporter(ctrl: &str, node_id: u32, size: usize) -> (Peer, SegmentId) {
    let mut peer = Peer::start(
        "role_entry",
        "exporter",
        &[
            ("NODE_ID", node_id.to_string()),
            ("CTRL", ctrl.to_string()),
            ("SIZE", size.to_string()),
        ],
    );
    let ready = peer.recv();
    let Some(id) = ready.strip_prefix("ready ").and_then(|s| s.parse().ok()) else {
        peer.kill();
        panic!("the exporter said {ready:?}");
    };
    (peer, SegmentId(id))
}

/// An exporter killed (`SIGKILL`) while the importer has four 64 KiB puts in flight, then
/// restarted under the same node id, `rounds` times, one importer node throughout.
fn exporter_restarts_mid_put(ctrl: &str, rounds: usize) {
    let _serial = serial();
    common::logs();
    let rt = runtime();
    let exporter = fresh_node_id();
    let node = rt.block_on(common::node(exporter + 1));
    let c = rt.block_on(node.controller(ctrl)).unwrap();
    let size = 1024 * KIB;
    for round in 0..rounds {
        let (mut peer, segid) = start_exporter(ctrl, exporter, size);
        let imp = rt
            .block_on(c.import(NodeId(exporter), segid, Perm::RDWR))
            .unwrap_or_else(|e| panic!("{ctrl} round {round}: import: {e}"));
        let puts: Vec<_> = (0..4u64)
            .map(|i| {
                let imp = imp.clone();
                rt.spawn(async move {
                    let mut n = 0u64;
                    loop {
                        let at = ((i * 4 + n % 4) * 64 * KIB as u64) % (1024 * KIB as u64);
                        if let Err(e) = imp.put(at, vec![i as u8; 64 * KIB]).await {
                            return (e.into_parts().0, Instant::now());
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        // Between 0 and 3 ms into the stream of puts.
        std::thread::sleep(Duration::from_micros(
            (round as u64 * 7919 + 300) % 3000 + 200,
        ));
        let killed = Instant::now();
        peer.kill();
        for put in puts {
            let (e, at) = rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(5), put).await })
                .unwrap_or_else(|_| {
                    panic!("{ctrl} round {round}: a put still waits 5 s after the kill")
                })
                .unwrap();
            assert!(
                e.is_unreachable(),
                "{ctrl} round {round}: the put fails as unreachable: {e}"
            );
            assert!(
                at - killed < Duration::from_secs(2),
                "{ctrl} round {round}: the put failed {:?} after the kill",
                at - killed
            );
        }
        let t = Instant::now();
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), imp.disconnect()).await })
            .unwrap_or_else(|_| panic!("{ctrl} round {round}: disconnect hangs"))
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{ctrl} round {round}: disconnect of a lost import took {:?}",
            t.elapsed()
        );
        // The same node id again, a new process.
        let (mut peer, segid) = start_exporter(ctrl, exporter, size);
        let t = Instant::now();
        let ok = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), async {
                let imp = c.import(NodeId(exporter), segid, Perm::RDWR).await?;
                let data = common::pattern(round as u64, 64 * KIB);
                imp.put(4096, data.clone())
                    .await
                    .map_err(|e| e.into_parts().0)?;
                let (_, back) = imp
                    .get(4096, vec![0u8; 64 * KIB])
                    .await
                    .map_err(|e| e.into_parts().0)?;
                assert_eq!(back, data, "{ctrl} round {round}: the data reads back");
                imp.disconnect().await
            })
            .await
        });
        match ok {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{ctrl} round {round}: the restarted exporter: {e}"),
            Err(_) => panic!(
                "{ctrl} round {round}: the restarted exporter unusable after {:?}",
                t.elapsed()
            ),
        }
        assert!(
            peer.quit(),
            "{ctrl} round {round}: the restarted exporter quits"
        );
    }
    let t = Instant::now();
    rt.block_on(async {
        drop(c);
        tokio::time::timeout(Duration::from_secs(5), node.shutdown()).await
    })
    .unwrap_or_else(|_| panic!("{ctrl}: shutdown hangs"));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{ctrl}: shutdown took {:?}",
        t.elapsed()
    );
}

#[test]
fn shm0_exporter_restarts_mid_put() {
    exporter_restarts_mid_put("shm0", runs(10));
}

#[test]
fn tcp0_exporter_restarts_mid_put() {
    exporter_restarts_mid_put("tcp0", runs(10));
}
