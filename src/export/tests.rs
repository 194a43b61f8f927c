//! The export's drop under races: the last handle revokes, once, whoever else holds the
//! export for a moment (DESIGN.md §4, Revoke).

use crate::{ExportFlags, Node, NodeId, Perm, SegmentEvent};
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Events of `events` that arrive within `within`, stopping early at the first `Revoked`
/// when `until_revoked`.
async fn revokes(events: &mut crate::EventStream, within: Duration, until_revoked: bool) -> usize {
    let mut n = 0;
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Some(e)) = tokio::time::timeout_at(deadline, events.next()).await {
        if matches!(e, Ok(SegmentEvent::Revoked)) {
            n += 1;
            if until_revoked {
                break;
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_handle_revokes_exactly_once_whatever_races_it() {
    let start = |id: u32| Node::builder().ignore_environment().id(id).start();
    let a_id = 5_000_000 + (rand::random::<u32>() % 500_000) * 4;
    let (a, b) = (start(a_id).await.unwrap(), start(a_id + 1).await.unwrap());
    let (ctrl_a, ctrl_b) = (
        a.controller("tcp0").await.unwrap(),
        b.controller("tcp0").await.unwrap(),
    );
    for round in 0..30 {
        let seg = ctrl_a.export(1 << 16, ExportFlags::empty()).unwrap();
        let id = seg.publish(None, &[]).await.unwrap();
        let imp = ctrl_b.import(NodeId(a_id), id, Perm::RDWR).await.unwrap();
        let mut events = imp.events();
        // The dispatcher's look-ups: each holds the export for a moment.
        let (ctx, stop) = (Arc::clone(&a.inner.state), Arc::new(AtomicBool::new(false)));
        let upgrader = std::thread::spawn({
            let (ctx, stop) = (Arc::clone(&ctx), Arc::clone(&stop));
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let held = ctx.export(id.get());
                    std::hint::spin_loop();
                    drop(held);
                }
            }
        });
        // Handles cloned and dropped on four threads at once; the test's own goes first.
        let go = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (seg, go) = (seg.clone(), Arc::clone(&go));
                std::thread::spawn(move || {
                    go.wait();
                    for _ in 0..100 {
                        drop(seg.clone());
                    }
                    drop(seg);
                })
            })
            .collect();
        drop(seg);
        for t in threads {
            t.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        upgrader.join().unwrap();
        // The importer was told once, and the id is free once it acknowledged.
        let first = revokes(&mut events, Duration::from_secs(6), true).await;
        assert_eq!(
            first, 1,
            "round {round}: the last handle's drop did not revoke"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(6);
        while ctx.export(id.get()).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: id held"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let again = revokes(&mut events, Duration::from_millis(20), false).await;
        assert_eq!(again, 0, "round {round}: revoked twice");
        let e = imp.put(0, vec![1u8; 8]).await.unwrap_err();
        assert!(e.error().is_unreachable(), "round {round}: {}", e.error());
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A forked child's republish and destroy are refused, and its last handle dropped, before
/// any lock is taken: a lock another thread of the parent held at the fork stays held in
/// the child for ever.
#[test]
fn a_forked_child_is_refused_before_any_lock() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = 5_600_000 + (rand::random::<u32>() % 100_000) * 2;
    let node = rt
        .block_on(Node::builder().ignore_environment().id(id).start())
        .unwrap();
    let ctrl = rt.block_on(node.controller("loopback")).unwrap();
    let seg = ctrl.export(1 << 16, ExportFlags::empty()).unwrap();
    rt.block_on(seg.publish(None, &[])).unwrap();
    // As a parent's engine or dispatcher thread may hold it at the fork.
    let inner = Arc::clone(&seg.inner);
    let held = inner.lock();
    // SAFETY: the child only runs `republish`, `destroy` and the handle's drop, which must
    // refuse it or do nothing before taking a lock (glibc makes malloc fork-safe), and
    // leaves with `_exit`, running no other destructor.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = |r: crate::Result<()>| r.map_or_else(|e| e.code(), |()| 0);
        let republished = code(futures::executor::block_on(seg.republish(&[])));
        // A clone destroyed, then the last handle dropped: neither touches the parent's.
        let destroyed = code(futures::executor::block_on(seg.clone().destroy()));
        drop(seg);
        let both = if republished == destroyed {
            republished
        } else {
            99
        };
        // SAFETY: ends the forked child without returning into the test harness.
        unsafe { libc::_exit(both) };
    }
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut status = 0;
    loop {
        // SAFETY: pid is this process's child; status is a valid out-parameter.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: pid is this process's child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the forked child hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        12,
        "RSMERR_NOT_CREATOR from both"
    );
    // The parent's segment is whole.
    rt.block_on(seg.republish(&[])).unwrap();
    rt.block_on(seg.destroy()).unwrap();
    rt.block_on(node.shutdown());
}
