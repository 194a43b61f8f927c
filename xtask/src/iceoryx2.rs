//! iceoryx2's figures beside the loopback and shm0 rows: the anchor program in
//! `xtask/anchors/iceoryx2/` (its own workspace and lockfile, so neither the library's
//! build, `cargo xtask test` nor CI compiles iceoryx2), built here in release mode and run
//! between the small-row pairs as UCX's tests are.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

use crate::child::run_child;
use crate::row::Reading;

/// The anchor's crate, from the workspace root.
pub const DIR: &str = "xtask/anchors/iceoryx2";
const BINARY: &str = "rsm-anchor-iceoryx2";

/// The most one run may take (the event test's 10,000 sleeping round trips take about a
/// second on a quiet host).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// One of the anchor's tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// Publish-subscribe ping-pong of 8 bytes, both processes busy-polling.
    PubSub,
    /// An event answered by an event, both listeners asleep.
    Event,
}

impl Test {
    pub const ALL: [Test; 2] = [Test::PubSub, Test::Event];

    fn arg(self) -> &'static str {
        match self {
            Test::PubSub => "pubsub",
            Test::Event => "event",
        }
    }

    /// Round trips timed per run: a few hundred milliseconds each on a quiet host.
    fn iters(self) -> usize {
        match self {
            Test::PubSub => 100_000,
            Test::Event => 10_000,
        }
    }

    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Test::PubSub => "iceoryx2 publish-subscribe round trip (busy-polling)",
            Test::Event => "iceoryx2 event round trip (listeners asleep)",
        }
    }

    /// The test standing beside a row, and how the row reads it: the publish-subscribe round
    /// trip beside the loopback and shm0 signal round trips.
    pub fn mapping(controller: &str, op: &str, mode: &str) -> Option<(Test, Reading)> {
        (matches!(controller, "loopback" | "shm0") && op == "signal" && mode == "latency")
            .then_some((Test::PubSub, Reading::RoundTrip))
    }
}

/// What one run printed: the round trip's percentiles in µs.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Tails {
    pub samples: usize,
    pub median_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

/// The anchor's binary under `target_dir`.
pub fn binary(target_dir: &Path) -> PathBuf {
    target_dir.join("anchors").join("release").join(BINARY)
}

/// The command that builds the anchor (release, its locked dependencies) into
/// `target_dir/anchors`.
pub fn build_command(cargo: &std::ffi::OsStr, root: &Path, target_dir: &Path) -> Command {
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--locked", "--manifest-path"])
        .arg(root.join(DIR).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir.join("anchors"))
        .current_dir(root);
    cmd
}

/// One run of `test`.
pub fn measure(bin: &Path, test: Test) -> Result<Tails, String> {
    let mut cmd = Command::new(bin);
    cmd.args(["--test", test.arg(), "--iters", &test.iters().to_string()]);
    let out = run_child(&mut cmd, RUN_TIMEOUT);
    parse(&out.stdout).ok_or_else(|| {
        if out.last_err.is_empty() {
            format!("no figure (exit {:?})", out.code)
        } else {
            out.last_err
        }
    })
}

/// The first line of `stdout` that is the anchor's figure.
fn parse(stdout: &[String]) -> Option<Tails> {
    stdout
        .iter()
        .find_map(|l| serde_json::from_str::<Tails>(l).ok())
        .filter(|t| t.samples > 0 && t.median_us.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_parse_from_the_anchor_line() {
        let line = r#"{"test":"pubsub","samples":100000,"median_us":0.531,"p99_us":0.9,"p999_us":4.25,"min_us":0.4}"#;
        let t = parse(&["noise".into(), line.into()]).unwrap();
        assert_eq!(
            (t.samples, t.median_us, t.p99_us, t.p999_us),
            (100_000, 0.531, 0.9, 4.25)
        );
        assert_eq!(parse(&[]), None);
        assert_eq!(
            parse(&[r#"{"samples":0,"median_us":1,"p99_us":1,"p999_us":1}"#.into()]),
            None
        );
    }

    #[test]
    fn the_publish_subscribe_round_trip_stands_beside_the_shared_memory_signals() {
        assert_eq!(
            Test::mapping("loopback", "signal", "latency"),
            Some((Test::PubSub, Reading::RoundTrip))
        );
        assert!(Test::mapping("shm0", "signal", "latency").is_some());
        assert_eq!(Test::mapping("tcp0", "signal", "latency"), None);
        assert_eq!(Test::mapping("loopback", "put", "latency"), None);
        let cmd = build_command("cargo".as_ref(), Path::new("/r"), Path::new("/r/target"));
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"--locked".to_string()));
        assert!(args.contains(&"/r/xtask/anchors/iceoryx2/Cargo.toml".to_string()));
        assert!(args.contains(&"/r/target/anchors".to_string()));
        assert_eq!(
            binary(Path::new("/t")),
            Path::new("/t/anchors/release/rsm-anchor-iceoryx2")
        );
    }
}
