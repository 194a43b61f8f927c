//! Worker processes of the benchmarks that start many (`rsm bench-memory`'s importers,
//! `rsm bench-scale`'s nodes): each is the running executable with a hidden subcommand,
//! talked to in lines over its standard input and output, with the providers pinned to
//! loopback. Dropping the set asks each to quit, then kills and reaps what is left.

use super::BenchError;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a process gets to end after `quit` before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(10);

/// One worker process.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

/// The worker processes of one run.
#[derive(Default)]
pub(super) struct Children {
    workers: Vec<Worker>,
}

impl Children {
    /// Starts `<current exe> args...`; `what` names it in errors.
    pub(super) fn spawn(&mut self, args: &[String], what: &str) -> Result<(), BenchError> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::Peer(format!("cannot find the rsm executable: {e}")))?;
        let mut child = std::process::Command::new(exe)
            .args(args)
            .env("FI_TCP_IFACE", "lo")
            .env("FI_SOCKETS_IFACE", "lo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::Peer(format!("cannot start {what}: {e}")))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (tx, lines) = mpsc::channel();
        // From here on `self` owns the child: any early return ends and reaps it.
        self.workers.push(Worker {
            child,
            stdin,
            lines,
        });
        let stdout = stdout.ok_or_else(|| BenchError::Peer(format!("no pipe from {what}")))?;
        std::thread::Builder::new()
            .name("rsm-bench-child-out".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| BenchError::Peer(format!("cannot start a reader thread: {e}")))?;
        Ok(())
    }

    /// How many were started.
    pub(super) fn len(&self) -> usize {
        self.workers.len()
    }

    /// Their process ids, in the order they were started.
    pub(super) fn pids(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.child.id()).collect()
    }

    /// The next line of worker `i`, waiting until `deadline`.
    pub(super) fn line(&mut self, i: usize, deadline: Instant) -> Result<String, BenchError> {
        let w = self
            .workers
            .get_mut(i)
            .ok_or_else(|| BenchError::Usage(format!("no worker {i}")))?;
        let left = deadline.saturating_duration_since(Instant::now());
        match w.lines.recv_timeout(left) {
            Ok(l) => Ok(l),
            Err(RecvTimeoutError::Timeout) => Err(BenchError::Peer(format!(
                "process {} said nothing in time",
                w.child.id()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                let status = w.child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(BenchError::Peer(format!(
                    "process {} exited ({status})",
                    w.child.id()
                )))
            }
        }
    }

    /// Sends `line` to worker `i`.
    pub(super) fn say(&mut self, i: usize, line: &str) -> Result<(), BenchError> {
        let w = self
            .workers
            .get_mut(i)
            .ok_or_else(|| BenchError::Usage(format!("no worker {i}")))?;
        let pid = w.child.id();
        let stdin = w
            .stdin
            .as_mut()
            .ok_or_else(|| BenchError::Peer(format!("process {pid} has no input")))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| BenchError::Peer(format!("cannot talk to process {pid}: {e}")))
    }

    /// Asks every worker to quit, waits for them, kills the ones that do not.
    pub(super) fn quit(&mut self) {
        for w in &mut self.workers {
            if let Some(mut s) = w.stdin.take() {
                let _ = writeln!(s, "quit").and_then(|()| s.flush());
            }
        }
        let deadline = Instant::now() + QUIT_GRACE;
        for w in self.workers.drain(..) {
            let mut child = w.child;
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    _ => {
                        let pid = child.id();
                        let _ = child.kill();
                        let _ = child.wait();
                        super::child::remove_shm_leftovers(pid);
                        break;
                    }
                }
            }
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.quit();
    }
}
