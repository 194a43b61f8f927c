//! The export side across processes: unpublish and destroy with connected importers (the
//! two-phase revoke), republishing afterwards, and the creator rule after `fork`.

mod common;

use common::*;
use rsm::{ExportFlags, Node, Perm};
use std::time::{Duration, Instant};

#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter(),
        Some("forker") => forker(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// Publishes a segment; `unpublish`, `destroy`, `publish` and `importers` act on it.
fn exporter() {
    let rt = runtime();
    let node_id: u32 = arg("NODE_ID").parse().unwrap();
    let (node, ctrl) = rt.block_on(async {
        let node = node(node_id).await;
        let ctrl = node.controller(&arg("CTRL")).await.unwrap();
        (node, ctrl)
    });
    let mut seg = Some(ctrl.export(1 << 20, ExportFlags::ALLOW_REBIND).unwrap());
    let id = rt
        .block_on(seg.as_ref().unwrap().publish(None, &[]))
        .unwrap();
    say(format!("ready {}", id.get()));
    while let Some(cmd) = next_command() {
        let t = Instant::now();
        match cmd.as_str() {
            "unpublish" => {
                rt.block_on(seg.as_ref().unwrap().unpublish()).unwrap();
                say(format!("ok {}", t.elapsed().as_millis()));
            }
            "destroy" => {
                rt.block_on(seg.take().unwrap().destroy()).unwrap();
                say(format!("ok {}", t.elapsed().as_millis()));
            }
            "publish" => {
                let s =
                    seg.get_or_insert_with(|| ctrl.export(1 << 20, ExportFlags::empty()).unwrap());
                let id = rt.block_on(s.publish(None, &[])).unwrap();
                say(format!("ready {}", id.get()));
            }
            "importers" => say(seg.as_ref().map_or(0, |s| s.importer_count())),
            "rebind" => {
                rt.block_on(seg.as_ref().unwrap().rebind(Pages::new(1 << 20, 0)))
                    .unwrap();
                say(format!("ok {}", t.elapsed().as_millis()));
            }
            cmd if cmd.starts_with("peek ") => {
                let off: u64 = cmd[5..].parse().unwrap();
                let mut b = [0u8; 8];
                seg.as_ref().unwrap().read_at(off, &mut b).unwrap();
                say(u64::from_le_bytes(b));
            }
            "quit" | "" => break,
            other => panic!("unknown command {other}"),
        }
    }
    rt.block_on(node.shutdown());
}

fn start_exporter(ctrl: &str) -> (Peer, u32, u32) {
    let id = fresh_node_id();
    let peer = Peer::start(
        "role_entry",
        "exporter",
        &[("NODE_ID", id.to_string()), ("CTRL", ctrl.to_string())],
    );
    let segid = peer
        .recv()
        .strip_prefix("ready ")
        .expect("ready")
        .parse()
        .unwrap();
    (peer, id, segid)
}

/// Unpublish (or destroy) while the importer has puts in flight: the importer's operations
/// end in CONN_ABORTED within 5 s, the exporter stays sound, and a new segment can be
/// imported afterwards.
fn revoke_aborts_importers(ctrl: &str, how: &str) {
    let _serial = serial();
    let (mut peer, exporter, segid) = start_exporter(ctrl);
    let rt = runtime();
    let node = rt
        .block_on(
            Node::builder()
                .ignore_environment()
                .id(fresh_node_id() + 1)
                .start(),
        )
        .unwrap();
    let c = rt.block_on(node.controller(ctrl)).unwrap();
    let imp = rt
        .block_on(c.import(rsm::NodeId(exporter), rsm::SegmentId(segid), Perm::RDWR))
        .unwrap();
    rt.block_on(imp.put(0, vec![1u8; 64])).unwrap();
    assert_eq!(peer.ask("importers"), "1");

    let writer = imp.clone();
    let busy = rt.spawn(async move {
        let started = Instant::now();
        loop {
            let (res, _) = common::split(writer.put(4096, vec![2u8; 65_536]).await);
            if let Err(e) = res {
                return (e.code(), started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(30) {
                return (0, started.elapsed());
            }
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let answer = peer.ask(how);
    assert!(answer.starts_with("ok"), "{ctrl}: {how}: {answer}");
    let (code, _) = rt.block_on(busy).unwrap();
    assert_eq!(
        code, 40,
        "{ctrl}: {how} ends the importer's operations in CONN_ABORTED"
    );
    assert!(
        t.elapsed() < Duration::from_secs(7),
        "{ctrl}: {how} took {:?}",
        t.elapsed()
    );
    let (res, buf) = common::split(rt.block_on(imp.put(0, vec![3u8; 8])));
    assert_eq!(
        res.unwrap_err().code(),
        40,
        "{ctrl}: later puts are CONN_ABORTED"
    );
    assert!(buf.is_some(), "a refused put gives its buffer back");
    let (res, _) = common::split(rt.block_on(imp.get(0, vec![0u8; 8])));
    assert_eq!(res.unwrap_err().code(), 40);

    // The importer cleans up and imports the segment the exporter publishes next.
    rt.block_on(imp.disconnect()).unwrap();
    let again: u32 = peer
        .ask("publish")
        .strip_prefix("ready ")
        .unwrap()
        .parse()
        .unwrap();
    let imp2 = rt
        .block_on(c.import(rsm::NodeId(exporter), rsm::SegmentId(again), Perm::RDWR))
        .unwrap();
    rt.block_on(imp2.put(0, vec![4u8; 4096])).unwrap();
    let (res, got) = common::split(rt.block_on(imp2.get(0, vec![0u8; 4096])));
    res.unwrap();
    assert_eq!(got.unwrap(), vec![4u8; 4096]);
    if how == "unpublish" {
        // The old id is free again: importing it fails as not published.
        if again != segid {
            let e = rt
                .block_on(c.import(rsm::NodeId(exporter), rsm::SegmentId(segid), Perm::RDWR))
                .unwrap_err();
            assert_eq!(e.code(), 7, "{ctrl}: the unpublished id is gone");
        }
    }
    rt.block_on(node.shutdown());
    assert!(peer.quit(), "the exporter stayed sound and exits cleanly");
}

#[test]
fn tcp_unpublish_aborts_importers() {
    revoke_aborts_importers("tcp0", "unpublish");
}
#[test]
fn shm_unpublish_aborts_importers() {
    revoke_aborts_importers("shm0", "unpublish");
}
#[test]
fn sockets_unpublish_aborts_importers() {
    revoke_aborts_importers("sockets0", "unpublish");
}
#[test]
fn tcp_destroy_aborts_importers() {
    revoke_aborts_importers("tcp0", "destroy");
}
#[test]
fn shm_destroy_aborts_importers() {
    revoke_aborts_importers("shm0", "destroy");
}
#[test]
fn sockets_destroy_aborts_importers() {
    revoke_aborts_importers("sockets0", "destroy");
}

/// Exports a segment, then forks: in the child, the segment refuses with NOT_CREATOR.
fn forker() {
    let rt = runtime();
    let node = rt
        .block_on(
            Node::builder()
                .ignore_environment()
                .id(arg("NODE_ID").parse::<u32>().unwrap())
                .start(),
        )
        .unwrap();
    let ctrl = rt.block_on(node.controller("tcp0")).unwrap();
    let seg = ctrl.export(1 << 16, ExportFlags::empty()).unwrap();
    // SAFETY: the child only runs code that takes no lock another thread could hold at the
    // fork (glibc makes malloc fork-safe; the checks below touch no runtime), then _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = futures::executor::block_on(seg.publish(rsm::SegmentId(0x0040_1000), &[]))
            .map_err(|e| e.code());
        let unpub = futures::executor::block_on(seg.unpublish()).map_err(|e| e.code());
        let ok = code == Err(12) && unpub == Err(12);
        // SAFETY: _exit ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: pid is our child; status is a valid out-parameter.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let child_ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    // The creator itself still may publish.
    let published = rt
        .block_on(seg.publish(rsm::SegmentId(0x0040_1000), &[]))
        .is_ok();
    say(format!("{child_ok} {published}"));
    rt.block_on(node.shutdown());
}

#[test]
fn a_forked_child_is_not_the_creator() {
    let _serial = serial();
    let mut peer = Peer::start(
        "role_entry",
        "forker",
        &[("NODE_ID", fresh_node_id().to_string())],
    );
    assert_eq!(
        peer.recv(),
        "true true",
        "the child gets NOT_CREATOR, the creator publishes"
    );
    peer.kill();
}

/// Rebind with a connected importer in another process: it keeps its handle, and its next
/// put lands in the new memory (which starts empty: rebind copies nothing).
fn rebind_moves_importers(ctrl: &str) {
    let _serial = serial();
    let (mut peer, exporter, segid) = start_exporter(ctrl);
    let rt = runtime();
    let node = rt
        .block_on(
            Node::builder()
                .ignore_environment()
                .id(fresh_node_id() + 1)
                .start(),
        )
        .unwrap();
    let c = rt.block_on(node.controller(ctrl)).unwrap();
    let imp = rt
        .block_on(c.import(rsm::NodeId(exporter), rsm::SegmentId(segid), Perm::RDWR))
        .unwrap();
    rt.block_on(imp.put(0, 0x1111u64.to_le_bytes().to_vec()))
        .unwrap();
    assert_eq!(peer.ask("peek 0"), 0x1111.to_string());
    let answer = peer.ask("rebind");
    assert!(answer.starts_with("ok"), "{ctrl}: rebind: {answer}");
    rt.block_on(imp.put(8, 0x2222u64.to_le_bytes().to_vec()))
        .unwrap();
    assert_eq!(
        peer.ask("peek 8"),
        0x2222.to_string(),
        "{ctrl}: the put after the rebind lands in the new memory"
    );
    assert_eq!(
        peer.ask("peek 0"),
        "0",
        "{ctrl}: the new memory starts empty"
    );
    let (res, got) = common::split(rt.block_on(imp.get(8, vec![0u8; 8])));
    res.unwrap();
    assert_eq!(got.unwrap(), 0x2222u64.to_le_bytes().to_vec());
    rt.block_on(node.shutdown());
    assert!(peer.quit());
}

#[test]
fn tcp_rebind_moves_importers() {
    rebind_moves_importers("tcp0");
}
#[test]
fn shm_rebind_moves_importers() {
    rebind_moves_importers("shm0");
}
#[test]
fn sockets_rebind_moves_importers() {
    rebind_moves_importers("sockets0");
}
