//! A tcp controller's remote atomics by the provider (DESIGN.md §13). tcp's connected
//! endpoints carry no atomics, so beside them a tcp controller opens, at the first atomic
//! it performs for an importer or posts itself, a reliable-datagram endpoint over
//! `tcp;ofi_rxm` on the same interface, with its own fabric, domain, queue, address vector
//! and engine (rxm pre-posts about 70 MiB of receive buffers per endpoint, which hints do
//! not lower: opened only where atomics are used). An exporter registers a read-write
//! grant's memory there too, under the grant's own key and closed with the grant's
//! registration (DESIGN.md §8, "Grants"); the grant, or the reply to the connection's first
//! atomic, carries that endpoint's address, and the importer posts its atomics there.

use super::import::FabricImport;
use super::{AtomicsOpener, FabricBackend, PeerAddress, Registration};
use crate::backend::path::Offer;
use crate::fabric::{Domain, Fabric, Info, MrAccess};
use crate::perm::Perm;
use crate::reactor::engine::Engine;
use std::sync::Arc;
use std::time::Duration;

/// What the endpoint for atomics reports its engine to, once open: the node, which wakes
/// it when a peer asks this controller's engines to look at their queues.
pub(crate) type OnEngine = Box<dyn FnOnce(&Arc<Engine>) + Send>;

/// The opening of controller `name`'s endpoint for atomics, described by `info`; its
/// engine counts into the controller's `stats` and runs inside its `span`.
pub(crate) fn opener(
    info: Arc<Info>,
    name: String,
    spin_budget: Option<Duration>,
    (stats, span): (Arc<crate::stats::Counters>, tracing::Span),
    on_engine: OnEngine,
) -> AtomicsOpener {
    Box::new(move || {
        // Opening a domain may install signal handlers (DESIGN.md §3.1).
        let opened = crate::sys::dispositions::keep("fi_endpoint", || {
            let domain = Fabric::open(info)
                .and_then(Domain::open)
                .map_err(crate::Error::from)?;
            // Tuned as the connected endpoints: the awaiting thread reads its own answers.
            FabricBackend::open_as(domain, (&name, "tcp"), spin_budget, (stats, span), true)
        });
        match opened {
            Ok(b) => {
                on_engine(b.engine());
                tracing::debug!(controller = %name, "endpoint for atomics open");
                Some(b)
            }
            Err(e) => {
                tracing::warn!(controller = %name, error = %e, "no endpoint for atomics: the exporter performs them");
                None
            }
        }
    })
}

impl FabricBackend {
    /// Hands the controller the opening of its endpoint for atomics, run by the first
    /// [`FabricBackend::atomics`].
    pub(crate) fn arm_atomics(&self, opener: AtomicsOpener) {
        *self
            .atomics_opener
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(opener);
    }

    /// The controller's endpoint for atomics, opened now if it was not yet; `None` where it
    /// has none or it did not open.
    pub(crate) fn atomics(&self) -> Option<&Arc<FabricBackend>> {
        self.atomics
            .get_or_init(|| {
                let open = self
                    .atomics_opener
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                open.and_then(|f| f())
            })
            .as_ref()
    }

    /// The endpoint for atomics if it is open.
    fn atomics_if_open(&self) -> Option<&Arc<FabricBackend>> {
        self.atomics.get().and_then(Option::as_ref)
    }

    /// Connection `conn_id`'s endpoint for atomics (opened now if it was not), its
    /// registration in `offer` mirrored there if it was not: that endpoint's address, or
    /// `None` (the exporter performs the connection's atomics).
    pub(super) fn atomics_for(&self, offer: &Offer, conn_id: u64) -> Option<Vec<u8>> {
        if self.carries_atomics() {
            return None;
        }
        let rx = self.atomics()?;
        offer
            .with_registration(conn_id, |reg, access| {
                if !access.allows(Perm::RDWR) {
                    return None;
                }
                if reg.atomics.is_some() {
                    return Some(rx.address());
                }
                let (addr, len) = (reg.mr.addr() as *const u8, reg.mr.len());
                // SAFETY: the memory is `reg`'s, registered and mapped while `reg` lives;
                // the mirror lives in `reg`.
                unsafe { self.mirror_for_atomics(reg, addr, len) }
            })
            .flatten()
    }

    /// Whether this controller's own endpoint carries atomics: not connected ones.
    pub(crate) fn carries_atomics(&self) -> bool {
        !self.domain.info().view().is_msg()
    }

    /// Registers the memory of `reg` (`len` bytes at `addr`) on the endpoint for atomics, if
    /// it is open, under the same key, closed with `reg`: returns that endpoint's address for
    /// the importer, or `None` (the exporter performs the grant's atomics).
    ///
    /// # Safety
    /// As for [`FabricBackend::register`]: `reg`'s memory.
    pub(super) unsafe fn mirror_for_atomics(
        &self,
        reg: &mut Registration,
        addr: *const u8,
        len: usize,
    ) -> Option<Vec<u8>> {
        let rx = self.atomics_if_open()?;
        let access = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);
        // SAFETY: forwarded contract; the mirror lives in `reg`, so it closes no later.
        match unsafe { rx.register_keyed(addr, len, access, reg.key) } {
            Ok((mr, key)) if key == reg.key => {
                reg.atomics = Some(Box::new(Registration {
                    mr,
                    key,
                    base: reg.base,
                    backend: Arc::clone(rx),
                    atomics: None,
                }));
                Some(rx.address())
            }
            Ok((mr, key)) => {
                drop(mr);
                rx.forget_key(key);
                tracing::debug!(
                    "the endpoint for atomics chose its own key: the exporter performs them"
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot register a grant for atomics: the exporter performs them");
                None
            }
        }
    }

    /// The importer's end of a grant's atomics: the exporter's endpoint for atomics at `addr`
    /// (hostile until checked) in this controller's one; `None` where either has none.
    pub(crate) fn atomics_import(&self, addr: &[u8]) -> Option<Arc<FabricImport>> {
        if addr.is_empty() {
            return None;
        }
        let rx = self.atomics()?;
        let peer = PeerAddress {
            addr: addr.to_vec(),
            ticket: Vec::new(),
        };
        let dest = match rx.check_peer_address(addr).and_then(|()| rx.peer(&peer)) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "the exporter's endpoint for atomics is out of reach: it performs them");
                return None;
            }
        };
        Some(Arc::new(FabricImport {
            engine: Arc::clone(rx.engine()),
            backend: Arc::clone(rx),
            dest,
            peer,
            offered_atomics: Vec::new(),
            atomics: std::sync::OnceLock::new(),
        }))
    }
}

impl FabricImport {
    /// Where this connection's atomics go when its endpoint carries none (tcp): the
    /// exporter's endpoint for atomics, reached at the first call once the grant or an
    /// exporter's answer named it; `None`: the exporter performs them.
    pub(crate) fn atomics_path(&self) -> Option<&Arc<FabricImport>> {
        if let Some(done) = self.atomics.get() {
            return done.as_ref();
        }
        if self.offered_atomics.is_empty() {
            return None;
        }
        self.adopt_atomics(&self.offered_atomics);
        self.atomics.get().and_then(Option::as_ref)
    }

    /// The exporter's endpoint for this connection's atomics is at `addr`: later atomics go
    /// there (this controller's own endpoint for atomics opened now if it was not). Once.
    pub(crate) fn adopt_atomics(&self, addr: &[u8]) {
        if self.atomics.get().is_none() && !addr.is_empty() {
            let _ = self.atomics.set(self.backend.atomics_import(addr));
        }
    }
}
