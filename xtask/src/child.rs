//! Bounded child processes: both pipes read to the end, killed and reaped after a timeout.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::command::display;

/// What a child printed and how it ended.
pub struct Output {
    pub stdout: Vec<String>,
    /// The last line it wrote to standard error (progress lines end in `\r`).
    pub last_err: String,
    /// `None` when it had to be killed.
    pub code: Option<i32>,
    pub secs: f64,
}

/// Runs a child, reading both pipes, killing it after `timeout`.
pub fn run_child(cmd: &mut Command, timeout: Duration) -> Output {
    let t0 = Instant::now();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Output {
                stdout: Vec::new(),
                last_err: format!("cannot start `{}`: {e}", display(cmd)),
                code: None,
                secs: 0.0,
            };
        }
    };
    // Read to the end on a thread, joined once the child is gone: lines still in the pipe
    // when it exits are kept.
    let out_reader = child.stdout.take().map(|out| {
        std::thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        })
    });
    let err_reader = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = err.read_to_end(&mut all);
            String::from_utf8_lossy(&all)
                .split(['\r', '\n'])
                .map(str::trim)
                .rfind(|l| !l.is_empty())
                .unwrap_or_default()
                .to_string()
        })
    });
    let code = wait_or_kill(&mut child, t0 + timeout);
    let mut last_err = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    if code.is_none() {
        last_err = format!("killed after {} s ({last_err})", timeout.as_secs());
    }
    Output {
        stdout: out_reader.and_then(|h| h.join().ok()).unwrap_or_default(),
        last_err,
        code,
        secs: t0.elapsed().as_secs_f64(),
    }
}

/// Waits for `child` until `deadline`, then kills it; its exit code, `None` when killed.
pub fn wait_or_kill(child: &mut Child, deadline: Instant) -> Option<i32> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_bounded_and_report_their_last_error_line() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo '{\"a\":1}'; printf 'progress\\rrsm bench: broken\\n' >&2; exit 2",
        ]);
        let out = run_child(&mut cmd, Duration::from_secs(10));
        assert_eq!(out.code, Some(2));
        assert_eq!(out.stdout, ["{\"a\":1}"]);
        assert_eq!(out.last_err, "rsm bench: broken");
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let out = run_child(&mut cmd, Duration::from_millis(200));
        assert_eq!(out.code, None);
        assert!(out.secs < 10.0 && out.last_err.starts_with("killed after"));
    }
}
