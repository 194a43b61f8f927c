//! The service examples (`examples/kv_store.rs`, `pubsub_ring.rs`, `pollfd_select.rs`,
//! `graceful_shutdown.rs`, `atomic_counter.rs`, `signal_service.rs`, `work_queue.rs`,
//! `feature_cache.rs`; `metrics.rs`, two nodes
//! in one process) run as real processes, one per node, and say what they did.
//!
//! This file builds nothing: `cargo test` builds the examples into `target/<profile>/examples/`,
//! next to the directory of this test's executable. Every process is killed and reaped by a
//! guard, whatever the test's fate.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a scenario waits for one line, or for a process to end.
const PATIENCE: Duration = Duration::from_secs(30);

/// One example process, playing one node.
struct Example {
    what: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Example {
    /// Starts example `name` as node `id` (`RSM_NODE_ID`), with `args`.
    fn start(name: &str, id: u32, args: &[&str]) -> Example {
        let path = common::example(name);
        let mut cmd = Command::new(&path);
        for (k, _) in std::env::vars() {
            if k.starts_with("RSM_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(args)
            .env("RSM_NODE_ID", id.to_string())
            .env("FI_TCP_IFACE", "lo")
            .env("FI_SOCKETS_IFACE", "lo")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start the example");
        let what = format!("{name} {}", args.join(" "));
        let stdout = child.stdout.take().expect("its standard output");
        let (tx, lines) = mpsc::channel();
        let tag = format!("{name}#{id}");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("[{tag}] {line}");
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Example {
            what,
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line containing `pattern` (earlier lines are kept in `seen`).
    fn expect(&mut self, pattern: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(pattern) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "`{}` never said {pattern:?} ({e:?}); it said {:#?}",
                    self.what, self.seen
                ),
            }
        }
    }

    /// Waits (at most `PATIENCE`) until the process ended, and asserts it succeeded.
    fn succeeds(&mut self) {
        let status = self.wait();
        assert!(
            status.is_some_and(|s| s.success()),
            "`{}` ended with {status:?}; it said {:#?}",
            self.what,
            self.seen
        );
    }

    fn wait(&mut self) -> Option<ExitStatus> {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                // Collect what it said last, for the messages.
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                    self.seen.push(line);
                }
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends SIGTERM (kill(1) keeps the tests free of unsafe code).
    fn terminate(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "SIGTERM to `{}`", self.what);
    }
}

impl Drop for Example {
    /// The guard: a process still running is killed; every one is reaped.
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        common::remove_shm_files(self.child.id());
    }
}

/// Four node ids no other test uses.
fn ids() -> [u32; 4] {
    let (a, b) = (common::fresh_node_id(), common::fresh_node_id());
    [a, a + 1, b, b + 1]
}

fn kv_store(controller: &str) {
    let [server_id, w, a, b] = ids();
    let server_arg = server_id.to_string();
    let base = ["--controller", controller, "--server", &server_arg];
    let mut server = Example::start(
        "kv_store",
        server_id,
        &[
            "--role",
            "server",
            "--clients",
            "3",
            "--controller",
            controller,
        ],
    );
    server.expect("kv server: ready");
    // The watcher first: it hears of every change the writers make.
    let mut watcher = Example::start(
        "kv_store",
        w,
        &[
            &base[..],
            &["--role", "client", "--name", "w", "--watch", "b-9"],
        ]
        .concat(),
    );
    watcher.expect("connected to node");
    let writers: Vec<Example> = [("a", a), ("b", b)]
        .into_iter()
        .map(|(name, id)| {
            Example::start(
                "kv_store",
                id,
                &[
                    &base[..],
                    &["--role", "client", "--name", name, "--puts", "10"],
                ]
                .concat(),
            )
        })
        .collect();
    for (mut writer, name) in writers.into_iter().zip(["a", "b"]) {
        let line = writer.expect("puts read back");
        assert!(line.starts_with(&format!("kv {name}: 10 puts read back; shared = from ")));
        writer.expect(&format!("kv {name}: ok"));
        writer.succeeds();
    }
    let line = watcher.expect("watched key");
    assert!(line.contains("watched key b-9 = value 9 of b"), "{line}");
    watcher.expect("kv w: ok");
    watcher.succeeds();
    // 10 keys and 10 writes of "shared" from each writer: 21 keys.
    server.expect("kv server: 40 puts from 3 clients, 21 keys in the table");
    server.expect("kv server: ok");
    server.succeeds();
}

#[test]
fn kv_store_loopback() {
    kv_store("loopback");
}

#[test]
fn kv_store_tcp0() {
    kv_store("tcp0");
}

fn pubsub_ring(controller: &str) {
    let [producer_id, s1, s2, s3] = ids();
    let server = producer_id.to_string();
    let base = [
        "--controller",
        controller,
        "--server",
        &server,
        "--records",
        "2000",
    ];
    let mut producer = Example::start(
        "pubsub_ring",
        producer_id,
        &[
            "--role",
            "producer",
            "--subscribers",
            "3",
            "--records",
            "2000",
            "--controller",
            controller,
        ],
    );
    producer.expect("producer: ready");
    let mut subscribers: Vec<(Example, &str)> =
        [("s1", s1, false), ("s2", s2, false), ("s3", s3, true)]
            .into_iter()
            .map(|(name, id, slow)| {
                let mut args = [&base[..], &["--role", "subscriber", "--name", name]].concat();
                if slow {
                    args.push("--slow");
                }
                (Example::start("pubsub_ring", id, &args), name)
            })
            .collect();
    producer.expect("3 subscribers connected");
    for (sub, name) in &mut subscribers {
        if *name == "s3" {
            // The slow one: its stream fell behind, and it read on from the ring's head.
            sub.expect("s3: stream lagged, missed");
        }
        let line = sub.expect("records in order");
        assert!(
            line.starts_with(&format!(
                "{name}: received 2000 of 2000 records in order, lost 0"
            )),
            "{line}"
        );
        sub.expect(&format!("{name}: ok"));
        sub.succeeds();
    }
    producer.expect("producer: subscribers done: true");
    producer.expect("producer: ok");
    producer.succeeds();
}

#[test]
fn pubsub_ring_loopback() {
    pubsub_ring("loopback");
}

#[test]
fn pubsub_ring_tcp0() {
    pubsub_ring("tcp0");
}

fn pollfd_select(controller: &str) {
    let [pinger_id, ponger_id, ..] = ids();
    let server = pinger_id.to_string();
    let mut pinger = Example::start(
        "pollfd_select",
        pinger_id,
        &[
            "--role",
            "pinger",
            "--pings",
            "20",
            "--controller",
            controller,
        ],
    );
    pinger.expect("pinger: ready");
    let mut ponger = Example::start(
        "pollfd_select",
        ponger_id,
        &[
            "--role",
            "ponger",
            "--server",
            &server,
            "--pings",
            "20",
            "--controller",
            controller,
        ],
    );
    let line = ponger.expect("pings through the PollFd");
    // "ponger: 20 pings through the PollFd, T timer ticks, M channel messages"
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 3, "{line}");
    assert_eq!(numbers[0], 20, "{line}");
    assert!(
        numbers[1] > 0 && numbers[2] > 0,
        "the other sources ran too: {line}"
    );
    ponger.expect("ponger: ok");
    ponger.succeeds();
    pinger.expect("pinger: 20 pings answered");
    pinger.expect("pinger: ok");
    pinger.succeeds();
}

#[test]
fn pollfd_select_loopback() {
    pollfd_select("loopback");
}

#[test]
fn pollfd_select_tcp0() {
    pollfd_select("tcp0");
}

fn graceful_shutdown(controller: &str) {
    let [server_id, client_id, ..] = ids();
    let server_arg = server_id.to_string();
    let mut server = Example::start(
        "graceful_shutdown",
        server_id,
        &["--role", "server", "--controller", controller],
    );
    server.expect("server: ready");
    let mut client = Example::start(
        "graceful_shutdown",
        client_id,
        &[
            "--role",
            "client",
            "--server",
            &server_arg,
            "--controller",
            controller,
        ],
    );
    client.expect("client: job 3 done: 9");
    // The client stops between jobs: the one under way finishes, then it leaves in order.
    client.terminate();
    client.expect("client: SIGTERM: stopping, no new work");
    let line = client.expect("jobs done, none left in flight");
    let jobs: u64 = line
        .trim_start_matches("client: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(jobs >= 3, "{line}");
    client.expect("client: disconnected");
    client.expect("client: node shut down");
    client.expect("client: ok");
    client.succeeds();
    // The server: no job in flight now; it destroys its segment and shuts its node down.
    server.terminate();
    server.expect("server: SIGTERM: stopping, no new work");
    let line = server.expect("in-flight jobs finished");
    assert_eq!(
        line,
        format!("server: 0 in-flight jobs finished, {jobs} jobs in all")
    );
    server.expect("server: segment destroyed");
    server.expect("server: node shut down");
    server.expect("server: ok");
    server.succeeds();
}

#[test]
fn graceful_shutdown_loopback() {
    graceful_shutdown("loopback");
}

#[test]
fn graceful_shutdown_tcp0() {
    graceful_shutdown("tcp0");
}

#[test]
fn graceful_shutdown_shm0() {
    graceful_shutdown("shm0");
}

/// `metrics`: the importer's counters, printed in the Prometheus text format, move with its
/// workload (puts made, and the bad offsets it provokes counted by code).
fn metrics(controller: &str) {
    let [id, ..] = ids();
    let mut m = Example::start(
        "metrics",
        id,
        &[
            "--controller",
            controller,
            "--seconds",
            "1",
            "--interval-ms",
            "200",
        ],
    );
    let value = |line: &str| -> u64 {
        let v = line.rsplit(' ').next().unwrap_or_default();
        v.parse()
            .unwrap_or_else(|e| panic!("{line:?}: no count ({e})"))
    };
    // Its node ids come from its pid: the lines are found by family and labels.
    let mut family = |name: &str, labels: &str| loop {
        let line = m.expect(labels);
        if line.starts_with(&format!("{name}{{")) {
            break line;
        }
    };
    let puts = family(
        "rsm_operations_total",
        &format!("controller=\"{controller}\",kind=\"put\"}}"),
    );
    assert!(value(&puts) > 0, "{puts}");
    let refused = family(
        "rsm_errors_total",
        &format!("controller=\"{controller}\",code=\"RSMERR_BAD_OFFSET\"}}"),
    );
    assert!(value(&refused) > 0, "{refused}");
    m.succeeds();
}

#[test]
fn metrics_loopback() {
    metrics("loopback");
}

#[test]
fn metrics_tcp0() {
    metrics("tcp0");
}

fn atomic_counter(controller: &str) {
    let [server_id, a, b, c] = ids();
    let (clients, tasks, iters) = (3, 4, 25);
    // The server's own 2 tasks go through an import of its own segment.
    let expect = (clients * tasks * iters + 2 * iters).to_string();
    let mut server = Example::start(
        "atomic_counter",
        server_id,
        &[
            "--role",
            "server",
            "--clients",
            &clients.to_string(),
            "--expect",
            &expect,
            "--tasks",
            "2",
            "--iters",
            &iters.to_string(),
            "--controller",
            controller,
        ],
    );
    server.expect("counter server: ready");
    let server_arg = server_id.to_string();
    let (tasks_arg, iters_arg) = (tasks.to_string(), iters.to_string());
    let mut running: Vec<Example> = [("a", a), ("b", b), ("c", c)]
        .into_iter()
        .map(|(name, id)| {
            Example::start(
                "atomic_counter",
                id,
                &[
                    "--role",
                    "client",
                    "--server",
                    &server_arg,
                    "--name",
                    name,
                    "--tasks",
                    &tasks_arg,
                    "--iters",
                    &iters_arg,
                    "--controller",
                    controller,
                ],
            )
        })
        .collect();
    for (client, name) in running.iter_mut().zip(["a", "b", "c"]) {
        client.expect(&format!("counter {name}: {} increments", tasks * iters));
        client.expect(&format!("counter {name}: ok"));
        client.succeeds();
    }
    server.expect(&format!(
        "counter server: {} increments and critical sections of its own",
        2 * iters
    ));
    let line = server.expect("counter server: counter =");
    assert!(
        line.contains(&format!("counter = {expect}, protected = {expect}")),
        "{line}"
    );
    server.expect("counter server: ok");
    server.succeeds();
}

#[test]
fn atomic_counter_loopback() {
    atomic_counter("loopback");
}

#[test]
fn atomic_counter_tcp0() {
    atomic_counter("tcp0");
}

#[test]
fn atomic_counter_shm0() {
    atomic_counter("shm0");
}

/// The ledger starts its teller itself, which connects by the segment id the ledger prints.
fn signal_service(controller: &str) {
    let [ledger_id, ..] = ids();
    let mut ledger = Example::start(
        "signal_service",
        ledger_id,
        &["--controller", controller, "--records", "200"],
    );
    ledger.expect("teller: 200 records written and acknowledged");
    let line = ledger.expect("ledger: 200 records, total");
    let want: u64 = (0..200u64).map(|i| i % 97).sum();
    assert!(
        line.contains(&format!("total {want} (expected {want})")),
        "{line}"
    );
    ledger.succeeds();
}

#[test]
fn signal_service_loopback() {
    signal_service("loopback");
}

#[test]
fn signal_service_tcp0() {
    signal_service("tcp0");
}

#[test]
fn signal_service_shm0() {
    signal_service("shm0");
}

/// A coordinator and three workers; with `kill`, the slow third worker is killed while it
/// holds tasks, and its claims go back to the others.
fn work_queue(controller: &str, kill: bool) {
    let [coord_id, a, b, c] = ids();
    let tasks = "300";
    let mut coord = Example::start(
        "work_queue",
        coord_id,
        &[
            "--role",
            "coordinator",
            "--tasks",
            tasks,
            "--workers",
            "3",
            "--controller",
            controller,
        ],
    );
    coord.expect("coordinator: ready");
    let server = coord_id.to_string();
    let start = |name: &str, id: u32, work_ms: &str| {
        Example::start(
            "work_queue",
            id,
            &[
                "--role",
                "worker",
                "--server",
                &server,
                "--name",
                name,
                "--work-ms",
                work_ms,
                "--controller",
                controller,
            ],
        )
    };
    let mut workers = vec![start("a", a, "0"), start("b", b, "0")];
    // Killed, the slow worker holds the task it works on for 2 s.
    let mut slow = start("c", c, if kill { "2000" } else { "0" });
    if kill {
        slow.expect("worker c: working on task");
        let _ = slow.child.kill();
        coord.expect(&format!("coordinator: worker node {c} left"));
    } else {
        workers.push(slow);
    }
    let line = coord.expect("coordinator: 300 tasks, each result taken once");
    let requeued = if kill { "1 requeued" } else { "0 requeued" };
    assert!(
        line.contains("(0 done twice") && line.contains(requeued),
        "{line}"
    );
    for (w, name) in workers.iter_mut().zip(["a", "b", "c"]) {
        w.expect(&format!("worker {name}: ok"));
        w.succeeds();
    }
    coord.expect("coordinator: ok");
    coord.succeeds();
}

#[test]
fn work_queue_loopback() {
    work_queue("loopback", false);
}

#[test]
fn work_queue_shm0_survives_a_killed_worker() {
    work_queue("shm0", true);
}

#[test]
fn work_queue_tcp0_survives_a_killed_worker() {
    work_queue("tcp0", true);
}

/// A writer and two readers, one reading through a mapping; with `restart`, the writer is
/// killed mid-way and started again under the same node id, and the readers follow it.
fn feature_cache(controller: &str, restart: bool) {
    let [writer_id, a, b, _] = ids();
    let writer_args = [
        "--role",
        "writer",
        "--readers",
        "2",
        "--rounds",
        "40",
        "--controller",
        controller,
    ];
    let mut writer = Example::start("feature_cache", writer_id, &writer_args);
    writer.expect("writer: ready");
    let server = writer_id.to_string();
    let reader = |name: &str, id: u32, map: bool| {
        let mut args = vec![
            "--role",
            "reader",
            "--server",
            &server,
            "--name",
            name,
            "--controller",
            controller,
        ];
        if map {
            args.push("--map");
        }
        Example::start("feature_cache", id, &args)
    };
    let mut readers = [reader("a", a, false), reader("b", b, true)];
    if restart {
        writer.expect("writer: round 10");
        let _ = writer.child.kill();
        let _ = writer.child.wait();
        common::remove_shm_files(writer.child.id());
        writer = Example::start("feature_cache", writer_id, &writer_args);
        writer.expect("writer: ready");
        for (r, name) in readers.iter_mut().zip(["a", "b"]) {
            r.expect(&format!("reader {name}: the table ended"));
        }
    }
    writer.expect("writer: 40 rounds written");
    for (r, name) in readers.iter_mut().zip(["a", "b"]) {
        let line = r.expect(&format!("reader {name}: 40 rounds"));
        let expect = if restart {
            "2 incarnation(s)"
        } else {
            "1 incarnation(s)"
        };
        assert!(line.contains(expect), "{line}");
        r.expect(&format!("reader {name}: ok"));
        r.succeeds();
    }
    writer.expect("writer: ok");
    writer.succeeds();
}

#[test]
fn feature_cache_loopback() {
    feature_cache("loopback", false);
}

#[test]
fn feature_cache_shm0_follows_a_restarted_writer() {
    feature_cache("shm0", true);
}

#[test]
fn feature_cache_tcp0_follows_a_restarted_writer() {
    feature_cache("tcp0", true);
}
