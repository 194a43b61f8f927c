//! Nodes on several hosts (DESIGN.md §10, "Several hosts"): network namespaces joined by a
//! bridge, one node process per namespace, keyed and configured from files as an operator
//! would (`netns.rs`). What crosses hosts: export, publish with an access list, connect,
//! data of 1 B to 64 MiB, vectors, typed items, barriers, signals both ways and event
//! streams on tcp0 and sockets0; an importer the access list leaves out; faults (a link
//! taken down, a frozen process, a restart) seen within 5 s; and shared memory refused
//! between hosts. Without root these tests say `SKIPPED <name>` and return.

#[path = "../common/mod.rs"]
mod common;
mod netfaults;
mod netns;
mod nft;
mod records;
mod role;

use std::time::Duration;

use common::Peer;
use netns::{Cluster, Host};

/// What every fault must be seen within (issue 31: "within 5 s, never a hang").
const WITHIN_MS: u128 = 5000;

#[test]
fn role_entry() {
    match common::role().as_deref() {
        Some("node") => role::node_role(),
        Some(other) => panic!("unknown role {other}"),
        None => {}
    }
}

/// A node process on `host`: its id and incarnation from its `ready` line.
fn start(host: &Host) -> (Peer, u64) {
    let peer = Peer::start_in(Some(&host.ns), "role_entry", "node", &host.env());
    let ready = peer.recv();
    let words: Vec<&str> = ready.split_whitespace().collect();
    match words.as_slice() {
        ["ready", id, inc] => {
            assert_eq!(id.parse::<u32>().unwrap(), host.node_id, "{ready}");
            (peer, inc.parse().unwrap())
        }
        _ => panic!("the node on {} said {ready:?}", host.ns),
    }
}

/// `export CTRL SIZE ACL` on `peer`: the export's index and segment id.
fn export(peer: &mut Peer, ctrl: &str, size: usize, acl: &str) -> (usize, u32) {
    let line = peer.ask(&format!("export {ctrl} {size} {acl}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["seg", i, id] => (i.parse().unwrap(), id.parse().unwrap()),
        _ => panic!("export {ctrl}: {line}"),
    }
}

/// `import CTRL NODE SEG` on `peer`: `Ok(index)` or `Err((error name, ms))`.
fn import(peer: &mut Peer, ctrl: &str, node: u32, seg: u32) -> Result<usize, (String, u128)> {
    let line = peer.ask(&format!("import {ctrl} {node} {seg}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["imp", i, _ms] => Ok(i.parse().unwrap()),
        ["err", name, ms, ..] => Err((name.to_string(), ms.parse().unwrap())),
        _ => panic!("import {ctrl}: {line}"),
    }
}

/// An error line `err NAME MS`: the name and the milliseconds.
fn error_of(line: &str) -> (String, u128) {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["err", name, ms, ..] => (name.to_string(), ms.parse().unwrap()),
        _ => panic!("expected an error, got {line:?}"),
    }
}

/// Freezes `peer` and returns once all its threads are stopped.
fn freeze(peer: &Peer) {
    let started = std::time::Instant::now();
    peer.freeze();
    eprintln!("frozen within {:?}", started.elapsed());
}

/// Imports until one succeeds (a link brought back up, a node restarted), within 10 s.
fn import_again(peer: &mut Peer, ctrl: &str, node: u32, seg: u32) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match import(peer, ctrl, node, seg) {
            Ok(i) => return i,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("import again: {e:?}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{ctrl}: no import within 10 s after recovery: {e:?}"),
        }
    }
}

/// Puts 4 KiB on import `i` until one succeeds, within 10 s; each failure is printed. (The
/// first tcp0 put after the link came back once waited past 15 s: the fabric connection the
/// loss left open still held the aborted puts, behind the kernel's retransmission backoff.
/// A lost peer's connections are now reset, DESIGN.md §8, "Peer loss".)
fn put_recovers(peer: &mut Peer, i: usize, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = peer.ask(&format!("put {i} 4096"));
        if out.starts_with("ok") {
            return;
        }
        eprintln!("{what}: put after recovery: {out}");
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: no put within 10 s: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn three_hosts_move_data_signal_and_refuse_what_they_must() {
    let _serial = common::serial();
    let Some(cluster) = Cluster::new("three_hosts_move_data_signal_and_refuse_what_they_must", 3)
    else {
        return;
    };
    let [a, b, c] = &cluster.hosts[..] else {
        unreachable!()
    };
    let (mut pa, _) = start(a);
    let (mut pb, _) = start(b);
    let (mut pc, _) = start(c);
    // udp0 (udp;ofi_rxd) passed this in 1.6 s on an idle machine and stalled past 15 s
    // beside a compiler run: not in CI.
    for ctrl in ["tcp0", "sockets0"] {
        let started = std::time::Instant::now();
        // Published to B only; C is not on the list.
        let acl = format!("{}:600", b.node_id);
        let (e, seg) = export(&mut pa, ctrl, 64 << 20, &acl);
        let i = import(&mut pb, ctrl, a.node_id, seg).expect("B is on the access list");
        let denied = import(&mut pc, ctrl, a.node_id, seg).expect_err("C is not on the list");
        assert_eq!(
            denied.0, "RSMERR_SEG_NOT_PUBLISHED_TO_NODE",
            "{ctrl}: {denied:?}"
        );

        // Data, checked at the exporter too.
        let line = pb.ask_within(&format!("data {i}"), Duration::from_secs(120));
        let seed: u64 = match line.strip_prefix("ok ") {
            Some(s) => s.parse().unwrap(),
            None => panic!("{ctrl}: {line}"),
        };
        let got = pa.ask(&format!("check {e} 0 {seed} {}", 64 << 20));
        assert_eq!(got, "same", "{ctrl}: the exporter's 64 MiB");

        // Signals both ways, and the event streams that saw them.
        assert_eq!(pb.ask(&format!("signal {i}")), "ok", "{ctrl}");
        let heard = pa.ask(&format!("ewait {e} 5000"));
        assert_eq!(heard, format!("signalled {}", b.node_id), "{ctrl}");
        assert_eq!(pa.ask(&format!("esignal {e}")), "ok", "{ctrl}");
        let heard = pb.ask(&format!("iwait {i} 5000"));
        assert_eq!(heard, format!("signalled {}", a.node_id), "{ctrl}");
        std::thread::sleep(Duration::from_millis(200));
        let seen = pa.ask("events");
        let connected = format!("exp{e} ImporterConnected {{ node: NodeId({}) }}", b.node_id);
        assert!(seen.contains(&connected), "{ctrl}: {seen}");
        assert!(seen.contains(&format!("exp{e} Signal")), "{ctrl}: {seen}");
        assert!(
            pb.ask("events").contains(&format!("imp{i} Signal")),
            "{ctrl}"
        );

        // Published to everyone: C, on a third host, gets in too.
        let (_, open) = export(&mut pa, ctrl, 1 << 20, "all");
        let k = import(&mut pc, ctrl, a.node_id, open).expect("published to all");
        assert!(pc.ask(&format!("put {k} 4096")).starts_with("ok"), "{ctrl}");
        eprintln!("{ctrl}: {:?}", started.elapsed());
    }
    // Shared memory never joins two hosts, though /dev/shm and the boot id are shared here.
    for ctrl in ["shm0", "loopback"] {
        let (_, seg) = export(&mut pa, ctrl, 1 << 20, "all");
        let (name, ms) = import(&mut pb, ctrl, a.node_id, seg).expect_err(ctrl);
        assert_eq!(name, "RSMERR_REMOTE_NODE_UNREACHABLE", "{ctrl}");
        assert!(ms < WITHIN_MS, "{ctrl}: {ms} ms");
    }
}

/// Link down, a frozen process and a restart, on `ctrl`, between two hosts.
fn faults(test: &str, ctrl: &str) {
    let _serial = common::serial();
    let Some(cluster) = Cluster::new(test, 2) else {
        return;
    };
    let [a, b] = &cluster.hosts[..] else {
        unreachable!()
    };
    let (mut pa, first) = start(a);
    let (mut pb, _) = start(b);
    let (_, seg) = export(&mut pa, ctrl, 1 << 20, "all");

    // 1. The exporter's link goes down while puts are in flight.
    let i = import(&mut pb, ctrl, a.node_id, seg).expect("import");
    assert_eq!(pb.ask(&format!("stream {i}")), "ok");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pb.ask("mark"), "ok");
    a.link(false);
    let out = pb.ask("outcome 10000");
    eprintln!("{ctrl}, link down: pending put {out} ms");
    let (name, ms) = out.split_once(' ').expect(&out);
    assert_eq!(name, "RSMERR_CONN_ABORTED", "{ctrl}, link down: {out}");
    assert!(ms.parse::<u128>().unwrap() < WITHIN_MS, "{ctrl}: {out}");
    let (name, ms) = import(&mut pb, ctrl, a.node_id, seg).expect_err("link down");
    eprintln!("{ctrl}, link down: connect {name} {ms} ms");
    assert_eq!(name, "RSMERR_REMOTE_NODE_UNREACHABLE", "{ctrl}, link down");
    assert!(ms < WITHIN_MS, "{ctrl}, link down: connect took {ms} ms");
    a.link(true);
    let i = import_again(&mut pb, ctrl, a.node_id, seg);
    put_recovers(&mut pb, i, &format!("{ctrl}, link back up"));

    // 2. The exporter's process is frozen (SIGSTOP): alive, silent.
    assert_eq!(pb.ask(&format!("stream {i}")), "ok");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pb.ask("mark"), "ok");
    freeze(&pa);
    let out = pb.ask("outcome 10000");
    pa.signal(libc::SIGCONT);
    eprintln!("{ctrl}, frozen: pending put {out} ms");
    let (name, ms) = out.split_once(' ').expect(&out);
    assert!(
        name == "RSMERR_CONN_ABORTED" && ms.parse::<u128>().unwrap() < WITHIN_MS,
        "{ctrl}, frozen: {out}"
    );
    freeze(&pa);
    let (name, ms) = import(&mut pb, ctrl, a.node_id, seg).expect_err("frozen");
    pa.signal(libc::SIGCONT);
    eprintln!("{ctrl}, frozen: connect {name} {ms} ms");
    assert_eq!(name, "RSMERR_REMOTE_NODE_UNREACHABLE", "{ctrl}, frozen");
    assert!(ms < WITHIN_MS, "{ctrl}, frozen: connect took {ms} ms");
    let i = import_again(&mut pb, ctrl, a.node_id, seg);
    put_recovers(&mut pb, i, &format!("{ctrl}, thawed"));

    // 3. The exporter restarts under a new incarnation: the old import stays aborted.
    pa.kill();
    let (mut pa, second) = start(a);
    assert_ne!(first, second, "a new incarnation");
    let (_, seg) = export(&mut pa, ctrl, 1 << 20, "all");
    let (name, _) = error_of(&pb.ask(&format!("put {i} 8")));
    assert_eq!(name, "RSMERR_CONN_ABORTED", "{ctrl}: the old import");
    let j = import_again(&mut pb, ctrl, a.node_id, seg);
    put_recovers(&mut pb, j, &format!("{ctrl}, restarted"));
    let (name, _) = error_of(&pb.ask(&format!("put {i} 8")));
    assert_eq!(name, "RSMERR_CONN_ABORTED", "{ctrl}: the old import, still");
    let seen = pb.ask("events");
    assert!(
        seen.contains(&format!(
            "PeerUnreachable {{ node: NodeId({}) }}",
            a.node_id
        )),
        "{ctrl}: {seen}"
    );
}

#[test]
fn tcp0_faults_between_hosts_are_seen_within_5_s() {
    faults("tcp0_faults_between_hosts_are_seen_within_5_s", "tcp0");
}

#[test]
fn sockets0_faults_between_hosts_are_seen_within_5_s() {
    faults(
        "sockets0_faults_between_hosts_are_seen_within_5_s",
        "sockets0",
    );
}

/// The lines of an example process on a host, with a deadline per expected line.
struct Lines(std::sync::mpsc::Receiver<String>, std::process::Child);

impl Lines {
    fn start(mut cmd: std::process::Command) -> Lines {
        use std::io::BufRead;
        cmd.stdout(std::process::Stdio::piped())
            .stdin(std::process::Stdio::null());
        let mut child = cmd.spawn().expect("start the example");
        let out = child.stdout.take().expect("its output");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                println!("{line}");
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines(rx, child)
    }

    /// The next line containing `what`, within 30 s.
    fn expect(&mut self, what: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line with {what:?} within 30 s: {e}"),
            }
        }
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.1.kill();
        let _ = self.1.wait();
    }
}

#[test]
fn the_kv_store_example_serves_a_client_on_another_host() {
    let _serial = common::serial();
    let test = "the_kv_store_example_serves_a_client_on_another_host";
    let Some(cluster) = Cluster::new(test, 2) else {
        return;
    };
    let [a, b] = &cluster.hosts[..] else {
        unreachable!()
    };
    // As README.md, "Running on several hosts", runs it: each host its --config.
    let kv = common::example("kv_store");
    let mut server = a.command(&kv);
    server.args(["--role", "server", "--clients", "1", "--controller", "tcp0"]);
    server.arg("--config").arg(&a.config);
    let mut server = Lines::start(server);
    server.expect("kv server: ready");
    let mut client = b.command(&kv);
    client.args(["--role", "client", "--server", &a.node_id.to_string()]);
    client.args(["--name", "b", "--puts", "5", "--controller", "tcp0"]);
    client.arg("--config").arg(&b.config);
    let mut client = Lines::start(client);
    let line = client.expect("puts read back");
    assert!(line.starts_with("kv b: 5 puts read back"), "{line}");
    client.expect("kv b: ok");
    server.expect("kv server: 10 puts from 1 clients");
    server.expect("kv server: ok");
}

/// `examples/atomic_counter.rs` across three hosts: the counter and the ticket lock stay
/// exact with clients on two other hosts, on tcp0 (the exporter performs the atomics) and
/// sockets0 (the provider does).
fn atomic_counter(test: &str, ctrl: &str) {
    let _serial = common::serial();
    let Some(cluster) = Cluster::new(test, 3) else {
        return;
    };
    let [a, b, c] = &cluster.hosts[..] else {
        unreachable!()
    };
    let ex = common::example("atomic_counter");
    let mut server = a.command(&ex);
    server.args(["--role", "server", "--clients", "2", "--expect", "200"]);
    server
        .args(["--controller", ctrl])
        .arg("--config")
        .arg(&a.config);
    let mut server = Lines::start(server);
    server.expect("counter server: ready");
    let clients: Vec<Lines> = [(b, "b"), (c, "c")]
        .into_iter()
        .map(|(host, name)| {
            let mut client = host.command(&ex);
            client.args(["--role", "client", "--server", &a.node_id.to_string()]);
            client.args(["--name", name, "--tasks", "4", "--iters", "25"]);
            client
                .args(["--controller", ctrl])
                .arg("--config")
                .arg(&host.config);
            Lines::start(client)
        })
        .collect();
    for (mut client, name) in clients.into_iter().zip(["b", "c"]) {
        client.expect(&format!("counter {name}: 100 increments"));
        client.expect(&format!("counter {name}: ok"));
    }
    let line = server.expect("counter server: counter =");
    assert!(line.contains("counter = 200, protected = 200"), "{line}");
    server.expect("counter server: ok");
}

#[test]
fn the_atomic_counter_example_counts_across_hosts_on_tcp0() {
    atomic_counter(
        "the_atomic_counter_example_counts_across_hosts_on_tcp0",
        "tcp0",
    );
}

#[test]
fn the_atomic_counter_example_counts_across_hosts_on_sockets0() {
    atomic_counter(
        "the_atomic_counter_example_counts_across_hosts_on_sockets0",
        "sockets0",
    );
}
