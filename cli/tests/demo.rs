//! `rsm demo` as a newcomer runs it: every step behaves as expected, and a demo that cannot
//! go on says where it stopped and fails.

use std::process::Command;

/// Runs `rsm demo` with `args`; returns the exit code and standard output.
fn demo(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsm"));
    cmd.arg("demo").args(args);
    // The demo pins its child to loopback itself; its own nodes find the loopback domain
    // from their listen address.
    for var in ["RSM_CONFIG", "RSM_NODE_ID", "RSM_LISTEN", "RSM_PEERS"] {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("run rsm demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code(), stdout)
}

fn walks_through(args: &[&str]) {
    let (code, out) = demo(args);
    assert_eq!(code, Some(0), "rsm demo {args:?} failed");
    for name in [
        "RSMERR_SEG_NOT_PUBLISHED_TO_NODE",
        "RSMERR_PERM_DENIED",
        "RSMERR_CONN_ABORTED",
    ] {
        assert!(out.contains(name), "{name} is not in the output");
    }
    assert!(out.contains("steps behaved as expected"));
    assert!(!out.contains("NOT AS EXPECTED"));
    assert!(out.contains("The exporter process ended (exit status: 0)"));
}

#[test]
fn every_step_behaves_as_expected_on_tcp() {
    walks_through(&[]);
}

#[test]
fn every_step_behaves_as_expected_on_shm() {
    walks_through(&["--controller", "shm0"]);
}

#[test]
fn a_demo_that_cannot_go_on_says_where_it_stopped() {
    let (code, out) = demo(&["--controller", "nosuch7"]);
    assert_eq!(code, Some(2));
    assert!(out.contains("RSMERR_CTLR_NOT_PRESENT"), "{out}");
    assert!(out.contains("stopped after step 1"), "{out}");
}
