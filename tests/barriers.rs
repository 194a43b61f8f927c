//! Barriers across real processes (docs/rsmapi.md §4.6, DESIGN.md §7, DESIGN.md, decisions 2 and 16): explicit-mode
//! puts under a barrier, visible when it closes; revoke and remote failures reported by
//! close; on every local libfabric controller.

mod common;

use common::*;
use futures::FutureExt;
use rsm::BarrierMode;
use std::task::{Context, Poll, Waker};

#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

const SEG: usize = 1 << 20;

/// `op` after its first poll, which started it: the open barrier covers it from then on.
fn started<B: Send>(mut op: rsm::Op<B>) -> rsm::Op<B> {
    let _ = op.poll_unpin(&mut Context::from_waker(Waker::noop()));
    op
}

fn thousand_puts_visible_at_close(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl, SEG);
    assert_eq!(
        s.imp.mode(),
        BarrierMode::Implicit,
        "implicit after connect"
    );
    s.imp.set_mode(BarrierMode::Explicit).unwrap();
    assert_eq!(s.imp.mode(), BarrierMode::Explicit);
    let bar = s.imp.init_barrier().unwrap();
    bar.open().unwrap();
    assert_eq!(bar.open().unwrap_err().name(), "RSMERR_BARRIER_OPEN_FAILED");
    // Each put starts at its first poll; polled once, it is the barrier's to finish
    // whether its future is kept or dropped.
    let mut cx = Context::from_waker(Waker::noop());
    let mut handles = Vec::new();
    for i in 0..1000u64 {
        let mut h = s.imp.put(i * 1024, pattern(i, 512));
        match h.poll_unpin(&mut cx) {
            Poll::Ready(r) => assert_eq!(r.unwrap().0, 512),
            Poll::Pending if i % 3 == 0 => handles.push(h),
            Poll::Pending => drop(h),
        }
    }
    // Never polled: it does nothing, in this mode as in the other.
    drop(s.imp.put(1000 * 1024, pattern(7, 512)));
    s.rt.block_on(bar.close())
        .unwrap_or_else(|e| panic!("{ctrl}: close: {e}"));
    // Right after close the target's memory has every put.
    for i in 0..1000u64 {
        assert_eq!(
            s.peer.ask(&format!("sum {} 512", i * 1024)),
            checksum(&pattern(i, 512)).to_string(),
            "{ctrl}: put {i} is visible after close"
        );
    }
    assert_eq!(
        s.peer.ask(&format!("sum {} 512", 1000 * 1024)),
        checksum(&[0u8; 512]).to_string(),
        "{ctrl}: the put never polled wrote nothing"
    );
    for h in handles {
        let (n, buf) = s.rt.block_on(h).unwrap();
        assert_eq!((n, buf.len()), (512, 512));
    }
    // Closed: close and order again are BARRIER_NOT_OPENED (DESIGN.md, decision 16).
    assert_eq!(
        s.rt.block_on(bar.close()).unwrap_err().name(),
        "RSMERR_BARRIER_NOT_OPENED"
    );
    assert_eq!(
        s.rt.block_on(bar.order()).unwrap_err().name(),
        "RSMERR_BARRIER_NOT_OPENED"
    );

    // order(): every write before it completes before any after it; the last one wins.
    bar.open().unwrap();
    for round in 0..50u64 {
        s.rt.block_on(s.imp.put(0, pattern(round, 4096))).unwrap();
        s.rt.block_on(bar.order()).unwrap();
    }
    s.rt.block_on(bar.close()).unwrap();
    assert_eq!(
        s.peer.ask("sum 0 4096"),
        checksum(&pattern(49, 4096)).to_string()
    );

    // Gets under a barrier, and back to implicit mode.
    bar.open().unwrap();
    let gets = (0..8u64).map(|i| s.imp.get(i * 1024, vec![0u8; 512]));
    let gets = s.rt.block_on(futures::future::join_all(gets));
    s.rt.block_on(bar.close()).unwrap();
    for (i, g) in gets.into_iter().enumerate() {
        let (_, buf) = g.unwrap();
        if i > 3 {
            assert!(buf == pattern(i as u64, 512), "{ctrl}: get {i}");
        }
    }
    bar.destroy().unwrap();
    s.imp.set_mode(BarrierMode::Implicit).unwrap();
    let (res, _) = common::split(s.rt.block_on(s.imp.put(0, vec![7u8; 8])));
    res.unwrap();
    assert_eq!(s.peer.ask("dump 0 8"), "0707070707070707");
    assert!(s.peer.quit());
    s.rt.block_on(s.node.shutdown());
}

fn revoked_mid_barrier_is_conn_aborted(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl, SEG);
    s.imp.set_mode(BarrierMode::Explicit).unwrap();
    let bar = s.imp.init_barrier().unwrap();
    bar.open().unwrap();
    for i in 0..100u64 {
        drop(started(s.imp.put(i * 64, pattern(i, 64))));
    }
    assert_eq!(s.peer.ask("unpublish"), "ok");
    for i in 0..100u64 {
        drop(started(s.imp.put(i * 64, pattern(i, 64))));
    }
    let e = s.rt.block_on(bar.close()).unwrap_err();
    assert_eq!(e.name(), "RSMERR_CONN_ABORTED", "{ctrl}: {e}");
    // A later barrier on the revoked segment fails the same way.
    bar.open().unwrap();
    drop(started(s.imp.put(0, vec![1u8; 8])));
    let e = s.rt.block_on(bar.close()).unwrap_err();
    assert_eq!(e.name(), "RSMERR_CONN_ABORTED", "{ctrl}: {e}");
    assert!(s.peer.quit());
    s.rt.block_on(s.node.shutdown());
}

/// The exporter loses its registration without notice (fault injection): a put inside the
/// barrier fails remotely and close reports `BARRIER_FAILURE`.
#[cfg(feature = "fault-injection")]
fn remote_failure_is_barrier_failure(ctrl: &str) {
    let _serial = serial();
    let mut s = setup(ctrl, SEG);
    s.imp.set_mode(BarrierMode::Explicit).unwrap();
    let bar = s.imp.init_barrier().unwrap();
    bar.open().unwrap();
    s.rt.block_on(s.imp.put(0, vec![1u8; 4096])).unwrap();
    s.rt.block_on(bar.close()).unwrap();
    assert_eq!(s.peer.ask("break"), "ok");
    bar.open().unwrap();
    // Started by its first poll; the close reports its failure.
    let mut h = s.imp.put(65536, vec![2u8; 65536]);
    let _ = h.poll_unpin(&mut Context::from_waker(Waker::noop()));
    let e = s.rt.block_on(bar.close()).unwrap_err();
    assert_eq!(e.name(), "RSMERR_BARRIER_FAILURE", "{ctrl}: {e}");
    drop(h);
    // The exporter's memory may be gone (shm): end it without its own clean-up.
    s.peer.kill();
    s.rt.block_on(s.node.shutdown());
}

/// On tcp the target answers an access under a key it does not know by closing the
/// connection between the two processes: the importer's next operation makes it again, so
/// a signal after the failed put still reaches the exporter.
#[cfg(feature = "fault-injection")]
#[test]
fn tcp_a_failed_access_leaves_the_exporter_reachable() {
    let _serial = serial();
    let mut s = setup("tcp0", SEG);
    s.rt.block_on(s.imp.put(0, vec![1u8; 4096])).unwrap();
    assert_eq!(s.peer.ask("break"), "ok");
    let (res, _) = common::split(s.rt.block_on(s.imp.put(0, vec![2u8; 4096])));
    assert_eq!(res.unwrap_err().name(), "RSMERR_BARRIER_FAILURE");
    s.rt.block_on(s.imp.signal(rsm::SignalFlags::empty()))
        .expect("a signal over a new connection");
    assert_eq!(s.peer.ask("wait 5000"), "signalled");
    s.peer.kill();
    s.rt.block_on(s.node.shutdown());
}

#[test]
fn tcp_thousand_puts_visible_at_close() {
    thousand_puts_visible_at_close("tcp0");
}
#[test]
fn shm_thousand_puts_visible_at_close() {
    thousand_puts_visible_at_close("shm0");
}
#[test]
fn sockets_thousand_puts_visible_at_close() {
    thousand_puts_visible_at_close("sockets0");
}
#[test]
fn tcp_revoked_mid_barrier_is_conn_aborted() {
    revoked_mid_barrier_is_conn_aborted("tcp0");
}
#[test]
fn shm_revoked_mid_barrier_is_conn_aborted() {
    revoked_mid_barrier_is_conn_aborted("shm0");
}
#[test]
fn sockets_revoked_mid_barrier_is_conn_aborted() {
    revoked_mid_barrier_is_conn_aborted("sockets0");
}
#[cfg(feature = "fault-injection")]
#[test]
fn tcp_remote_failure_is_barrier_failure() {
    remote_failure_is_barrier_failure("tcp0");
}
#[cfg(feature = "fault-injection")]
#[test]
fn shm_remote_failure_is_barrier_failure() {
    remote_failure_is_barrier_failure("shm0");
}
#[cfg(feature = "fault-injection")]
#[test]
fn sockets_remote_failure_is_barrier_failure() {
    remote_failure_is_barrier_failure("sockets0");
}

#[test]
fn modes_and_states() {
    assert_eq!(BarrierMode::from_raw(1).unwrap(), BarrierMode::Implicit);
    assert_eq!(BarrierMode::Explicit.raw(), 0);
    assert_eq!(
        BarrierMode::from_raw(-1).unwrap_err().name(),
        "RSMERR_BAD_MODE"
    );
}
#[test]
fn loopback_thousand_puts_visible_at_close() {
    thousand_puts_visible_at_close("loopback");
}
#[test]
fn loopback_revoked_mid_barrier_is_conn_aborted() {
    revoked_mid_barrier_is_conn_aborted("loopback");
}

/// A barrier closes from a spawned task: its future is `Send` (it compiles).
#[test]
fn close_is_send() {
    fn spawnable<F: Future + Send + 'static>(_: F) {}
    let _ = |b: rsm::Barrier| spawnable(async move { b.close().await });
}
