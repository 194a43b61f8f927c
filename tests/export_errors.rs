//! The export side's own errors, on every libfabric controller: publishing twice, ids that
//! are taken or reserved, unpublishing what is not published, and local access out of range.

mod common;

use common::node;

use rsm::{Access, ExportFlags};

fn code<T: std::fmt::Debug>(r: rsm::Result<T>) -> i32 {
    r.expect_err("an error").code()
}

#[test]
fn publish_and_unpublish_errors() {
    let _serial = common::serial();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let node = node(common::fresh_node_id()).await;
        for ctrl in ["tcp0", "shm0", "sockets0"] {
            let c = node.controller(ctrl).await.unwrap();
            let page = c.attr().page_size as usize;
            let a = c.export(page, ExportFlags::empty()).unwrap();
            let b = c.export(page, ExportFlags::empty()).unwrap();

            // Ids the caller chooses lie in 0x400000..=0x7FFFFFFF (DESIGN.md, decision 8).
            assert_eq!(
                code(a.publish(rsm::SegmentId(0x3F_FFFF), &[]).await),
                23,
                "{ctrl}: below the range"
            );
            assert_eq!(
                code(a.publish(rsm::SegmentId(0x8000_0000), &[]).await),
                23,
                "{ctrl}: the node's own range"
            );
            assert_eq!(
                code(
                    a.publish(
                        rsm::SegmentId(0x40_0000),
                        &[Access::new(rsm::NodeId(1), 0o700)]
                    )
                    .await
                ),
                21,
                "{ctrl}: BAD_ACL"
            );
            assert_eq!(
                a.publish(rsm::SegmentId(0x40_0007), &[]).await.unwrap(),
                rsm::SegmentId(0x40_0007)
            );
            assert_eq!(
                code(a.publish(rsm::SegmentId(0x40_0008), &[]).await),
                6,
                "{ctrl}: SEG_ALREADY_PUBLISHED"
            );
            assert_eq!(
                code(b.publish(rsm::SegmentId(0x40_0007), &[]).await),
                24,
                "{ctrl}: SEGID_IN_USE"
            );
            assert_eq!(code(b.unpublish().await), 7, "{ctrl}: SEG_NOT_PUBLISHED");
            assert_eq!(
                code(b.republish(&[]).await),
                7,
                "{ctrl}: republish of an unpublished segment"
            );

            // Local access is bounds-checked like put and get.
            assert_eq!(
                code(a.write_at(page as u64, &[1])),
                18,
                "{ctrl}: at the end"
            );
            assert_eq!(
                code(a.write_at(page as u64 - 1, &[1, 2])),
                20,
                "{ctrl}: across the end"
            );
            let mut two = [0u8; 2];
            assert_eq!(code(a.read_at(u64::MAX, &mut two)), 18);

            // Unpublished, the id is free again and the segment can be published anew.
            a.unpublish().await.unwrap();
            assert_eq!(
                b.publish(rsm::SegmentId(0x40_0007), &[]).await.unwrap(),
                rsm::SegmentId(0x40_0007)
            );
            assert!(a.publish(None, &[]).await.unwrap().get() >= 0x8000_0000);
            a.destroy().await.unwrap();
            b.destroy().await.unwrap();
        }
        node.shutdown().await;
    });
}

#[test]
fn export_create_errors() {
    let _serial = common::serial();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let node = node(common::fresh_node_id()).await;
        let c = node.controller("tcp0").await.unwrap();
        let page = c.attr().page_size as usize;
        assert_eq!(code(c.export(0, ExportFlags::empty())), 20, "BAD_LENGTH");
        assert_eq!(
            code(c.export(page + 1, ExportFlags::empty())),
            17,
            "BAD_MEM_ALIGNMENT"
        );
        let unknown = node.controller("nosuch3").await;
        assert_eq!(code(unknown), 4, "CTLR_NOT_PRESENT");
        node.shutdown().await;
    });
}
