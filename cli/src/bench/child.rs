//! The peer process `rsm bench` starts: spawned from the running executable, talked to over
//! its standard input and output, and always ended and reaped, also on errors and panics.

use super::BenchError;
use super::cli::BaselineWait;
use super::proto::{Command, PeerHello};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long the peer may take to open its domain and start its node.
const HELLO_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one command may take (the longest is a checksum of the whole buffer).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the peer gets to close its libfabric objects after `quit` before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(5);

/// A running `rsm bench-peer`. Dropping it asks the peer to quit, waits a little, then kills
/// it, and reaps it in every case. A peer reached with `--peer` has no child here: dropping
/// it only ends its session.
pub(crate) struct PeerProcess {
    child: Option<Child>,
    stdin: Option<Box<dyn Write + Send>>,
    lines: Receiver<String>,
    /// The peer's hello line.
    pub(crate) hello: PeerHello,
    /// This side's address toward the peer: loopback for a spawned peer, the control
    /// connection's local address for a served one (the interface the run must use).
    pub(crate) local_ip: std::net::IpAddr,
}

impl PeerProcess {
    /// Starts `<current exe> bench-peer --controller C --max-size N [--no-rsm]
    /// --baseline-wait W` with the providers pinned to loopback (in the child's environment
    /// only) and reads its hello.
    pub(crate) fn spawn(
        controller: &str,
        max_size: usize,
        no_rsm: bool,
        wait: BaselineWait,
        atomics: bool,
    ) -> Result<PeerProcess, BenchError> {
        let exe = std::env::current_exe()
            .map_err(|e| BenchError::Peer(format!("cannot find the rsm executable: {e}")))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["bench-peer", "--controller", controller, "--max-size"])
            .arg(max_size.to_string())
            .env("FI_TCP_IFACE", "lo")
            .env("FI_SOCKETS_IFACE", "lo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if no_rsm {
            cmd.arg("--no-rsm");
        }
        cmd.args(["--baseline-wait", wait.as_str()]);
        if atomics {
            cmd.arg("--atomics");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| BenchError::Peer(format!("cannot start the peer: {e}")))?;
        let stdout = child.stdout.take();
        let stdin = child.stdin.take();
        // From here on the guard owns the child: any early return kills and reaps it.
        let peer = PeerProcess {
            child: Some(child),
            stdin: stdin.map(|s| Box::new(s) as Box<dyn Write + Send>),
            lines: mpsc::channel().1,
            hello: PeerHello::default(),
            local_ip: std::net::Ipv4Addr::LOCALHOST.into(),
        };
        let stdout = stdout.ok_or_else(|| BenchError::Peer("no pipe from the peer".into()))?;
        peer.start(stdout)
    }

    /// Connects to a peer serving on `addr` (`rsm bench-peer --serve`) and reads its hello.
    pub(crate) fn connect(addr: SocketAddr) -> Result<PeerProcess, BenchError> {
        let stream = TcpStream::connect_timeout(&addr, HELLO_TIMEOUT)
            .map_err(|e| BenchError::Peer(format!("cannot reach the peer at {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let local_ip = stream
            .local_addr()
            .map_err(|e| BenchError::Peer(format!("cannot read the local address: {e}")))?
            .ip();
        let reader = stream
            .try_clone()
            .map_err(|e| BenchError::Peer(format!("cannot read from {addr}: {e}")))?;
        let peer = PeerProcess {
            child: None,
            stdin: Some(Box::new(stream)),
            lines: mpsc::channel().1,
            hello: PeerHello::default(),
            local_ip,
        };
        peer.start(reader)
    }

    /// Reads the peer's lines on a thread, then its hello.
    fn start(mut self, from: impl Read + Send + 'static) -> Result<PeerProcess, BenchError> {
        let (tx, lines) = mpsc::channel();
        self.lines = lines;
        std::thread::Builder::new()
            .name("rsm-bench-peer-out".into())
            .spawn(move || {
                for line in BufReader::new(from).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| BenchError::Peer(format!("cannot start a reader thread: {e}")))?;
        let line = self.recv(HELLO_TIMEOUT, "its hello")?;
        self.hello = serde_json::from_str(&line)
            .map_err(|e| BenchError::Peer(format!("unreadable hello {line:?}: {e}")))?;
        Ok(self)
    }

    fn recv(&mut self, timeout: Duration, what: &str) -> Result<String, BenchError> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => Err(BenchError::Peer(format!(
                "no answer to {what} within {} s",
                timeout.as_secs()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                // The pipe closed: the peer exited (its own message is on standard error).
                let status = match self.child.as_mut() {
                    Some(c) => c.wait().map_or_else(|e| e.to_string(), |s| s.to_string()),
                    None => "it closed the connection".into(),
                };
                Err(BenchError::Peer(format!(
                    "the peer exited before {what} ({status})"
                )))
            }
        }
    }

    /// Sends one command and returns the peer's reply line (`err ...` becomes an error).
    pub(crate) fn request(&mut self, cmd: &Command) -> Result<String, BenchError> {
        self.send(cmd)?;
        self.answer(cmd)
    }

    /// Sends one command without waiting for its reply (read it with [`Self::answer`]):
    /// for commands the peer can only answer once this side did its part.
    pub(crate) fn send(&mut self, cmd: &Command) -> Result<(), BenchError> {
        let line = cmd.to_line();
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| BenchError::Peer("the peer's input is closed".into()))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| BenchError::Peer(format!("cannot send {line:?}: {e}")))
    }

    /// The reply to `cmd`, sent before with [`Self::send`] (`err ...` becomes an error).
    pub(crate) fn answer(&mut self, cmd: &Command) -> Result<String, BenchError> {
        let line = cmd.to_line();
        let reply = self.recv(REPLY_TIMEOUT, &format!("{line:?}"))?;
        match reply.strip_prefix("err ") {
            Some(why) => Err(BenchError::Peer(format!("{line:?} failed: {why}"))),
            None => Ok(reply),
        }
    }

    /// Sends a command whose answer must be `ok`.
    pub(crate) fn expect_ok(&mut self, cmd: &Command) -> Result<(), BenchError> {
        match self.request(cmd)?.as_str() {
            "ok" => Ok(()),
            other => Err(BenchError::Peer(format!(
                "{:?}: unexpected answer {other:?}",
                cmd.to_line()
            ))),
        }
    }

    /// The peer's checksum of the first `len` bytes of a buffer.
    pub(crate) fn sum(&mut self, cmd: &Command) -> Result<u64, BenchError> {
        let reply = self.request(cmd)?;
        u64::from_str_radix(&reply, 16)
            .map_err(|_| BenchError::Peer(format!("{:?}: bad checksum {reply:?}", cmd.to_line())))
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            // A served peer: `quit` ends this session, the peer goes on serving.
            if let Some(mut s) = self.stdin.take() {
                let _ = writeln!(s, "quit").and_then(|()| s.flush());
            }
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return; // exited and reaped
        }
        // Ask first: a peer that quits closes its libfabric objects (a killed shm peer
        // leaves its region in /dev/shm). Closing its input is a second way of asking.
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit").and_then(|()| stdin.flush());
        }
        let deadline = Instant::now() + QUIT_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break,
            }
        }
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        remove_shm_leftovers(pid);
    }
}

/// Removes the shared-memory files of a peer that had to be killed (`/dev/shm/<pid>:...`).
pub(super) fn remove_shm_leftovers(pid: u32) {
    let prefix = format!("{pid}:");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
