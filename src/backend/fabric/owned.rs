//! Descriptors for owned buffers where the domain demands them (`FI_MR_LOCAL`, or the test
//! switch `RSM_FORCE_MR_LOCAL=1`; DESIGN.md §5.1).
//!
//! A contiguous operation of at most [`BOUNCE_MAX`] bytes goes through a slot of the
//! controller's bounce pool, registered once: a put copies its bytes in before posting, a
//! get copies them out once the read succeeded. Everything else (larger operations, a
//! pool with no free slot, the owned entries of a vector) gets a registration of its own
//! buffer's range, shared through a cache keyed by address range.
//!
//! The cache only ever answers with a registration whose *owner*, the operation that made it,
//! still holds its buffer: that buffer is alive, so memory inside its range that another
//! live buffer occupies is the same allocation (a `Bytes` clone or slice), registered while
//! alive. Once the owner's buffer went back to the caller, who may free it and see the
//! addresses reused by new memory, the entry answers no more; its registration lives on
//! while any operation that uses it is in flight, and is closed with the last. Keeping
//! registrations past that would need to learn of every unmap (libfabric's own cache in the
//! pinning providers, verbs and efa, hooks for that), which this library does not do.

use super::FabricBackend;
use crate::backend::fabric::Keys;
use crate::fabric::{MemoryRegion, MrAccess};
use crate::reactor::held::{CopyBack, Held, Keep};
use crate::reactor::slot::{Dir, Plan};
use crate::sys::mem::Mapping;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The variable that makes a controller register owned buffers as if its domain demanded
/// `FI_MR_LOCAL` (tests run the data-path suite this way).
pub(crate) const ENV_FORCE_MR_LOCAL: &str = "RSM_FORCE_MR_LOCAL";

/// The largest operation that goes through the bounce pool (measured: `docs/performance.md`,
/// "Registration of owned buffers").
pub(crate) const BOUNCE_MAX: usize = 16 * 1024;

/// Bounce slots per controller.
const BOUNCE_SLOTS: usize = 64;

/// Whether `RSM_FORCE_MR_LOCAL` asks for the registration path.
pub(crate) fn forced() -> bool {
    std::env::var_os(ENV_FORCE_MR_LOCAL).is_some_and(|v| v == "1")
}

/// A controller's bounce pool and registration cache, made at its first use.
pub(crate) struct Owned {
    pool: OnceLock<Option<Arc<BouncePool>>>,
    cache: Arc<Cache>,
}

impl Owned {
    pub(crate) fn new() -> Self {
        Owned {
            pool: OnceLock::new(),
            cache: Arc::new(Cache::default()),
        }
    }
}

impl FabricBackend {
    /// What an operation of `plan` in direction `dir` holds for its descriptors, its
    /// pieces' descriptors filled in: `None` where the domain wants none. `fenced`: the
    /// operation has a fence part, which reads into the pool's sink.
    pub(crate) fn hold(
        &self,
        plan: &mut Plan,
        dir: Dir,
        fenced: bool,
    ) -> Result<Option<Box<Held>>> {
        if !self.mr_local {
            return Ok(None);
        }
        self.hold_with(plan, dir, fenced, BOUNCE_MAX)
            .map(|h| Some(Box::new(h)))
    }

    /// [`FabricBackend::hold`] with operations of at most `bounce_max` bytes bounced (the
    /// benchmark of the paths sets it), whatever the domain demands.
    pub(crate) fn hold_with(
        &self,
        plan: &mut Plan,
        dir: Dir,
        fenced: bool,
        bounce_max: usize,
    ) -> Result<Held> {
        let mut held = Held::new();
        if fenced {
            let pool = self.pool().ok_or_else(|| {
                Error::insufficient_resources().detail("no registered memory for the fence")
            })?;
            held.fence_sink(pool.sink(), pool.mr.desc());
            held.keep(Box::new(Arc::clone(pool)));
        }
        match plan {
            Plan::Contiguous { piece, .. } => {
                if piece.len <= bounce_max.min(BOUNCE_MAX) {
                    if let Some(lease) = self.pool().and_then(BouncePool::lease) {
                        let slot = lease.ptr();
                        match dir {
                            // SAFETY: the piece lies in the operation's buffer, the slot in
                            // the pool; both hold `len` <= BOUNCE_MAX bytes; the slot is
                            // leased to this operation alone.
                            Dir::Write { .. } => unsafe {
                                std::ptr::copy_nonoverlapping(piece.ptr, slot, piece.len)
                            },
                            Dir::Read => held.copy_back(CopyBack {
                                from: slot,
                                to: piece.ptr,
                                len: piece.len,
                            }),
                            // An atomic's operands go in and its result comes back.
                            Dir::Atomic(_) => {
                                // SAFETY: as for a write.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(piece.ptr, slot, piece.len)
                                };
                                held.copy_back(CopyBack {
                                    from: slot,
                                    to: piece.ptr,
                                    len: piece.len,
                                })
                            }
                        }
                        piece.ptr = slot;
                        piece.desc = lease.pool.mr.desc();
                        held.keep(Box::new(lease));
                        return Ok(held);
                    }
                }
                piece.desc = self.cached(&mut held, piece.ptr, piece.len)?;
            }
            Plan::Batches(b) => {
                for p in b
                    .pieces
                    .iter_mut()
                    .filter(|p| p.desc.is_null() && p.len > 0)
                {
                    p.desc = self.cached(&mut held, p.ptr, p.len)?;
                }
            }
        }
        Ok(held)
    }

    /// The descriptor of a registration covering `len` bytes at `ptr`, from the cache or
    /// made (and then owned by this operation); kept in `held`.
    fn cached(&self, held: &mut Held, ptr: *mut u8, len: usize) -> Result<*mut libc::c_void> {
        let (start, end) = (ptr as usize, ptr as usize + len);
        if let Some(mr) = self.owned.cache.find(start, end) {
            let desc = mr.mr.desc();
            held.keep(Box::new(mr));
            return Ok(desc);
        }
        // SAFETY: the range is the operation's buffer, which its slot owns until the
        // provider is done; the registration is closed when the last operation holding it
        // is (the slots keep it), so never after the memory is gone while in use.
        let (mr, key) = unsafe { self.register_region(ptr, len, LOCAL) }
            .map_err(|e| super::registration_error(e).controller(self.name.clone()))?;
        let mr = Arc::new(CachedMr {
            mr,
            key,
            keys: Arc::clone(&self.keys),
            start,
            id: self.owned.cache.ids.fetch_add(1, Ordering::Relaxed),
            cache: Arc::downgrade(&self.owned.cache),
        });
        self.owned.cache.insert(&mr, end);
        let desc = mr.mr.desc();
        held.keep(Box::new(Owner(mr)));
        Ok(desc)
    }

    /// The bounce pool, registered at the first call (`None` if that failed).
    fn pool(&self) -> Option<&Arc<BouncePool>> {
        self.owned
            .pool
            .get_or_init(|| match BouncePool::new(self) {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    tracing::warn!(controller = %self.name, error = %e, "no bounce pool: small owned buffers are registered one by one");
                    None
                }
            })
            .as_ref()
    }
}

/// Local buffers are written from and read into.
const LOCAL: MrAccess = MrAccess::READ.union(MrAccess::WRITE);

/// Registered memory cut into slots of [`BOUNCE_MAX`] bytes, and the fence sink.
pub(crate) struct BouncePool {
    // Declared before the memory: the registration closes before it is unmapped.
    mr: MemoryRegion,
    key: u64,
    keys: Keys,
    mem: Mapping,
    free: Mutex<Vec<usize>>,
}

impl BouncePool {
    fn new(backend: &FabricBackend) -> Result<Self> {
        // The slots, then a page whose first byte is the fence sink (mappings are whole pages).
        let mem = Mapping::new(BOUNCE_SLOTS * BOUNCE_MAX + crate::sys::limits::page_size())?;
        // SAFETY: the mapping lives as long as the pool and outlives its registration
        // (field order); slots go out only to operations that hold the pool.
        let (mr, key) = unsafe { backend.register_region(mem.as_ptr(), mem.len(), LOCAL) }
            .map_err(|e| super::registration_error(e).controller(backend.name.clone()))?;
        Ok(BouncePool {
            mr,
            key,
            keys: Arc::clone(&backend.keys),
            mem,
            free: Mutex::new((0..BOUNCE_SLOTS).rev().collect()),
        })
    }

    /// A free slot, if there is one.
    fn lease(pool: &Arc<Self>) -> Option<Lease> {
        let index = pool.free.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        Some(Lease {
            pool: Arc::clone(pool),
            index,
        })
    }

    /// Where fences read (shared: nobody reads the byte).
    fn sink(&self) -> *mut u8 {
        self.mem.as_ptr().wrapping_add(BOUNCE_SLOTS * BOUNCE_MAX)
    }
}

impl Drop for BouncePool {
    fn drop(&mut self) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

impl Keep for Arc<BouncePool> {}

/// One slot of the pool, given back when dropped.
struct Lease {
    pool: Arc<BouncePool>,
    index: usize,
}

impl Lease {
    fn ptr(&self) -> *mut u8 {
        self.pool.mem.as_ptr().wrapping_add(self.index * BOUNCE_MAX)
    }
}

impl Keep for Lease {}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.index);
    }
}

/// A registration of an owned buffer's range.
struct CachedMr {
    mr: MemoryRegion,
    key: u64,
    keys: Keys,
    start: usize,
    /// Tells this registration's entry from a later one at the same address.
    id: u64,
    cache: Weak<Cache>,
}

impl Keep for Arc<CachedMr> {}

impl Drop for CachedMr {
    fn drop(&mut self) {
        if let Some(cache) = self.cache.upgrade() {
            cache.remove(self.start, self.id);
        }
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// The operation that made a registration: while it holds its buffer, the cache may hand
/// the registration to others.
struct Owner(Arc<CachedMr>);

impl Owner {
    fn retire(&self) {
        if let Some(cache) = self.0.cache.upgrade() {
            cache.retire(self.0.start, self.0.id);
        }
    }
}

impl Keep for Owner {
    fn buffer_returned(&self) {
        self.retire();
    }
}

// An operation dropped before its buffer was reported returned (never posted, or refused)
// gave it back all the same.
impl Drop for Owner {
    fn drop(&mut self) {
        self.retire();
    }
}

/// The registrations by start address.
#[derive(Default)]
struct Cache {
    entries: Mutex<BTreeMap<usize, Entry>>,
    ids: AtomicU64,
}

struct Entry {
    end: usize,
    mr: Weak<CachedMr>,
    id: u64,
    /// The owner still holds its buffer.
    live: bool,
}

impl Cache {
    /// A registration covering `start..end` whose owner still holds its buffer.
    fn find(&self, start: usize, end: usize) -> Option<Arc<CachedMr>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (_, e) = entries.range(..=start).next_back()?;
        if !e.live || e.end < end {
            return None;
        }
        e.mr.upgrade()
    }

    fn insert(&self, mr: &Arc<CachedMr>, end: usize) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.insert(
            mr.start,
            Entry {
                end,
                mr: Arc::downgrade(mr),
                id: mr.id,
                live: true,
            },
        );
    }

    /// The owner of entry `id` gave its buffer back.
    fn retire(&self, start: usize, id: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get_mut(&start).filter(|e| e.id == id) {
            e.live = false;
        }
    }

    /// The registration of entry `id` was closed.
    fn remove(&self, start: usize, id: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.get(&start).is_some_and(|e| e.id == id) {
            entries.remove(&start);
        }
    }
}
