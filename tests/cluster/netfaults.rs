//! Network faults between two hosts on tcp0 and sockets0 (DESIGN.md §10, "Several hosts"):
//! packet loss of 1, 5 and 10 %, link flaps shorter and longer than the liveness bound, and
//! a stalled peer (every frame to and from it dropped at the switch, or its process
//! frozen), each while the importer's records workload (`records.rs`) runs. Throughout: no
//! record read back is ever wrong; every acknowledged put is read back with its value once
//! the network healed (the workers put a failed put's records again at once, as an
//! application retries, so a failed put that lands late shows); every await ends (one
//! still pending after 12 s counts as a hang); every failure is `CONN_ABORTED` or
//! `REMOTE_NODE_UNREACHABLE` within 5 s; and after the fault the workload imports again and
//! its puts are acknowledged. Each phase prints a `NETFAULT` line with its figures
//! (docs/reliability.md, "Network faults").

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::{self, Peer};
use crate::netns::{Cluster, Host};
use crate::{WITHIN_MS, export, freeze, nft, start};

/// Slots of 4 KiB in the exporter's segment.
const SLOTS: u64 = 1024;

/// What an operation may fail with while the network is at fault.
const ALLOWED: [&str; 2] = ["RSMERR_CONN_ABORTED", "RSMERR_REMOTE_NODE_UNREACHABLE"];

/// An exporter on host A and the records workload importing it on host B.
struct Pair {
    pa: Peer,
    pb: Peer,
    ctrl: &'static str,
    seg: u32,
    // Last: its guard deletes the namespaces once the node processes ended.
    cluster: Cluster,
}

/// A fault: how to cause it, how long it lasts, how to end it (frames dropped, if counted).
struct Fault<'a> {
    name: String,
    lasts: Duration,
    start: Box<dyn FnOnce(&Pair) + 'a>,
    end: Box<dyn FnOnce(&Pair) -> u64 + 'a>,
    /// Whether operations cannot succeed while it lasts, so some must fail.
    cuts: bool,
    /// Whether the workers hold their lost imports until new ones work, or drop them.
    hold_lost: bool,
}

impl Pair {
    /// The pair for `test` on `ctrl`, or `None` after saying why the test is skipped.
    fn new(test: &str, ctrl: &'static str) -> Option<Pair> {
        if let Some(why) = nft::missing() {
            crate::netns::skip(test, &why);
            return None;
        }
        let cluster = Cluster::new(test, 2)?;
        let (mut pa, _) = start(&cluster.hosts[0]);
        let (pb, _) = start(&cluster.hosts[1]);
        let (_, seg) = export(&mut pa, ctrl, SLOTS as usize * 4096, "all");
        Some(Pair {
            cluster,
            pa,
            pb,
            ctrl,
            seg,
        })
    }

    fn a(&self) -> &Host {
        &self.cluster.hosts[0]
    }

    fn work(&mut self, cmd: &str) -> String {
        self.pb
            .ask_within(&format!("work {cmd}"), Duration::from_secs(90))
    }

    /// Runs the workload through `fault` and checks everything the module's doc promises.
    fn phase(&mut self, fault: Fault<'_>) {
        let what = format!("{} {}", self.ctrl, fault.name);
        let lost = if fault.hold_lost { "hold" } else { "drop" };
        let start = format!(
            "start {} {} {} {SLOTS} {lost}",
            self.ctrl,
            self.a().node_id,
            self.seg
        );
        assert_eq!(self.work(&start), "ok", "{what}");
        // The fault hits a running workload: one with puts acknowledged, so in flight too.
        let started = Instant::now();
        while self.work("acked") == "0" {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{what}: no put acknowledged within 20 s of the start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        (fault.start)(self);
        std::thread::sleep(fault.lasts);
        let dropped = (fault.end)(self);
        let healed = Instant::now();
        assert_eq!(self.work("heal"), "ok", "{what}");
        // Recovered: puts acknowledged again (after a new import if the old one was lost).
        let recovered = loop {
            let n: u64 = self.work("healed").parse().expect("a count");
            if n > 0 {
                break healed.elapsed();
            }
            assert!(
                healed.elapsed() < Duration::from_secs(20),
                "{what}: no put acknowledged within 20 s of the end of the fault"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let done = self.work("stop");
        let verified = self.work("verify");
        eprintln!(
            "NETFAULT {what}: dropped={dropped} recovered_ms={} {done} | {verified}",
            recovered.as_millis()
        );
        let tally = parse(&done, &what);
        assert_eq!(
            tally["hangs"], "0",
            "{what}: awaits that never ended: {done}"
        );
        assert_eq!(tally["bad"], "0", "{what}: wrong records read: {done}");
        let errors = tally["errors"];
        for e in errors.split(',').filter(|e| *e != "-") {
            let name = e.split(':').next().unwrap_or(e);
            assert!(ALLOWED.contains(&name), "{what}: failed with {e}: {done}");
        }
        let max_err: u128 = tally["maxerr"].parse().unwrap();
        assert!(
            max_err < WITHIN_MS,
            "{what}: a failure took {max_err} ms: {done}"
        );
        if fault.cuts {
            assert_ne!(errors, "-", "{what}: nothing failed while cut off: {done}");
        }
        assert!(tally["acked"] != "0", "{what}: {done}");
        let w: Vec<&str> = verified.split_whitespace().collect();
        assert!(
            matches!(w.as_slice(), ["verified", n, "bad", "0", "hangs", "0", "lost", _] if *n != "0"),
            "{what}: acknowledged puts read back: {verified}"
        );
    }
}

/// `done k=v k=v ...; problems` as a map.
fn parse<'a>(line: &'a str, what: &str) -> HashMap<&'a str, &'a str> {
    let head = line.split(';').next().unwrap_or(line);
    let Some(rest) = head.strip_prefix("done ") else {
        panic!("{what}: the workload ended with {line:?}");
    };
    rest.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn loss(pct: u32) -> Fault<'static> {
    Fault {
        name: format!("loss {pct}%"),
        lasts: Duration::from_secs(4),
        start: Box::new(move |p| nft::loss(&p.cluster, pct)),
        end: Box::new(|p| nft::heal(&p.cluster)),
        cuts: false,
        hold_lost: false,
    }
}

/// The link down for `secs`; a long flap's workers hold their lost imports (the fabric
/// connection to the peer stays and is used again), a short one's drop them.
fn flap(secs: u64) -> Fault<'static> {
    Fault {
        name: format!("link down {secs} s"),
        lasts: Duration::from_secs(secs),
        start: Box::new(|p| p.a().link(false)),
        end: Box::new(|p| {
            p.a().link(true);
            0
        }),
        cuts: secs > 4,
        hold_lost: secs > 4,
    }
}

fn packet_loss(test: &str, ctrl: &'static str) {
    let _serial = common::serial();
    let Some(mut pair) = Pair::new(test, ctrl) else {
        return;
    };
    for pct in [1, 5, 10] {
        pair.phase(loss(pct));
    }
}

fn link_flaps(test: &str, ctrl: &'static str) {
    let _serial = common::serial();
    let Some(mut pair) = Pair::new(test, ctrl) else {
        return;
    };
    // Shorter than the liveness bound (3 s of silence on a watched link), then longer.
    pair.phase(flap(1));
    pair.phase(flap(6));
}

fn stalled_peer(test: &str, ctrl: &'static str) {
    let _serial = common::serial();
    let Some(mut pair) = Pair::new(test, ctrl) else {
        return;
    };
    pair.phase(Fault {
        name: "silent 6 s".into(),
        lasts: Duration::from_secs(6),
        start: Box::new(|p| nft::isolate(&p.cluster, p.a())),
        end: Box::new(|p| nft::heal(&p.cluster)),
        cuts: true,
        hold_lost: false,
    });
    pair.phase(Fault {
        name: "frozen 6 s".into(),
        lasts: Duration::from_secs(6),
        start: Box::new(|p| freeze(&p.pa)),
        end: Box::new(|p| {
            p.pa.signal(libc::SIGCONT);
            0
        }),
        cuts: true,
        hold_lost: true,
    });
}

#[test]
fn tcp0_survives_packet_loss_between_hosts() {
    packet_loss("tcp0_survives_packet_loss_between_hosts", "tcp0");
}

#[test]
fn sockets0_survives_packet_loss_between_hosts() {
    packet_loss("sockets0_survives_packet_loss_between_hosts", "sockets0");
}

#[test]
fn tcp0_survives_link_flaps_between_hosts() {
    link_flaps("tcp0_survives_link_flaps_between_hosts", "tcp0");
}

#[test]
fn sockets0_survives_link_flaps_between_hosts() {
    link_flaps("sockets0_survives_link_flaps_between_hosts", "sockets0");
}

#[test]
fn tcp0_survives_a_stalled_peer() {
    stalled_peer("tcp0_survives_a_stalled_peer", "tcp0");
}

#[test]
fn sockets0_survives_a_stalled_peer() {
    stalled_peer("sockets0_survives_a_stalled_peer", "sockets0");
}
