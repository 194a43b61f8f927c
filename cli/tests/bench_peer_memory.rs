//! `rsm bench --peer` against a peer started by hand (`rsm bench-peer --serve`), and
//! `rsm bench-memory`: real processes on loopback, every byte verified.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Benchmarks spin on both cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn rsm() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsm"));
    cmd.env("FI_TCP_IFACE", "lo")
        .env("FI_SOCKETS_IFACE", "lo")
        .env_remove("RSM_CONFIG")
        .env_remove("RSM_PEERS");
    cmd
}

/// A served peer; told to quit (and killed if it does not) on drop.
struct Served {
    child: Child,
    addr: String,
}

impl Served {
    fn start(controller: &str) -> Served {
        let mut child = rsm()
            .args([
                "bench-peer",
                "--controller",
                controller,
                "--max-size",
                "64K",
            ])
            .args(["--serve", "127.0.0.1:0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rsm bench-peer --serve");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        BufReader::new(out)
            .read_line(&mut line)
            .expect("its address");
        Served {
            child,
            addr: line.trim().to_string(),
        }
    }

    /// Sends `quit`; true when the peer exited by itself within 10 s.
    fn quit(&mut self) -> bool {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = writeln!(stdin, "quit");
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if !self.quit() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn json_rows(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

#[test]
fn bench_runs_against_a_served_peer_twice() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut peer = Served::start("tcp0");
    assert!(peer.addr.starts_with("127.0.0.1:"), "{}", peer.addr);
    // Two runs in a row: the peer serves one session after the other.
    for op in ["put", "get"] {
        let out = rsm()
            .args(["bench", "--peer", &peer.addr, "--controller", "tcp0"])
            .args(["--op", op, "--sizes", "8,64K", "--iters", "100"])
            .args(["--baseline", "--json"])
            .output()
            .expect("run rsm bench --peer");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{op}: {stderr}");
        let rows = json_rows(&out);
        assert_eq!(rows.len(), 2, "{rows:?}");
        for (row, size) in rows.iter().zip([8, 65536]) {
            assert_eq!(row["op"], op);
            assert_eq!(row["size"], size);
            assert_eq!(row["verified"], true, "{row}");
            assert_eq!(row["baseline_verified"], true, "{row}");
            assert!(row["ratio"].as_f64().is_some(), "{row}");
        }
    }
    // A baseline with another wait object than the peer's queue is refused, and the peer
    // stays up.
    let out = rsm()
        .args(["bench", "--peer", &peer.addr, "--controller", "tcp0"])
        .args([
            "--op",
            "get",
            "--sizes",
            "8",
            "--baseline",
            "--baseline-wait",
            "fd",
        ])
        .output()
        .expect("run rsm bench --peer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("start it with --baseline-wait fd"),
        "{stderr}"
    );
    // A run larger than what the peer registered is refused, and the peer stays up.
    let out = rsm()
        .args(["bench", "--peer", &peer.addr, "--controller", "tcp0"])
        .args(["--op", "put", "--sizes", "1M", "--json"])
        .output()
        .expect("run rsm bench --peer");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-size"));
    assert!(peer.quit(), "the served peer exits on quit");
}

#[test]
fn bench_peer_refuses_an_unreachable_address() {
    let out = rsm()
        .args([
            "bench",
            "--peer",
            "127.0.0.1:1",
            "--controller",
            "tcp0",
            "--op",
            "put",
        ])
        .output()
        .expect("run rsm bench --peer");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the peer"));
}

#[test]
fn memory_figure_of_an_exporter_with_importer_processes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // tcp0 measures a second of idling too; shm0 none.
    for (controller, idle_secs) in [("tcp0", 1), ("shm0", 0)] {
        let out = rsm()
            .args(["bench-memory", "--controller", controller])
            .args(["--segments", "24", "--importers", "3", "--json"])
            .args(["--idle-secs", &idle_secs.to_string()])
            .output()
            .expect("run rsm bench-memory");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{controller}: {stderr}");
        let rows = json_rows(&out);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r["controller"], controller);
        assert_eq!(r["connections"], 24, "{r}");
        assert_eq!(r["importers"], 3, "{r}");
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["segment_bytes"], 24 * 4096);
        for stage in ["start", "node", "exported", "connected"] {
            let rss = r["stages"][stage]["rss_kib"].as_u64().unwrap();
            assert!(rss > 0, "{stage}: {r}");
            assert!(r["stages"][stage]["hwm_kib"].as_u64().unwrap() >= rss);
        }
        assert!(r["rss_beyond_segments_mib"].as_f64().is_some());
        assert!(r["met"].is_boolean());
        let idle = &r["idle"];
        if idle_secs == 0 {
            assert!(idle.is_null(), "{r}");
            continue;
        }
        // The span is a sleep: at or after its time, within 2 s more.
        let secs = idle["seconds"].as_f64().unwrap();
        assert!((1.0..3.0).contains(&secs), "{r}");
        assert_eq!(idle["importer_ms"].as_array().map(Vec::len), Some(3), "{r}");
        let exporter_ms = idle["exporter_ms"].as_f64().unwrap();
        assert!(
            exporter_ms >= 0.0 && exporter_ms <= secs * 1000.0 * 2.0,
            "{r}"
        );
        assert!(idle["met"].is_boolean(), "{r}");
        assert_eq!(idle["target_pct_of_core"], 1.0, "{r}");
    }
}

/// `rsm bench-scale` in small, at two sizes: node processes that all import at once (more
/// dials of one node than the handshake gate holds from one source: they wait for a place,
/// none is refused), then idle; the three figures of each size come out, in turn.
#[test]
fn scale_figures_of_nodes_connecting_at_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let out = rsm()
        .args(["bench-scale", "--controller", "tcp0", "--nodes", "12,3"])
        .args(["--imports", "11", "--idle-secs", "1", "--json"])
        .output()
        .expect("run rsm bench-scale");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 2, "{stderr}");
    let small = &rows[1];
    assert_eq!(
        (small["nodes"].as_u64(), small["imports"].as_u64()),
        (Some(3), Some(2)),
        "{small}"
    );
    assert_eq!(small["idle"]["target_pct_of_core"], 1.0, "{small}");
    let r = &rows[0];
    assert_eq!(
        (r["nodes"].as_u64(), r["imports"].as_u64()),
        (Some(12), Some(11)),
        "{r}"
    );
    assert_eq!(r["connections"], 132, "{r}");
    let storm = r["storm"]["slowest_s"].as_f64().unwrap();
    assert!(
        storm > 0.0 && r["storm"]["median_s"].as_f64().unwrap() <= storm,
        "{r}"
    );
    let secs = r["idle"]["seconds"].as_f64().unwrap();
    assert!((1.0..3.0).contains(&secs), "{r}");
    // Idle links beat every 20 s: a second of idling may cost nothing at all.
    let total = r["idle"]["total_ms"].as_f64().unwrap();
    assert!(total >= 0.0, "{r}");
    assert!(r["idle"]["busiest_ms"].as_f64().unwrap() <= total, "{r}");
    assert_eq!(r["idle"]["target_pct_of_core"], 1.0, "{r}");
    let rss = r["memory"]["largest_mib"].as_f64().unwrap();
    assert!(
        rss > 1.0 && r["memory"]["median_mib"].as_f64().unwrap() <= rss,
        "{r}"
    );
    for figure in ["storm", "idle", "memory"] {
        assert!(r[figure]["met"].is_boolean(), "{figure}: {r}");
    }
}
