//! `rsm` needs no tokio runtime in the caller: its futures are driven by the node's own
//! threads and wake whatever executor awaits them. Two nodes in one process, awaited with
//! `futures::executor::block_on`.

mod common;

use rsm::{ExportFlags, Perm};

#[test]
fn put_and_get_without_a_tokio_runtime() {
    let _serial = common::serial();
    futures::executor::block_on(async {
        let (a, b, a_id) = common::two_nodes().await;
        for ctrl in ["tcp0", "shm0"] {
            let seg = a
                .controller(ctrl)
                .await
                .unwrap()
                .export(1 << 16, ExportFlags::empty())
                .unwrap();
            let id = seg.publish(None, &[]).await.unwrap();
            let imp = b
                .controller(ctrl)
                .await
                .unwrap()
                .import(rsm::NodeId(a_id), id, Perm::RDWR)
                .await
                .unwrap();
            let (res, _) = common::split(
                imp.put(100, bytes::Bytes::from_static(b"no runtime needed"))
                    .await,
            );
            res.unwrap();
            let mut here = [0u8; 17];
            seg.read_at(100, &mut here).unwrap();
            assert_eq!(&here, b"no runtime needed", "{ctrl}");
            let (res, back) = common::split(imp.get(100, bytes::BytesMut::zeroed(17)).await);
            res.unwrap();
            assert_eq!(&back.unwrap()[..], b"no runtime needed", "{ctrl}");
            imp.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
        }
        a.shutdown().await;
        b.shutdown().await;
    });
}
