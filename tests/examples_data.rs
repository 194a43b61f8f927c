//! The data-path examples (`scatter_gather`, `zero_copy_map`, `reconnecting_client`) run as
//! real processes, one per role, as a user would start them; the test checks what they print
//! and always ends them.

mod common;

use common::{fresh_node_id, remove_shm_files, serial};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::example;

/// An example process; killed (if still running) and reaped on drop.
struct Proc {
    name: String,
    /// The node's configuration file, removed on drop.
    _config: tempfile::NamedTempFile,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Everything it printed so far, for the messages of failed checks.
    seen: Vec<String>,
    /// What it wrote to standard error (echoed as it comes), for the same messages.
    errors: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Starts example `name` as node `node` with `args`: the node id comes from a
    /// configuration file given with `--config`, as a deployment would give it.
    fn start(name: &str, node: u32, args: &[&str]) -> Proc {
        let config = tempfile::Builder::new()
            .suffix(".toml")
            .tempfile()
            .expect("a configuration file");
        std::fs::write(config.path(), format!("node_id = {node}\n")).expect("write it");
        let mut cmd = Command::new(example(name));
        cmd.arg("--config").arg(config.path()).args(args);
        // The machine's configuration stays out of the test.
        for var in [
            "RSM_CONFIG",
            "RSM_NODE_ID",
            "RSM_LISTEN",
            "RSM_PEERS",
            "RSM_KEY_FILE",
            "RSM_TRUST_FILE",
            "RSM_SPIN_BUDGET_US",
        ] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .env("FI_TCP_IFACE", "lo")
            .env("FI_SOCKETS_IFACE", "lo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the example");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        let tag = format!("{name}[{}]", child.id());
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (err_tag, err_lines) = (tag.clone(), Arc::clone(&errors));
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{err_tag} (stderr): {line}");
                err_lines
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(line);
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("{tag}: {line}");
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Proc {
            name: name.to_string(),
            _config: config,
            child,
            stdin,
            lines,
            seen: Vec::new(),
            errors,
        }
    }

    /// How the process ended, if it did (waiting a moment for it), and what it wrote to
    /// standard error: for the messages of failed checks.
    fn post_mortem(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.to_string(),
                _ if Instant::now() >= deadline => break "still running".to_string(),
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        format!("process: {status}; standard error: {errors:#?}")
    }

    /// Waits (at most `limit`) for a line containing `what`, and returns it.
    fn expect(&mut self, what: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(what) {
                        return line;
                    }
                }
                Err(e) => {
                    let end = self.post_mortem();
                    panic!(
                        "{} did not say {what:?} within {limit:?} ({e:?}); it said {:#?}; {end}",
                        self.name, self.seen
                    )
                }
            }
        }
    }

    /// Waits (at most `limit`) for the process to end, reads the rest of its output, and
    /// checks it ended well with a last line `ok`.
    fn finishes_ok(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not end within {limit:?}; it said {:#?}",
                self.name,
                self.seen
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends at end of output.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        if !status.success() {
            let end = self.post_mortem();
            panic!(
                "{} ended with {status}; it said {:#?}; {end}",
                self.name, self.seen
            );
        }
        assert_eq!(
            self.seen.last().map(String::as_str),
            Some("ok"),
            "{}'s last line",
            self.name
        );
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write to the example");
        stdin.flush().expect("flush");
    }

    /// Kills the process at once (a crash), and reaps it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_shm_files(self.child.id());
    }

    /// Lines it said that contain `what`.
    fn said(&self, what: &str) -> Vec<&String> {
        self.seen.iter().filter(|l| l.contains(what)).collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Closing standard input asks a server to quit; anything left is killed.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                remove_shm_files(self.child.id());
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

const START: Duration = Duration::from_secs(20);
const RUN: Duration = Duration::from_secs(30);

fn scatter_gather(ctrl: &str) {
    let _serial = serial();
    let exporter_id = fresh_node_id();
    let mut exporter = Proc::start(
        "scatter_gather",
        exporter_id,
        &["--role", "exporter", "--controller", ctrl],
    );
    exporter.expect("exporter: ready", START);
    let mut importer = Proc::start(
        "scatter_gather",
        exporter_id + 1,
        &[
            "--role",
            "importer",
            "--controller",
            ctrl,
            "--exporter",
            &exporter_id.to_string(),
        ],
    );
    importer.finishes_ok(RUN);
    exporter.finishes_ok(RUN);
    for what in [
        "putv scattered 16 pieces",
        "getv gathered them back",
        "1000 puts",
    ] {
        assert_eq!(importer.said(what).len(), 1, "the importer said {what:?}");
    }
    assert_eq!(
        exporter
            .said("verified 16 scattered pieces (16384 bytes) and 1000 batched records")
            .len(),
        1
    );
}

#[test]
fn scatter_gather_loopback() {
    scatter_gather("loopback");
}

#[test]
fn scatter_gather_tcp() {
    scatter_gather("tcp0");
}

#[test]
fn scatter_gather_shm() {
    scatter_gather("shm0");
}

#[test]
fn zero_copy_map_seqlock_never_reads_a_torn_record() {
    let _serial = serial();
    let writer_id = fresh_node_id();
    let mut writer = Proc::start(
        "zero_copy_map",
        writer_id,
        &["--role", "writer", "--millis", "700"],
    );
    writer.expect("writer: ready", START);
    let mut reader = Proc::start(
        "zero_copy_map",
        writer_id + 1,
        &["--role", "reader", "--writer", &writer_id.to_string()],
    );
    reader.finishes_ok(RUN);
    writer.finishes_ok(RUN);
    let updates: u64 = number_before(&writer.said(" updates in "), " updates");
    let line = reader.said("consistent reads")[0].clone();
    assert!(line.contains(", 0 torn records accepted"), "{line}");
    // The reader saw the writer's last version, and the writer made many.
    assert!(
        line.contains(&format!("up to version {updates},")),
        "{line} (writer: {updates} updates)"
    );
    assert!(updates > 1000, "{updates} updates");
}

/// The number just before `suffix` in the first of `lines` that has it.
fn number_before(lines: &[&String], suffix: &str) -> u64 {
    let line = lines
        .iter()
        .find(|l| l.contains(suffix))
        .unwrap_or_else(|| panic!("a line with {suffix:?} in {lines:?}"));
    let head = &line[..line.find(suffix).unwrap()];
    head.rsplit(' ').next().unwrap().parse().expect("a number")
}

/// The client starts before the server; then the server quits once (destroy: the client's
/// connection is revoked) and is killed once (a crash), and each time a new server process
/// with the same node id and segment id starts.
fn reconnecting_client(ctrl: &str) {
    let _serial = serial();
    let server_id = fresh_node_id();
    let server_args = ["--role", "server", "--controller", ctrl];
    // The client starts first, and waits for a server.
    let mut client = Proc::start(
        "reconnecting_client",
        server_id + 1,
        &[
            "--role",
            "client",
            "--controller",
            ctrl,
            "--server",
            &server_id.to_string(),
            "--reconnects",
            "2",
            "--max-backoff-ms",
            "400",
        ],
    );
    client.expect(
        "client: connect failed (RSMERR_REMOTE_NODE_UNREACHABLE)",
        START,
    );
    let mut server = Proc::start("reconnecting_client", server_id, &server_args);
    server.expect("server: ready", START);
    client.expect("client: connected", START);
    std::thread::sleep(Duration::from_millis(300));

    // 1. The server quits.
    server.send("quit");
    server.finishes_ok(RUN);
    let last_round = server.expect_said("the client's last round here was");
    assert!(
        last_round > 0,
        "the client wrote rounds to the first server"
    );
    client.expect("client: lost the server", RUN);
    // Let the client try (and back off) while no server runs.
    std::thread::sleep(Duration::from_millis(500));
    let mut server = Proc::start("reconnecting_client", server_id, &server_args);
    server.expect("server: ready", START);
    client.expect("client: reconnected (#1)", RUN);
    std::thread::sleep(Duration::from_millis(300));

    // 2. The server crashes.
    server.kill();
    client.expect("client: lost the server", RUN);
    let mut server = Proc::start("reconnecting_client", server_id, &server_args);
    server.expect("server: ready", START);
    client.expect("client: reconnected (#2)", RUN);
    client.finishes_ok(RUN);

    // Each loss said why, in the terms `is_unreachable` covers.
    for line in client.said("lost the server") {
        assert!(
            line.contains("RSMERR_CONN_ABORTED") || line.contains("RSMERR_REMOTE_NODE_UNREACHABLE"),
            "{line}"
        );
    }
    assert!(
        !client.said("connect failed").is_empty(),
        "the client retried while no server ran"
    );
    assert_eq!(
        client.said("2 reconnections, 3 server incarnations").len(),
        1,
        "the client's summary"
    );
    server.send("quit");
    server.finishes_ok(RUN);
}

impl Proc {
    /// The number at the end of the line this process said containing `what`.
    fn expect_said(&self, what: &str) -> u64 {
        let line = self.said(what)[0];
        line.rsplit(' ').next().unwrap().parse().expect("a number")
    }
}

#[test]
fn reconnecting_client_loopback() {
    reconnecting_client("loopback");
}

#[test]
fn reconnecting_client_tcp() {
    reconnecting_client("tcp0");
}

/// On shm0 too the server is killed mid-operation the second time (DESIGN.md §3, "Peer
/// death on shm").
#[test]
fn reconnecting_client_shm() {
    reconnecting_client("shm0");
}
