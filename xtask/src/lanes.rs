//! Test binaries side by side: the workspace's test binaries are built by one cargo
//! invocation, then xtask runs them itself, [`LANES`] at a time, the longest first. Each
//! binary's output goes to a file and is printed whole when it ends, under the `Running`
//! line `cargo test` would print, so the log reads as cargo's does.
//!
//! Most of a suite's time is spent waiting (for children, timeouts, liveness bounds), so a
//! second lane halves the step on this machine's 2 cores (`RSM_TEST_LANES=1`: one at a time,
//! to tell a test that fails only beside another suite).

use std::collections::VecDeque;
use std::env;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::child::wait_or_kill;
use crate::command::display;
use crate::failure::Failure;

/// Test binaries running at once by default.
pub const LANES: usize = 2;

/// The most one binary may run before it is killed and counted failed: far beyond the
/// slowest suite, well inside CI's limit.
const JOB_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A test binary the build made.
#[derive(Debug, Clone)]
pub struct Binary {
    /// The package's name, `rsm` or `rsm-cli`, say.
    pub package: String,
    /// The target's name: `faults` for `tests/faults/main.rs`, the crate's for its unit tests.
    pub target: String,
    /// The target's source, relative to its package (`tests/faults/main.rs`).
    pub src: String,
    pub exe: PathBuf,
    /// The package's directory: cargo runs a test binary from there.
    pub dir: PathBuf,
}

/// One run of a program in a lane.
#[derive(Debug)]
pub struct Job {
    /// What the log calls it.
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub dir: PathBuf,
    /// Larger runs first.
    pub weight: u32,
}

/// How one job ended.
struct Ended {
    label: String,
    secs: f64,
    ok: bool,
}

/// The cargo messages read here (`--message-format=json`).
#[derive(Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    package_id: String,
    #[serde(default)]
    manifest_path: Option<PathBuf>,
    target: Option<Target>,
    profile: Option<Profile>,
    executable: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Target {
    name: String,
    src_path: PathBuf,
}

#[derive(Deserialize)]
struct Profile {
    test: bool,
}

/// Builds the test binaries with `cargo <build_args> --no-run` (diagnostics on the
/// terminal) and lists them.
pub fn build(cargo: &OsString, root: &Path, build_args: &[&str]) -> Result<Vec<Binary>, Failure> {
    let mut cmd = Command::new(cargo);
    cmd.args(build_args)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    eprintln!("xtask: {}", display(&cmd));
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::new(format!("cannot start `{}`: {e}", display(&cmd))))?;
    let mut binaries = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(binary) = serde_json::from_str::<Message>(&line)
                .ok()
                .and_then(binary_of)
            {
                binaries.push(binary);
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| Failure::new(format!("waiting for the test build: {e}")))?;
    if !status.success() {
        return Err(Failure::with_code(
            format!("building the tests failed ({status})"),
            status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1),
        ));
    }
    Ok(binaries)
}

/// The test binary a cargo message announces, if it announces one.
fn binary_of(msg: Message) -> Option<Binary> {
    if msg.reason != "compiler-artifact" || !msg.profile.is_some_and(|p| p.test) {
        return None;
    }
    let target = msg.target?;
    let exe = msg.executable?;
    let dir = msg.manifest_path?.parent()?.to_path_buf();
    let src = target
        .src_path
        .strip_prefix(&dir)
        .unwrap_or(&target.src_path)
        .display()
        .to_string();
    Some(Binary {
        package: package_name(&msg.package_id),
        target: target.name,
        src,
        exe,
        dir,
    })
}

/// The package's name in a package id: `path+file:///w/cli#rsm-cli@0.1.0` (cargo's newer
/// spelling) or `rsm-cli 0.1.0 (path+file:///w/cli)` (the older one).
fn package_name(id: &str) -> String {
    if let Some((_, tail)) = id.rsplit_once('#') {
        let name = tail.split('@').next().unwrap_or(tail);
        // `path+file:///w/rsm#0.1.0`: the directory's name is the package's.
        if name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            let head = id.rsplit_once('#').map_or(id, |(h, _)| h);
            return head.rsplit('/').next().unwrap_or(head).to_string();
        }
        return name.to_string();
    }
    id.split(' ').next().unwrap_or(id).to_string()
}

/// The lanes to run in: `RSM_TEST_LANES`, else [`LANES`].
pub fn lanes() -> usize {
    env::var("RSM_TEST_LANES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(LANES)
}

/// Runs `jobs` in `lanes` lanes, heaviest first; once one fails no new one starts. Prints
/// each job's output when it ends, then the slowest jobs.
pub fn run(mut jobs: Vec<Job>, lanes: usize, log_dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(log_dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", log_dir.display())))?;
    jobs.sort_by_key(|job| std::cmp::Reverse(job.weight));
    let total = jobs.len();
    eprintln!("xtask: {total} test runs in {lanes} lanes");
    let queue = Arc::new(Mutex::new(VecDeque::from(jobs)));
    let ended = Arc::new(Mutex::new(Vec::<Ended>::new()));
    let workers: Vec<_> = (0..lanes)
        .map(|lane| {
            let (queue, ended) = (Arc::clone(&queue), Arc::clone(&ended));
            let log = log_dir.join(format!("lane{lane}.log"));
            std::thread::spawn(move || {
                loop {
                    if lock(&ended).iter().any(|e| !e.ok) {
                        return;
                    }
                    let Some(job) = lock(&queue).pop_front() else {
                        return;
                    };
                    let end = run_one(&job, &log);
                    lock(&ended).push(end);
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    let mut ended = std::mem::take(&mut *lock(&ended));
    ended.sort_by(|a, b| b.secs.total_cmp(&a.secs));
    eprintln!("xtask: the slowest test runs:");
    for e in ended.iter().take(8) {
        eprintln!("xtask:   {:>7.1} s  {}", e.secs, e.label);
    }
    let failed: Vec<_> = ended
        .iter()
        .filter(|e| !e.ok)
        .map(|e| e.label.as_str())
        .collect();
    if !failed.is_empty() {
        return Err(Failure::with_code(
            format!("failed: {}", failed.join(", ")),
            101,
        ));
    }
    if ended.len() < total {
        return Err(Failure::new(format!(
            "only {} of {total} test runs ran",
            ended.len()
        )));
    }
    Ok(())
}

/// Runs one job with its output in `log`, then prints the output whole.
fn run_one(job: &Job, log: &Path) -> Ended {
    let started = Instant::now();
    let mut cmd = Command::new(&job.program);
    cmd.args(&job.args)
        .current_dir(&job.dir)
        .stdin(Stdio::null());
    for (key, value) in &job.env {
        cmd.env(key, value);
    }
    let outcome = File::create(log)
        .and_then(|out| Ok((out.try_clone()?, out)))
        .map_err(|e| format!("cannot create {}: {e}", log.display()))
        .and_then(|(out, err)| {
            cmd.stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|e| format!("cannot start `{}`: {e}", display(&cmd)))
        })
        .map(|mut child| wait_or_kill(&mut child, started + JOB_TIMEOUT));
    let secs = started.elapsed().as_secs_f64();
    let mut text = String::new();
    if let Ok(mut file) = File::open(log) {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let verdict = match &outcome {
        Ok(Some(0)) => None,
        Ok(Some(code)) => Some(format!("exit code {code}")),
        Ok(None) => Some(format!(
            "killed after {} s (or ended by a signal)",
            JOB_TIMEOUT.as_secs()
        )),
        Err(why) => Some(why.clone()),
    };
    let end = match &verdict {
        None => format!("xtask: {} passed in {secs:.1} s", job.label),
        Some(why) => format!("xtask: {} FAILED in {secs:.1} s: {why}", job.label),
    };
    // One call, so lanes never interleave their lines (and a test harness captures it).
    eprint!(
        "     Running {} ({})\n{text}\n{end}\n",
        job.label,
        display(&cmd)
    );
    Ended {
        label: job.label.clone(),
        secs,
        ok: verdict.is_none(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_read_in_both_id_spellings() {
        assert_eq!(
            package_name("path+file:///w/main/cli#rsm-cli@0.1.0"),
            "rsm-cli"
        );
        assert_eq!(package_name("path+file:///w/main#rsm@0.1.0"), "rsm");
        assert_eq!(package_name("path+file:///w/main/xtask#0.0.0"), "xtask");
        assert_eq!(package_name("rsm 0.1.0 (path+file:///w/main)"), "rsm");
    }

    #[test]
    fn a_failed_job_stops_the_lanes_and_names_itself() {
        let dir = std::env::temp_dir().join(format!("xtask-lanes-{}", std::process::id()));
        let job = |label: &str, script: &str, weight| Job {
            label: label.into(),
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![("X".into(), "1".into())],
            dir: std::env::temp_dir(),
            weight,
        };
        let ok = run(
            vec![job("a", "test \"$X\" = 1", 0), job("b", "true", 1)],
            2,
            &dir,
        );
        assert!(ok.is_ok());
        let failed = run(
            vec![job("slow", "sleep 0.3; exit 3", 5), job("late", "true", 0)],
            1,
            &dir,
        );
        let message = failed.err().map(|f| f.message).unwrap_or_default();
        assert_eq!(message, "failed: slow");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
