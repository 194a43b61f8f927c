//! Resource limits: a child whose descriptor limit (`RLIMIT_NOFILE`) or address-space limit
//! (`RLIMIT_AS`) is low does exports, publishes and imports until one fails. Every failure
//! is an `rsm::Error` with a clear code, nothing panics or aborts, and once resources are
//! freed the same work succeeds again.

use crate::common::{self, say};
use rsm::{Controller, ExportFlags, ExportSegment, ImportSegment, NodeId, Perm, SegmentId};
use std::time::Duration;

pub fn role(other: &str) {
    match other {
        "nofile" => nofile_role(),
        "memlimit" => memlimit_role(),
        _ => panic!("unknown role {other}"),
    }
}

/// Sets the soft limit of `resource` (the hard one stays).
fn set_limit(resource: libc::__rlimit_resource_t, soft: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid resource and a pointer to a live rlimit.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut lim) }, 0);
    lim.rlim_cur = soft.min(lim.rlim_max);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(resource, &lim) }, 0);
}

/// One export of `size` bytes, published, and an import of the peer's segment `peer_seg`,
/// written and read.
async fn pair_up(
    ctrl: &Controller,
    peer: NodeId,
    peer_seg: SegmentId,
    size: usize,
) -> rsm::Result<(ExportSegment, ImportSegment)> {
    let seg = ctrl.export(size, ExportFlags::empty())?;
    if let Err(e) = seg.publish(None, &[]).await {
        let _ = seg.destroy().await;
        return Err(e);
    }
    let imp = match ctrl.import(peer, peer_seg, Perm::RDWR).await {
        Ok(imp) => imp,
        Err(e) => {
            let _ = seg.destroy().await;
            return Err(e);
        }
    };
    let data = common::pattern(u64::from(seg.id().map_or(0, SegmentId::get)), 64);
    let work = async {
        imp.put(0, data.clone())
            .await
            .map_err(|e| e.into_parts().0)?;
        let (_, back) = imp
            .get(0, vec![0u8; 64])
            .await
            .map_err(|e| e.into_parts().0)?;
        Ok::<_, rsm::Error>(back)
    };
    match work.await {
        Ok(back) if back == data => Ok((seg, imp)),
        Ok(_) => panic!("the data read back differs"),
        Err(e) => {
            let _ = imp.disconnect().await;
            let _ = seg.destroy().await;
            Err(e)
        }
    }
}

/// Says how a step failed: `<what> <RSMERR name> <text>`.
fn failed(what: &str, e: &rsm::Error) {
    say(format!("{what} {} {e}", e.name()));
}

/// A node `NODE_ID` on `CTRL` under a soft descriptor limit of `NOFILE`: exports of its
/// own and imports of segment `PEER_SEG` of node `PEER` (a process without the limit), in
/// pairs, until one fails; then half of them freed and one more pair made. Says `start ...`
/// or `controller ...` when those fail first, else `limit <pairs> <error>` (or `limit
/// none`), `again ok` (or `again <error>`), `done`.
fn nofile_role() {
    set_limit(libc::RLIMIT_NOFILE, common::arg("NOFILE").parse().unwrap());
    let rt = common::runtime();
    let ctrl = common::arg("CTRL");
    let id: u32 = common::arg("NODE_ID").parse().unwrap();
    let peer = NodeId(common::arg("PEER").parse().unwrap());
    let peer_seg = SegmentId(common::arg("PEER_SEG").parse().unwrap());
    rt.block_on(async {
        let node = match rsm::Node::builder()
            .ignore_environment()
            .id(id)
            .start()
            .await
        {
            Ok(n) => n,
            Err(e) => return failed("start", &e),
        };
        let c = match node.controller(&ctrl).await {
            Ok(c) => c,
            Err(e) => {
                failed("controller", &e);
                node.shutdown().await;
                return say("done");
            }
        };
        let mut held = Vec::new();
        loop {
            let made =
                tokio::time::timeout(Duration::from_secs(10), pair_up(&c, peer, peer_seg, 4096))
                    .await;
            match made {
                Ok(Ok(p)) => held.push(p),
                Ok(Err(e)) => {
                    failed(&format!("limit {}", held.len()), &e);
                    break;
                }
                Err(_) => {
                    say(format!("limit {} hang", held.len()));
                    break;
                }
            }
            if held.len() >= 300 {
                say("limit none");
                break;
            }
        }
        // Half freed: room again.
        for (seg, imp) in held.drain(..held.len().div_ceil(2)) {
            let _ = imp.disconnect().await;
            let _ = seg.destroy().await;
        }
        match tokio::time::timeout(Duration::from_secs(10), pair_up(&c, peer, peer_seg, 4096)).await
        {
            Ok(Ok(p)) => {
                held.push(p);
                say("again ok");
            }
            Ok(Err(e)) => failed("again", &e),
            Err(_) => say("again hang"),
        }
        for (seg, imp) in held {
            let _ = imp.disconnect().await;
            let _ = seg.destroy().await;
        }
        drop(c);
        node.shutdown().await;
        say("done");
    });
}

/// The VmSize of this process in bytes.
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A node on `CTRL` importing `PEER_SEG` of `PEER`, then an address-space limit 256 MiB above what the process uses:
/// a 1 GiB export and 1 GiB of local memory fail (`export <error>`, `local <error>`), a
/// small pair still works (`again ok`), `done`.
fn memlimit_role() {
    let rt = common::runtime();
    let ctrl = common::arg("CTRL");
    let id: u32 = common::arg("NODE_ID").parse().unwrap();
    rt.block_on(async {
        let peer = NodeId(common::arg("PEER").parse().unwrap());
        let peer_seg = SegmentId(common::arg("PEER_SEG").parse().unwrap());
        let a = common::node(id).await;
        let ca = a.controller(&ctrl).await.unwrap();
        // Everything this test needs once, before the limit: threads, links, registrations.
        let (seg, imp) = pair_up(&ca, peer, peer_seg, 1 << 20).await.unwrap();
        imp.disconnect().await.unwrap();
        seg.destroy().await.unwrap();
        set_limit(libc::RLIMIT_AS, vm_size() + (256 << 20));
        match ca.export(1 << 30, ExportFlags::empty()) {
            Ok(_) => say("export ok"),
            Err(e) => failed("export", &e),
        }
        match ca.local_memory(1 << 30).await {
            Ok(_) => say("local ok"),
            Err(e) => failed("local", &e),
        }
        match pair_up(&ca, peer, peer_seg, 1 << 20).await {
            Ok((seg, imp)) => {
                imp.disconnect().await.unwrap();
                seg.destroy().await.unwrap();
                say("again ok");
            }
            Err(e) => failed("again", &e),
        }
        drop(ca);
        a.shutdown().await;
        say("done");
    });
}
