//! Multi-process test support: a test re-executes its own binary as a remote node (a
//! "role"), talks to it over its standard input and output, and always ends it.

#![allow(dead_code)]

use rsm::SegmentMemory;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// CPU time (user and system) that a `/proc/.../stat` file reports: a process's, or a
/// thread's (`/proc/self/task/TID/stat`).
pub fn cpu_in_stat(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after the name.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// CPU time of this process's threads named `name` (such as `rsm-tcp0`), summed.
pub fn cpu_of_threads(name: &str) -> Duration {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| t.ok())
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .map(|t| cpu_in_stat(&t.path().join("stat").to_string_lossy()))
        .sum()
}

/// The runtime tests await `rsm` on (it needs none: this is the user's executor).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A node with id `id` and no configuration from the environment.
pub async fn node(id: u32) -> rsm::Node {
    rsm::Node::builder()
        .ignore_environment()
        .id(id)
        .start()
        .await
        .expect("node starts")
}

/// Two nodes with fresh ids; the first one's id is returned too.
pub async fn two_nodes() -> (rsm::Node, rsm::Node, u32) {
    let a_id = fresh_node_id();
    (node(a_id).await, node(a_id + 1).await, a_id)
}

/// The variable that tells a re-executed test binary which role to play.
pub const ROLE_VAR: &str = "RSM_TEST_ROLE";

/// A node id no other test running at the same time on this host has (the side channel's
/// Unix names are per host and per node id), with the next id free too (`two_nodes`, a
/// child's `fresh_node_id() + 1`): a block of 1,000 ids per process (by pid), taken two at
/// a time. Random ids within 1,000 per process clashed now and then between the tests one
/// binary runs in parallel.
pub fn fresh_node_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = std::process::id() % 4_000_000;
    let k = NEXT.fetch_add(2, std::sync::atomic::Ordering::Relaxed) % 1000;
    1_000_000 + pid * 1000 + k
}

/// Sends `sig` to process `pid`; kill(1) keeps the tests free of unsafe code.
pub fn send_signal(pid: u32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Whether every thread of process `pid` is stopped (state `T`).
pub fn stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .is_ok_and(|st| st.rsplit(") ").next().is_some_and(|r| r.starts_with('T')))
    })
}

/// Freezes process `pid` (SIGSTOP) and returns once all its threads are stopped: `kill`
/// returns before that, and on a busy host the kernel stops the other threads only once
/// the signalled one has had its turn, so a "frozen" process could still answer a
/// request just sent (acknowledge a revoke, say).
pub fn freeze(pid: u32) {
    let started = std::time::Instant::now();
    send_signal(pid, libc::SIGSTOP);
    while !stopped(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "process {pid} not stopped within 5 s of SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A child process playing a role; killed and reaped on drop, with the `/dev/shm` files
/// libfabric's shm provider leaves for a killed process removed.
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    /// Starts `role` of test `entry` (a `#[test]` that calls [`run_role`]) with `args`.
    pub fn start(entry: &str, role: &str, args: &[(&str, String)]) -> Peer {
        Peer::start_in(None, entry, role, args)
    }

    /// As [`Peer::start`], inside the network namespace `ns` when given (`ip netns exec`,
    /// which execs the test binary: the child's pid is the node's).
    pub fn start_in(ns: Option<&str>, entry: &str, role: &str, args: &[(&str, String)]) -> Peer {
        Peer::from_spawned(spawn_role(ns, entry, role, args))
    }

    /// As [`Peer::start`], run by the command `wrapper` ([`spawn_role_under`]).
    pub fn start_under(wrapper: &[&str], entry: &str, role: &str, args: &[(&str, String)]) -> Peer {
        Peer::from_spawned(spawn_role_under(wrapper, entry, role, args))
    }

    fn from_spawned((child, stdin, stdout): (Child, ChildStdin, ChildStdout)) -> Peer {
        let lines = peer_lines(stdout, Some);
        Peer {
            child,
            stdin,
            lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line the peer says, within 20 s.
    pub fn recv(&self) -> String {
        self.recv_within(Duration::from_secs(20))
    }

    /// The next line the peer says, within `limit` (a whole scenario's verdict).
    pub fn recv_within(&self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("the peer answered within {limit:?}: {e:?}"))
    }

    /// Sends a command line without waiting for an answer.
    pub fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").expect("write to the peer");
        self.stdin.flush().expect("flush");
    }

    /// Sends a command line and returns the answer.
    pub fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").expect("write to the peer");
        self.stdin.flush().expect("flush");
        self.recv()
    }

    /// Sends a command line and returns the answer, which may take up to `limit`.
    pub fn ask_within(&mut self, cmd: &str, limit: Duration) -> String {
        writeln!(self.stdin, "{cmd}").expect("write to the peer");
        self.stdin.flush().expect("flush");
        self.recv_within(limit)
    }

    pub fn signal(&self, sig: i32) {
        send_signal(self.pid(), sig);
    }

    /// Freezes the peer (SIGSTOP) and returns once all its threads are stopped.
    pub fn freeze(&self) {
        freeze(self.pid());
    }

    /// Sends a command the peer is expected to die of, and returns how it ended (within
    /// 10 s; killed otherwise).
    pub fn ask_and_wait(&mut self, cmd: &str) -> std::process::ExitStatus {
        let _ = writeln!(self.stdin, "{cmd}");
        let _ = self.stdin.flush();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().expect("reap the peer")
    }

    /// Asks the peer to quit and waits (at most 10 s) until it exited; its `/dev/shm` files
    /// are left for the caller to check.
    pub fn quit(&mut self) -> bool {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Waits (at most `limit`) until the peer exits by itself and returns how it ended;
    /// `None` if it is still running (it is killed when dropped).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the peer at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_shm_files(self.child.id());
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                _ if std::time::Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        remove_shm_files(self.child.id());
    }
}

/// Starts this test binary as `role` of test `entry` (a `#[test]` that calls [`run_role`])
/// with `args` in its environment, inside the network namespace `ns` when given (`ip netns
/// exec`, which execs the test binary: the child's pid is the node's); stdin and stdout piped.
pub fn spawn_role(
    ns: Option<&str>,
    entry: &str,
    role: &str,
    args: &[(&str, String)],
) -> (Child, ChildStdin, ChildStdout) {
    match ns {
        None => spawn_role_under(&[], entry, role, args),
        Some(ns) => spawn_role_under(&["ip", "netns", "exec", ns], entry, role, args),
    }
}

/// As [`spawn_role`], the test binary run by the command `wrapper` (`unshare --pid
/// --fork`, say), which execs it; none when empty.
pub fn spawn_role_under(
    wrapper: &[&str],
    entry: &str,
    role: &str,
    args: &[(&str, String)],
) -> (Child, ChildStdin, ChildStdout) {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = match wrapper {
        [] => Command::new(exe),
        [program, rest @ ..] => {
            let mut c = Command::new(program);
            c.args(rest).arg(exe);
            c
        }
    };
    cmd.args(["--exact", entry, "--nocapture", "--test-threads", "1"])
        .env(ROLE_VAR, role)
        .env("FI_TCP_IFACE", "lo")
        .env("FI_SOCKETS_IFACE", "lo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in args {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn the peer");
    let stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    (child, stdin, stdout)
}

/// What a role says (`PEER <line>`, see [`say`]) on `stdout`, each line through `sift` first,
/// which keeps aside what it does not return; ends with the output or the receiver.
pub fn peer_lines(
    stdout: ChildStdout,
    mut sift: impl FnMut(String) -> Option<String> + Send + 'static,
) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print "test role_entry ... " before the first line.
            let Some((_, msg)) = line.split_once("PEER ") else {
                continue;
            };
            if let Some(msg) = sift(msg.to_string()) {
                if tx.send(msg).is_err() {
                    return;
                }
            }
        }
    });
    lines
}

/// libfabric's shm provider names its regions `/dev/shm/<pid>:...`; a killed process cannot
/// remove its own.
pub fn remove_shm_files(pid: u32) {
    let prefix = format!("{pid}:");
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether any `/dev/shm` file belongs to `pid`.
pub fn shm_files_of(pid: u32) -> Vec<String> {
    let prefix = format!("{pid}:");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The example binary `name`: cargo builds examples before it runs integration tests, into
/// `target/<profile>/examples`, beside this test's `deps` directory.
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test --all-features` builds the examples (or `cargo build \
         --all-features --examples`)",
        path.display()
    );
    path
}

/// The role this process was started for, if any.
pub fn role() -> Option<String> {
    std::env::var(ROLE_VAR).ok()
}

/// A role's parameter.
pub fn arg(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("role parameter {name} missing"))
}

/// Prints a line the parent reads.
pub fn say(msg: impl std::fmt::Display) {
    println!("PEER {msg}");
}

/// Reads the parent's next command line; `None` at end of input.
pub fn next_command() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_string()),
    }
}

/// The bytes a test writes: position-dependent, so a misplaced byte shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(131))
                % 251) as u8
        })
        .collect()
}

/// FNV-1a over `data`.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Waits (at most 10 s, polling every 5 ms) until `cond` holds, which another process or
/// the node's background tasks bring about; fails the test with `what` otherwise.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// On tcp0 a connection's atomics go to the exporter's endpoint for atomics once an answer
/// named it and this side's own opened (both on blocking threads, from the first atomic):
/// atomics that add 0 at `offset` until the import adopted it (10 s at most); its address.
#[cfg(feature = "test-util")]
pub async fn atomics_adopted(imp: &rsm::ImportSegment, offset: u64) -> Vec<u8> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let addr = rsm::test_util::atomics_addr_of(imp);
        if !addr.is_empty() {
            return addr;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within 10 s: the endpoint for atomics adopted"
        );
        imp.fetch_add(offset, 0u64).await.expect("fetch_add");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Multi-process tests run one at a time: they spin progress threads and move large
/// buffers, and two at once on 2 cores only measure the scheduler.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// `n` operations of a long loop, scaled by `RSM_TEST_SCALE` (a fraction, default 1; at
/// least 1): the busy-host run (`cargo xtask test --busy`) checks that every wait is woken
/// beside CPU-bound spinners, not volume, which the quiet run and the bench cover.
#[allow(dead_code)] // not every suite has long loops
pub fn scaled(n: usize) -> usize {
    let scale = std::env::var("RSM_TEST_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    ((n as f64 * scale) as usize).clamp(1, n.max(1))
}

/// The system page size.
pub fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Page-aligned, zeroed heap memory, `skew` bytes past the aligned start (to show
/// misalignment).
pub struct Pages {
    ptr: *mut u8,
    len: usize,
    layout: Layout,
    skew: usize,
}

// SAFETY: the allocation is owned by the value and freed only in its Drop.
unsafe impl Send for Pages {}
// SAFETY: as above.
unsafe impl Sync for Pages {}

impl Pages {
    pub fn new(len: usize, skew: usize) -> Pages {
        let layout = Layout::from_size_align(len + skew, page()).unwrap();
        // SAFETY: the size is not zero.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Pages {
            ptr,
            len,
            layout,
            skew,
        }
    }
}

// SAFETY: one fixed allocation, valid until drop, freed by nobody else.
unsafe impl SegmentMemory for Pages {
    fn as_ptr(&self) -> *mut u8 {
        // SAFETY: skew lies within the allocation.
        unsafe { self.ptr.add(self.skew) }
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// Bytes as lowercase hex, for lines exchanged with a child.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The exporter role: starts node `NODE_ID` (announcing the byte order `ANNOUNCE`, `big` or
/// `little`, with the `fault-injection` feature), exports `SIZE` bytes on `CTRL`, publishes
/// them, says `ready <id>`, and answers: `sum <off> <len>` (checksum), `fill <seed> <off>
/// <len>` (pattern), `dump <off> <len>` (hex), `write <off> <hex>`, `importers`,
/// `signals` (pending count), `wait <ms>` (`signalled` or the error's name), `unpublish`,
/// `break` (fault injection: the registration is lost), `quit`.
pub fn exporter_role() {
    let rt = runtime();
    let node_id: u32 = arg("NODE_ID").parse().unwrap();
    let size: usize = arg("SIZE").parse().unwrap();
    let announce = std::env::var("ANNOUNCE").ok();
    let (node, seg) = rt.block_on(async {
        let builder = rsm::Node::builder().ignore_environment().id(node_id);
        let builder = match announce.as_deref() {
            None => builder,
            #[cfg(feature = "fault-injection")]
            Some("big") => builder.announce_byte_order(rsm::ByteOrder::Big),
            #[cfg(feature = "fault-injection")]
            Some("little") => builder.announce_byte_order(rsm::ByteOrder::Little),
            Some(other) => panic!("cannot announce {other}"),
        };
        let node = builder.start().await.unwrap();
        let ctrl = node.controller(&arg("CTRL")).await.unwrap();
        let seg = ctrl.export(size, rsm::ExportFlags::empty()).unwrap();
        (node, seg)
    });
    let id = rt.block_on(seg.publish(None, &[])).unwrap();
    say(format!("ready {}", id.get()));
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["sum", off, len] => {
                let mut buf = vec![0u8; len.parse().unwrap()];
                seg.read_at(off.parse().unwrap(), &mut buf).unwrap();
                say(checksum(&buf));
            }
            ["fill", seed, off, len] => {
                let data = pattern(seed.parse().unwrap(), len.parse().unwrap());
                seg.write_at(off.parse().unwrap(), &data).unwrap();
                say("ok");
            }
            ["dump", off, len] => {
                let mut buf = vec![0u8; len.parse().unwrap()];
                seg.read_at(off.parse().unwrap(), &mut buf).unwrap();
                say(hex(&buf));
            }
            ["write", off, data] => {
                seg.write_at(off.parse().unwrap(), &unhex(data)).unwrap();
                say("ok");
            }
            ["importers"] => say(seg.importer_count()),
            ["signals"] => say(seg.pending_signals()),
            ["wait", ms] => {
                let timeout = std::time::Duration::from_millis(ms.parse().unwrap());
                match rt.block_on(seg.wait_signal(Some(timeout))) {
                    Ok(_importer) => say("signalled"),
                    Err(e) => say(e.name()),
                }
            }
            #[cfg(feature = "fault-injection")]
            ["break"] => {
                seg.inject_lost_registration().unwrap();
                say("ok");
            }
            ["unpublish"] => {
                rt.block_on(seg.unpublish()).unwrap();
                say("ok");
            }
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    rt.block_on(async {
        let _ = seg.destroy().await;
        node.shutdown().await;
    });
}

/// An exporter child (running [`exporter_role`] through the test file's `role_entry`) and an
/// import of its segment in this process.
pub struct Setup {
    pub rt: tokio::runtime::Runtime,
    pub peer: Peer,
    pub node: rsm::Node,
    pub imp: rsm::ImportSegment,
    pub exporter_id: u32,
    pub segid: rsm::SegmentId,
}

/// Starts an exporter child (the test file's `role_entry`, role `exporter`) as node
/// `node_id` with `size` bytes on `ctrl`; returns it with its published segment's id.
pub fn start_exporter(ctrl: &str, node_id: u32, size: usize) -> (Peer, rsm::SegmentId) {
    let mut peer = Peer::start(
        "role_entry",
        "exporter",
        &[
            ("NODE_ID", node_id.to_string()),
            ("CTRL", ctrl.to_string()),
            ("SIZE", size.to_string()),
        ],
    );
    let ready = peer.recv();
    let Some(segid) = ready
        .strip_prefix("ready ")
        .and_then(|s| s.parse().ok())
        .map(rsm::SegmentId)
    else {
        peer.kill();
        panic!("the exporter said {ready:?}");
    };
    (peer, segid)
}

/// Starts the exporter child with `size` bytes on `ctrl` and imports its segment read-write.
pub fn setup(ctrl: &str, size: usize) -> Setup {
    logs();
    let exporter_id = fresh_node_id();
    let (peer, segid) = start_exporter(ctrl, exporter_id, size);
    let rt = runtime();
    let (node, imp) = rt.block_on(async {
        let node = node(fresh_node_id() + 1).await;
        let c = node.controller(ctrl).await.unwrap();
        let imp = c
            .import(rsm::NodeId(exporter_id), segid, rsm::Perm::RDWR)
            .await
            .unwrap();
        (node, imp)
    });
    assert_eq!(imp.len(), size as u64);
    Setup {
        rt,
        peer,
        node,
        imp,
        exporter_id,
        segid,
    }
}

/// Logs to the test's output when `RUST_LOG` asks for them.
pub fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// An operation's output as these tests check it: the result, and the buffer if it came back.
pub fn split<T, B>(out: rsm::BufResult<T, B>) -> (rsm::Result<()>, Option<B>) {
    match out {
        Ok((_, buf)) => (Ok(()), Some(buf)),
        Err(e) => {
            let (e, buf) = e.into_parts();
            (Err(e), buf)
        }
    }
}

/// Node `a` exports `size` bytes on `ctrl` with `flags` and publishes them to everyone;
/// node `b` imports them read-write.
pub async fn export_and_import(
    a: &rsm::Node,
    b: &rsm::Node,
    ctrl: &str,
    size: usize,
    flags: rsm::ExportFlags,
) -> (rsm::ExportSegment, rsm::ImportSegment) {
    export_and_import_as(a, b, ctrl, size, flags, rsm::Perm::RDWR).await
}

/// As [`export_and_import`], imported with `perm`.
pub async fn export_and_import_as(
    a: &rsm::Node,
    b: &rsm::Node,
    ctrl: &str,
    size: usize,
    flags: rsm::ExportFlags,
    perm: rsm::Perm,
) -> (rsm::ExportSegment, rsm::ImportSegment) {
    let seg = a
        .controller(ctrl)
        .await
        .unwrap()
        .export(size, flags)
        .unwrap();
    let id = seg.publish(None, &[]).await.unwrap();
    let imp = b
        .controller(ctrl)
        .await
        .unwrap()
        .import(a.id(), id, perm)
        .await
        .unwrap();
    (seg, imp)
}

/// A node `id` (signals over the side channel when `side`) exporting a page on `ctrl`,
/// published: the exporter of the two-process signal tests.
pub async fn published_page(
    id: u32,
    ctrl: &str,
    side: bool,
) -> (rsm::Node, rsm::ExportSegment, rsm::SegmentId) {
    let node = rsm::Node::builder()
        .ignore_environment()
        .id(id)
        .signals_over_side_channel(side)
        .start()
        .await
        .unwrap();
    let seg = node
        .controller(ctrl)
        .await
        .unwrap()
        .export(page(), rsm::ExportFlags::empty())
        .unwrap();
    let segid = seg.publish(None, &[]).await.unwrap();
    (node, seg, segid)
}
