//! The `rsm` command on two hosts (network namespaces, `tests/cluster/netns.rs`), configured
//! as README.md, "Running on several hosts", says: `rsm bench --serve` on one host and
//! `--peer` on the other, with the baseline, on tcp0 and sockets0; `rsm info` and `rsm
//! topology` with `--config` beside a running node of the same configuration. Without root
//! each test says `SKIPPED <name>` and returns.

#[path = "../../tests/cluster/netns.rs"]
mod netns;

use netns::{Cluster, Host};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A process on a host, killed and reaped on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.0.stdin.take() {
            let _ = writeln!(stdin, "quit");
        }
        std::thread::sleep(Duration::from_millis(200));
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rsm ARGS` on `host`, to its end (at most 120 s): success, standard output, error.
fn rsm(host: &Host, args: &[&str]) -> (bool, String, String) {
    let mut cmd = host.command(env!("CARGO_BIN_EXE_rsm"));
    cmd.args(args).stdin(Stdio::null());
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rsm");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("rsm {args:?} did not end within 120 s");
    };
    let out = out.expect("rsm's output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `rsm bench --serve` on `host` for `ctrl`, once it printed its address.
fn serve(host: &Host, ctrl: &str) -> Running {
    let config = host.config.display().to_string();
    let mut cmd = host.command(env!("CARGO_BIN_EXE_rsm"));
    cmd.args(["bench", "--config", &config, "--serve", "0.0.0.0"])
        .args(["--controller", ctrl, "--sizes", "8,64K"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = Running(cmd.spawn().expect("rsm bench --serve"));
    let out = child.0.stdout.take().expect("its output");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("its address");
    assert!(line.trim().ends_with(":7470"), "{line}");
    child
}

#[test]
fn bench_serves_on_one_host_and_measures_from_the_other() {
    let test = "bench_serves_on_one_host_and_measures_from_the_other";
    let Some(cluster) = Cluster::new(test, 2) else {
        return;
    };
    let [a, b] = &cluster.hosts[..] else {
        unreachable!()
    };
    let config = b.config.display().to_string();
    let peer = a.ip.to_string();
    for (ctrl, op) in [("tcp0", "put"), ("tcp0", "get"), ("sockets0", "put")] {
        let _server = serve(a, ctrl);
        let (ok, out, err) = rsm(
            b,
            &[
                "bench",
                "--config",
                &config,
                "--peer",
                &peer,
                "--controller",
                ctrl,
                "--op",
                op,
                "--sizes",
                "8,64K",
                "--iters",
                "100",
                "--baseline",
                "--json",
            ],
        );
        assert!(ok, "{ctrl} {op}: {err}");
        let rows: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON row"))
            .collect();
        assert_eq!(rows.len(), 2, "{ctrl} {op}: {out}");
        for r in &rows {
            assert_eq!(r["verified"], true, "{ctrl} {op}: {r}");
            assert!(
                r["ratio"].as_f64().is_some(),
                "{ctrl} {op}: no baseline: {r}"
            );
        }
    }
}

/// A node of `host` started from its configuration, running until its input closes (the
/// `rsm` command has no daemon: `rsm bench --serve` would use other ids).
fn node(host: &Host) -> Running {
    let mut cmd = host.command(std::env::current_exe().expect("this test"));
    cmd.args(["--exact", "node_entry", "--nocapture"])
        .env("RSM_TEST_NODE", "1")
        .envs(host.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = Running(cmd.spawn().expect("a node"));
    let out = child.0.stdout.take().expect("its output");
    let mut lines = BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("NODE READY") => break,
            Some(Ok(_)) => {}
            other => panic!("the node on {} did not start: {other:?}", host.ns),
        }
    }
    // The rest is read, so that the node's last lines find their pipe open.
    std::thread::spawn(move || lines.for_each(drop));
    child
}

#[test]
fn node_entry() {
    if std::env::var_os("RSM_TEST_NODE").is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let node = rt
        .block_on(rsm::Node::builder().start())
        .expect("the node starts from RSM_CONFIG");
    println!("NODE READY {}", node.id());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    rt.block_on(node.shutdown());
}

#[test]
fn info_and_topology_read_the_config_beside_a_running_node() {
    let test = "info_and_topology_read_the_config_beside_a_running_node";
    let Some(cluster) = Cluster::new(test, 2) else {
        return;
    };
    let [a, b] = &cluster.hosts[..] else {
        unreachable!()
    };
    let _na = node(a);
    let _nb = node(b);
    let config = a.config.display().to_string();
    // info: the domain of the configured address.
    let (ok, out, err) = rsm(a, &["info", "--config", &config, "--json"]);
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("info --json");
    let tcp = list
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == "tcp0"))
        .expect("tcp0");
    assert_eq!(tcp["domain"], netns::IFACE, "{tcp}");
    // topology: an observer beside node 1 (same configuration: port and name taken).
    for _ in 0..2 {
        let (ok, out, err) = rsm(a, &["topology", "--config", &config, "--json"]);
        assert!(ok, "{err}");
        let t: serde_json::Value = serde_json::from_str(&out).expect("topology --json");
        assert_eq!(t["local_node"], a.node_id);
        assert_eq!(t["observer"], a.node_id ^ 0x8000_0000);
        let tcp = t["controllers"]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["controller"] == "tcp0"))
            .expect("tcp0");
        let remotes: Vec<u64> = tcp["remotes"]
            .as_array()
            .expect("remotes")
            .iter()
            .map(|r| r["node"].as_u64().unwrap())
            .collect();
        assert_eq!(remotes, vec![u64::from(b.node_id)], "{t}");
        // Shared memory does not reach the other host: nobody under shm0.
        let shm = t["controllers"]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["controller"] == "shm0"))
            .expect("shm0");
        assert_eq!(shm["remotes"], serde_json::json!([]), "{t}");
    }
}
