//! Process faults (issue 44, item 5; docs/reliability.md): on every controller, an exporter
//! child and an importer child run each kind of operation in a loop, and one of them is
//! killed (`SIGKILL`) at a random moment: the survivor's awaits end within their bound with
//! `RSMERR_CONN_ABORTED` or `RSMERR_REMOTE_NODE_UNREACHABLE` (or succeed), nothing crashes,
//! every acknowledged write is in the surviving exporter's memory, and the killed side,
//! restarted under its node id, works with the survivor at once. A frozen exporter
//! (`SIGSTOP`) is found unreachable within the liveness bound, and one resumed before it
//! goes on as if nothing happened. `limits.rs`: descriptor and memory limits give clear
//! errors, never a crash.
//!
//! `RSM_FAULT_ROUNDS` (default 1) sets how many times every kind is run with each victim;
//! `RSM_FAULT_SEED` replays a run (each test prints its seed). `soak` (ignored; `cargo
//! xtask soak --minutes N`) runs every controller at once with random kinds, victims and
//! delays until its time is up.

#[path = "../common/mod.rs"]
mod common;
mod exporter;
mod importer;
mod limits;
mod proc;
mod records;
mod rounds;
mod shared;

use rand::{Rng, SeedableRng};
use rounds::{Outcome, Pair, Victim};
use shared::{Kind, Tally, now_ms};
use std::time::{Duration, Instant};

#[test]
fn role_entry() {
    match common::role().as_deref() {
        None => {}
        Some("fexporter") => exporter::exporter_role(),
        Some("fimporter") => importer::importer_role(),
        Some(other) => limits::role(other),
    }
}

/// The seed of this run: `RSM_FAULT_SEED`, else the clock's.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("RSM_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_ms);
    eprintln!("{test}: RSM_FAULT_SEED={seed}");
    seed
}

fn rounds() -> usize {
    std::env::var("RSM_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Every kind of operation on `ctrl`, each with the exporter and the importer killed at a
/// random moment, `rounds()` times.
fn kills(ctrl: &str) {
    let _serial = common::serial();
    common::logs();
    let seed = seed(&format!("{ctrl}_kills"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Outcome::default();
    let t = Instant::now();
    let mut pair = Pair::start(ctrl, common::fresh_node_id(), &mut out);
    let mut base = 0;
    for _ in 0..rounds() {
        for kind in Kind::on(ctrl) {
            for victim in [Victim::Exporter, Victim::Importer] {
                base += 1_000_000;
                let delay = Duration::from_millis(rng.random_range(10..250));
                pair.round(kind, victim, delay, base, &mut out);
            }
        }
    }
    pair.finish(&mut out);
    eprintln!("{} in {:?} (seed {seed})", out.summary(ctrl), t.elapsed());
    assert!(out.clean(), "{} (seed {seed})", out.summary(ctrl));
}

#[test]
fn loopback_kills() {
    kills("loopback");
}

#[test]
fn shm0_kills() {
    kills("shm0");
}

#[test]
fn tcp0_kills() {
    kills("tcp0");
}

#[test]
fn sockets0_kills() {
    kills("sockets0");
}

/// The exporter frozen (`SIGSTOP`) while the importer writes: resumed after `frozen` (well
/// within the liveness bound) the writes go on with no error; left frozen, the importer's
/// writes end as unreachable within the bound (DESIGN.md §8: 3-4 s from the first wait),
/// and once the exporter resumes, the importer imports it again and works.
fn freeze(ctrl: &str) {
    let _serial = common::serial();
    common::logs();
    let mut out = Outcome::default();
    let mut pair = Pair::start(ctrl, common::fresh_node_id(), &mut out);
    assert!(out.clean(), "{}", out.summary(ctrl));
    let run = |pair: &mut Pair, base: u64| {
        assert_eq!(
            pair.exporter
                .ask("run put", rounds::ANSWER_WITHIN)
                .as_deref(),
            Some("running")
        );
        let a = pair
            .importer
            .ask(&format!("run put {base}"), rounds::ANSWER_WITHIN);
        assert_eq!(a.as_deref(), Some("running"), "{ctrl}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // The importer's loop, then the exporter's, which answers only once it runs: asked while
    // frozen, its answer waited out `ANSWER_WITHIN` and came late, to the next question.
    let stop = |pair: &mut Pair, wait_ms: u64| -> Tally {
        let a = pair.importer.ask(
            &format!("stop {wait_ms}"),
            Duration::from_millis(wait_ms) + rounds::ANSWER_WITHIN,
        );
        pair.exporter.signal(libc::SIGCONT);
        let e = pair.exporter.ask("stop", rounds::ANSWER_WITHIN);
        let e = Tally::parse(e.as_deref().unwrap_or_default())
            .unwrap_or_else(|| panic!("{ctrl}: the exporter answered {e:?}"));
        assert_eq!(e.hangs, 0, "{ctrl}: the exporter's loop: {}", e.line());
        Tally::parse(a.as_deref().unwrap_or_default())
            .unwrap_or_else(|| panic!("{ctrl}: the importer answered {a:?}"))
    };

    // Frozen for 1.5 s: nothing fails.
    run(&mut pair, 1_000_000);
    pair.exporter.freeze();
    std::thread::sleep(Duration::from_millis(1500));
    pair.exporter.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(500));
    let t = stop(&mut pair, 0);
    assert!(
        t.errors.is_empty() && t.hangs == 0 && t.data == 0 && t.ops > 0,
        "{ctrl}: a peer frozen for 1.5 s: {}",
        t.line()
    );
    assert_eq!(
        pair.importer
            .ask("check 1999999", rounds::ANSWER_WITHIN)
            .as_deref(),
        Some("ok"),
        "{ctrl}"
    );

    // Frozen until found unreachable.
    assert_eq!(
        pair.importer
            .ask("connect", rounds::ANSWER_WITHIN)
            .as_deref(),
        Some("connected")
    );
    run(&mut pair, 2_000_000);
    let frozen_at = now_ms();
    pair.exporter.freeze();
    let t = stop(&mut pair, 12_000);
    let found = t.last_fail.saturating_sub(frozen_at);
    eprintln!(
        "{ctrl}: a frozen exporter found unreachable {found} ms after the freeze: {}",
        t.line()
    );
    assert!(
        t.left == 0 && t.hangs == 0 && t.bad == 0 && t.data == 0,
        "{ctrl}: the importer's writes end once the frozen exporter is found: {}",
        t.line()
    );
    assert!(
        found <= 8_000,
        "{ctrl}: found {found} ms after the freeze (bound 3-4 s from the first wait)"
    );
    // Resumed: imported again, and it works.
    let t0 = Instant::now();
    let a = pair.importer.ask("connect", rounds::ANSWER_WITHIN);
    assert_eq!(
        a.as_deref(),
        Some("connected"),
        "{ctrl}: import after the resume"
    );
    assert_eq!(
        pair.importer
            .ask("check 2999999", rounds::ANSWER_WITHIN)
            .as_deref(),
        Some("ok"),
        "{ctrl}"
    );
    eprintln!(
        "{ctrl}: the resumed exporter imported and used within {:?}",
        t0.elapsed()
    );
    pair.finish(&mut out);
    assert!(out.clean(), "{}", out.summary(ctrl));
}

#[test]
fn loopback_freeze() {
    freeze("loopback");
}

#[test]
fn shm0_freeze() {
    freeze("shm0");
}

#[test]
fn tcp0_freeze() {
    freeze("tcp0");
}

#[test]
fn sockets0_freeze() {
    freeze("sockets0");
}

/// `cargo xtask soak --minutes N` (`RSM_SOAK_MINUTES`): a pair on every controller at once,
/// each round a random kind, victim and delay, until the time is up; prints a `SOAK` line
/// per controller and in total, and fails if anything hung, crashed or read wrong data.
#[test]
#[ignore = "a soak: cargo xtask soak --minutes N"]
fn soak() {
    let minutes: f64 = std::env::var("RSM_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(1.0);
    let seed = seed("soak");
    let until = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let ctrls = ["loopback", "shm0", "tcp0", "sockets0"];
    let outcomes: Vec<(String, Outcome)> = std::thread::scope(|s| {
        let handles: Vec<_> = ctrls
            .iter()
            .enumerate()
            .map(|(i, ctrl)| {
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(i as u64));
                    let mut out = Outcome::default();
                    let mut pair = Pair::start(ctrl, common::fresh_node_id(), &mut out);
                    let kinds = Kind::on(ctrl);
                    let mut base = 0;
                    while Instant::now() < until {
                        base += 1_000_000;
                        let kind = kinds[rng.random_range(0..kinds.len())];
                        let victim = if rng.random_bool(0.5) {
                            Victim::Exporter
                        } else {
                            Victim::Importer
                        };
                        let delay = Duration::from_millis(rng.random_range(10..1000));
                        pair.round(kind, victim, delay, base, &mut out);
                    }
                    pair.finish(&mut out);
                    (ctrl.to_string(), out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a soak thread"))
            .collect()
    });
    let mut total = Outcome::default();
    for (ctrl, out) in outcomes {
        println!("SOAK {}", soak_line(&ctrl, &out));
        eprintln!("{}", out.summary(&ctrl));
        total.add(out);
    }
    println!("SOAK {}", soak_line("total", &total));
    assert!(total.clean(), "{} (seed {seed})", total.summary("soak"));
}

fn soak_line(what: &str, o: &Outcome) -> String {
    format!(
        "{what} runs={} faults={} hangs={} crashes={} data_errors={} unexpected={} retried={} ops={} worst_loss_ms={}",
        o.runs,
        o.faults,
        o.hangs.len(),
        o.crashes.len(),
        o.data_errors.len(),
        o.unexpected.len(),
        o.retried.len(),
        o.tally.ops,
        o.worst_loss_ms
    )
}

/// Runs a limits role (`nofile` or `memlimit`) on `ctrl` with `args`; returns its lines.
/// It must exit 0 (no panic, no abort) within 60 s, and every failure it reports must be
/// one of `codes`.
fn limited(role: &str, ctrl: &str, args: &[(&str, String)], codes: &[&str]) -> Vec<String> {
    // The peer: a node of this process, with no limit, exporting a page.
    let rt = common::runtime();
    let peer_id = common::fresh_node_id();
    let (peer, seg) = rt.block_on(async {
        let peer = common::node(peer_id).await;
        let seg = peer
            .controller(ctrl)
            .await
            .unwrap()
            .export(1 << 20, rsm::ExportFlags::empty())
            .unwrap();
        seg.publish(None, &[]).await.unwrap();
        (peer, seg)
    });
    let mut all = vec![
        ("CTRL", ctrl.to_string()),
        ("NODE_ID", (peer_id + 1).to_string()),
        ("PEER", peer_id.to_string()),
        ("PEER_SEG", seg.id().unwrap().get().to_string()),
    ];
    all.extend(args.iter().cloned());
    let mut p = proc::Proc::start(role, &all);
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(line) = p.recv_within(deadline.saturating_duration_since(Instant::now())) {
        let done = line == "done";
        lines.push(line);
        if done {
            break;
        }
    }
    let status = p.quit(Duration::from_secs(10));
    rt.block_on(async {
        seg.destroy().await.unwrap();
        peer.shutdown().await;
    });
    eprintln!("{role} {ctrl} {args:?}: {lines:?}");
    assert!(
        status.is_some_and(|s| s.success()),
        "{role} on {ctrl} {args:?} ended with {:?}: {lines:?}",
        status.map(proc::how)
    );
    for l in &lines {
        if let Some(code) = l.split_whitespace().find(|w| w.starts_with("RSMERR_")) {
            assert!(codes.contains(&code), "{role} on {ctrl} {args:?}: {l}");
        }
        assert!(!l.ends_with("hang"), "{role} on {ctrl} {args:?}: {l}");
    }
    lines
}

/// Descriptor limits from too low to start a node to enough for a few dozen segments.
fn nofile(ctrl: &str) {
    let _serial = common::serial();
    for limit in [12, 24, 48, 96] {
        let lines = limited(
            "nofile",
            ctrl,
            &[("NOFILE", limit.to_string())],
            &["RSMERR_INSUFFICIENT_RESOURCES"],
        );
        for l in lines.iter().filter(|l| l.contains("RSMERR_")) {
            assert!(
                l.contains("file descriptors") || l.contains("Too many open files"),
                "{ctrl} {limit}: the error says why: {l}"
            );
        }
        if lines
            .iter()
            .any(|l| l.starts_with("limit ") && !l.ends_with("none"))
        {
            assert!(
                lines.iter().any(|l| l == "again ok"),
                "{ctrl} {limit}: {lines:?}"
            );
        }
    }
}

#[test]
fn loopback_nofile() {
    nofile("loopback");
}

#[test]
fn shm0_nofile() {
    nofile("shm0");
}

#[test]
fn tcp0_nofile() {
    nofile("tcp0");
}

#[test]
fn sockets0_nofile() {
    nofile("sockets0");
}

/// An address-space limit: 1 GiB exports and local memory fail with
/// `RSMERR_INSUFFICIENT_MEM`, a small segment still works.
fn memlimit(ctrl: &str) {
    let _serial = common::serial();
    let lines = limited("memlimit", ctrl, &[], &["RSMERR_INSUFFICIENT_MEM"]);
    for want in [
        "export RSMERR_INSUFFICIENT_MEM",
        "local RSMERR_INSUFFICIENT_MEM",
        "again ok",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "{ctrl}: {want}: {lines:?}"
        );
    }
}

#[test]
fn loopback_memlimit() {
    memlimit("loopback");
}

#[test]
fn shm0_memlimit() {
    memlimit("shm0");
}

#[test]
fn tcp0_memlimit() {
    memlimit("tcp0");
}

#[test]
fn sockets0_memlimit() {
    memlimit("sockets0");
}
