//! A child process of this test binary playing a role, as the fault rounds need it: its
//! answers apart from its progress lines, how it ended, and kills and freezes on demand.
//! It is killed and reaped on drop, and the `/dev/shm` files of a killed child removed.

use crate::common;
use std::io::Write;
use std::process::{Child, ChildStdin, ExitStatus};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// The last `acked ...` line.
    progress: Arc<Mutex<Option<String>>>,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `role` with `args` (the test binary's `role_entry`).
    pub fn start(role: &str, args: &[(&str, String)]) -> Proc {
        let (child, stdin, stdout) = common::spawn_role(None, "role_entry", role, args);
        let progress = Arc::new(Mutex::new(None));
        let last = Arc::clone(&progress);
        let lines = common::peer_lines(stdout, move |msg| {
            if msg.starts_with("acked ") {
                *last.lock().unwrap() = Some(msg);
                None
            } else {
                Some(msg)
            }
        });
        Proc {
            child,
            stdin,
            lines,
            progress,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next answer within `limit`; `None` if none came (or the child's output ended).
    pub fn recv_within(&self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }

    /// Sends `cmd` and returns the answer within `limit`.
    pub fn ask(&mut self, cmd: &str, limit: Duration) -> Option<String> {
        writeln!(self.stdin, "{cmd}").ok()?;
        self.stdin.flush().ok()?;
        self.recv_within(limit)
    }

    /// The lane counts of the last progress line, and forgets it.
    pub fn take_progress(&self) -> Option<Vec<u64>> {
        let line = self.progress.lock().unwrap().take()?;
        Some(
            line.split_whitespace()
                .skip(1)
                .filter_map(|w| w.parse().ok())
                .collect(),
        )
    }

    /// How the child ended, if it did.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// `SIGKILL`, reaped; the `/dev/shm` files it left removed.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        if let Ok(s) = self.child.wait() {
            self.status.get_or_insert(s);
        }
        common::remove_shm_files(self.pid());
    }

    /// Sends `sig` (`SIGSTOP`, `SIGCONT`).
    pub fn signal(&self, sig: i32) {
        common::send_signal(self.pid(), sig);
    }

    /// Freezes the process (SIGSTOP) and returns once all its threads are stopped.
    pub fn freeze(&self) {
        common::freeze(self.pid());
    }

    /// Asks the child to quit and returns how it ended, within `limit` (killed after).
    pub fn quit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.quit(Duration::from_secs(5));
        }
        common::remove_shm_files(self.pid());
    }
}

/// How a child ended, said for a report: `exit 0`, `signal 11`.
pub fn how(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (_, Some(s)) => format!("signal {s}"),
        _ => "ended".into(),
    }
}
