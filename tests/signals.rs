//! Remote signals between processes (docs/rsmapi.md §4.7, DESIGN.md, decisions 3, 11, 18, 19) on tcp0, shm0 and
//! sockets0, by the fabric's doorbells and by the side channel: counting, NO_ACCUMULATE,
//! put-then-signal order, wait timeouts, the pollable descriptor, event streams, signals
//! from an import-only read-only node, which importer signalled and answers to one
//! (`signal_to`), and an idle node's CPU time.
//!
//! The parent exports; the child is an import-only node.

mod common;

use common::{Peer, arg, fresh_node_id, node, runtime, say, serial};
use futures::StreamExt;
use rsm::{Error, ExportFlags, NodeId, Perm, SegmentEvent, SignalFlags, Signaller};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONTROLLERS: [&str; 4] = ["tcp0", "shm0", "sockets0", "loopback"];
const FIVE_S: Option<Duration> = Some(Duration::from_secs(5));

#[test]
fn role_entry() {
    match common::role().as_deref() {
        None => {}
        Some("importer") => importer_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// The import-only child: imports `SEG` of node `EXPORTER` on `CTRL` with `PERM`, then
/// answers commands.
fn importer_role() {
    let rt = runtime();
    let side = arg("SIDE") == "1";
    let perm = Perm::from_bits(u32::from_str_radix(&arg("PERM"), 8).unwrap());
    let (node, imp) = rt.block_on(async {
        let node = rsm::Node::builder()
            .ignore_environment()
            .id(arg("NODE_ID").parse::<u32>().unwrap())
            .signals_over_side_channel(side)
            .start()
            .await
            .unwrap();
        let ctrl = node.controller(&arg("CTRL")).await.unwrap();
        let imp = ctrl
            .import(
                arg("EXPORTER").parse().unwrap(),
                arg("SEG").parse().unwrap(),
                perm,
            )
            .await
            .unwrap();
        (node, imp)
    });
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut idle: Option<tokio::task::JoinHandle<rsm::Result<rsm::NodeId>>> = None;
    let exporter = rsm::NodeId(arg("EXPORTER").parse().unwrap());
    say("ready");
    while let Some(cmd) = common::next_command() {
        let w: Vec<&str> = cmd.split_whitespace().collect();
        let res: String = match w.as_slice() {
            ["post", n, flags] => rt.block_on(async {
                let flags = SignalFlags::from_bits(flags.parse().unwrap());
                for _ in 0..n.parse::<u32>().unwrap() {
                    if let Err(e) = imp.signal(flags).await {
                        return format!("err {}", e.code());
                    }
                }
                "ok".to_string()
            }),
            ["wait", n, ms] => rt.block_on(async {
                let t = Some(Duration::from_millis(ms.parse().unwrap()));
                for _ in 0..n.parse::<u32>().unwrap() {
                    match imp.wait_signal(t).await {
                        Ok(from) if from == exporter => {}
                        Ok(from) => return format!("signalled by {from}, not {exporter}"),
                        Err(e) => return format!("err {}", e.code()),
                    }
                }
                "ok".to_string()
            }),
            // Rounds of: put record i, signal, wait for the answer.
            ["records", from, n] => rt.block_on(async {
                let from: u64 = from.parse().unwrap();
                for i in from..from + n.parse::<u64>().unwrap() {
                    let (r, _) = common::split(imp.put(0, record(i)).await);
                    r.unwrap();
                    imp.signal(SignalFlags::empty()).await.unwrap();
                    if let Err(e) = imp.wait_signal(FIVE_S).await {
                        return format!("err {} at {i}", e.code());
                    }
                }
                "ok".to_string()
            }),
            // Answers each of n signals with one.
            ["echo", n] => rt.block_on(async {
                for _ in 0..n.parse::<u32>().unwrap() {
                    if let Err(e) = imp.wait_signal(FIVE_S).await {
                        return format!("err {}", e.code());
                    }
                    imp.signal(SignalFlags::empty()).await.unwrap();
                }
                "ok".to_string()
            }),
            // After `secs` of silence: the time of one 8-byte put, or of one signal round trip.
            ["idleput", secs] => {
                std::thread::sleep(Duration::from_secs(secs.parse().unwrap()));
                rt.block_on(async {
                    let t = Instant::now();
                    let (r, _) = common::split(imp.put(0, vec![7u8; 8]).await);
                    r.unwrap();
                    format!("{}", t.elapsed().as_micros())
                })
            }
            ["idlesig", secs] => {
                std::thread::sleep(Duration::from_secs(secs.parse().unwrap()));
                rt.block_on(async {
                    let t = Instant::now();
                    imp.signal(SignalFlags::empty()).await.unwrap();
                    imp.wait_signal(FIVE_S).await.unwrap();
                    format!("{}", t.elapsed().as_micros())
                })
            }
            ["pending"] => imp.pending_signals().to_string(),
            // Polls the descriptor (at most 10 s) and consumes what it reports.
            ["poll"] => {
                let fd = imp.pollfd().unwrap();
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                say("polling");
                // SAFETY: one valid pollfd for the duration of the call.
                let n = unsafe { libc::poll(&mut pfd, 1, 10_000) };
                if n == 1 && fd.try_consume() {
                    "readable".into()
                } else {
                    format!("poll returned {n}")
                }
            }
            ["watch"] => {
                let mut events = imp.events();
                let seen = Arc::clone(&seen);
                rt.spawn(async move {
                    while let Some(e) = events.next().await {
                        seen.lock().unwrap().push(format!("{e:?}"));
                    }
                    seen.lock().unwrap().push("end".into());
                });
                "ok".into()
            }
            ["seen"] => seen.lock().unwrap().join(","),
            ["idle", ms] => {
                let imp = imp.clone();
                let t = Some(Duration::from_millis(ms.parse().unwrap()));
                idle = Some(rt.spawn(async move { imp.wait_signal(t).await }));
                "ok".into()
            }
            ["idle_result"] => match rt.block_on(idle.take().unwrap()).unwrap() {
                Ok(_exporter) => "ok".into(),
                Err(e) => format!("err {}", e.code()),
            },
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        };
        say(res);
    }
    rt.block_on(async {
        drop(imp);
        node.shutdown().await;
    });
}

fn record(i: u64) -> Vec<u8> {
    let mut r = i.to_le_bytes().to_vec();
    r.extend_from_slice(&common::pattern(i, 56));
    r
}

struct Setup {
    rt: tokio::runtime::Runtime,
    node: rsm::Node,
    seg: rsm::ExportSegment,
    child: Peer,
    child_id: u32,
}

/// The parent exports a page on `ctrl` and a child imports it with `perm`.
fn setup(ctrl: &str, side: bool, perm: &str) -> Setup {
    let rt = runtime();
    let id = fresh_node_id();
    let (node, seg, segid) = rt.block_on(common::published_page(id, ctrl, side));
    let child_id = id + 1;
    let child = Peer::start(
        "role_entry",
        "importer",
        &[
            ("NODE_ID", child_id.to_string()),
            ("EXPORTER", id.to_string()),
            ("SEG", segid.to_string()),
            ("CTRL", ctrl.to_string()),
            ("PERM", perm.to_string()),
            ("SIDE", if side { "1" } else { "0" }.to_string()),
        ],
    );
    assert_eq!(child.recv(), "ready");
    Setup {
        rt,
        node,
        seg,
        child,
        child_id,
    }
}

impl Setup {
    fn end(mut self) {
        assert!(self.child.quit(), "the child exits cleanly");
        self.rt.block_on(async {
            self.seg.destroy().await.unwrap();
            self.node.shutdown().await;
        });
    }
}

fn paths() -> Vec<(&'static str, bool)> {
    CONTROLLERS
        .iter()
        .flat_map(|c| [(*c, false), (*c, true)])
        .collect()
}

#[test]
fn ten_thousand_signals_are_ten_thousand_events_both_ways() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let mut s = setup(ctrl, side, "600");
        // Importer to exporter: counted, every one.
        assert_eq!(s.child.ask("post 10000 0"), "ok", "{ctrl} side={side}");
        let seg = s.seg.clone();
        s.rt.block_on(async {
            for i in 0..10_000 {
                seg.wait_signal(FIVE_S)
                    .await
                    .unwrap_or_else(|e| panic!("{ctrl} side={side}: wait {i}: {e}"));
            }
            let late = seg.wait_signal(Some(Duration::from_millis(200))).await;
            assert_eq!(late.unwrap_err().code(), 42, "{ctrl}: no 10,001st event");
        });
        // Exporter to importer.
        s.rt.block_on(async {
            for _ in 0..10_000 {
                seg.signal(SignalFlags::empty()).await.unwrap();
            }
        });
        assert_eq!(s.child.ask("wait 10000 5000"), "ok", "{ctrl} side={side}");
        assert_eq!(s.child.ask("wait 1 200"), "err 42", "{ctrl} side={side}");
        s.end();
    }
}

#[test]
fn no_accumulate_drops_posts_while_one_is_pending() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let mut s = setup(ctrl, side, "600");
        let seg = s.seg.clone();
        // A burst with no wait in between leaves exactly one pending event.
        assert_eq!(s.child.ask("post 50 2"), "ok");
        s.rt.block_on(async {
            common::eventually("a pending signal", || seg.pending_signals() >= 1).await;
            // Any late one would show within this pause.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(seg.pending_signals(), 1, "{ctrl} side={side}");
            seg.wait_signal(FIVE_S).await.unwrap();
            let none = seg.wait_signal(Some(Duration::from_millis(100))).await;
            assert_eq!(none.unwrap_err().code(), 42);
        });
        // Without the flag they accumulate; with it after a drained queue, one counts.
        assert_eq!(s.child.ask("post 3 0"), "ok");
        assert_eq!(s.child.ask("post 1 2"), "ok");
        s.rt.block_on(async {
            common::eventually("three pending signals", || seg.pending_signals() >= 3).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(seg.pending_signals(), 3, "{ctrl} side={side}");
        });
        // The other direction.
        s.rt.block_on(async {
            for _ in 0..20 {
                seg.signal(SignalFlags::NO_ACCUMULATE).await.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(s.child.ask("pending"), "1", "{ctrl} side={side}");
        s.end();
    }
}

#[test]
fn a_record_put_then_signalled_is_always_found() {
    let _serial = serial();
    let only = std::env::var("ONLY_CTRL").ok();
    for (ctrl, side) in paths() {
        if only.as_deref().is_some_and(|o| o != ctrl) {
            continue;
        }
        eprintln!("records on {ctrl} side={side}");
        let mut s = setup(ctrl, side, "600");
        let seg = s.seg.clone();
        let rounds: u64 =
            std::env::var("ROUNDS").map_or(common::scaled(4_000) as u64, |r| r.parse().unwrap());
        let start = Instant::now();
        let checker = s.rt.spawn(async move {
            let mut buf = [0u8; 64];
            for i in 0..rounds {
                seg.wait_signal(FIVE_S)
                    .await
                    .map_err(|e| format!("wait {i}: {e}"))?;
                seg.read_at(0, &mut buf).unwrap();
                if buf[..] != record(i)[..] {
                    return Err(format!("round {i}: found record {:?}", &buf[..8]));
                }
                seg.signal(SignalFlags::empty()).await.unwrap();
            }
            Ok::<(), String>(())
        });
        // In chunks, each answered well within the harness's 20 s, even on sockets beside
        // CPU-bound neighbours (a round trip of tens of ms).
        for from in (0..rounds).step_by(100) {
            let n = (rounds - from).min(100);
            assert_eq!(s.child.ask(&format!("records {from} {n}")), "ok", "{ctrl}");
        }
        s.rt.block_on(checker)
            .unwrap()
            .unwrap_or_else(|e| panic!("{ctrl} side={side}: {e}"));
        eprintln!(
            "{rounds} rounds on {ctrl} side={side}: {:?}",
            start.elapsed()
        );
        s.end();
    }
}

#[test]
fn waits_time_out_at_or_after_their_timeout() {
    let _serial = serial();
    let s = setup("tcp0", false, "600");
    let seg = s.seg.clone();
    s.rt.block_on(async {
        for ms in [0u64, 1, 10, 250, 1000] {
            let t = Duration::from_millis(ms);
            let start = Instant::now();
            let e = seg.wait_signal(Some(t)).await.unwrap_err();
            let took = start.elapsed();
            assert_eq!(e.code(), 42, "RSMERR_TIMEOUT");
            assert!(took >= t, "{ms} ms: returned after {took:?}");
            assert!(took < t + Duration::from_secs(2), "{ms} ms: {took:?}");
        }
    });
    // Without a tokio runtime in the caller.
    let start = Instant::now();
    let e = futures::executor::block_on(seg.wait_signal(Some(Duration::from_millis(150))));
    assert_eq!(e.unwrap_err().code(), 42);
    assert!(start.elapsed() >= Duration::from_millis(150));
    s.end();
}

#[test]
fn the_pollfd_wakes_on_a_remote_post_and_blocks_destroy() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let mut s = setup(ctrl, side, "600");
        let seg = s.seg.clone();
        // Import side: the child polls, the exporter posts.
        assert_eq!(s.child.ask("poll"), "polling");
        std::thread::sleep(Duration::from_millis(100));
        s.rt.block_on(seg.signal(SignalFlags::empty())).unwrap();
        assert_eq!(s.child.recv(), "readable", "{ctrl} side={side}");
        // Export side, and the count that blocks destroy.
        let fd = seg.pollfd().unwrap();
        let fd2 = seg.pollfd().unwrap();
        assert_eq!(fd.as_raw_fd(), fd2.as_raw_fd());
        let poller = std::thread::spawn({
            let raw = fd.as_raw_fd();
            move || {
                let mut pfd = libc::pollfd {
                    fd: raw,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; the fd stays open (the parent holds the guard).
                unsafe { libc::poll(&mut pfd, 1, 10_000) }
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(s.child.ask("post 1 0"), "ok");
        assert_eq!(poller.join().unwrap(), 1, "{ctrl} side={side}: poll woke");
        assert!(fd.try_consume());
        assert!(!fd.try_consume());
        let e = s.rt.block_on(seg.clone().destroy()).unwrap_err();
        assert_eq!(e.code(), 34, "RSMERR_POLLFD_IN_USE");
        drop(fd);
        let e = s.rt.block_on(seg.clone().destroy()).unwrap_err();
        assert_eq!(e.code(), 34, "one reference is still held");
        drop(fd2);
        s.end();
    }
}

#[test]
fn streams_report_connect_disconnect_revoke_and_death() {
    let _serial = serial();
    for ctrl in CONTROLLERS {
        let mut s = setup(ctrl, false, "600");
        let mut events = s.seg.events();
        let next = |rt: &tokio::runtime::Runtime, ev: &mut rsm::EventStream| {
            rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), ev.next())
                    .await
                    .expect("an event within 10 s")
                    .expect("the stream goes on")
                    .expect("no lag")
            })
        };
        // The connect happened before the stream existed; a signal shows the importer.
        assert_eq!(s.child.ask("watch"), "ok");
        assert_eq!(s.child.ask("post 1 0"), "ok");
        let importers = s.seg.importers();
        assert_eq!(importers.len(), 1);
        assert_eq!(importers[0].node(), rsm::NodeId(s.child_id));
        assert_eq!(
            next(&s.rt, &mut events),
            SegmentEvent::Signal {
                from: Signaller::Importer(importers[0])
            }
        );
        // A stream does not consume: the wait still finds the event.
        s.rt.block_on(s.seg.wait_signal(FIVE_S)).unwrap();
        // A second importer connects and disconnects.
        let other = s.rt.block_on(async {
            let n = node(fresh_node_id()).await;
            let imp = n
                .controller(ctrl)
                .await
                .unwrap()
                .import(s.node.id(), s.seg.id().unwrap(), Perm::READ)
                .await
                .unwrap();
            (n, imp)
        });
        let other_id = other.0.id();
        assert_eq!(
            next(&s.rt, &mut events),
            SegmentEvent::ImporterConnected {
                node: rsm::NodeId(other_id.get())
            }
        );
        s.rt.block_on(other.1.disconnect()).unwrap();
        assert_eq!(
            next(&s.rt, &mut events),
            SegmentEvent::ImporterDisconnected {
                node: rsm::NodeId(other_id.get())
            }
        );
        s.rt.block_on(other.0.shutdown());
        // Revoke, seen by the importer's stream.
        s.rt.block_on(s.seg.unpublish()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = s.child.ask("seen");
            if seen.contains("Revoked") {
                break;
            }
            assert!(Instant::now() < deadline, "{ctrl}: importer saw {seen}");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The importer's death.
        let segid = s.rt.block_on(s.seg.publish(None, &[])).unwrap();
        let mut s2 = setup_child(&s, ctrl, segid);
        assert_eq!(
            next(&s.rt, &mut events),
            SegmentEvent::ImporterConnected {
                node: rsm::NodeId(s.child_id + 7)
            }
        );
        s2.kill();
        let mut got = Vec::new();
        let dead = s.child_id + 7;
        while !(got.contains(&SegmentEvent::PeerUnreachable {
            node: rsm::NodeId(dead),
        }) && got.contains(&SegmentEvent::ImporterDisconnected {
            node: rsm::NodeId(dead),
        })) {
            got.push(next(&s.rt, &mut events));
        }
        // The stream ends with the segment.
        let seg = s.seg.clone();
        s.end();
        drop(seg);
        let end = futures::executor::block_on(async {
            let mut rest = Vec::new();
            while let Some(e) = events.next().await {
                rest.push(e);
            }
            rest
        });
        assert!(end.len() < 10, "{end:?}");
    }
}

#[test]
fn two_importers_are_told_apart_and_answered_alone() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let mut s = setup(ctrl, side, "600");
        let seg = s.seg.clone();
        // The second importer never forces the side channel: with `side`, one importer
        // signals by the side channel and the other by the doorbell.
        let mut b_child = setup_child(&s, ctrl, seg.id().unwrap());
        let (a_id, b_id) = (NodeId(s.child_id), NodeId(s.child_id + 7));
        let importers = seg.importers();
        assert_eq!(importers.len(), 2, "{ctrl} side={side}");
        let find = |n: NodeId| importers.iter().copied().find(|i| i.node() == n).unwrap();
        let (a, b) = (find(a_id), find(b_id));
        assert_ne!(a.connection(), b.connection());

        // Each wait names the importer that posted.
        assert_eq!(s.child.ask("post 1 0"), "ok");
        let who = s.rt.block_on(seg.wait_signal(FIVE_S)).unwrap();
        assert_eq!(who, a, "{ctrl} side={side}");
        assert_eq!(b_child.ask("post 1 0"), "ok");
        let who = s.rt.block_on(seg.wait_signal(FIVE_S)).unwrap();
        assert_eq!(who, b, "{ctrl} side={side}");
        // Both pending: n posts are n waits, and the importers are served in turn.
        assert_eq!(s.child.ask("post 3 0"), "ok");
        assert_eq!(b_child.ask("post 1 0"), "ok");
        s.rt.block_on(async {
            common::eventually("four pending signals", || seg.pending_signals() >= 4).await;
            let mut got = Vec::new();
            for _ in 0..4 {
                got.push(seg.wait_signal(FIVE_S).await.unwrap());
            }
            assert_ne!(got[0], got[1], "{ctrl} side={side}: in turn, {got:?}");
            assert_eq!(got.iter().filter(|w| **w == a).count(), 3, "{got:?}");
            assert_eq!(got.iter().filter(|w| **w == b).count(), 1, "{got:?}");
            let late = seg.wait_signal(Some(Duration::from_millis(100))).await;
            assert!(late.unwrap_err().is_timeout());
        });

        // signal_to reaches its target only.
        s.rt.block_on(seg.signal_to(a, SignalFlags::empty()))
            .unwrap();
        assert_eq!(s.child.ask("wait 1 5000"), "ok", "{ctrl} side={side}");
        assert_eq!(b_child.ask("wait 1 300"), "err 42", "{ctrl} side={side}");
        s.rt.block_on(seg.signal_to(b, SignalFlags::empty()))
            .unwrap();
        assert_eq!(b_child.ask("wait 1 5000"), "ok", "{ctrl} side={side}");
        assert_eq!(s.child.ask("wait 1 300"), "err 42", "{ctrl} side={side}");
        // NO_ACCUMULATE as for `signal`: one pending at the target.
        s.rt.block_on(async {
            for _ in 0..5 {
                seg.signal_to(a, SignalFlags::NO_ACCUMULATE).await.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(s.child.ask("pending"), "1", "{ctrl} side={side}");
        assert_eq!(b_child.ask("pending"), "0", "{ctrl} side={side}");
        assert_eq!(s.child.ask("wait 1 5000"), "ok");

        // An importer that left, and one of another segment, get an error and nothing.
        assert!(b_child.quit(), "the second child exits cleanly");
        s.rt.block_on(common::eventually("one importer", || {
            seg.importers().len() == 1
        }));
        let e =
            s.rt.block_on(seg.signal_to(b, SignalFlags::empty()))
                .unwrap_err();
        assert!(matches!(e, Error::SegNotConnected(_)), "{ctrl}: {e}");
        assert!(e.is_disconnected());
        let other = s.rt.block_on(async {
            let other = s
                .node
                .controller(ctrl)
                .await
                .unwrap()
                .export(common::page(), ExportFlags::empty())
                .unwrap();
            other.publish(None, &[]).await.unwrap();
            other
        });
        let e =
            s.rt.block_on(other.signal_to(a, SignalFlags::empty()))
                .unwrap_err();
        assert!(matches!(e, Error::SegNotConnected(_)), "{ctrl}: {e}");
        assert_eq!(s.child.ask("wait 1 200"), "err 42", "{ctrl} side={side}");
        s.rt.block_on(other.destroy()).unwrap();
        s.end();
    }
}

fn setup_child(s: &Setup, ctrl: &str, segid: rsm::SegmentId) -> Peer {
    let child = Peer::start(
        "role_entry",
        "importer",
        &[
            ("NODE_ID", (s.child_id + 7).to_string()),
            ("EXPORTER", s.node.id().to_string()),
            ("SEG", segid.to_string()),
            ("CTRL", ctrl.to_string()),
            ("PERM", "400".to_string()),
            ("SIDE", "0".to_string()),
        ],
    );
    assert_eq!(child.recv(), "ready");
    child
}

#[test]
fn an_import_only_read_only_node_signals_and_is_signalled() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let mut s = setup(ctrl, side, "400");
        assert_eq!(s.child.ask("post 3 0"), "ok", "{ctrl} side={side}");
        let seg = s.seg.clone();
        s.rt.block_on(async {
            for _ in 0..3 {
                seg.wait_signal(FIVE_S).await.unwrap();
            }
            seg.signal(SignalFlags::empty()).await.unwrap();
        });
        assert_eq!(s.child.ask("wait 1 5000"), "ok", "{ctrl} side={side}");
        s.end();
    }
}

#[test]
fn a_signal_to_a_dead_node_is_unreachable() {
    let _serial = serial();
    let rt = runtime();
    rt.block_on(async {
        for ctrl in CONTROLLERS {
            let (a, b, a_id) = common::two_nodes().await;
            let (seg, imp) =
                common::export_and_import(&a, &b, ctrl, common::page(), ExportFlags::empty()).await;
            let mut events = imp.events();
            imp.signal(SignalFlags::empty()).await.unwrap();
            seg.wait_signal(FIVE_S).await.unwrap();
            // The exporting node goes away: it withdraws its export first (a revoke), then
            // its side channel closes.
            a.shutdown().await;
            let mut seen = Vec::new();
            let lost = SegmentEvent::PeerUnreachable {
                node: rsm::NodeId(a_id),
            };
            while !seen.contains(&lost) {
                let e = tokio::time::timeout(Duration::from_secs(10), events.next())
                    .await
                    .unwrap_or_else(|_| panic!("{ctrl}: no PeerUnreachable within 10 s: {seen:?}"));
                seen.push(e.unwrap().unwrap());
            }
            assert!(
                seen.iter()
                    .all(|e| *e == lost || *e == SegmentEvent::Revoked),
                "{ctrl}: {seen:?}"
            );
            let e = imp.signal(SignalFlags::empty()).await.unwrap_err();
            assert!(
                e.is_unreachable(),
                "{ctrl}: RSMERR_REMOTE_NODE_UNREACHABLE or RSMERR_CONN_ABORTED: {e}"
            );
            drop(imp);
            drop(seg);
            b.shutdown().await;
        }
    });
}

/// CPU time (user + system) of process `pid`, from /proc.
fn cpu_of(pid: u32) -> Duration {
    common::cpu_in_stat(&format!("/proc/{pid}/stat"))
}

#[test]
fn an_idle_node_with_a_pending_wait_uses_almost_no_cpu() {
    let _serial = serial();
    // Every controller's pair idles in the same 10 s.
    let mut pairs: Vec<_> = CONTROLLERS
        .iter()
        .map(|ctrl| {
            let mut s = setup(ctrl, false, "600");
            // Some traffic first, then silence.
            assert_eq!(s.child.ask("post 10 0"), "ok");
            assert_eq!(s.child.ask("idle 30000"), "ok");
            (*ctrl, s)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let before: Vec<_> = pairs.iter().map(|(_, s)| cpu_of(s.child.pid())).collect();
    std::thread::sleep(Duration::from_secs(10));
    for ((ctrl, s), before) in pairs.iter_mut().zip(before) {
        let used = cpu_of(s.child.pid()) - before;
        eprintln!("idle CPU of the importer over 10 s on {ctrl}: {used:?}");
        assert!(used < Duration::from_millis(500), "{ctrl}: {used:?}");
        // The wait is still there and a signal ends it.
        s.rt.block_on(s.seg.signal(SignalFlags::empty())).unwrap();
        assert_eq!(s.child.ask("idle_result"), "ok", "{ctrl}");
    }
    for (_, s) in pairs {
        s.end();
    }
}

/// Every signal round trip (post, wait, post back) on every path is answered within its
/// wait; the round trip's figures are `rsm bench --op signal`'s.
#[test]
fn every_round_trip_is_answered_within_its_wait() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let mut s = setup(ctrl, side, "600");
        let n = 300;
        s.child.send(&format!("echo {n}"));
        let seg = s.seg.clone();
        let answered = s.rt.block_on(async {
            for i in 0..n {
                seg.signal(SignalFlags::empty()).await.unwrap();
                if let Err(e) = seg.wait_signal(FIVE_S).await {
                    return format!("round trip {i}: {e}");
                }
            }
            "ok".to_string()
        });
        assert_eq!(answered, "ok", "{ctrl} side={side}");
        assert_eq!(s.child.recv(), "ok", "{ctrl} side={side}");
        s.end();
    }
}

/// On each controller, after a second with nothing happening on either node (fifty idle
/// windows: every engine asleep), the first put and the first signal round trip complete
/// within 5 s: a sleeping target is woken by what is sent to it, not by a later timer.
#[test]
fn the_first_operations_after_idle_wake_the_target() {
    let _serial = serial();
    for ctrl in CONTROLLERS {
        let mut s = setup(ctrl, false, "600");
        let seg = s.seg.clone();
        let echo = s.rt.spawn(async move {
            seg.wait_signal(Some(Duration::from_secs(60))).await?;
            seg.signal(SignalFlags::empty()).await
        });
        for cmd in ["idleput 0", "idleput 1", "idlesig 1"] {
            let us: u64 = s
                .child
                .ask(cmd)
                .parse()
                .unwrap_or_else(|_| panic!("{ctrl}: `{cmd}` failed"));
            assert!(us < 5_000_000, "{ctrl}: `{cmd}` took {us} us");
        }
        s.rt.block_on(echo).unwrap().unwrap();
        s.end();
    }
}

/// The exporter counts an importer connected from its grant on, and may signal it at once,
/// before the importer has taken the grant in (a busy host: here the importer pauses 300 ms
/// there): every such signal reaches the import, on every path.
#[cfg(feature = "fault-injection")]
#[test]
fn signals_sent_before_the_importer_took_its_grant_in_arrive() {
    let _serial = serial();
    let rt = runtime();
    for (ctrl, side) in paths() {
        rt.block_on(async {
            let a_id = fresh_node_id();
            let a = rsm::Node::builder()
                .ignore_environment()
                .id(a_id)
                .signals_over_side_channel(side)
                .start()
                .await
                .unwrap();
            let b = rsm::Node::builder()
                .ignore_environment()
                .id(a_id + 1)
                .pause_import_registration(Duration::from_millis(300))
                .start()
                .await
                .unwrap();
            let seg = a.controller(ctrl).await.unwrap();
            let seg = seg.export(4096, ExportFlags::empty()).unwrap();
            let id = seg.publish(None, &[]).await.unwrap();
            let cb = b.controller(ctrl).await.unwrap();
            let importing =
                tokio::spawn(async move { cb.import(NodeId(a_id), id, Perm::RDWR).await });
            let deadline = Instant::now() + Duration::from_secs(10);
            while seg.importers().is_empty() {
                assert!(Instant::now() < deadline, "{ctrl} side={side}: no importer");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            for _ in 0..3 {
                seg.signal(SignalFlags::empty()).await.unwrap();
            }
            let imp = importing.await.unwrap().unwrap();
            for i in 0..3 {
                imp.wait_signal(FIVE_S)
                    .await
                    .unwrap_or_else(|e| panic!("{ctrl} side={side}: signal {i}: {e}"));
            }
            let late = imp.wait_signal(Some(Duration::from_millis(100))).await;
            assert_eq!(late.unwrap_err().code(), 42, "{ctrl} side={side}: no 4th");
            imp.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }
}
