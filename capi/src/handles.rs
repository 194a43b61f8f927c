//! Handles C holds: numbers dressed as pointers, looked up in a table of their kind, so a
//! NULL, stale, foreign or forged handle is an RSMERR code and never a dereference
//! (docs/rsmapi.md §2.2, DESIGN.md §12).

use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The next handle value; shared by every kind, so one kind's handle is never another's.
/// Steps of 16 from a high start make them look like the aligned pointers C expects.
static NEXT: AtomicUsize = AtomicUsize::new(0x5253_0000);

/// The live handles of one kind.
pub(crate) struct Registry<T> {
    map: Mutex<Option<HashMap<usize, Arc<T>>>>,
}

impl<T> Registry<T> {
    /// An empty table.
    pub(crate) const fn new() -> Self {
        Registry {
            map: Mutex::new(None),
        }
    }

    /// The table, locked (a panic elsewhere never makes it unusable).
    pub(crate) fn lock(&self) -> Table<'_, T> {
        Table(self.map.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A new handle for `obj`.
    pub(crate) fn insert(&self, obj: Arc<T>) -> *mut c_void {
        self.lock().insert(obj)
    }

    /// The object behind `h`, if `h` is a live handle of this kind.
    pub(crate) fn get(&self, h: *const c_void) -> Option<Arc<T>> {
        self.lock().get(h)
    }

    /// Removes `h` and returns its object.
    pub(crate) fn remove(&self, h: *const c_void) -> Option<Arc<T>> {
        self.lock().remove(h)
    }
}

/// A locked [`Registry`].
pub(crate) struct Table<'a, T>(MutexGuard<'a, Option<HashMap<usize, Arc<T>>>>);

impl<T> Table<'_, T> {
    fn map(&mut self) -> &mut HashMap<usize, Arc<T>> {
        self.0.get_or_insert_with(HashMap::new)
    }

    /// A new handle for `obj`.
    pub(crate) fn insert(&mut self, obj: Arc<T>) -> *mut c_void {
        let id = NEXT.fetch_add(16, Ordering::Relaxed);
        self.map().insert(id, obj);
        std::ptr::without_provenance_mut(id)
    }

    /// The object behind `h`.
    pub(crate) fn get(&mut self, h: *const c_void) -> Option<Arc<T>> {
        self.map().get(&h.addr()).cloned()
    }

    /// Removes `h`.
    pub(crate) fn remove(&mut self, h: *const c_void) -> Option<Arc<T>> {
        self.map().remove(&h.addr())
    }

    /// The first handle whose object satisfies `pred`.
    pub(crate) fn find(&mut self, pred: impl Fn(&T) -> bool) -> Option<(*mut c_void, Arc<T>)> {
        self.map()
            .iter()
            .find(|(_, v)| pred(v))
            .map(|(&k, v)| (std::ptr::without_provenance_mut(k), Arc::clone(v)))
    }
}
