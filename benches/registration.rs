//! What an owned buffer's descriptor costs an operation where the domain demands
//! `FI_MR_LOCAL` (DESIGN.md §5.1), per size, on the controller named by
//! `RSM_BENCH_CONTROLLER` (default `shm0`): the copy into a bounce slot, a registration of
//! its own (a cache miss: `fi_mr_reg`, then its close when the operation ends), and a cache
//! hit (a live registration of the same range reused). The data path bounces up to the size
//! where the bounce stops being the cheaper (`docs/performance.md`).

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rsm::Node;
use rsm::test_util::registration::{Path, hold_put};
use std::time::Duration;

const SIZES: [usize; 8] = [8, 64, 512, 4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20];

fn registration(c: &mut Criterion) {
    let name = std::env::var("RSM_BENCH_CONTROLLER").unwrap_or_else(|_| "shm0".into());
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let (_node, ctrl) = rt.block_on(async {
        let node = Node::builder()
            .ignore_environment()
            .id(4711)
            .start()
            .await
            .expect("a node");
        let ctrl = node.controller(&name).await.expect("the controller");
        (node, ctrl)
    });
    let mut g = c.benchmark_group(format!("owned buffer descriptor ({name})"));
    g.measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20);
    for size in SIZES {
        let buf = vec![7u8; size];
        if size <= 16 << 10 {
            g.bench_with_input(BenchmarkId::new("bounce", size), &buf, |b, buf| {
                b.iter(|| hold_put(&ctrl, buf, Path::Bounce).expect("a bounce slot"))
            });
        }
        g.bench_with_input(BenchmarkId::new("miss", size), &buf, |b, buf| {
            b.iter(|| hold_put(&ctrl, buf, Path::Register).expect("a registration"))
        });
        let owner = hold_put(&ctrl, &buf, Path::Register).expect("a registration");
        g.bench_with_input(BenchmarkId::new("hit", size), &buf, |b, buf| {
            b.iter(|| hold_put(&ctrl, buf, Path::Register).expect("a cache hit"))
        });
        drop(owner);
    }
    g.finish();
}

criterion_group!(benches, registration);
criterion_main!(benches);
