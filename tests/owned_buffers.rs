//! The rules of owned-buffer descriptors where a domain demands `FI_MR_LOCAL` (DESIGN.md
//! §5.1), on shm0 and tcp0: which operations share a registration, which bounce, and that a
//! registration whose owner gave its buffer back is never handed out again.

use rsm::test_util::registration::{Holding, Path, hold_put};
use rsm::{Controller, Node};

fn with_controller(name: &str, id: u32, f: impl FnOnce(&Controller)) {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let (node, ctrl) = rt.block_on(async {
        let node = Node::builder()
            .ignore_environment()
            .id(id)
            .start()
            .await
            .expect("a node");
        let ctrl = node.controller(name).await.expect("the controller");
        (node, ctrl)
    });
    f(&ctrl);
    drop(ctrl);
    rt.block_on(node.shutdown());
}

fn reg(ctrl: &Controller, buf: &[u8]) -> Holding {
    hold_put(ctrl, buf, Path::Register).expect("a registration")
}

fn cache_rules(name: &str, id: u32) {
    with_controller(name, id, |ctrl| {
        let buf = vec![1u8; 256 * 1024];
        let owner = reg(ctrl, &buf);
        assert_ne!(owner.desc(), 0, "{name}: a descriptor");

        // While the owner holds its buffer: the same range and any range inside it hit.
        let same = reg(ctrl, &buf);
        let inside = reg(ctrl, &buf[4096..8192]);
        assert_eq!(same.desc(), owner.desc(), "{name}: the same range");
        assert_eq!(inside.desc(), owner.desc(), "{name}: a range inside");

        // A range reaching past it, or another buffer, gets its own.
        let other = vec![2u8; 64 * 1024];
        let apart = reg(ctrl, &other);
        assert_ne!(apart.desc(), owner.desc(), "{name}: another buffer");

        // The owner gives its buffer back: its range is no longer taken for alive, even
        // though `same` and `inside` keep the registration open.
        drop(owner);
        let after = reg(ctrl, &buf);
        assert_ne!(
            after.desc(),
            same.desc(),
            "{name}: a retired registration handed out"
        );
        // The new one owns the range now.
        let again = reg(ctrl, &buf[..1024]);
        assert_eq!(again.desc(), after.desc(), "{name}: the new owner's range");
    });
}

fn bounce_rules(name: &str, id: u32) {
    with_controller(name, id, |ctrl| {
        let small = vec![3u8; 512];
        let first = hold_put(ctrl, &small, Path::Bounce).expect("a slot");
        // The pool's registration, not one of the buffer's.
        let own = reg(ctrl, &small);
        assert_ne!(own.desc(), first.desc(), "{name}: bounced");
        drop(own);
        // Every slot is one registration: the pool's.
        let slots: Vec<_> = (0..63)
            .map(|_| hold_put(ctrl, &small, Path::Bounce).expect("a slot"))
            .collect();
        assert!(slots.iter().all(|h| h.desc() == first.desc()), "{name}");
        // The pool is empty: the 65th registers its own buffer instead of failing.
        let spill = hold_put(ctrl, &small, Path::Bounce).expect("a registration");
        assert_ne!(spill.desc(), first.desc(), "{name}: a full pool spills");
        drop(slots);
        let back = hold_put(ctrl, &small, Path::Bounce).expect("a slot");
        assert_eq!(back.desc(), first.desc(), "{name}: slots come back");
        // Past 16 KiB nothing bounces.
        let large = vec![4u8; 16 * 1024 + 1];
        let big = hold_put(ctrl, &large, Path::Bounce).expect("a registration");
        assert_ne!(big.desc(), first.desc(), "{name}: too large to bounce");
    });
}

#[test]
fn shm0_cache_rules() {
    cache_rules("shm0", 4712);
}

#[test]
fn tcp0_cache_rules() {
    cache_rules("tcp0", 4713);
}

#[test]
fn shm0_bounce_rules() {
    bounce_rules("shm0", 4714);
}

#[test]
fn tcp0_bounce_rules() {
    bounce_rules("tcp0", 4715);
}
