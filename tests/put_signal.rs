//! Put and signal as one operation (`ImportSegment::put_signal`, putv's `IMPLICIT_SIGPOST`;
//! DESIGN.md §6.1) between two processes on tcp0, shm0, sockets0 and loopback, by the
//! fabric's write with completion data and by the side channel's fallback: the exporter's
//! wait returns only once the record is visible (never stale, many rounds); a write whose
//! word fails its check is dropped as a signal; a revoked or disconnected import fails
//! with its RSMERR.
//!
//! The parent exports; the child is an import-only node.

mod common;

use common::{Peer, arg, fresh_node_id, runtime, say, serial};
use rsm::{Perm, SgEntry, SgFlags, SignalFlags};
use std::time::Duration;

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

fn record(i: u64) -> Vec<u8> {
    let mut r = i.to_le_bytes().to_vec();
    r.extend_from_slice(&common::pattern(i, 56));
    r
}

/// The child: imports `SEG` of node `EXPORTER` on `CTRL` read-write, then answers commands.
fn importer_role() {
    let rt = runtime();
    let side = arg("SIDE") == "1";
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
                Perm::RDWR,
            )
            .await
            .unwrap();
        (node, imp)
    });
    say("ready");
    while let Some(cmd) = common::next_command() {
        let w: Vec<&str> = cmd.split_whitespace().collect();
        let res: String = match w.as_slice() {
            // Rounds of: record i put and signalled in one operation, the answer awaited.
            ["records", how, from, n] => rt.block_on(async {
                let from: u64 = from.parse().unwrap();
                for i in from..from + n.parse::<u64>().unwrap() {
                    let r = record(i);
                    let res = match *how {
                        "one" => imp
                            .put_signal(0, r, SignalFlags::empty())
                            .await
                            .map(|_| ())
                            .map_err(rsm::Error::from),
                        // Two entries that follow each other: one post where the provider
                        // takes two ranges.
                        _ => {
                            let (head, tail) = (r[..8].to_vec(), r[8..].to_vec());
                            let v = vec![SgEntry::buffer(head, 0), SgEntry::buffer(tail, 8)];
                            imp.putv(v, SgFlags::IMPLICIT_SIGPOST).await.result
                        }
                    };
                    if let Err(e) = res {
                        return format!("err {} at {i}", e.name());
                    }
                    if let Err(e) = imp.wait_signal(FIVE_S).await {
                        return format!("err {} waiting at {i}", e.name());
                    }
                }
                "ok".to_string()
            }),
            ["carried"] => rsm::test_util::carried_signals(&imp).to_string(),
            ["forge"] => match rsm::test_util::put_forged_signal(&imp, 0, vec![0xEE; 64]) {
                None => "none".into(),
                Some(op) => match rt.block_on(op) {
                    Ok(_) => "ok".into(),
                    Err(e) => format!("err {}", e.error().name()),
                },
            },
            ["one"] => match rt.block_on(imp.put_signal(0, record(7), SignalFlags::empty())) {
                Ok(_) => "ok".into(),
                Err(e) => format!("err {}", e.error().name()),
            },
            ["disconnect"] => {
                rt.block_on(imp.clone().disconnect()).unwrap();
                "ok".into()
            }
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

struct Setup {
    rt: tokio::runtime::Runtime,
    node: rsm::Node,
    seg: rsm::ExportSegment,
    child: Peer,
}

/// The parent exports a page on `ctrl`; a child imports it read-write.
fn setup(ctrl: &str, side: bool) -> Setup {
    common::logs();
    let rt = runtime();
    let id = fresh_node_id();
    let (node, seg, segid) = rt.block_on(common::published_page(id, ctrl, side));
    let child = Peer::start(
        "role_entry",
        "importer",
        &[
            ("NODE_ID", (id + 1).to_string()),
            ("EXPORTER", id.to_string()),
            ("SEG", segid.to_string()),
            ("CTRL", ctrl.to_string()),
            ("SIDE", if side { "1" } else { "0" }.to_string()),
        ],
    );
    assert_eq!(child.recv(), "ready");
    Setup {
        rt,
        node,
        seg,
        child,
    }
}

impl Setup {
    fn end(mut self) {
        assert!(self.child.quit(), "the child exits cleanly");
        self.rt.block_on(async {
            let _ = self.seg.destroy().await;
            self.node.shutdown().await;
        });
    }

    /// `rounds` rounds of the child's `how` (`one`: put_signal, `vec`: putv with
    /// IMPLICIT_SIGPOST); the parent reads the record right after each wait and answers.
    fn rounds(&mut self, how: &str, rounds: u64, what: &str) {
        let seg = self.seg.clone();
        let checker = self.rt.spawn(async move {
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
        // In chunks, each answered within the harness's 20 s on sockets beside busy
        // neighbours too (a round trip of tens of ms).
        for from in (0..rounds).step_by(100) {
            let n = (rounds - from).min(100);
            assert_eq!(
                self.child.ask(&format!("records {how} {from} {n}")),
                "ok",
                "{what}"
            );
        }
        self.rt
            .block_on(checker)
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

fn paths() -> Vec<(&'static str, bool)> {
    CONTROLLERS
        .iter()
        .flat_map(|c| [(*c, false), (*c, true)])
        .collect()
}

/// Where the write itself carries the signal: a fabric controller whose signals go by the
/// doorbell.
fn carries(ctrl: &str, side: bool) -> bool {
    ctrl != "loopback" && !side
}

#[test]
fn the_exporter_finds_the_record_once_its_wait_returns() {
    let _serial = serial();
    let only = std::env::var("ONLY_CTRL").ok();
    for (ctrl, side) in paths() {
        if only.as_deref().is_some_and(|o| o != ctrl) {
            continue;
        }
        let what = format!("{ctrl} side={side}");
        let mut s = setup(ctrl, side);
        let rounds = common::scaled(2_000) as u64;
        s.rounds("one", rounds, &what);
        let carried: u64 = s.child.ask("carried").parse().unwrap();
        if carries(ctrl, side) {
            assert_eq!(carried, rounds, "{what}: every signal rode its write");
        } else {
            assert_eq!(carried, 0, "{what}: put, then signal");
        }
        s.end();
    }
}

#[test]
fn putv_with_implicit_sigpost_signals_after_its_data() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let what = format!("putv on {ctrl} side={side}");
        let mut s = setup(ctrl, side);
        let rounds = common::scaled(500) as u64;
        s.rounds("vec", rounds, &what);
        let carried: u64 = s.child.ask("carried").parse().unwrap();
        // Two ranges that follow each other are one post on every provider here.
        let want = if carries(ctrl, side) { rounds } else { 0 };
        assert_eq!(carried, want, "{what}: signals that rode the write");
        s.end();
    }
}

#[test]
fn a_write_whose_word_fails_its_check_signals_nothing() {
    let _serial = serial();
    for ctrl in ["tcp0", "shm0", "sockets0"] {
        let mut s = setup(ctrl, false);
        assert_eq!(s.child.ask("forge"), "ok", "{ctrl}");
        // The write landed (the grant allows it); the signal did not.
        let mut buf = [0u8; 64];
        s.seg.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [0xEE; 64], "{ctrl}");
        let e =
            s.rt.block_on(s.seg.wait_signal(Some(Duration::from_millis(300))))
                .unwrap_err();
        assert!(e.is_timeout(), "{ctrl}: {e}");
        assert_eq!(s.seg.pending_signals(), 0, "{ctrl}");
        // The connection still signals.
        assert_eq!(s.child.ask("one"), "ok", "{ctrl}");
        s.rt.block_on(s.seg.wait_signal(FIVE_S)).unwrap();
        s.seg.read_at(0, &mut buf).unwrap();
        assert_eq!(buf[..], record(7)[..], "{ctrl}");
        s.end();
    }
}

#[test]
fn a_revoked_or_disconnected_import_fails_with_its_code() {
    let _serial = serial();
    for (ctrl, side) in paths() {
        let what = format!("{ctrl} side={side}");
        let mut s = setup(ctrl, side);
        assert_eq!(s.child.ask("one"), "ok", "{what}");
        s.rt.block_on(s.seg.wait_signal(FIVE_S)).unwrap();
        s.rt.block_on(s.seg.unpublish()).unwrap();
        let res = s.child.ask("one");
        assert_eq!(res, "err RSMERR_CONN_ABORTED", "{what}");
        assert_eq!(s.seg.pending_signals(), 0, "{what}");
        assert_eq!(s.child.ask("disconnect"), "ok", "{what}");
        assert_eq!(s.child.ask("one"), "err RSMERR_BAD_SEG_HNDL", "{what}");
        s.end();
    }
}
