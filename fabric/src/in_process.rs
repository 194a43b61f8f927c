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

/// The addresses of every shm endpoint this process enabled (names are never reused).
static ENDPOINTS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

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

/// An shm endpoint at `name` enabled, bound to `av`: the vector may hold endpoints of this
/// process, and they may hold this one.
pub(crate) fn register(name: &[u8], av: &Arc<AddressVector>) {
    lock(&ENDPOINTS).push(trimmed(name).to_vec());
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

/// Whether `name` (an shm address or region file name, with or without its `fi_shm://`
/// prefix) is an endpoint this process enabled, open or closed: its region is never to be
/// read but through that endpoint.
pub fn of_this_process(name: &[u8]) -> bool {
    let name = unprefixed(trimmed(name));
    lock(&ENDPOINTS).iter().any(|n| unprefixed(n) == name)
}

/// An shm address without its `fi_shm://` prefix: its region's file name.
fn unprefixed(name: &[u8]) -> &[u8] {
    name.windows(3)
        .position(|w| w == b"://")
        .map_or(name, |i| &name[i + 3..])
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
        assert_eq!(unprefixed(b"fi_shm://42:0:0"), b"42:0:0");
        assert_eq!(unprefixed(b"42:0:0"), b"42:0:0");
    }
}
