//! A tcp controller's remote atomics by the provider (DESIGN.md §13). tcp's connected
//! endpoints carry no atomics, so beside them a tcp controller opens, on a blocking thread
//! from the first atomic it performs for an importer or makes itself, a reliable-datagram
//! endpoint over
//! `tcp;ofi_rxm` on the same interface, with its own fabric, domain, queue, address vector
//! and engine (rxm pre-posts about 70 MiB of receive buffers per endpoint, which hints do
//! not lower: opened only where atomics are used). An exporter registers a read-write
//! grant's memory there too, under the grant's own key and closed with the grant's
//! registration (DESIGN.md §8, "Grants"); the grant, or the reply to one of the
//! connection's atomics, carries that endpoint's address, and the importer posts its
//! atomics there once its own is open.

use super::import::FabricImport;
use super::{AtomicsOpener, FabricBackend, PeerAddress, Registration};
use crate::backend::path::Offer;
use crate::fabric::{Domain, Fabric, Info, MrAccess};
use crate::perm::Perm;
use crate::reactor::engine::Engine;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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

/// A tcp controller's endpoint for atomics: its opening, handed over when the controller
/// opens, runs on a blocking thread of the node's runtime, started by the first atomic
/// made or served (the exporter performs atomics until it is open).
#[derive(Default)]
pub(crate) struct Slot {
    /// The endpoint once the opening ended; `None` inside where it did not open.
    ep: Arc<OnceLock<Option<Arc<FabricBackend>>>>,
    /// What opens it and the runtime whose blocking threads run that, taken by the first
    /// that needs it.
    opener: Mutex<Option<(AtomicsOpener, tokio::runtime::Handle)>>,
    /// An opener was handed over: until `ep` is set the endpoint is to come.
    armed: AtomicBool,
}

/// Sets the endpoint to `None` if the opening is dropped without running (a runtime shut
/// down), so that nobody waits for it.
struct Fill(Arc<OnceLock<Option<Arc<FabricBackend>>>>);

impl Drop for Fill {
    fn drop(&mut self) {
        let _ = self.0.set(None);
    }
}

/// Where a controller's endpoint for atomics stands.
pub(crate) enum Standing<'a> {
    /// Open: atomics may be posted there.
    Open(&'a Arc<FabricBackend>),
    /// Opening on a blocking thread: the exporter performs atomics meanwhile.
    Opening,
    /// None, or it did not open: the exporter performs atomics.
    None,
}

impl FabricBackend {
    /// Hands the controller the opening of its endpoint for atomics, which the first
    /// [`FabricBackend::atomics`] starts on a blocking thread of `runtime`.
    pub(crate) fn arm_atomics(&self, opener: AtomicsOpener, runtime: tokio::runtime::Handle) {
        *self
            .atomics
            .opener
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((opener, runtime));
        self.atomics.armed.store(true, Ordering::Release);
    }

    /// Whether the controller has or will have an endpoint for atomics that is not open yet
    /// (a cheap look, for the atomics path of every controller).
    pub(crate) fn atomics_pending(&self) -> bool {
        self.atomics.ep.get().is_none() && self.atomics.armed.load(Ordering::Acquire)
    }

    /// The controller's endpoint for atomics, its opening started now on a blocking
    /// thread if it was not: never waits for it.
    pub(crate) fn atomics(&self) -> Standing<'_> {
        if let Some(ep) = self.atomics.ep.get() {
            return ep.as_ref().map_or(Standing::None, Standing::Open);
        }
        if !self.atomics.armed.load(Ordering::Acquire) {
            return Standing::None;
        }
        let taken = self
            .atomics
            .opener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((open, runtime)) = taken {
            let fill = Fill(Arc::clone(&self.atomics.ep));
            // fi_getinfo, a fabric, a domain and rxm's 4,096 pre-posted receives block for
            // milliseconds: never on an executor's thread.
            drop(runtime.spawn_blocking(move || {
                let _ = fill.0.set(open());
            }));
        }
        match self.atomics.ep.get() {
            Some(Some(ep)) => Standing::Open(ep),
            Some(None) => Standing::None,
            None => Standing::Opening,
        }
    }

    /// Where the endpoint for atomics stands, without starting its opening: `"none"`,
    /// `"closed"` (to open at the first atomic), `"opening"` or `"open"`.
    pub(crate) fn atomics_standing(&self) -> &'static str {
        match self.atomics.ep.get() {
            Some(Some(_)) => "open",
            Some(None) => "none",
            None if !self.atomics.armed.load(Ordering::Acquire) => "none",
            None => match self
                .atomics
                .opener
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
            {
                true => "closed",
                false => "opening",
            },
        }
    }

    /// The endpoint for atomics if it is open.
    fn atomics_if_open(&self) -> Option<&Arc<FabricBackend>> {
        self.atomics.ep.get().and_then(Option::as_ref)
    }

    /// Connection `conn_id`'s endpoint for atomics, its registration in `offer` mirrored
    /// there if it was not: that endpoint's address, or `None` (the exporter performs the
    /// connection's atomics; if the endpoint is to come its opening starts now, and a later
    /// atomic of the connection names it).
    pub(super) fn atomics_for(&self, offer: &Offer, conn_id: u64) -> Option<Vec<u8>> {
        if self.carries_atomics() {
            return None;
        }
        let Standing::Open(rx) = self.atomics() else {
            return None;
        };
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
    /// (hostile until checked) in this controller's one `rx`; `None` where it is out of
    /// reach.
    fn atomics_import(rx: &Arc<FabricBackend>, addr: &[u8]) -> Option<Arc<FabricImport>> {
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
            offered_atomics: OnceLock::new(),
            atomics: OnceLock::new(),
        }))
    }
}

impl FabricImport {
    /// Where this connection's atomics go when its endpoint carries none (tcp): the
    /// exporter's endpoint for atomics, adopted at the first call once the grant or an
    /// exporter's answer named it and this controller's own is open; `None`: the exporter
    /// performs this one (and, once settled so, all).
    #[inline]
    pub(crate) fn atomics_path(&self) -> Option<&Arc<FabricImport>> {
        match self.atomics.get() {
            Some(done) => done.as_ref(),
            None => self.adopt_pending(),
        }
    }

    /// Adopts the exporter's endpoint for atomics once both ends are open; until then
    /// starts this controller's own opening (on a blocking thread) at the first atomic.
    fn adopt_pending(&self) -> Option<&Arc<FabricImport>> {
        let Some(addr) = self.offered_atomics.get() else {
            if self.backend.atomics_pending() {
                let _ = self.backend.atomics();
            }
            return None;
        };
        let adopted = match self.backend.atomics() {
            Standing::Opening => return None,
            Standing::None => None,
            Standing::Open(rx) => FabricBackend::atomics_import(rx, addr),
        };
        let _ = self.atomics.set(adopted);
        self.atomics.get().and_then(Option::as_ref)
    }

    /// The exporter's endpoint for this connection's atomics is at `addr`: later atomics go
    /// there once this controller's own endpoint for atomics is open. Once.
    pub(crate) fn adopt_atomics(&self, addr: &[u8]) {
        if self.atomics.get().is_none() && !addr.is_empty() {
            let _ = self.offered_atomics.set(addr.to_vec());
        }
    }
}
