//! The process's signal handlers stay the user's (DESIGN.md §3.1): a real SIGINT or SIGTERM
//! sent to a child process that runs nodes on each controller reaches its
//! `tokio::signal::ctrl_c()` or SIGTERM stream, and the child shuts its nodes down and exits
//! with status 0, within seconds; also when it registered for the signal before its first
//! node started, and when controllers opened on several threads at once while it registered
//! another. A program with no handler ends as the default action says. The shm regions a
//! killed process leaves are removed when an shm controller opens.

mod common;

use common::{
    Peer, arg, export_and_import, pattern, runtime, say, serial, shm_files_of, two_nodes,
};
use rsm::ExportFlags;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use tokio::signal::unix::{SignalKind, signal};

/// From the signal to the child's exit.
const BOUND: Duration = Duration::from_secs(5);
/// For a child to start its nodes and open its controllers on a busy host.
const START: Duration = Duration::from_secs(60);

#[test]
fn role_entry() {
    match common::role().as_deref() {
        None => {}
        Some("serve") => serve_role(),
        Some("race") => race_role(),
        Some("plain") => plain_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// What the child waits for: ctrl-c (`SIGNAL=int`) or SIGTERM (`SIGNAL=term`).
enum Waiter {
    CtrlC(std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>),
    Term(tokio::signal::unix::Signal),
}

impl Waiter {
    /// Registers for the signal now: `ctrl_c()` registers at its first poll.
    async fn register(which: &str) -> Waiter {
        match which {
            "int" => {
                let mut f = Box::pin(tokio::signal::ctrl_c());
                assert!(futures::poll!(&mut f).is_pending(), "no ctrl-c yet");
                Waiter::CtrlC(f)
            }
            "term" => Waiter::Term(signal(SignalKind::terminate()).expect("a SIGTERM stream")),
            other => panic!("unknown signal {other}"),
        }
    }

    /// What the child says once the signal came (or two minutes passed).
    async fn wait(self) -> &'static str {
        let limit = Duration::from_secs(120);
        match self {
            Waiter::CtrlC(f) => match tokio::time::timeout(limit, f).await {
                Ok(Ok(())) => "saw ctrl-c",
                _ => "no signal",
            },
            Waiter::Term(mut s) => match tokio::time::timeout(limit, s.recv()).await {
                Ok(Some(())) => "saw SIGTERM",
                _ => "no signal",
            },
        }
    }
}

/// Two nodes on `CTRL`: the first exports and publishes, the second imports and puts; then
/// it waits for `SIGNAL` (registered before the nodes start when `EARLY=1`), says so, and
/// disconnects, destroys, shuts both nodes down and says `shut down`.
fn serve_role() {
    let ctrl = arg("CTRL");
    let rt = runtime();
    rt.block_on(async {
        let early = match arg("EARLY").as_str() {
            "1" => Some(Waiter::register(&arg("SIGNAL")).await),
            _ => None,
        };
        let (a, b, _) = two_nodes().await;
        let (seg, imp) = export_and_import(&a, &b, &ctrl, 4096, ExportFlags::empty()).await;
        let data = pattern(7, 4096);
        imp.put(0, data.clone()).await.expect("the put");
        let mut back = vec![0u8; 4096];
        seg.read_at(0, &mut back).expect("read the segment");
        assert_eq!(back, data);
        let waiter = match early {
            Some(w) => w,
            None => Waiter::register(&arg("SIGNAL")).await,
        };
        say("ready");
        say(waiter.wait().await);
        imp.disconnect().await.expect("disconnect");
        seg.destroy().await.expect("destroy");
        a.shutdown().await;
        b.shutdown().await;
        say("shut down");
    });
}

/// Registers ctrl-c before any node; then opens shm0 on two nodes, tcp0 and sockets0 on
/// threads of their own at once, while registering `SIGUSR1` meanwhile; says `ready`, then
/// `saw SIGUSR1` and `saw ctrl-c` as they come, and shuts down.
fn race_role() {
    let rt = runtime();
    let waiter = rt.block_on(Waiter::register("int"));
    let openers: Vec<_> = ["shm0", "shm0", "tcp0", "sockets0"]
        .into_iter()
        .map(|ctrl| {
            std::thread::spawn(move || {
                let rt = runtime();
                rt.block_on(async {
                    let node = common::node(common::fresh_node_id()).await;
                    let c = node.controller(ctrl).await.expect("the controller opens");
                    (node, c)
                })
            })
        })
        .collect();
    let mut usr1 = rt.block_on(async { signal(SignalKind::user_defined1()).expect("SIGUSR1") });
    let opened: Vec<_> = openers
        .into_iter()
        .map(|t| t.join().expect("an opener"))
        .collect();
    say("ready");
    rt.block_on(async {
        let got = tokio::time::timeout(Duration::from_secs(120), usr1.recv()).await;
        say(if matches!(got, Ok(Some(()))) {
            "saw SIGUSR1"
        } else {
            "no SIGUSR1"
        });
        say(waiter.wait().await);
        for (node, c) in opened {
            drop(c);
            node.shutdown().await;
        }
    });
    say("shut down");
}

/// A program that handles no signal: opens `CTRL`, says `ready`, and waits.
fn plain_role() {
    let rt = runtime();
    let _kept = rt.block_on(async {
        let node = common::node(common::fresh_node_id()).await;
        let c = node
            .controller(&arg("CTRL"))
            .await
            .expect("the controller opens");
        (node, c)
    });
    say("ready");
    std::thread::sleep(Duration::from_secs(120));
}

/// Starts `role` on `ctrl` and waits until it is ready.
fn start(role: &str, ctrl: &str, signal: &str, early: bool) -> Peer {
    let args = [
        ("CTRL", ctrl.to_string()),
        ("SIGNAL", signal.to_string()),
        ("EARLY", if early { "1" } else { "0" }.to_string()),
    ];
    let peer = Peer::start("role_entry", role, &args);
    assert_eq!(peer.recv_within(START), "ready", "{role} on {ctrl}");
    peer
}

/// What the child says between the signal and its exit, each within what is left of
/// [`BOUND`] after `sent`, then its exit within it.
fn ends_cleanly(peer: &mut Peer, sent: Instant, saw: &str, what: &str) {
    let left = || {
        BOUND
            .saturating_sub(sent.elapsed())
            .max(Duration::from_millis(1))
    };
    assert_eq!(peer.recv_within(left()), saw, "{what}");
    assert_eq!(peer.recv_within(left()), "shut down", "{what}");
    let status = peer.wait_exit(left());
    assert!(
        status.is_some_and(|s| s.code() == Some(0)),
        "{what}: exited with {status:?} within {BOUND:?} of the signal"
    );
    eprintln!("{what}: exited 0 {:?} after the signal", sent.elapsed());
}

fn signal_reaches_tokio(ctrl: &str, which: &str, early: bool) {
    let _serial = serial();
    let mut peer = start("serve", ctrl, which, early);
    let pid = peer.pid();
    let (number, saw) = match which {
        "int" => (libc::SIGINT, "saw ctrl-c"),
        _ => (libc::SIGTERM, "saw SIGTERM"),
    };
    let sent = Instant::now();
    peer.signal(number);
    ends_cleanly(
        &mut peer,
        sent,
        saw,
        &format!("SIG{} on {ctrl}", which.to_uppercase()),
    );
    // A clean shutdown closes the endpoints, which remove their regions.
    assert_eq!(shm_files_of(pid), Vec::<String>::new(), "{ctrl}");
}

#[test]
fn sigint_reaches_ctrl_c_on_loopback() {
    signal_reaches_tokio("loopback", "int", false);
}

#[test]
fn sigint_reaches_ctrl_c_on_tcp0() {
    signal_reaches_tokio("tcp0", "int", false);
}

#[test]
fn sigint_reaches_ctrl_c_on_shm0() {
    signal_reaches_tokio("shm0", "int", false);
}

#[test]
fn sigint_reaches_ctrl_c_on_sockets0() {
    signal_reaches_tokio("sockets0", "int", false);
}

#[test]
fn sigterm_reaches_its_stream_on_shm0() {
    signal_reaches_tokio("shm0", "term", false);
}

#[test]
fn sigterm_reaches_its_stream_on_tcp0() {
    signal_reaches_tokio("tcp0", "term", false);
}

#[test]
fn ctrl_c_registered_before_the_first_node_starts_is_reached_on_shm0() {
    signal_reaches_tokio("shm0", "int", true);
}

#[test]
fn sigterm_registered_before_the_first_node_starts_is_reached_on_tcp0() {
    signal_reaches_tokio("tcp0", "term", true);
}

#[test]
fn controllers_opening_on_several_threads_keep_the_users_handlers() {
    let _serial = serial();
    let mut peer = start("race", "", "int", true);
    let sent = Instant::now();
    peer.signal(libc::SIGUSR1);
    assert_eq!(peer.recv_within(BOUND), "saw SIGUSR1");
    let sent_int = Instant::now();
    peer.signal(libc::SIGINT);
    ends_cleanly(
        &mut peer,
        sent_int,
        "saw ctrl-c",
        "SIGINT after four controllers",
    );
    assert!(sent.elapsed() < 2 * BOUND);
}

#[test]
fn a_program_that_handles_no_signal_gets_the_default_action() {
    let _serial = serial();
    for (ctrl, number) in [("shm0", libc::SIGTERM), ("tcp0", libc::SIGINT)] {
        let mut peer = start("plain", ctrl, "none", false);
        peer.signal(number);
        let status = peer.wait_exit(BOUND);
        // Not exit(1) from a provider's handler: the signal's default action.
        assert_eq!(
            status.and_then(|s| s.signal()),
            Some(number),
            "{ctrl}: {status:?}"
        );
    }
}

#[test]
fn an_shm_controller_that_opens_removes_the_regions_of_a_killed_process_only() {
    let _serial = serial();
    let mut killed = start("plain", "shm0", "none", false);
    let live = start("plain", "shm0", "none", false);
    let (dead_pid, live_pid) = (killed.pid(), live.pid());
    killed.signal(libc::SIGKILL);
    let status = killed.wait_exit(BOUND);
    assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    assert!(
        !shm_files_of(dead_pid).is_empty(),
        "a killed process leaves its region"
    );
    assert!(!shm_files_of(live_pid).is_empty());
    let rt = runtime();
    rt.block_on(async {
        let node = common::node(common::fresh_node_id()).await;
        let c = node.controller("shm0").await.expect("shm0 opens");
        assert_eq!(
            shm_files_of(dead_pid),
            Vec::<String>::new(),
            "the dead one's removed"
        );
        assert!(!shm_files_of(live_pid).is_empty(), "the live one's kept");
        drop(c);
        node.shutdown().await;
    });
}
