//! How a signal travels between nodes (DESIGN.md §6, Signals): the node's routes and the
//! sending. What an arriving signal is delivered to is the dispatcher's (`dispatch.rs`).
//!
//! Every controller registers a small remote-write-only doorbell (`backend/fabric/doorbell.rs`).
//! Its address and key travel in the connect exchange: the importer's in the
//! `ConnectRequest`, with a token the importer chose for the connection; the exporter's in
//! the `ConnectGrant`, whose connection id is the exporter's token. A signal is an 8-byte
//! `fi_inject_writedata` to the peer's doorbell whose 64-bit completion data is
//!
//! ```text
//! bits 40..64: check | bits 8..40: the receiver's token | bit 1: NO_ACCUMULATE | bit 0: 1 = to an importer
//! ```
//!
//! so that any node can signal and be signalled, import-only and read-only ones included
//! (the doorbell is not the segment). A doorbell's completion does not say who wrote it, so
//! the word names the connection at both ends: the receiver's token finds it, and the check
//! (the low 24 bits of the sender's token for it: the importer's token to the exporter, the
//! exporter's connection id to the importer) must match what the receiver recorded at
//! connect, else the signal is dropped. The exporter then knows which importer signalled
//! from the connection alone. Where the fabric cannot carry it (no doorbell on either side,
//! completion data narrower than 8 bytes, a token beyond 32 bits) or when the node was built
//! with [`NodeBuilder::signals_over_side_channel`](crate::NodeBuilder::signals_over_side_channel),
//! the same word goes as a side-channel `Signal` message (the whole token, flag bits), whose
//! link names the sending node.
//!
//! On `loopback` a connection has its own doorbell instead (`events/loopback_bell.rs`): a
//! shared word each way and a pair of datagram sockets, handed over with the segment's memfd; the side
//! channel carries signals there only when forced, or for a connection without one.
//!
//! Order (DESIGN.md, decision 18): a signal posted after a put *that resolved* arrives after the
//! put's data is visible, on every path, because a put resolves only once its data is visible at
//! the target (delivery-complete on shm, sockets and tcp; on udp the fence read behind the
//! write). A put still in flight when the signal is posted (not awaited yet) has no such
//! promise: on tcp the doorbell write usually follows it on the same connection, but a put waiting
//! for a place in the transmit queue, split in pieces, or retried after `-FI_EAGAIN` may be
//! overtaken, and the side channel is another connection altogether.

use super::event::SignalFlags;
use super::loopback_bell::LoopbackBell;
use crate::backend::fabric::{FabricBackend, PeerAddress};
use crate::entries::{ImportEntry, Owner};
use crate::fabric::endpoint::PostError;
use crate::fabric::ffi;
use crate::sans_io::wire::{Doorbell, Message};
use crate::sidechannel::SideChannel;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// Bit 0 of the signal word: the receiver is an importer (else the exporter).
const TO_IMPORTER: u64 = 0x01;
/// Bit 1: `RSM_SIGPOST_NO_ACCUMULATE`.
const NO_ACCUMULATE: u64 = 0x02;
const TOKEN_SHIFT: u32 = 8;
/// Tokens a doorbell word carries (32 bits); larger ones go over the side channel.
pub(crate) const MAX_BELL_TOKEN: u64 = u32::MAX as u64;
const CHECK_SHIFT: u32 = 40;
/// The check: the low 24 bits of the sender's token.
pub(crate) const CHECK_MASK: u64 = (1 << (64 - CHECK_SHIFT)) - 1;
/// Tokens this node hands out stay below 2^32 for a long while: random start in 2^31.
pub(crate) const MAX_TOKEN: u64 = (1 << 56) - 1;

/// The 64-bit completion data of a signal to the receiver's `token` from the sender whose
/// token for the connection is `sender`.
pub(crate) fn encode(token: u64, sender: u64, to_importer: bool, flags: SignalFlags) -> u64 {
    let mut w = ((token & MAX_BELL_TOKEN) << TOKEN_SHIFT) | ((sender & CHECK_MASK) << CHECK_SHIFT);
    if to_importer {
        w |= TO_IMPORTER;
    }
    if flags.contains(SignalFlags::NO_ACCUMULATE) {
        w |= NO_ACCUMULATE;
    }
    w
}

/// What a signal word says: the receiver's token, the check, the direction (to an
/// importer?) and whether `NO_ACCUMULATE` was asked for. A side-channel `Signal` has only
/// the flag bits in its word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) token: u64,
    pub(crate) check: u64,
    pub(crate) to_importer: bool,
    pub(crate) no_accumulate: bool,
}

pub(crate) fn decode(word: u64) -> Word {
    Word {
        token: (word >> TOKEN_SHIFT) & MAX_BELL_TOKEN,
        check: word >> CHECK_SHIFT,
        to_importer: word & TO_IMPORTER != 0,
        no_accumulate: word & NO_ACCUMULATE != 0,
    }
}

/// Whether `sender`, the sender's token as the receiver recorded it, is what a word's check
/// says.
pub(crate) fn checks(word: &Word, sender: u64) -> bool {
    sender & CHECK_MASK == word.check
}

/// How a signal says who sent it: the side channel's link names the node and its
/// incarnation; a doorbell word carries a check of the sender's token for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    Side(Owner),
    Bell(Word),
}

/// Whether a signal came from the connection's peer: `peer` (node and incarnation) on a
/// side-channel link, or a doorbell word whose check matches `sender_token`, the peer's
/// token for it.
pub(crate) fn from_peer(sent: Sent, peer: Owner, sender_token: u64) -> bool {
    match sent {
        Sent::Side(from) => from == peer,
        Sent::Bell(w) => checks(&w, sender_token),
    }
}

/// The most kinds of signal (sender, `NO_ACCUMULATE`) held for one import being connected;
/// each kind is a count, so a flood costs no memory, and a peer's variety beyond this is
/// dropped.
const EARLY_KINDS: usize = 8;

/// An importer token's route: an import being connected, or one that was.
enum ImportRoute {
    /// The request went out with this token, the grant has not been taken in: an exporter
    /// that granted may signal at once, before the importer knows the connection's id
    /// (which a signal's check is tested against), so its signals wait here, counted.
    Awaited {
        exporter: u32,
        early: Vec<Early>,
    },
    Live(Weak<dyn ImportEntry>),
}

/// Where a signal for an importer token went.
pub(crate) enum SignalRoute {
    /// To this import, if its exporter sent it.
    To(Arc<dyn ImportEntry>),
    /// Held for an import being connected.
    Held,
    /// No import has the token.
    Unknown,
}

/// Signals of one kind that arrived for an import being connected.
struct Early {
    sent: Sent,
    no_accumulate: bool,
    count: u64,
}

/// An import being connected, from its request to its registration ([`Routes::add_import`]);
/// dropped before (a refusal, a cancelled connect), the signals held for it go.
pub(crate) struct AwaitedImport<'a> {
    routes: &'a Routes,
    token: u64,
}

impl AwaitedImport<'_> {
    pub(crate) fn token(&self) -> u64 {
        self.token
    }
}

impl Drop for AwaitedImport<'_> {
    fn drop(&mut self) {
        let mut imports = lock(&self.routes.imports);
        if let Some(ImportRoute::Awaited { .. }) = imports.get(&self.token) {
            imports.remove(&self.token);
        }
    }
}

/// An importer as its exporter signals it.
pub(crate) struct ImporterBell {
    pub(crate) node: u32,
    token: u64,
    bell: Option<Doorbell>,
    /// Its fabric address and the ticket it issued for connecting to it.
    fabric: PeerAddress,
    /// None on loopback: signals to the importer ring the connection's loopback doorbell.
    backend: Option<Arc<FabricBackend>>,
    /// The importer's address-vector entry, inserted at the first signal.
    dest: OnceLock<Option<ffi::fi_addr_t>>,
    /// The connection's loopback doorbell, held so that a post rings it without a lookup
    /// (set once the grant offered it: signals before go by the side channel).
    loopback: OnceLock<Arc<LoopbackBell>>,
}

impl ImporterBell {
    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    pub(crate) fn bell(&self) -> Option<&Doorbell> {
        self.bell.as_ref()
    }

    /// The connection's loopback doorbell, where it has one.
    pub(crate) fn loopback(&self) -> Option<&LoopbackBell> {
        self.loopback.get().map(Arc::as_ref)
    }

    pub(crate) fn dest(&self) -> Option<ffi::fi_addr_t> {
        *self.dest.get_or_init(|| match self.backend.as_ref()?.peer(&self.fabric) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::debug!(node = self.node, error = %e, "importer's fabric address refused: signals to it use the side channel");
                None
            }
        })
    }
}

impl Drop for ImporterBell {
    fn drop(&mut self) {
        if let (Some(Some(_)), Some(b)) = (self.dest.get(), &self.backend) {
            b.release_peer(&self.fabric);
        }
    }
}

/// The most loopback doorbells a signal wait looks at (see [`Routes::loopback_bells`]).
const LOOK_AT_MOST: usize = 64;

/// The node's signal routes: importer tokens to imports, and the exporter's connections to
/// their importers' doorbells.
pub(crate) struct Routes {
    force_side: AtomicBool,
    /// How long an import waits between its grant and its registration, in µs (a fault
    /// injection hook, `NodeBuilder::pause_import_registration`).
    registration_pause_us: AtomicU64,
    next_token: AtomicU64,
    /// Importer tokens to imports, and to imports being connected.
    imports: Mutex<HashMap<u64, ImportRoute>>,
    importers: Mutex<HashMap<u64, Arc<ImporterBell>>>,
    /// Loopback doorbells by whom they ring: (peer node, to an importer?, receiver's token).
    loopback: Mutex<HashMap<(u32, bool, u64), Arc<LoopbackBell>>>,
    /// The same doorbells as a list, made again when one comes or goes, so that a signal
    /// wait takes it with one count instead of building its own (empty past
    /// [`LOOK_AT_MOST`]).
    looked_at: Mutex<Arc<[Arc<LoopbackBell>]>>,
    /// Signals this node sent by a loopback doorbell, and by the side channel.
    pub(crate) sent_by_bell: AtomicU64,
    pub(crate) sent_by_side: AtomicU64,
    /// Signal words handed to writes into a segment as their remote CQ data.
    pub(crate) sent_with_data: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for Routes {
    fn default() -> Self {
        Routes {
            force_side: AtomicBool::new(false),
            registration_pause_us: AtomicU64::new(0),
            next_token: AtomicU64::new(u64::from(rand::random::<u32>() >> 1) + 1),
            imports: Mutex::new(HashMap::new()),
            importers: Mutex::new(HashMap::new()),
            loopback: Mutex::new(HashMap::new()),
            looked_at: Mutex::new(Arc::from(Vec::new())),
            sent_by_bell: AtomicU64::new(0),
            sent_by_side: AtomicU64::new(0),
            sent_with_data: AtomicU64::new(0),
        }
    }
}

impl Routes {
    /// Every signal of this node goes over the side channel (the builder's setting).
    pub(crate) fn force_side_channel(&self, on: bool) {
        self.force_side.store(on, Ordering::Relaxed);
    }

    /// Imports wait `pause` between their grant and their registration (test hook).
    pub(crate) fn pause_registration(&self, pause: std::time::Duration) {
        let us = u64::try_from(pause.as_micros()).unwrap_or(u64::MAX);
        self.registration_pause_us.store(us, Ordering::Relaxed);
    }

    /// How long an import waits between its grant and its registration (zero but in
    /// fault-injection tests).
    pub(crate) fn registration_pause(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.registration_pause_us.load(Ordering::Relaxed))
    }

    pub(crate) fn side_channel_forced(&self) -> bool {
        self.force_side.load(Ordering::Relaxed)
    }

    /// A fresh importer token (below 2^32, so the doorbell carries it, for 2^31 imports)
    /// for an import from node `exporter`, whose signals are held from now on until the
    /// import is registered with it.
    pub(crate) fn new_token(&self, exporter: u32) -> AwaitedImport<'_> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) & MAX_TOKEN;
        let awaited = ImportRoute::Awaited {
            exporter,
            early: Vec::new(),
        };
        lock(&self.imports).insert(token, awaited);
        AwaitedImport {
            routes: self,
            token,
        }
    }

    /// The import of `awaited`'s token is connected: signals go to it from now on, and
    /// those held for it are delivered first, if its exporter sent them.
    pub(crate) fn add_import<T: ImportEntry>(&self, awaited: AwaitedImport<'_>, imp: &Arc<T>) {
        let token = awaited.token;
        let live = Arc::downgrade(imp) as Weak<dyn ImportEntry>;
        // Delivered under the lock, so a signal arriving meanwhile comes after them.
        let mut imports = lock(&self.imports);
        let held = imports.insert(token, ImportRoute::Live(live));
        let Some(ImportRoute::Awaited { early, .. }) = held else {
            return;
        };
        for e in early {
            if !from_peer(e.sent, imp.exporter(), imp.conn_id()) {
                tracing::debug!(
                    token,
                    "signal held for an import being connected came from another sender: dropped"
                );
                continue;
            }
            match e.no_accumulate {
                true => imp.signal(true),
                false => imp.bell(false, e.count),
            }
        }
        drop(imports);
        drop(awaited);
    }

    pub(crate) fn remove_import(&self, token: u64) {
        lock(&self.imports).remove(&token);
    }

    /// Where a signal `sent` for importer token `token` goes: the import, if it lives; if
    /// it is being connected, the signal is held for it.
    pub(crate) fn import_for_signal(
        &self,
        token: u64,
        sent: Sent,
        no_accumulate: bool,
    ) -> SignalRoute {
        let mut imports = lock(&self.imports);
        match imports.get_mut(&token) {
            None => SignalRoute::Unknown,
            Some(ImportRoute::Live(imp)) => {
                imp.upgrade().map_or(SignalRoute::Unknown, SignalRoute::To)
            }
            Some(ImportRoute::Awaited { exporter, early }) => {
                // A side-channel signal names its node: only the exporter's is held.
                if matches!(sent, Sent::Side(from) if from.node != *exporter) {
                    return SignalRoute::Unknown;
                }
                let same = |e: &&mut Early| e.sent == sent && e.no_accumulate == no_accumulate;
                if let Some(e) = early.iter_mut().find(same) {
                    e.count = e.count.saturating_add(1);
                } else if early.len() < EARLY_KINDS {
                    early.push(Early {
                        sent,
                        no_accumulate,
                        count: 1,
                    });
                } else {
                    tracing::debug!(
                        token,
                        "too many kinds of signal for an import being connected: dropped"
                    );
                }
                SignalRoute::Held
            }
        }
    }

    /// Exporter side: a connection is being granted to `node`, whose doorbell and token
    /// came in its request. Made before the importer is listed as connected, so that no
    /// signal of the exporter's can find it listed and have no route to it.
    pub(crate) fn add_importer(
        &self,
        conn_id: u64,
        node: u32,
        token: u64,
        bell: Option<Doorbell>,
        fabric: PeerAddress,
        backend: Option<Arc<FabricBackend>>,
    ) {
        let b = ImporterBell {
            node,
            token,
            bell,
            fabric,
            backend,
            dest: OnceLock::new(),
            loopback: OnceLock::new(),
        };
        lock(&self.importers).insert(conn_id, Arc::new(b));
    }

    /// Exporter side: the grant of connection `conn_id` gave it `loopback`, its own
    /// doorbell, which its signals ring from now on.
    pub(crate) fn add_importer_bell(&self, conn_id: u64, loopback: Arc<LoopbackBell>) {
        let Some(b) = self.importer(conn_id) else {
            return;
        };
        if b.loopback.set(Arc::clone(&loopback)).is_ok() {
            self.add_loopback_bell(b.node, true, b.token, loopback);
        }
    }

    /// Exporter side: the connection ended.
    pub(crate) fn forget_importer(&self, conn_id: u64) {
        let gone = lock(&self.importers).remove(&conn_id);
        if let Some(b) = gone.as_ref().filter(|b| b.loopback.get().is_some()) {
            self.drop_loopback_bell(b.node, true, b.token);
        }
        drop(gone);
    }

    /// `bell`, of the connection to (`node`, `to_importer`, `token`), is looked at by the
    /// node's signal waits from now on (its handle holds it and rings it).
    pub(crate) fn add_loopback_bell(
        &self,
        node: u32,
        to_importer: bool,
        token: u64,
        bell: Arc<LoopbackBell>,
    ) {
        let mut bells = lock(&self.loopback);
        bells.insert((node, to_importer, token), bell);
        self.relist(&bells);
    }

    /// The connection ended: the waits stop looking at its doorbell (its watch stops once
    /// the connection's handle lets it go too).
    pub(crate) fn drop_loopback_bell(&self, node: u32, to_importer: bool, token: u64) {
        let mut bells = lock(&self.loopback);
        let gone = bells.remove(&(node, to_importer, token));
        self.relist(&bells);
        drop(bells);
        drop(gone);
    }

    /// Makes the list of doorbells a wait looks at again, from `bells` (the map, locked).
    fn relist(&self, bells: &HashMap<(u32, bool, u64), Arc<LoopbackBell>>) {
        let list: Arc<[Arc<LoopbackBell>]> = match bells.len() > LOOK_AT_MOST {
            true => Arc::from(Vec::new()),
            false => bells.values().cloned().collect(),
        };
        *lock(&self.looked_at) = list;
    }

    /// The node's loopback doorbells, for a signal wait to look at before its task parks;
    /// none past [`LOOK_AT_MOST`], where looking at each would cost more than the wake-up it
    /// saves.
    pub(crate) fn loopback_bells(&self) -> Arc<[Arc<LoopbackBell>]> {
        Arc::clone(&lock(&self.looked_at))
    }

    pub(crate) fn importer(&self, conn_id: u64) -> Option<Arc<ImporterBell>> {
        lock(&self.importers).get(&conn_id).cloned()
    }
}

/// Where one signal goes.
pub(crate) struct Target<'a> {
    pub(crate) node: u32,
    pub(crate) token: u64,
    /// The sender's own token for the connection (the word's check).
    pub(crate) sender: u64,
    pub(crate) to_importer: bool,
    pub(crate) bell: Option<&'a Doorbell>,
    pub(crate) dest: Option<ffi::fi_addr_t>,
    /// The connection's loopback doorbell, which its handle holds from connect on.
    pub(crate) loopback: Option<&'a LoopbackBell>,
}

/// Sends one signal: by the doorbell when both ends have one, else by the side channel.
pub(crate) async fn send(
    routes: &Routes,
    side: Result<&Arc<SideChannel>>,
    backend: Option<&Arc<FabricBackend>>,
    t: Target<'_>,
    flags: SignalFlags,
    op: &'static str,
) -> Result<()> {
    let word = encode(t.token, t.sender, t.to_importer, flags);
    if let Some(rang) = ring_loopback(routes, backend, &t, flags, op) {
        return rang;
    }
    if let (Some(backend), Some(bell), Some(dest)) =
        (by_fabric(routes, backend, &t), t.bell, t.dest)
    {
        return ring(backend, t.node, dest, bell, word, op).await;
    }
    let side = side.map_err(|e| e.op(op))?;
    routes.sent_by_side.fetch_add(1, Ordering::Relaxed);
    side.send(
        t.node,
        Message::Signal {
            conn_id: t.token,
            flags: (word & 0xFF) as u32,
        },
    )
    .await
    .map_err(|e| e.op(op).node(t.node))
}

/// Rings the connection's loopback doorbell now, where the signal goes that way (`None`:
/// it goes another way). No system call unless the receiver sleeps.
pub(crate) fn ring_loopback(
    routes: &Routes,
    backend: Option<&Arc<FabricBackend>>,
    t: &Target<'_>,
    flags: SignalFlags,
    op: &'static str,
) -> Option<Result<()>> {
    let bell = t.loopback?;
    if backend.is_some() || routes.side_channel_forced() {
        return None;
    }
    let rang = bell
        .ring(flags.contains(SignalFlags::NO_ACCUMULATE))
        .map_err(|e| e.op(op).node(t.node));
    if rang.is_ok() {
        routes.sent_by_bell.fetch_add(1, Ordering::Relaxed);
    }
    Some(rang)
}

/// The fabric whose doorbell the signal rings, where it goes by one: both ends have a
/// doorbell, the fabric carries 8 bytes of completion data, the word holds the token, and
/// the node does not force the side channel. A loopback connection without a doorbell
/// signals over the side channel, as forced signals do.
fn by_fabric<'a>(
    routes: &Routes,
    backend: Option<&'a Arc<FabricBackend>>,
    t: &Target<'_>,
) -> Option<&'a Arc<FabricBackend>> {
    let fabric = backend.filter(|b| {
        !routes.side_channel_forced() && b.carries_signals() && b.doorbell().is_some()
    })?;
    // A token the word cannot hold goes by the side channel, which carries all of it.
    (t.bell.is_some() && t.dest.is_some() && t.token <= MAX_BELL_TOKEN).then_some(fabric)
}

/// The signal word a write into the segment may carry as its remote CQ data in place of
/// the doorbell's (`put_signal`, DESIGN.md §6.1): where the signal would ring the fabric
/// doorbell, the exporter's engine hands any completion with remote data to the same
/// dispatcher, whatever region the write went to. `None`: the signal goes another way.
pub(crate) fn carried_word(
    routes: &Routes,
    backend: Option<&Arc<FabricBackend>>,
    t: &Target<'_>,
    flags: SignalFlags,
) -> Option<u64> {
    by_fabric(routes, backend, t)?;
    Some(encode(t.token, t.sender, t.to_importer, flags))
}

/// The doorbell write; `-FI_EAGAIN` means progress and retry.
async fn ring(
    backend: &Arc<FabricBackend>,
    node: u32,
    dest: ffi::fi_addr_t,
    bell: &Doorbell,
    word: u64,
    op: &'static str,
) -> Result<()> {
    let engine = backend.engine();
    let payload = [0u8; 8];
    loop {
        match engine
            .endpoint()
            .inject_writedata(&payload, word, dest, bell.addr, bell.key)
        {
            Ok(()) => {
                // A sleeping target (shm) needs its progress to see the doorbell; the local
                // engine may need to run for a connection being set up (rxm).
                engine.note_target(node);
                // rxm may queue the inject until its next progress.
                engine.progress_after_inject();
                return Ok(());
            }
            Err(PostError::Connecting { epoch }) => engine.connection_changed(epoch).await,
            Err(PostError::Again) => {
                // shm's first contact needs the target's progress too.
                engine.note_target(node);
                engine.try_progress();
                engine.poke();
                crate::reactor::yield_now().await;
            }
            Err(PostError::Failed(f)) => {
                return Err(Error::conn_aborted().op(op).node(node).fabric(f));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_word_round_trips() {
        let w = encode(
            0x3456_789A,
            0x12_ABCD_EF01,
            true,
            SignalFlags::NO_ACCUMULATE,
        );
        assert_eq!(w & 0xFF, 0x03);
        let d = decode(w);
        assert_eq!(
            d,
            Word {
                token: 0x3456_789A,
                check: 0xCD_EF01,
                to_importer: true,
                no_accumulate: true
            }
        );
        assert!(checks(&d, 0x12_ABCD_EF01));
        assert!(checks(&d, 0xCD_EF01));
        assert!(!checks(&d, 0x12_ABCD_EF02));
        let d = decode(encode(
            MAX_BELL_TOKEN,
            u64::MAX,
            false,
            SignalFlags::empty(),
        ));
        assert_eq!((d.token, d.check), (MAX_BELL_TOKEN, CHECK_MASK));
        assert!(!d.to_importer && !d.no_accumulate);
        // Any word decodes to something; a hostile one only fails its check or lookup.
        let d = decode(u64::MAX);
        assert_eq!((d.token, d.check), (MAX_BELL_TOKEN, CHECK_MASK));
    }
}
