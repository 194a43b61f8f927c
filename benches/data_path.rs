//! The data path in one process: two nodes, one exporting and one importing, on each
//! controller of [`CONTROLLERS`]. Measured: an operation's slot allocated and released
//! (the future created and dropped before it is polled: nothing is posted), and a put and a
//! get future from creation to completion, awaited with a plain executor (no tokio).
//!
//! The loopback controller is one more entry in [`CONTROLLERS`] once it can import.

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use futures::executor::block_on;
use rsm::{ExportFlags, ExportSegment, ImportSegment, Node, Perm};
use std::hint::black_box;

/// The controllers measured, in order.
const CONTROLLERS: &[&str] = &["shm0", "tcp0"];

static EIGHT: [u8; 8] = *b"rsmbench";

struct Pair {
    exporter: Node,
    importer: Node,
    seg: ExportSegment,
    imp: ImportSegment,
}

impl Pair {
    async fn open(controller: &str, first_id: u32) -> rsm::Result<Pair> {
        let start = |id| Node::builder().ignore_environment().id(id).start();
        let exporter = start(first_id).await?;
        let importer = start(first_id + 1).await?;
        let seg = exporter
            .controller(controller)
            .await?
            .export(1 << 16, ExportFlags::empty())?;
        let id = seg.publish(None, &[]).await?;
        let imp = importer
            .controller(controller)
            .await?
            .import(rsm::NodeId(first_id), id, Perm::RDWR)
            .await?;
        Ok(Pair {
            exporter,
            importer,
            seg,
            imp,
        })
    }

    async fn close(self) {
        let _ = self.imp.disconnect().await;
        let _ = self.seg.destroy().await;
        self.importer.shutdown().await;
        self.exporter.shutdown().await;
    }
}

fn data_path(c: &mut Criterion) {
    let base = 0x5000_0000 | ((std::process::id() & 0x00FF_FFFF) << 4);
    for (i, &controller) in CONTROLLERS.iter().enumerate() {
        let pair = match block_on(Pair::open(controller, base + 2 * i as u32)) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("data_path: {controller} skipped: {e}");
                continue;
            }
        };
        let imp = &pair.imp;
        // The operations work before they are timed.
        block_on(imp.put(0, &EIGHT[..])).expect("put");
        let (_, back) = block_on(imp.get(0, vec![0u8; 8])).expect("get");
        assert_eq!(back, EIGHT);

        let mut g = c.benchmark_group(format!("data path {controller}"));
        g.bench_function("slot allocate and release", |b| {
            b.iter(|| drop(black_box(imp.put(0, &EIGHT[..]))))
        });
        g.bench_function("put 8 B, created to completed", |b| {
            b.iter(|| block_on(imp.put(0, black_box(&EIGHT[..]))).is_ok())
        });
        let mut buf = Some(vec![0u8; 8]);
        g.bench_function("get 8 B, created to completed", |b| {
            b.iter(|| {
                let out = block_on(imp.get(0, buf.take().unwrap_or_else(|| vec![0; 8])));
                let ok = out.is_ok();
                buf = out.ok().map(|(_, b)| b);
                ok
            })
        });
        g.finish();
        block_on(pair.close());
    }
}

criterion_group! {
    name = benches;
    // Each sample is a network round trip on tcp0: fewer and shorter than the defaults.
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = data_path
}
criterion_main!(benches);
