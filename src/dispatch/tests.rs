//! The dispatcher's unit tests.

use crate::export::entry::requester;

/// Descriptors a loopback connection holds (a memfd, a doorbell page, two eventfds).
const LOOPBACK_DESCRIPTORS: usize = 4;
use super::*;
use crate::events::route::decode;
use crate::events::route::{Sent, from_peer};
use crate::sans_io::wire::ByteOrder;
use crate::sans_io::wire::{ConnectReply, ConnectRequest};
use crate::sidechannel::PeerCreds;

fn request() -> ConnectRequest {
    ConnectRequest {
        req: 1,
        segment_id: 0x400000,
        controller: "tcp".into(),
        perm: 0o600,
        uid: 0,
        gid: 0,
        groups: vec![0, 4],
        fabric_addr: Vec::new(),
        signal_token: 0,
        doorbell: None,
        admission: Vec::new(),
    }
}

fn own(node: u32, incarnation: u64) -> Owner {
    Owner { node, incarnation }
}

/// A link's view of peer `o`.
fn link(o: Owner) -> PeerInfo {
    PeerInfo {
        node_id: o.node,
        incarnation: o.incarnation,
        ..peer(None)
    }
}

/// A context with no side channel, and its dispatcher.
fn context() -> (tokio::runtime::Runtime, Arc<NodeContext>, Arc<NodeHandler>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ctx = NodeContext::new(rt.handle().clone());
    let handler = NodeHandler::new(&ctx);
    (rt, ctx, handler)
}

#[test]
fn connection_ids_are_random_unique_and_fit_a_doorbell_word() {
    let (_rt, ctx, _) = context();
    let ids: Vec<u64> = (0..1000)
        .map(|_| {
            ctx.open_conn(0x400000, own(7, 1), 0, (None, 0))
                .expect("open")
        })
        .collect();
    let unique: std::collections::HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len());
    assert!(
        ids.iter()
            .all(|&c| c != 0 && c <= crate::events::route::MAX_BELL_TOKEN)
    );
    // Not counted up: a peer cannot name another's connection from its own.
    let consecutive = ids.windows(2).filter(|w| w[1] == w[0] + 1).count();
    assert!(consecutive < 10, "{consecutive} consecutive ids");
}

#[test]
fn only_the_owner_disconnects_its_connection() {
    let (_rt, ctx, handler) = context();
    let conn = ctx
        .open_conn(0x400000, own(7, 1), 0, (None, 0))
        .expect("open");
    // Another node, then the same node under another incarnation: nothing happens.
    for intruder in [own(8, 1), own(7, 2)] {
        let reply = handler.on_message(&link(intruder), Message::Disconnect { conn_id: conn });
        assert!(reply.is_none());
        assert_eq!(ctx.conn_owner(conn), Some(own(7, 1)), "{intruder:?}");
    }
    handler.on_message(&link(own(7, 1)), Message::Disconnect { conn_id: conn });
    assert_eq!(ctx.conn_owner(conn), None);
}

#[test]
fn acknowledgements_count_only_from_the_peer_they_are_awaited_from() {
    let (_rt, ctx, handler) = context();
    let conn = 0x1234;
    let mut revoke = ctx.await_ack(Ack::Revoke(conn), own(7, 1));
    let mut rebind = ctx.await_ack(Ack::Rebind(conn, 3), own(7, 1));
    for intruder in [own(8, 1), own(7, 2)] {
        handler.on_message(
            &link(intruder),
            Message::RevokeAck {
                conn_id: conn,
                generation: 1,
            },
        );
        handler.on_message(
            &link(intruder),
            Message::RebindAck {
                conn_id: conn,
                generation: 3,
            },
        );
        assert!(revoke.try_recv().is_err(), "{intruder:?}");
        assert!(rebind.try_recv().is_err(), "{intruder:?}");
    }
    handler.on_message(
        &link(own(7, 1)),
        Message::RevokeAck {
            conn_id: conn,
            generation: 1,
        },
    );
    handler.on_message(
        &link(own(7, 1)),
        Message::RebindAck {
            conn_id: conn,
            generation: 3,
        },
    );
    assert!(revoke.try_recv().is_ok());
    assert!(rebind.try_recv().is_ok());
}

#[test]
fn the_node_and_each_uid_bound_connections_whatever_ids_the_peers_claim() {
    let (_rt, ctx, _) = context();
    ctx.set_limits(
        crate::Limits::default()
            .connections(6)
            .connections_per_uid(3),
    );
    // Three self-made ids of uid 1000, one connection each: the uid's share.
    for node in 10..13 {
        ctx.open_conn(1, own(node, 1), 0, (Some(1000), 0))
            .expect("within uid 1000's share");
    }
    let e = ctx
        .open_conn(1, own(13, 1), 0, (Some(1000), 0))
        .unwrap_err();
    assert!(matches!(e, Error::InsufficientResources(_)), "{e}");
    assert!(e.to_string().contains("connections_per_uid"), "{e}");
    // Another uid, and a TCP peer (no uid), still get in, up to the node's bound.
    ctx.open_conn(1, own(20, 1), 0, (Some(1001), 0))
        .expect("another uid");
    let last = ctx.open_conn(1, own(21, 1), 0, (None, 0)).expect("tcp");
    ctx.open_conn(1, own(22, 1), 0, (None, 0)).expect("tcp");
    let e = ctx.open_conn(1, own(23, 1), 0, (None, 0)).unwrap_err();
    assert!(e.to_string().contains("Limits::connections)"), "{e}");
    ctx.remove_conn(last);
    ctx.open_conn(1, own(23, 1), 0, (None, 0))
        .expect("room again");
}

#[test]
fn a_peer_beyond_its_connection_limits_is_refused_and_others_are_not() {
    let (_rt, ctx, _) = context();
    ctx.set_limits(
        crate::Limits::default()
            .connections_per_peer(2)
            .descriptors_per_peer(6)
            .connects_in_progress_per_peer(1),
    );
    let a = ctx.open_conn(1, own(7, 1), 0, (None, 0)).expect("first");
    ctx.open_conn(1, own(7, 2), LOOPBACK_DESCRIPTORS, (None, 0))
        .expect("second, another incarnation");
    let e = ctx.open_conn(1, own(7, 1), 0, (None, 0)).unwrap_err();
    assert!(matches!(e, Error::InsufficientResources(_)), "{e}");
    assert!(e.to_string().contains("connections_per_peer"), "{e}");
    // Another node is served all the same.
    ctx.open_conn(1, own(8, 1), LOOPBACK_DESCRIPTORS, (None, 0))
        .expect("another node");
    // A connection that ends makes room; descriptors have their own bound.
    ctx.remove_conn(a);
    let e = ctx
        .open_conn(1, own(7, 1), LOOPBACK_DESCRIPTORS, (None, 0))
        .unwrap_err();
    assert!(e.to_string().contains("descriptors_per_peer"), "{e}");
    ctx.open_conn(1, own(7, 1), 0, (None, 0))
        .expect("room again");
    // Connect requests in progress, per node.
    let first = ctx.begin_connect(7).expect("first request");
    let e = ctx.begin_connect(7).err().expect("beyond the limit");
    assert!(
        e.to_string().contains("connects_in_progress_per_peer"),
        "{e}"
    );
    let _other = ctx.begin_connect(8).expect("another node");
    drop(first);
    ctx.begin_connect(7).expect("after the first answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_and_notices_count_only_from_the_connections_peer() {
    use crate::{ExportFlags, Node, NodeId, Perm};
    let start = |id: u32| Node::builder().ignore_environment().id(id).start();
    let a_id = 3_000_000 + (rand::random::<u32>() % 500_000) * 4;
    let (a, b) = (start(a_id).await.unwrap(), start(a_id + 1).await.unwrap());
    let seg = a.controller("tcp0").await.unwrap();
    let seg = seg.export(1 << 16, ExportFlags::empty()).unwrap();
    let id = seg.publish(None, &[]).await.unwrap();
    let ctrl = b.controller("tcp0").await.unwrap();
    let imp = ctrl.import(NodeId(a_id), id, Perm::RDWR).await.unwrap();
    let (ha, hb) = (
        NodeHandler::new(&a.inner.state),
        NodeHandler::new(&b.inner.state),
    );
    let conn = imp.connection_id();
    let (a_own, b_own) = (own(a_id, a.incarnation()), own(a_id + 1, b.incarnation()));
    let c_own = own(a_id + 2, 1);
    // At the exporter: a third node, or the importer's node under another incarnation,
    // neither signals nor ends the connection.
    for intruder in [c_own, own(b_own.node, b_own.incarnation ^ 1)] {
        let signal = Message::Signal {
            conn_id: conn,
            flags: 0,
        };
        ha.on_message(&link(intruder), signal);
        ha.on_message(&link(intruder), Message::Disconnect { conn_id: conn });
    }
    assert_eq!(seg.pending_signals(), 0);
    assert_eq!(seg.importer_count(), 1);
    ha.on_message(
        &link(b_own),
        Message::Signal {
            conn_id: conn,
            flags: 0,
        },
    );
    assert_eq!(seg.pending_signals(), 1);
    // At the importer: a revoke or rebind from a third node, or from the exporter's
    // node under another incarnation, changes nothing (a rebind to key 0 would break it).
    for intruder in [c_own, own(a_own.node, a_own.incarnation ^ 1)] {
        let revoke = Message::Revoke {
            conn_id: conn,
            generation: 1,
        };
        hb.on_message(&link(intruder), revoke);
        let rebind = Message::Rebind {
            conn_id: conn,
            generation: 2,
            keys: vec![0],
            base: 0,
        };
        hb.on_message(&link(intruder), rebind);
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    imp.put(0, vec![7u8; 64])
        .await
        .expect("the import still works");
    let (_, back) = imp.get(0, vec![0u8; 64]).await.expect("get");
    assert_eq!(back, vec![7u8; 64]);
    // The exporter's own revoke still reaches the importer.
    seg.destroy().await.unwrap();
    let e = imp.put(0, vec![1u8; 8]).await.unwrap_err();
    assert!(matches!(e.error(), Error::ConnAborted(_)), "{}", e.error());
    drop(imp);
    a.shutdown().await;
    b.shutdown().await;
}

fn peer(creds: Option<PeerCreds>) -> PeerInfo {
    PeerInfo {
        node_id: 7,
        incarnation: 1,
        byte_order: ByteOrder::native(),
        same_host: creds.is_some(),
        creds,
        doorbells: Vec::new(),
        link_id: 1,
    }
}

/// A connect whose fabric address the provider could not parse is refused before the
/// exporter admits anyone (RSMERR_BAD_ADDR), and no key goes back.
#[test]
fn hostile_fabric_addresses_are_refused_at_connect() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let id = 7_000_000 + (rand::random::<u32>() % 1_000_000) * 2;
        let node = crate::Node::builder()
            .ignore_environment()
            .id(id)
            .start()
            .await
            .unwrap();
        let ctrl = node.controller("tcp0").await.unwrap();
        let seg = ctrl.export(4096, crate::ExportFlags::empty()).unwrap();
        let segid = seg.publish(None, &[]).await.unwrap();
        let ctx = Arc::clone(&node.inner.state);
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        for hostile in [Vec::new(), vec![0xff; 16], v4, vec![2, 0, 1], vec![7; 600]] {
            let r = ConnectRequest {
                segment_id: segid.get(),
                perm: 0o400,
                fabric_addr: hostile.clone(),
                ..request()
            };
            match handle_connect(&ctx, &peer(None), r) {
                Message::ConnectReply(ConnectReply {
                    result: Err(code), ..
                }) => {
                    assert_eq!(code, 16, "{hostile:?}: RSMERR_BAD_ADDR")
                }
                other => panic!("{hostile:?} was answered {other:?}"),
            }
        }
        assert_eq!(seg.importer_count(), 0);
        seg.destroy().await.unwrap();
        node.shutdown().await;
    });
}

#[test]
fn kernel_credentials_replace_the_claimed_ids() {
    let r = request();
    let p = peer(Some(PeerCreds {
        pid: Some(42),
        uid: 65534,
        gid: 65533,
        groups: vec![100],
    }));
    let who = requester(&p, &r);
    assert_eq!((who.node, who.uid, who.gid), (7, 65534, 65533));
    assert_eq!(who.groups, &[100]);
    // The kernel reported no groups: the claimed ones are not used either.
    let p = peer(Some(PeerCreds {
        pid: None,
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    }));
    assert!(requester(&p, &r).groups.is_empty());
}

#[test]
fn a_signal_counts_only_from_the_connections_peer() {
    use crate::events::SignalFlags;
    use crate::events::route::encode;
    // The side channel's link names the node and its incarnation.
    let (me, other) = (own(7, 1), own(8, 1));
    assert!(from_peer(Sent::Side(me), me, 0));
    assert!(!from_peer(Sent::Side(other), me, 0));
    assert!(!from_peer(Sent::Side(own(7, 2)), me, 0));
    // A doorbell word's check must be the sender's token for the connection.
    let w = decode(encode(0x1234, 0xAB_CDEF, false, SignalFlags::empty()));
    assert_eq!(w.token, 0x1234);
    assert!(from_peer(Sent::Bell(w), me, 0xAB_CDEF));
    assert!(!from_peer(Sent::Bell(w), me, 0xAB_CDEE));
    // Whatever a peer writes decodes without a panic and fails its check.
    let hostile = decode(u64::MAX);
    assert!(!from_peer(Sent::Bell(hostile), me, 0xAB_CDEF));
}

#[test]
fn claimed_ids_count_without_kernel_credentials() {
    let r = request();
    let p = peer(None);
    let who = requester(&p, &r);
    assert_eq!((who.node, who.uid, who.gid), (7, 0, 0));
    assert_eq!(who.groups, &[0, 4]);
}

/// An export as the dispatcher sees it, which records what it was handed.
#[derive(Default)]
struct FakeExport {
    calls: std::sync::Mutex<Vec<String>>,
    /// Its id, and the one node it is listed to (the access check, faked).
    listed_to: Option<(u32, u32)>,
}

impl FakeExport {
    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().expect("calls"))
    }

    fn note(&self, call: String) {
        self.calls.lock().expect("calls").push(call);
    }
}

impl crate::entries::ExportEntry for FakeExport {
    fn connect(
        &self,
        peer: &PeerInfo,
        r: &ConnectRequest,
    ) -> crate::Result<crate::sans_io::wire::ConnectGrant> {
        self.note(format!("connect {} {:#o}", peer.node_id, r.perm));
        Err(crate::Error::perm_denied())
    }
    fn listing(
        &self,
        peer: &PeerInfo,
        r: &crate::sans_io::wire::SegmentsRequest,
    ) -> Option<crate::sans_io::wire::ListedSegment> {
        let (id, node) = self.listed_to?;
        (peer.node_id == node && (r.controller.is_empty() || r.controller == "tcp")).then(|| {
            crate::sans_io::wire::ListedSegment {
                id,
                size: 4096,
                perm: 0o400,
                controller: "tcp0".into(),
                name: None,
            }
        })
    }
    fn disconnect(&self, conn_id: u64) {
        self.note(format!("disconnect {conn_id:#x}"));
    }
    fn atomic(
        &self,
        from: Owner,
        r: &crate::sans_io::wire::AtomicRequest,
    ) -> crate::Result<(u64, Vec<u8>)> {
        self.note(format!("atomic {} {:#x}", from.node, r.conn_id));
        Ok((41, Vec::new()))
    }
    fn peer_lost(&self, lost: Owner) {
        self.note(format!("lost {} {}", lost.node, lost.incarnation));
    }
    fn signal(&self, node: u32, conn_id: u64, no_accumulate: bool) {
        self.note(format!("signal {node} {conn_id:#x} {no_accumulate}"));
    }
    fn bell(&self, from: u32, conn_id: u64, first_no_acc: bool, plain: u64) -> bool {
        self.note(format!("bell {from} {conn_id:#x} {first_no_acc} {plain}"));
        true
    }
    fn gauges(&self) -> (String, u64) {
        ("fake".into(), 0)
    }
    fn withdraw(self: Arc<Self>) {
        self.note("withdraw".into());
    }
}

/// The dispatcher alone, without sockets or segments: each message reaches the export it
/// names through its typed entry, only from the peer that may send it, and each request
/// gets its own reply type.
#[test]
fn each_message_reaches_the_entry_it_names_from_its_peer_only() {
    let (_rt, ctx, handler) = context();
    let export = Arc::new(FakeExport::default());
    let id = ctx.claim_segment_id(0x400000, None, &export).expect("id");
    let owner = own(7, 1);

    // A connect goes to the export; its refusal answers the request with the error's code.
    let reply = handler.on_message(&link(owner), Message::ConnectRequest(request()));
    let Some(Message::ConnectReply(ConnectReply { req: 1, result })) = reply else {
        panic!("no connect reply: {reply:?}");
    };
    assert_eq!(result, Err(crate::Error::perm_denied().code() as u32));
    assert_eq!(export.calls(), ["connect 7 0o600"]);
    // For a segment nobody published: no export is asked.
    let mut other = request();
    other.segment_id = id + 1;
    handler.on_message(&link(owner), Message::ConnectRequest(other));
    assert!(export.calls().is_empty());

    // An atomic on a connection of the export is the export's; its reply carries its value.
    let conn = ctx.open_conn(id, owner, 0, (None, 0)).expect("open");
    ctx.signals
        .add_importer(conn, owner.node, 0x77, None, Default::default(), None);
    let atomic = crate::sans_io::wire::AtomicRequest {
        req: 9,
        conn_id: conn,
        class: 0,
        op: 0,
        datatype: 0,
        offset: 0,
        operand: 0,
        compare: 0,
    };
    let reply = handler.on_message(&link(owner), Message::AtomicRequest(atomic));
    assert!(
        matches!(reply, Some(Message::AtomicReply(ref r)) if r.req == 9 && r.result == Ok(41)),
        "{reply:?}"
    );
    assert_eq!(export.calls(), [format!("atomic 7 {conn:#x}")]);

    // A signal over the side channel counts from the connection's owner only.
    for from in [own(8, 1), own(7, 2), owner] {
        handler.on_message(
            &link(from),
            Message::Signal {
                conn_id: conn,
                flags: 0,
            },
        );
    }
    assert_eq!(export.calls(), [format!("signal 7 {conn:#x} false")]);

    // A disconnect by another node is dropped; by the owner it reaches the export.
    handler.on_message(&link(own(8, 1)), Message::Disconnect { conn_id: conn });
    assert!(export.calls().is_empty());
    handler.on_message(&link(owner), Message::Disconnect { conn_id: conn });
    assert_eq!(export.calls(), [format!("disconnect {conn:#x}")]);

    // A lost peer is every export's to forget; the node's shutdown withdraws each.
    handler.on_peer_lost(7, 1);
    assert_eq!(export.calls(), ["lost 7 1"]);
    crate::export::retire::withdraw_all(&ctx);
    assert_eq!(export.calls(), ["withdraw"]);
}

/// An import as the dispatcher sees it, which records what it was handed.
struct FakeImport {
    exporter: Owner,
    conn_id: u64,
    calls: std::sync::Mutex<Vec<String>>,
}

impl FakeImport {
    fn new(exporter: Owner, conn_id: u64) -> Arc<Self> {
        Arc::new(FakeImport {
            exporter,
            conn_id,
            calls: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().expect("calls"))
    }

    fn note(&self, call: String) {
        self.calls.lock().expect("calls").push(call);
    }
}

impl crate::entries::ImportEntry for FakeImport {
    fn exporter(&self) -> Owner {
        self.exporter
    }
    fn conn_id(&self) -> u64 {
        self.conn_id
    }
    fn lost(&self, _err: crate::Error) {
        self.note("lost".into());
    }
    fn transport(&self) -> Option<(&str, &[u8])> {
        None
    }
    fn reset_transport(&self) {}
    fn revoked(self: Arc<Self>) -> futures::future::BoxFuture<'static, ()> {
        self.note("revoked".into());
        Box::pin(async {})
    }
    fn rebound(
        self: Arc<Self>,
        base: u64,
        key: u64,
        map: Option<u64>,
        generation: u32,
    ) -> futures::future::BoxFuture<'static, ()> {
        self.note(format!("rebound {base:#x} {key:#x} {map:?} {generation}"));
        Box::pin(async {})
    }
    fn signal(&self, no_accumulate: bool) {
        self.note(format!("signal {no_accumulate}"));
    }
    fn bell(&self, first_no_acc: bool, plain: u64) {
        self.note(format!("bell {first_no_acc} {plain}"));
    }
    fn gauges(&self) -> Option<String> {
        None
    }
}

/// The importer's side decided without sockets or tasks: a notice reaches the import only
/// from the exporter's incarnation that granted it, and its acknowledgement is an action
/// for the driver, due once the import let go; a notice for no import is answered at once.
#[test]
fn notices_decide_their_acknowledgements_from_the_granting_exporter_only() {
    let (_rt, ctx, _) = context();
    let exporter = own(5, 9);
    let conn = 0xabc;
    let imp = FakeImport::new(exporter, conn);
    ctx.add_import(exporter, conn, ctx.loss_mark(), &imp)
        .expect("registered");
    let revoke = Message::Revoke {
        conn_id: conn,
        generation: 1,
    };

    // Another incarnation of the exporter: the import hears nothing, and nothing is
    // answered. Another node names a connection of its own, which this node has no
    // import of: answered at once, and the import hears nothing either.
    let action = decide(&ctx, &link(own(5, 10)), revoke.clone());
    assert!(action.is_none(), "{action:?}");
    let action = decide(&ctx, &link(own(6, 9)), revoke.clone());
    assert!(
        matches!(action, Some(Action::Reply(Message::RevokeAck { .. }))),
        "{action:?}"
    );
    assert!(imp.calls().is_empty());

    // The exporter: the import is revoked, and acknowledges to that incarnation once done.
    let action = decide(&ctx, &link(exporter), revoke.clone());
    let Some(Action::NotifyAfter { to, msg, .. }) = action else {
        panic!("no acknowledgement: {action:?}");
    };
    assert_eq!(to, exporter);
    assert!(matches!(msg, Message::RevokeAck { conn_id, generation: 1 } if conn_id == conn));
    assert_eq!(imp.calls(), ["revoked"]);

    // A rebind with a key moves the import; one without is acknowledged at once.
    let rebind = |keys: Vec<u64>| Message::Rebind {
        conn_id: conn,
        generation: 2,
        keys,
        base: 0x1000,
    };
    let action = decide(&ctx, &link(exporter), rebind(vec![0x77]));
    assert!(
        matches!(action, Some(Action::NotifyAfter { .. })),
        "{action:?}"
    );
    assert_eq!(imp.calls(), ["rebound 0x1000 0x77 None 2"]);
    let action = decide(&ctx, &link(exporter), rebind(Vec::new()));
    assert!(
        matches!(action, Some(Action::Reply(Message::RebindAck { .. }))),
        "{action:?}"
    );

    // A revoke for a connection this node has no import of is answered at once.
    let other = Message::Revoke {
        conn_id: conn + 1,
        generation: 1,
    };
    let action = decide(&ctx, &link(exporter), other);
    assert!(
        matches!(action, Some(Action::Reply(Message::RevokeAck { .. }))),
        "{action:?}"
    );

    // A peer's wake is the driver's to carry out.
    let wake = Message::Wake {
        controller: "shm0".into(),
    };
    let action = decide(&ctx, &link(exporter), wake);
    assert!(
        matches!(action, Some(Action::Wake(ref c)) if c == "shm0"),
        "{action:?}"
    );
}

/// A listing decided with fake exports: each peer gets exactly the segments whose entry
/// lists them to it, in id order, in pages of at most `MAX_LISTED` with `more` only when
/// another follows; an export gone, or another controller type, is not listed.
#[test]
fn a_listing_names_only_what_the_peer_may_import_in_full_pages() {
    use crate::sans_io::wire::{MAX_LISTED, SegmentsPage, SegmentsReply, SegmentsRequest};
    let (_rt, ctx, handler) = context();
    // 400 exports: those with i % 3 == 0 listed to node 8, the others (266) to node 7.
    let exports: Vec<Arc<FakeExport>> = (0..400u32)
        .map(|i| {
            let id = 0x400000 + i;
            let node = if i % 3 == 0 { 8 } else { 7 };
            let e = Arc::new(FakeExport {
                listed_to: Some((id, node)),
                ..FakeExport::default()
            });
            ctx.claim_segment_id(id, None, &e).expect("id");
            e
        })
        .collect();
    let ask = |node: u32, after: u32, controller: &str| -> SegmentsPage {
        let r = SegmentsRequest {
            req: 5,
            controller: controller.into(),
            after,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        };
        let reply = handler.on_message(&link(own(node, 1)), Message::SegmentsRequest(r));
        let Some(Message::SegmentsReply(SegmentsReply {
            req: 5,
            result: Ok(page),
        })) = reply
        else {
            panic!("no listing: {reply:?}");
        };
        page
    };
    let ids = |p: &SegmentsPage| p.segments.iter().map(|s| s.id).collect::<Vec<u32>>();
    let seven: Vec<u32> = (0..400u32)
        .filter(|i| i % 3 != 0)
        .map(|i| 0x400000 + i)
        .collect();

    let first = ask(7, 0, "");
    assert!(first.more);
    assert_eq!(ids(&first), seven[..MAX_LISTED]);
    let second = ask(7, seven[MAX_LISTED - 1], "tcp");
    assert!(!second.more);
    assert_eq!(ids(&second), seven[MAX_LISTED..]);

    let eight = ask(8, 0, "");
    assert!(!eight.more);
    assert_eq!(eight.segments.len(), 134);
    assert!(ids(&eight).iter().all(|id| (id - 0x400000) % 3 == 0));

    // A node no entry lists to, another controller type, the end of the ids: nothing.
    assert_eq!(
        ask(9, 0, ""),
        SegmentsPage {
            segments: Vec::new(),
            more: false
        }
    );
    assert!(ask(7, 0, "shm").segments.is_empty());
    assert!(ask(7, u32::MAX, "").segments.is_empty());

    // An export whose last handle went is not listed.
    drop(exports);
    assert!(ask(7, 0, "").segments.is_empty());
}

/// An exporter may signal as soon as it granted, before the importer took the grant in (it
/// answers the request, then sees the importer connected): those signals are held for the
/// token and delivered at registration if they pass the connection's check; a connect that
/// fails lets them go.
#[test]
fn signals_before_the_grant_is_taken_in_are_held_for_the_import() {
    use crate::events::SignalFlags;
    use crate::events::route::encode;
    let (_rt, ctx, _) = context();
    let exporter = own(5, 9);
    let conn = 0x00AB_CDEF;
    let awaited = ctx.signals.new_token(exporter.node);
    let token = awaited.token();
    let bell = |check: u64, flags| on_doorbell(&ctx, encode(token, check, true, flags));
    // Three plain ones and a NO_ACCUMULATE from the exporter, a forged check, and by the
    // side channel one from the exporter and one from another node.
    for _ in 0..3 {
        bell(conn, SignalFlags::empty());
    }
    bell(conn, SignalFlags::NO_ACCUMULATE);
    bell(conn + 1, SignalFlags::empty());
    let side = |from| on_side_signal(&ctx, from, token, 0x01);
    side(exporter);
    side(own(6, 1));

    let imp = FakeImport::new(exporter, conn);
    ctx.signals.add_import(awaited, &imp);
    assert_eq!(
        imp.calls(),
        ["bell false 3", "signal true", "bell false 1"],
        "the exporter's, in kinds of arrival; the forged and the other node's dropped"
    );
    // From now on each goes straight to it.
    bell(conn, SignalFlags::empty());
    assert_eq!(imp.calls(), ["signal false"]);

    // A connect that ends before registering lets its held signals go, and the token too.
    let awaited = ctx.signals.new_token(exporter.node);
    let token = awaited.token();
    on_doorbell(&ctx, encode(token, conn, true, SignalFlags::empty()));
    drop(awaited);
    assert!(matches!(
        ctx.signals
            .import_for_signal(token, Sent::Side(exporter), false),
        crate::events::route::SignalRoute::Unknown
    ));

    // A flood of kinds (forged checks) is bounded: the held list stops growing, and the
    // exporter's own kind, once held, keeps counting.
    let awaited = ctx.signals.new_token(exporter.node);
    let token = awaited.token();
    on_doorbell(&ctx, encode(token, conn, true, SignalFlags::empty()));
    for check in 1..1000u64 {
        on_doorbell(
            &ctx,
            encode(token, conn + check, true, SignalFlags::empty()),
        );
    }
    on_doorbell(&ctx, encode(token, conn, true, SignalFlags::empty()));
    let imp = FakeImport::new(exporter, conn);
    ctx.signals.add_import(awaited, &imp);
    assert_eq!(imp.calls(), ["bell false 2"]);
}
