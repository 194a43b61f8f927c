//! Peers that die mid-operation and come back under the same node id (DESIGN.md §8, "Peer
//! loss"): every await ends within its bound, a lost import disconnects at once, the
//! restarted peer is usable at once, and nothing crashes.

mod common;

use common::{Peer, exporter_role, fresh_node_id, role, runtime, serial, start_exporter};
use rsm::{NodeId, Perm, SegmentId};
use std::time::{Duration, Instant};

#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter_role(),
        Some("reader") => reader_role(),
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
    // The worst of every round: puts failed after the kill, disconnect, the restarted
    // exporter imported and used.
    let mut worst = [Duration::ZERO; 3];
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
            worst[0] = worst[0].max(at - killed);
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
        worst[1] = worst[1].max(t.elapsed());
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
        worst[2] = worst[2].max(t.elapsed());
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
    eprintln!(
        "{ctrl}: {rounds} rounds: puts failed at most {:?} after the kill, disconnect took at \
         most {:?}, the restarted exporter was imported and used within {:?}, shutdown {:?}",
        worst[0],
        worst[1],
        worst[2],
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

/// Milliseconds since the epoch: parent and children of one host share the clock.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

/// A reader child: imports segment `SEGID` of node `EXPORTER` on `CTRL` read-write, says
/// `ready`, then on `stream` runs four tasks of gets and putv of 64 KiB until they fail,
/// says `ended <error> <epoch ms of the last failure>`, shuts its node down and says
/// `shutdown <ms> leaked <parts>`.
fn reader_role() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let rt = runtime();
    let ctrl = common::arg("CTRL");
    let exporter: u32 = common::arg("EXPORTER").parse().unwrap();
    let segid = SegmentId(common::arg("SEGID").parse().unwrap());
    let node = rt.block_on(common::node(common::arg("NODE_ID").parse().unwrap()));
    let c = rt.block_on(node.controller(&ctrl)).unwrap();
    let imp = rt
        .block_on(c.import(NodeId(exporter), segid, Perm::RDWR))
        .unwrap();
    common::say("ready");
    match common::next_command().as_deref() {
        Some("stream") => {}
        None | Some("quit" | "") => return,
        Some(other) => panic!("unknown command {other}"),
    }
    let tasks: Vec<_> = (0..4u64)
        .map(|i| {
            let imp = imp.clone();
            rt.spawn(async move {
                loop {
                    let at = (i * 64 * KIB as u64) % imp.len();
                    let r = if i % 2 == 0 {
                        imp.get(at, vec![0u8; 64 * KIB])
                            .await
                            .map(|_| ())
                            .map_err(|e| e.into_parts().0)
                    } else {
                        let e = (0..4u64)
                            .map(|k| {
                                rsm::SgEntry::buffer(
                                    vec![i as u8; 16 * KIB],
                                    at + k * 16 * KIB as u64,
                                )
                            })
                            .collect();
                        let out = imp.putv(e, rsm::SgFlags::empty()).await;
                        out.result
                    };
                    if let Err(e) = r {
                        return (e, now_ms());
                    }
                }
            })
        })
        .collect();
    common::say("streaming");
    let mut last = (String::new(), 0);
    for t in tasks {
        let (e, at) = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(20), t).await })
            .expect("a reader's operation ends")
            .unwrap();
        if at >= last.1 {
            last = (e.name().to_string(), at);
        }
    }
    common::say(format!("ended {} {}", last.0, last.1));
    drop((imp, c));
    let t = Instant::now();
    rt.block_on(node.shutdown());
    let leaked = node
        .stats()
        .controller(&ctrl)
        .map_or(0, |s| s.leaked_at_close);
    common::say(format!(
        "shutdown {} leaked {leaked}",
        t.elapsed().as_millis()
    ));
}

/// How the exporter ends while its readers stream.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Destroy,
    Unpublish,
    Shutdown,
    /// The readers are killed first, then the segment destroyed.
    ReadersKilled,
    /// The readers are frozen (`SIGSTOP`), the segment destroyed, then they resume.
    ReadersFrozen,
}

/// An exporter in this process with two reader children streaming gets and putv: `how` ends
/// it. Destroy, unpublish and shutdown never crash and end in bounded time (1 s with live
/// readers, 5 s with dead or frozen ones); the readers' operations end within 1 s of it, and
/// no node leaks an operation at close.
fn exporter_ends_with_readers(ctrl: &str, how: End) {
    let _serial = serial();
    common::logs();
    let rt = runtime();
    let node = rt.block_on(common::node(fresh_node_id()));
    let c = rt.block_on(node.controller(ctrl)).unwrap();
    let seg = c.export(1024 * KIB, rsm::ExportFlags::empty()).unwrap();
    let segid = rt.block_on(seg.publish(None, &[])).unwrap();
    let mut readers: Vec<Peer> = (0..2)
        .map(|_| {
            Peer::start(
                "role_entry",
                "reader",
                &[
                    ("NODE_ID", fresh_node_id().to_string()),
                    ("EXPORTER", node.id().get().to_string()),
                    ("SEGID", segid.get().to_string()),
                    ("CTRL", ctrl.to_string()),
                ],
            )
        })
        .collect();
    for r in &mut readers {
        assert_eq!(r.recv(), "ready", "{ctrl} {how:?}");
        assert_eq!(r.ask("stream"), "streaming", "{ctrl} {how:?}");
    }
    std::thread::sleep(Duration::from_millis(200));
    let bound = match how {
        End::ReadersKilled | End::ReadersFrozen => Duration::from_secs(5),
        _ => Duration::from_secs(1),
    };
    let t0 = now_ms();
    let t = Instant::now();
    match how {
        End::Destroy => rt.block_on(seg.destroy()).unwrap(),
        End::Unpublish => {
            rt.block_on(seg.unpublish()).unwrap();
            assert!(
                t.elapsed() < bound,
                "{ctrl}: unpublish took {:?}",
                t.elapsed()
            );
            rt.block_on(seg.destroy()).unwrap();
        }
        End::Shutdown => {
            drop(seg);
            rt.block_on(node.shutdown());
        }
        End::ReadersKilled => {
            for r in &mut readers {
                r.kill();
            }
            rt.block_on(seg.destroy()).unwrap();
        }
        End::ReadersFrozen => {
            for r in &readers {
                r.freeze();
            }
            rt.block_on(seg.destroy()).unwrap();
            for r in &readers {
                r.signal(libc::SIGCONT);
            }
        }
    }
    assert!(
        t.elapsed() < bound,
        "{ctrl} {how:?}: the exporter's end took {:?}",
        t.elapsed()
    );
    if how != End::ReadersKilled {
        for r in &mut readers {
            let ended = r.recv();
            let mut w = ended.split_whitespace();
            assert_eq!(w.next(), Some("ended"), "{ctrl} {how:?}: {ended}");
            let name = w.next().unwrap_or_default();
            assert!(
                name == "RSMERR_CONN_ABORTED" || name == "RSMERR_REMOTE_NODE_UNREACHABLE",
                "{ctrl} {how:?}: {ended}"
            );
            let at: u128 = w.next().and_then(|s| s.parse().ok()).unwrap();
            let after = Duration::from_millis(at.saturating_sub(t0) as u64);
            let limit = if how == End::ReadersFrozen {
                t.elapsed() + Duration::from_secs(1)
            } else {
                Duration::from_secs(1)
            };
            assert!(
                after < limit,
                "{ctrl} {how:?}: a reader's operations ended {after:?} after"
            );
            let down = r.recv();
            let w: Vec<&str> = down.split_whitespace().collect();
            assert!(
                matches!(w.as_slice(), ["shutdown", ms, "leaked", "0"] if ms.parse::<u64>().unwrap() < 1000),
                "{ctrl} {how:?}: a reader's shutdown: {down}"
            );
        }
    }
    drop(c);
    if how != End::Shutdown {
        let t = Instant::now();
        rt.block_on(node.shutdown());
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{ctrl} {how:?}: shutdown took {:?}",
            t.elapsed()
        );
    }
    assert_eq!(
        node.stats().controller(ctrl).map(|s| s.leaked_at_close),
        Some(0),
        "{ctrl} {how:?}"
    );
}

macro_rules! ends {
    ($($name:ident: $ctrl:literal, $how:ident;)*) => {
        $(
            #[test]
            fn $name() {
                exporter_ends_with_readers($ctrl, End::$how);
            }
        )*
    };
}

ends! {
    shm0_destroy_with_readers: "shm0", Destroy;
    shm0_unpublish_with_readers: "shm0", Unpublish;
    shm0_shutdown_with_readers: "shm0", Shutdown;
    shm0_destroy_after_readers_die: "shm0", ReadersKilled;
    shm0_destroy_with_frozen_readers: "shm0", ReadersFrozen;
    tcp0_destroy_with_readers: "tcp0", Destroy;
    tcp0_shutdown_with_readers: "tcp0", Shutdown;
    tcp0_destroy_after_readers_die: "tcp0", ReadersKilled;
    sockets0_destroy_with_readers: "sockets0", Destroy;
    sockets0_shutdown_with_readers: "sockets0", Shutdown;
    loopback_destroy_with_readers: "loopback", Destroy;
    loopback_shutdown_with_readers: "loopback", Shutdown;
    loopback_destroy_after_readers_die: "loopback", ReadersKilled;
}
