//! shm endpoints of this process that are each other's peers.
//!
//! libfabric 1.17's shm reaches a peer of the same process through that peer's own region
//! (it maps no copy), and an address vector writes into the peer's region when the peer's
//! entry goes (`smr_unmap_from_endpoint`, at `fi_av_remove` and when the vector closes). An
//! endpoint's close frees its region: a vector of this process still holding it then writes
//! into freed memory (two nodes of one process on shm segfaulted at shutdown). So before an
//! shm endpoint closes, every other shm vector of the process forgets its address, and a
//! closed endpoint's address is never inserted again.

use crate::av::AddressVector;
use std::sync::{Arc, Mutex, Weak};

/// The shm address vectors of this process.
static VECTORS: Mutex<Vec<Weak<AddressVector>>> = Mutex::new(Vec::new());

/// The addresses of this process's shm endpoints that closed (names are never reused).
static CLOSED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Held across an shm insert and across a close's removals: an insert of a closing
/// endpoint's address either comes first (and is removed) or sees it closed.
static ORDER: Mutex<()> = Mutex::new(());

/// Orders an shm insert against the closes of this process's shm endpoints.
pub(crate) fn ordered() -> std::sync::MutexGuard<'static, ()> {
    lock(&ORDER)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An shm vector whose endpoint is enabled: it may hold endpoints of this process.
pub(crate) fn register(av: &Arc<AddressVector>) {
    let mut all = lock(&VECTORS);
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(av));
}

/// Closes the shm endpoint at `name`, bound to `own`, with `close_endpoint`: every other
/// vector of the process forgets it first, and `own` closes right after it (so the vectors
/// alive are those of open endpoints, whose regions are mapped). One close at a time, and no
/// insert meanwhile.
pub(crate) fn close(name: &[u8], own: &Arc<AddressVector>, close_endpoint: impl FnOnce()) {
    let _order = lock(&ORDER);
    lock(&CLOSED).push(name.to_vec());
    let others: Vec<Arc<AddressVector>> = {
        let mut all = lock(&VECTORS);
        all.retain(|w| w.upgrade().is_some_and(|av| !Arc::ptr_eq(&av, own)));
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for av in others {
        av.forget_address(name);
    }
    close_endpoint();
    own.close();
}

/// Whether `addr` is an shm endpoint of this process that closed.
pub(crate) fn closed(addr: &[u8]) -> bool {
    let addr = trimmed(addr);
    lock(&CLOSED).iter().any(|n| trimmed(n) == addr)
}

/// An address without the NULs that may end it.
pub(crate) fn trimmed(addr: &[u8]) -> &[u8] {
    let end = addr.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &addr[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_compare_without_their_nuls() {
        assert_eq!(trimmed(b"fi_shm://42:0:0\0\0"), b"fi_shm://42:0:0");
        assert_eq!(trimmed(b"fi_shm://42:0:0"), b"fi_shm://42:0:0");
        assert_eq!(trimmed(b"\0"), b"");
    }
}
