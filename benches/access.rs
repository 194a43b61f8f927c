//! The access check of a connect request (`rsm::test_util::access::check`): the umask-derived
//! mode of an empty list, a short list, and the largest list allowed with the requester
//! named last.

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rsm::test_util::access::{Creator, MAX_ACL_ENTRIES, Requester, check};
use rsm::{Access, Perm};
use std::hint::black_box;

fn access(c: &mut Criterion) {
    let creator = Creator {
        uid: 1000,
        gid: 100,
        umask: 0o022,
    };
    let groups = [4, 24, 27, 100];
    let mut g = c.benchmark_group("access check");
    for entries in [0usize, 16, MAX_ACL_ENTRIES] {
        // The requester (node `entries`) is the last entry: the longest search.
        let acl: Vec<Access> = (1..=entries as u32)
            .map(|n| Access::new(rsm::NodeId(n), 0o660))
            .collect();
        let who = Requester {
            node: entries as u32,
            uid: 2000,
            gid: 2000,
            groups: &groups,
        };
        let want = if entries == 0 { Perm::READ } else { Perm::RDWR };
        assert_eq!(check(&acl, &creator, &who, want).expect("granted"), want);
        g.bench_with_input(BenchmarkId::new("granted", entries), &acl, |b, acl| {
            b.iter(|| check(black_box(acl), &creator, black_box(&who), want))
        });
    }
    // A refusal builds its error with a detail: the cost of saying why.
    let acl = [Access::new(rsm::NodeId(1), 0o600)];
    let stranger = Requester {
        node: 1,
        uid: 3000,
        gid: 3000,
        groups: &[],
    };
    assert!(check(&acl, &creator, &stranger, Perm::READ).is_err());
    g.bench_function("refused", |b| {
        b.iter(|| check(black_box(&acl), &creator, black_box(&stranger), Perm::READ))
    });
    g.finish();
}

criterion_group!(benches, access);
criterion_main!(benches);
