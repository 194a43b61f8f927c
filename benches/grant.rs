//! What registering a segment costs, per connect and per segment, by size, on the controller
//! named by `RSM_BENCH_CONTROLLER` (default `shm0`): on a libfabric controller every
//! connection gets its own registration of the segment, with exactly its grant's access,
//! and publish makes one trial registration (DESIGN.md §8, "Grants"). Two nodes in this
//! process:
//!
//! - `connect+disconnect`: an import of a published segment, read-write, and its disconnect;
//! - `register+close`: one `fi_mr_reg` of the segment's memory and its close, as a grant
//!   makes it (libfabric controllers only);
//! - `publish+unpublish`: a segment published, then withdrawn, without importers.
//!
//! `docs/performance.md` ("Registration per connection") holds the figures.

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use futures::executor::block_on;
use rsm::test_util::registration::register_segment;
use rsm::{ExportFlags, ExportSegment, Node, NodeId, Perm, ProviderKind};
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];

fn label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 => format!("{} MiB", s >> 20),
        s => format!("{} KiB", s >> 10),
    }
}

/// Waits (at most 2 s) until the exporter has forgotten every importer.
fn drained(seg: &ExportSegment) {
    let start = Instant::now();
    while seg.importer_count() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{} importers still connected after the last disconnect",
            seg.importer_count()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn settings(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
}

fn grant(c: &mut Criterion) {
    let name = std::env::var("RSM_BENCH_CONTROLLER").unwrap_or_else(|_| "shm0".into());
    // Ids of this process only: the side channel's Unix names are per host and node id.
    let first = 0x6000_0000 | ((std::process::id() & 0x00FF_FFFF) << 4);
    let start = |id| Node::builder().ignore_environment().id(id).start();
    let (exporter, importer) = block_on(async {
        (
            start(first).await.expect("the exporting node"),
            start(first + 1).await.expect("the importing node"),
        )
    });
    let (ectrl, ictrl) = block_on(async {
        (
            exporter.controller(&name).await.expect("the controller"),
            importer.controller(&name).await.expect("the controller"),
        )
    });

    let mut g = c.benchmark_group(format!("segment registration ({name})"));
    settings(&mut g);
    for size in SIZES {
        let seg = ectrl.export(size, ExportFlags::empty()).expect("a segment");
        let id = block_on(seg.publish(None, &[])).expect("published");
        let connect = || async {
            let imp = ictrl
                .import(NodeId(first), id, Perm::RDWR)
                .await
                .expect("a connect");
            imp.disconnect().await.expect("a disconnect");
        };
        // The first connect also brings up the side-channel link and the fabric connection.
        block_on(connect());
        g.bench_function(BenchmarkId::new("connect+disconnect", label(size)), |b| {
            b.iter(|| block_on(connect()))
        });
        // A disconnect only tells the exporter: connections left open would skew the figure.
        drained(&seg);
        if ectrl.kind() != ProviderKind::Loopback {
            g.bench_function(BenchmarkId::new("register+close", label(size)), |b| {
                b.iter(|| register_segment(&seg).expect("a registration"))
            });
        }
        block_on(seg.unpublish()).expect("unpublished");
        g.bench_function(BenchmarkId::new("publish+unpublish", label(size)), |b| {
            b.iter(|| {
                block_on(async {
                    seg.publish(None, &[]).await.expect("published");
                    seg.unpublish().await.expect("unpublished");
                })
            })
        });
        block_on(seg.destroy()).expect("destroyed");
    }
    g.finish();
    block_on(async {
        importer.shutdown().await;
        exporter.shutdown().await;
    });
}

criterion_group!(benches, grant);
criterion_main!(benches);
