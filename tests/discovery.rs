//! Discovery (DESIGN.md §8, "Discovery"): a node lists the segments another publishes to it,
//! with the access it would get and their names, and imports one by name; nothing published
//! to another node, or that its class may not access, is listed. Three nodes of this
//! process, on loopback and tcp0.

mod common;

use rsm::{Access, ExportFlags, NodeId, Perm, SegmentId, SegmentInfo};
use std::collections::BTreeMap;

const SIZE: usize = 64 * 1024;

/// What a listing says of each segment: (perm, controller, name) by id.
fn by_id(list: &[SegmentInfo]) -> BTreeMap<SegmentId, (Perm, String, Option<String>)> {
    list.iter()
        .map(|s| (s.id, (s.perm, s.controller.clone(), s.name.clone())))
        .collect()
}

fn lists_and_imports_by_name(ctrl: &'static str, other: &'static str) {
    common::logs();
    let rt = common::runtime();
    rt.block_on(async {
        let (a, b, a_id) = common::two_nodes().await;
        let c_id = common::fresh_node_id();
        let c = common::node(c_id).await;
        let (b_id, a_node) = (a_id + 1, NodeId(a_id));
        let ca = a.controller(ctrl).await.expect("a's controller");
        let export = |acl: Vec<Access>| {
            let seg = ca.export(SIZE, ExportFlags::empty()).expect("export");
            (seg, acl)
        };
        // To B read-write; to B read-only, named; to C only; to B with nothing for its
        // class (the same user: the owner digit); to everyone.
        let (rw, acl_rw) = export(vec![Access::new(NodeId(b_id), 0o666)]);
        let (ro, acl_ro) = export(vec![Access::new(NodeId(b_id), 0o444)]);
        let (to_c, acl_c) = export(vec![Access::new(NodeId(c_id), 0o666)]);
        let (no_class, acl_none) = export(vec![Access::new(NodeId(b_id), 0o066)]);
        let (all, acl_all) = export(Vec::new());
        let rw_id = rw.publish(None, &acl_rw).await.expect("publish");
        ro.write_at(0, b"features!").expect("write");
        let ro_id = ro
            .publish_named(None, "features", &acl_ro)
            .await
            .expect("publish named");
        let c_seg = to_c
            .publish_named(None, "for-c", &acl_c)
            .await
            .expect("publish");
        no_class.publish(None, &acl_none).await.expect("publish");
        let all_id = all.publish(None, &acl_all).await.expect("publish");
        // One on another controller type: listed by the node, not by this controller.
        let elsewhere = a
            .controller(other)
            .await
            .expect("the other controller")
            .export(SIZE, ExportFlags::empty())
            .expect("export");
        let elsewhere_id = elsewhere.publish(None, &[]).await.expect("publish");

        // A second publish of a name the node holds is refused, saying so.
        let dup = ca.export(SIZE, ExportFlags::empty()).expect("export");
        let e = dup.publish_named(None, "features", &[]).await.unwrap_err();
        assert_eq!(e.name(), "RSMERR_SEGID_IN_USE", "{e}");
        assert!(e.to_string().contains("name"), "{e}");
        assert!(dup.id().is_none());

        let cb = b.controller(ctrl).await.expect("b's controller");
        let listed = cb.segments(a_node).await.expect("b lists");
        let mine = by_id(&listed);
        let name = ca.name().to_string();
        assert_eq!(
            mine.keys().copied().collect::<Vec<_>>(),
            vec![rw_id, ro_id, all_id],
            "{ctrl}: {listed:?}"
        );
        assert_eq!(mine[&rw_id], (Perm::RDWR, name.clone(), None));
        assert_eq!(
            mine[&ro_id],
            (Perm::READ, name.clone(), Some("features".into()))
        );
        assert!(mine[&all_id].0.allows(Perm::READ), "{:?}", mine[&all_id]);
        assert!(listed.iter().all(|s| s.size == SIZE as u64));

        // The node lists every controller's.
        let everything = by_id(&b.segments(a_node).await.expect("node lists"));
        assert_eq!(everything.len(), 4, "{everything:?}");
        assert_eq!(everything[&elsewhere_id].1, other);

        // C sees its own and the public one, never B's.
        let cc = c.controller(ctrl).await.expect("c's controller");
        let theirs = by_id(&cc.segments(a_node).await.expect("c lists"));
        assert_eq!(
            theirs.keys().copied().collect::<Vec<_>>(),
            vec![c_seg, all_id]
        );
        assert_eq!(theirs[&c_seg].2.as_deref(), Some("for-c"));

        // Import by name: the grant the listing said, and the bytes.
        let imp = cb
            .import_named(a_node, "features", Perm::READ)
            .await
            .expect("import by name");
        let (_, back) = imp.get(0, vec![0u8; 9]).await.expect("get");
        assert_eq!(back, b"features!");
        let e = cb
            .import_named(a_node, "features", Perm::RDWR)
            .await
            .unwrap_err();
        assert_eq!(e.name(), "RSMERR_PERM_DENIED", "{e}");
        // A name published to another node is unknown here.
        let e = cb
            .import_named(a_node, "for-c", Perm::READ)
            .await
            .unwrap_err();
        assert_eq!(e.name(), "RSMERR_SEG_NOT_PUBLISHED", "{e}");
        imp.disconnect().await.expect("disconnect");

        // Unpublished: no longer listed, nor importable by its name; the name is free again.
        ro.unpublish().await.expect("unpublish");
        let after = by_id(&cb.segments(a_node).await.expect("b lists"));
        assert!(!after.contains_key(&ro_id), "{after:?}");
        let e = cb
            .import_named(a_node, "features", Perm::READ)
            .await
            .unwrap_err();
        assert_eq!(e.name(), "RSMERR_SEG_NOT_PUBLISHED", "{e}");
        dup.publish_named(None, "features", &[])
            .await
            .expect("the name is free");

        c.shutdown().await;
        b.shutdown().await;
        a.shutdown().await;
    });
}

#[test]
fn loopback_lists_and_imports_by_name() {
    lists_and_imports_by_name("loopback", "tcp0");
}

#[test]
fn tcp0_lists_and_imports_by_name() {
    lists_and_imports_by_name("tcp0", "loopback");
}

/// A node with more segments than one reply holds answers in pages, which the listing
/// follows to the end, in id order.
#[test]
fn many_segments_come_in_pages() {
    common::logs();
    let rt = common::runtime();
    rt.block_on(async {
        let (a, b, a_id) = common::two_nodes().await;
        let ca = a.controller("loopback").await.expect("a's loopback");
        let page = common::page();
        let mut segs = Vec::new();
        let mut ids = Vec::new();
        for i in 0..300u32 {
            let seg = ca.export(page, ExportFlags::empty()).expect("export");
            let id = seg
                .publish(SegmentId(0x40_0000 + 7 * i), &[])
                .await
                .expect("publish");
            ids.push(id);
            segs.push(seg);
        }
        let listed = b.segments(NodeId(a_id)).await.expect("lists");
        assert_eq!(listed.iter().map(|s| s.id).collect::<Vec<_>>(), ids);
        b.shutdown().await;
        a.shutdown().await;
    });
}
