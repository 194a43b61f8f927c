//! Recycled allocations of operation slots (DESIGN.md §5): an operation takes its slot's
//! memory from its thread's pool and the last owner of a slot gives it back, so a small
//! operation allocates nothing.
//!
//! A slot's memory goes back only through [`recycle`], and only when the caller's count is
//! the last one of any kind (`Arc::get_mut`: no other strong count, no `Weak`). The provider
//! holds a strong count from the first post to the last completion, so a slot it may still
//! touch is never recycled; one whose completion never comes is never the caller's alone,
//! and stays leaked. Per thread, not per engine: no lock, and a pooled allocation holds no
//! value (its engine and buffer were dropped), so it keeps nothing open.

use std::any::TypeId;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// The most allocations one thread keeps: a window of 64 operations in flight recycles
/// its slots among themselves.
const KEEP: usize = 64;

/// One pooled allocation: an `Arc<MaybeUninit<T>>` of the type `kind` names, as a raw
/// pointer, and how to free it.
struct Kept {
    kind: TypeId,
    ptr: *const (),
    free: unsafe fn(*const ()),
}

/// The allocations one thread keeps; freed when the thread exits.
struct Pool(Vec<Kept>);

impl Drop for Pool {
    fn drop(&mut self) {
        for k in self.0.drain(..) {
            // SAFETY: `k.ptr` came from `Arc::into_raw` of the `Arc<MaybeUninit<T>>` whose
            // `free` this is, and the pool held its only count.
            unsafe { (k.free)(k.ptr) };
        }
    }
}

thread_local! {
    static POOL: RefCell<Pool> = const { RefCell::new(Pool(Vec::new())) };
}

/// Frees a pooled `Arc<MaybeUninit<T>>`.
///
/// # Safety
/// `p` must come from `Arc::<MaybeUninit<T>>::into_raw`, its count owned by the caller.
unsafe fn free<T>(p: *const ()) {
    // SAFETY: per the contract; `MaybeUninit` drops nothing, the allocation is freed.
    drop(unsafe { Arc::from_raw(p.cast::<MaybeUninit<T>>()) });
}

/// An allocation for a `T`, recycled from this thread's pool if it holds one, else new. The
/// caller is its only owner (`Arc::get_mut` succeeds).
pub(crate) fn take<T: 'static>() -> Arc<MaybeUninit<T>> {
    let kind = TypeId::of::<T>();
    let kept = POOL
        .try_with(|p| {
            let mut p = p.try_borrow_mut().ok()?;
            let at = p.0.iter().rposition(|k| k.kind == kind)?;
            Some(p.0.swap_remove(at).ptr)
        })
        .ok()
        .flatten();
    match kept {
        // SAFETY: an entry of kind `T` came from `Arc::<MaybeUninit<T>>::into_raw` in
        // `recycle`, which held the allocation's only count, now handed to the caller.
        Some(ptr) => unsafe { Arc::from_raw(ptr.cast::<MaybeUninit<T>>()) },
        None => Arc::new_uninit(),
    }
}

/// Drops `arc`'s count; if it was the last count of any kind, drops the value and keeps the
/// allocation for [`take`]. Otherwise (the provider, a queue, a barrier, an abort's `Weak`
/// still holds it) this is an ordinary drop.
pub(crate) fn recycle<T: 'static>(mut arc: Arc<T>) {
    if Arc::get_mut(&mut arc).is_none() {
        return;
    }
    let raw = Arc::into_raw(arc).cast_mut();
    // SAFETY: `get_mut` proved this the only count, strong or weak, and nothing can make
    // another from it: the value is dropped once, here, and nobody reaches it after.
    unsafe { std::ptr::drop_in_place(raw) };
    // The value's drop may have run other code (a buffer's): the pool is borrowed after.
    let ptr = raw.cast_const().cast::<()>();
    let kept = POOL
        .try_with(|p| {
            let Ok(mut p) = p.try_borrow_mut() else {
                return false;
            };
            if p.0.len() >= KEEP {
                return false;
            }
            p.0.push(Kept {
                kind: TypeId::of::<T>(),
                ptr,
                free: free::<T>,
            });
            true
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: `raw` came from `Arc::into_raw` of an `Arc<T>` whose only count this is,
        // and its value was dropped above: as `MaybeUninit<T>` (same size and alignment),
        // only the allocation is freed.
        unsafe { free::<T>(ptr) };
    }
}

/// How many allocations for a `T` this thread keeps.
#[cfg(test)]
pub(crate) fn kept<T: 'static>() -> usize {
    let kind = TypeId::of::<T>();
    POOL.with(|p| p.borrow().0.iter().filter(|k| k.kind == kind).count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn make(drops: &Arc<AtomicUsize>) -> Arc<Counted> {
        let mut a = take::<Counted>();
        Arc::get_mut(&mut a)
            .expect("the only owner")
            .write(Counted(Arc::clone(drops)));
        // SAFETY: written just above.
        unsafe { a.assume_init() }
    }

    #[test]
    fn the_last_owner_gives_the_allocation_back_and_the_next_take_reuses_it() {
        let drops = Arc::new(AtomicUsize::new(0));
        let a = make(&drops);
        let at = Arc::as_ptr(&a) as usize;
        recycle(a);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the value was dropped");
        let b = make(&drops);
        assert_eq!(Arc::as_ptr(&b) as usize, at, "the same memory again");
        recycle(b);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_value_another_count_holds_is_neither_dropped_nor_reused() {
        let drops = Arc::new(AtomicUsize::new(0));
        let a = make(&drops);
        let other = Arc::clone(&a);
        let weak = Arc::downgrade(&other);
        let at = Arc::as_ptr(&a) as usize;
        recycle(a);
        assert_eq!(drops.load(Ordering::SeqCst), 0, "still held");
        let b = make(&drops);
        assert_ne!(
            Arc::as_ptr(&b) as usize,
            at,
            "a held value's memory is not reused"
        );
        // A Weak alone also keeps the memory out of the pool.
        recycle(other);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "dropped with its last strong count"
        );
        let c = make(&drops);
        assert_ne!(Arc::as_ptr(&c) as usize, at, "a Weak still names it");
        drop(weak);
        recycle(b);
        recycle(c);
    }

    #[test]
    fn a_thread_keeps_at_most_its_share() {
        let drops = Arc::new(AtomicUsize::new(0));
        let many: Vec<_> = (0..KEEP + 8).map(|_| make(&drops)).collect();
        for a in many {
            recycle(a);
        }
        let kept = POOL.with(|p| p.borrow().0.len());
        assert!(kept <= KEEP, "{kept} kept");
        assert_eq!(drops.load(Ordering::SeqCst), KEEP + 8);
    }
}
