//! A `loopback` connection's doorbell (DESIGN.md §7): signals between two processes of one host
//! without the side channel, with the same counting, `NO_ACCUMULATE`, waits, pollable
//! descriptor and streams as on the other paths, and no CPU while idle.
//!
//! At connect the exporter creates, for the connection, a one-page sealed memfd holding one
//! 64-bit word per direction (at 0: to the exporter, at 64: to the importer) and a connected
//! pair of Unix datagram sockets (`sys/bell.rs`), keeps one end and offers the page and the
//! other end to the importing process at its descriptor service (`sidechannel/fdpass.rs`);
//! the grant's `keys[1]` is their ticket. The page is not the segment, so a read-only
//! importer signals as well as any. Each side has its own end (not a shared eventfd, whose
//! `O_NONBLOCK` the peer could clear), and rings and drains with per-call `MSG_DONTWAIT`:
//! nothing the peer does to a descriptor makes this side's runtime wait.
//!
//! A post changes the receiver's word, and rings the receiver's end only when the word
//! was 0 (else the receiver was told already and has not looked yet). The receiver's
//! runtime watches its end (epoll: no thread, no CPU while idle); when it fires, it
//! drains it, then swaps the word with 0 and delivers what the word says:
//!
//! ```text
//! bit 63: the first post since the receiver last looked had NO_ACCUMULATE
//! bits 0..63: how many posts without it came since
//! ```
//!
//! That is exactly what the posts in their order would have done: a `NO_ACCUMULATE` post
//! into a non-zero word is dropped at once (whatever the word holds leaves an event pending
//! at the receiver before it), and into a zero word it counts only if nothing is pending at
//! the receiver, which the receiving hub decides, as on the other paths. Draining the
//! socket before the swap means a post that finds the word 0 after the swap rings again.
//!
//! A receiver whose waiting task reads its word before parking (`look`) says so in the
//! word's neighbour ([`LOOKING`] past it, same cache line): a post that finds it set skips
//! the ring, a system call here and a wake-up of the receiver's watch there. The poster's
//! add and the receiver's clearing of the flag are both sequentially consistent and each
//! side reads the other's word after its own write, so a post either sees the flag cleared
//! and rings, or is seen by the receiver's last look ([`Looking`]'s drop). Whatever a peer
//! writes into a flag only loses rings to itself or costs this side rings it did not need.
//!
//! Order (DESIGN.md, decision 18): a loopback put is a copy done before it returns, and the words'
//! release/acquire pairs make it visible to the receiver before the signal is.
//!
//! What a bell reads goes to a callback its connection's side injects ([`OnRing`]): the
//! bell is the connection's own, so the callback holds the export or import it delivers to,
//! and no route is looked up per ring. This file knows neither the node nor its routes. The
//! connection's handle holds its bell (the exporter's in its route to the importer), and
//! the routes list them for the waits (`events/route.rs`).
//!
//! The peer can write anything into the page: a word is only ever a count, bounded when
//! delivered. Its death is the side channel's to report (`PeerUnreachable`).

use crate::Result;
use crate::error::Error;
use crate::sidechannel::fdpass::FdService;
use crate::sys::bell as wake;
use crate::sys::shm::{SharedMap, check_peer_memfd, sealed_memfd};
use rustix::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

/// Where each direction's word lies in the page (separate cache lines).
const TO_EXPORTER: usize = 0;
const TO_IMPORTER: usize = 64;
/// Past a direction's word: non-zero while its receiver reads the word before parking.
const LOOKING: usize = 8;
/// Bit 63 of a word: the first post of the batch had `NO_ACCUMULATE`.
const FIRST_NO_ACC: u64 = 1 << 63;
const COUNT: u64 = FIRST_NO_ACC - 1;
/// The descriptors offered, in this order: the page, the importer's end of the sockets.
const FDS: usize = 2;

/// One side's end of a connection's doorbell: rings the peer; while it lives, the peer's
/// rings are watched (dropping it stops the watch).
pub(crate) struct LoopbackBell {
    page: Arc<SharedMap>,
    /// The peer's word, and this side's end of the sockets (which rings the peer).
    out_at: usize,
    out: Arc<OwnedFd>,
    /// This side's word, and whom what it says goes to.
    in_at: usize,
    on_ring: OnRing,
    stop: CancellationToken,
    /// This process's tasks reading this side's word now; the page's flag is set while
    /// there is one.
    lookers: AtomicUsize,
}

/// What a bell read: first a `NO_ACCUMULATE` post if `first_no_acc`, then `plain` posts
/// without it. The peer wrote the word: `plain` may be any count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ring {
    pub(crate) first_no_acc: bool,
    pub(crate) plain: u64,
}

/// Where a bell delivers what it read; `false` when its receiver is gone (the watch ends).
pub(crate) type OnRing = Arc<dyn Fn(Ring) -> bool + Send + Sync>;

impl Drop for LoopbackBell {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn word(page: &SharedMap, at: usize) -> &AtomicU64 {
    debug_assert!(at + 8 <= page.len());
    // SAFETY: `at` is 0, 8, 64 or 72 in a mapping of at least a page (checked when it was made),
    // page-aligned, so the word is in bounds and 8-byte aligned; the mapping lives as long
    // as `page`, and this memory is only ever accessed atomically, by both processes.
    unsafe { AtomicU64::from_ptr(page.as_ptr().add(at).cast()) }
}

impl LoopbackBell {
    /// Posts one signal to the peer (`NO_ACCUMULATE` as asked): no system call unless the
    /// peer has to be woken.
    pub(crate) fn ring(&self, no_accumulate: bool) -> Result<()> {
        let w = word(&self.page, self.out_at);
        let before = if no_accumulate {
            match w.compare_exchange(0, FIRST_NO_ACC, Ordering::SeqCst, Ordering::Acquire) {
                Ok(b) => b,
                // Dropped: the posts in the word leave one pending before it.
                Err(_) => return Ok(()),
            }
        } else {
            w.fetch_add(1, Ordering::SeqCst)
        };
        // SeqCst, with the add above: pairs with `Looking`'s drop (the module docs).
        if before == 0 && word(&self.page, self.out_at + LOOKING).load(Ordering::SeqCst) == 0 {
            wake::ring(self.out.as_fd()).map_err(|e| {
                Error::conn_aborted()
                    .detail(format!("cannot ring the loopback doorbell: {e}"))
                    .io(e)
            })?;
        }
        Ok(())
    }

    /// Delivers what this side's word says, as the watch does when its end fires;
    /// returns whether there was anything. For a waiter that looks before its task parks:
    /// a ring seen here costs no wake-up of the watch and then of the waiter.
    pub(crate) fn look(&self) -> bool {
        let w = word(&self.page, self.in_at);
        // A plain load first: the page's line stays shared while nothing came.
        if w.load(Ordering::Acquire) == 0 {
            return false;
        }
        let w = w.swap(0, Ordering::AcqRel);
        if w == 0 {
            return false;
        }
        deliver(&self.on_ring, w);
        true
    }

    /// A task of this process starts reading this side's word (`look`): the peer's posts
    /// need not ring.
    fn start_looking(&self) {
        if self.lookers.fetch_add(1, Ordering::SeqCst) == 0 {
            word(&self.page, self.in_at + LOOKING).store(1, Ordering::SeqCst);
        }
    }

    /// The task stops: the last one out clears the flag, then looks once more, taking a
    /// post that saw the flag set and did not ring. A flag left clear by a racing first one
    /// in only costs rings.
    fn stop_looking(&self) {
        if self.lookers.fetch_sub(1, Ordering::SeqCst) == 1 {
            word(&self.page, self.in_at + LOOKING).store(0, Ordering::SeqCst);
            // SeqCst, after the store: sees any post that saw the flag set.
            if word(&self.page, self.in_at).load(Ordering::SeqCst) != 0 {
                self.look();
            }
        }
    }
}

/// A task reading some bells' words before it parks, from its making to its drop.
pub(crate) struct Looking<'a>(&'a [Arc<LoopbackBell>]);

impl<'a> Looking<'a> {
    pub(crate) fn new(bells: &'a [Arc<LoopbackBell>]) -> Self {
        for b in bells {
            b.start_looking();
        }
        Looking(bells)
    }
}

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        for b in self.0 {
            b.stop_looking();
        }
    }
}

/// Hands what a non-zero word said to `on_ring`; `false` when its receiver is gone.
fn deliver(on_ring: &OnRing, w: u64) -> bool {
    on_ring(Ring {
        first_no_acc: w & FIRST_NO_ACC != 0,
        plain: w & COUNT,
    })
}

/// Watches `bell` on the node's runtime until `stop`, delivering the word at `at`.
async fn watch(
    on_ring: OnRing,
    page: Arc<SharedMap>,
    at: usize,
    bell: Arc<OwnedFd>,
    stop: CancellationToken,
) {
    // Deprecated in recent tokio for lack of I/O safety, which holds here: the AsyncFd owns
    // an `Arc<OwnedFd>`, so the descriptor stays open and the same for its whole life (its
    // replacement, `register_with_interest`, is newer than the tokio this crate accepts).
    #[allow(deprecated)]
    let afd = AsyncFd::with_interest(bell, Interest::READABLE);
    let afd = match afd {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch a loopback doorbell: its signals are lost");
            return;
        }
    };
    loop {
        let mut guard = tokio::select! {
            () = stop.cancelled() => return,
            g = afd.readable() => match g {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(error = %e, "loopback doorbell watch failed");
                    return;
                }
            },
        };
        let drained = match wake::drain(afd.get_ref().as_fd()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reset a loopback doorbell");
                return;
            }
        };
        // A ring after the drain sets readiness again (tokio keeps a newer event); with
        // more queued (a flood), readiness stays and this task yields before the next batch.
        if !drained.more {
            guard.clear_ready();
        }
        drop(guard);
        let w = word(&page, at).swap(0, Ordering::AcqRel);
        if w != 0 && !deliver(&on_ring, w) {
            return;
        }
        if drained.more {
            tokio::task::yield_now().await;
        }
    }
}

/// Maps a doorbell page (read and write) of at least a page.
fn map_page(fd: &OwnedFd) -> std::io::Result<SharedMap> {
    let page = crate::sys::limits::page_size();
    let map = SharedMap::map(fd.as_fd(), 0, page, true, None)?;
    map.dont_fork();
    Ok(map)
}

/// Starts watching this side's end `end` and returns the bell ringing the peer through it.
fn start(
    runtime: &tokio::runtime::Handle,
    on_ring: OnRing,
    page: Arc<SharedMap>,
    end: Arc<OwnedFd>,
    exporter: bool,
) -> Arc<LoopbackBell> {
    let (in_at, out_at) = match exporter {
        true => (TO_EXPORTER, TO_IMPORTER),
        false => (TO_IMPORTER, TO_EXPORTER),
    };
    let stop = CancellationToken::new();
    runtime.spawn(watch(
        Arc::clone(&on_ring),
        Arc::clone(&page),
        in_at,
        Arc::clone(&end),
        stop.clone(),
    ));
    Arc::new(LoopbackBell {
        page,
        out_at,
        out: end,
        in_at,
        on_ring,
        stop,
        lookers: AtomicUsize::new(0),
    })
}

/// The exporter's half, at connect: makes a connection's doorbell, watches it on
/// `runtime` (what it reads goes to `on_ring`, the connection's), and offers it to process
/// `pid` at the segment's descriptor `service`. Returns the ticket for the grant's
/// `keys[1]` and the bell, which signals to the importer ring from now on (the caller
/// holds it in its route); `None` (logged) when it cannot, and the connection then signals
/// over the side channel both ways.
pub(crate) fn offer(
    runtime: &tokio::runtime::Handle,
    on_ring: OnRing,
    service: Result<Arc<FdService>>,
    pid: u32,
) -> Option<(u64, Arc<LoopbackBell>)> {
    let made = (|| -> std::io::Result<_> {
        let page = crate::sys::limits::page_size() as u64;
        let page_fd = Arc::new(sealed_memfd("rsm-doorbell", page)?);
        let map = Arc::new(map_page(&page_fd)?);
        let (ours, theirs) = wake::pair()?;
        Ok((page_fd, map, ours, theirs))
    })();
    let ((page_fd, map, ours, theirs), service) = match (made, service) {
        (Ok(m), Ok(s)) => (m, s),
        (Err(e), _) => {
            tracing::debug!(error = %e, "no loopback doorbell: signals use the side channel");
            return None;
        }
        (_, Err(e)) => {
            tracing::debug!(error = %e, "no loopback doorbell: signals use the side channel");
            return None;
        }
    };
    let ticket = service.offer_many(vec![page_fd, Arc::new(theirs)], pid);
    let bell = start(runtime, on_ring, map, Arc::new(ours), true);
    Some((ticket, bell))
}

/// The importer's claimed doorbell, checked and mapped, not watched yet.
pub(crate) struct Claimed {
    page: Arc<SharedMap>,
    end: Arc<OwnedFd>,
}

/// The importer's half, at connect: claims the doorbell of ticket `ticket` at the
/// exporter's descriptor service and maps its page.
///
/// # Errors
/// `RSMERR_CONN_ABORTED` when it cannot be claimed, or is not a sealed page-sized memfd
/// and a Unix datagram socket.
pub(crate) async fn claim(service: Vec<u8>, ticket: u64) -> Result<Claimed> {
    let fds = crate::sidechannel::fdpass::fetch_many(&service, ticket, FDS).await?;
    let bad = |why: String| {
        Error::conn_aborted().detail(format!("the exporter's loopback doorbell: {why}"))
    };
    let [page_fd, end]: [OwnedFd; FDS] = fds
        .try_into()
        .map_err(|_| bad("not two descriptors".into()))?;
    let page = crate::sys::limits::page_size() as u64;
    check_peer_memfd(page_fd.as_fd(), page).map_err(|why| bad(format!("its page: {why}")))?;
    if !wake::is_bell(end.as_fd()) {
        return Err(bad("its wake-up end is not a Unix datagram socket".into()));
    }
    let map = map_page(&page_fd).map_err(|e| bad(format!("cannot map its page: {e}")))?;
    Ok(Claimed {
        page: Arc::new(map),
        end: Arc::new(end),
    })
}

/// The importer's half, once the import is made (so that no early signal is dropped for
/// want of it): watches the doorbell, and makes signals to the exporter of the connection
/// ring it (the import holds it). What the bell reads goes to `on_ring`, the import's.
pub(crate) fn attach(
    runtime: &tokio::runtime::Handle,
    on_ring: OnRing,
    c: Claimed,
) -> Arc<LoopbackBell> {
    start(runtime, on_ring, c.page, c.end, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bell on `page`, not watched, ringing through `out`, delivering to `on_ring`.
    fn unwatched(
        page: &Arc<SharedMap>,
        exporter: bool,
        out: OwnedFd,
        on_ring: OnRing,
    ) -> LoopbackBell {
        let (in_at, out_at) = match exporter {
            true => (TO_EXPORTER, TO_IMPORTER),
            false => (TO_IMPORTER, TO_EXPORTER),
        };
        LoopbackBell {
            page: Arc::clone(page),
            out_at,
            out: Arc::new(out),
            in_at,
            on_ring,
            stop: CancellationToken::new(),
            lookers: AtomicUsize::new(0),
        }
    }

    /// An exporter's bell, not watched, and the importer's end it rings.
    fn pair() -> (Arc<SharedMap>, LoopbackBell, Arc<OwnedFd>) {
        let page_fd = sealed_memfd("rsm-test", crate::sys::limits::page_size() as u64).unwrap();
        let map = Arc::new(map_page(&page_fd).unwrap());
        let (ours, theirs) = wake::pair().unwrap();
        let bell = unwatched(&map, true, ours, Arc::new(|_| true));
        (map, bell, Arc::new(theirs))
    }

    /// What the receiver would take now: (rung, first NO_ACCUMULATE, plain count).
    fn take(map: &SharedMap, fd: &OwnedFd) -> (bool, bool, u64) {
        let rung = wake::drain(fd.as_fd()).unwrap().rung;
        let w = word(map, TO_IMPORTER).swap(0, Ordering::AcqRel);
        (rung, w & FIRST_NO_ACC != 0, w & COUNT)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Two nodes in this process (ids from `base` up), a loopback segment of the first and
    /// the second's read-only import of it.
    async fn pair_of_nodes(
        base: u32,
        forced: bool,
    ) -> (
        crate::Node,
        crate::Node,
        crate::ExportSegment,
        crate::ImportSegment,
    ) {
        use crate::{ExportFlags, Node, Perm};
        let id = base + (rand::random::<u32>() % 1_000_000) * 2;
        let start = |id| {
            Node::builder()
                .ignore_environment()
                .id(id)
                .signals_over_side_channel(forced)
                .start()
        };
        let (a, b) = (start(id).await.unwrap(), start(id + 1).await.unwrap());
        let ctrl = a.controller("loopback").await.unwrap();
        let seg = ctrl.export(4096, ExportFlags::empty()).unwrap();
        let segid = seg.publish(None, &[]).await.unwrap();
        let bctrl = b.controller("loopback").await.unwrap();
        let imp = bctrl
            .import(crate::NodeId(id), segid, Perm::READ)
            .await
            .unwrap();
        (a, b, seg, imp)
    }

    /// Two nodes in this process, a loopback export and its import: signals both ways go by
    /// the doorbell (none by the side channel) and count exactly, unless the side channel
    /// is forced.
    #[test]
    fn loopback_signals_ring_the_doorbell_not_the_side_channel() {
        use crate::SignalFlags;
        use std::time::Duration;
        let rt = runtime();
        let five = Some(Duration::from_secs(5));
        for forced in [false, true] {
            rt.block_on(async {
                let (a, b, seg, imp) = pair_of_nodes(3_000_000, forced).await;
                for _ in 0..100 {
                    imp.signal(SignalFlags::empty()).await.unwrap();
                }
                for _ in 0..5 {
                    seg.signal(SignalFlags::NO_ACCUMULATE).await.unwrap();
                }
                seg.signal(SignalFlags::empty()).await.unwrap();
                for _ in 0..100 {
                    seg.wait_signal(five).await.unwrap();
                }
                // Over the side channel a post returns once queued: wait until the last
                // (plain) one arrived, so no wait below consumes a NO_ACCUMULATE one before
                // the next is judged. Frames on one link arrive in order.
                let t = std::time::Instant::now();
                while imp.pending_signals() < 2 && t.elapsed() < Duration::from_secs(5) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                imp.wait_signal(five).await.unwrap();
                // The NO_ACCUMULATE ones after the first were dropped; the plain one counted.
                imp.wait_signal(five).await.unwrap();
                let late = imp.wait_signal(Some(Duration::from_millis(100))).await;
                assert_eq!(late.unwrap_err().code(), 42);
                let counts = |n: &crate::Node| {
                    let r = &n.inner.state.signals;
                    (
                        r.sent_by_bell.load(Ordering::Relaxed),
                        r.sent_by_side.load(Ordering::Relaxed),
                    )
                };
                if forced {
                    assert_eq!((counts(&a), counts(&b)), ((0, 6), (0, 100)));
                } else {
                    assert_eq!((counts(&a), counts(&b)), ((6, 0), (100, 0)));
                }
                imp.disconnect().await.unwrap();
                seg.destroy().await.unwrap();
                b.shutdown().await;
                a.shutdown().await;
            });
        }
    }

    /// Round trips between two tasks, each waiting for the other's signal before it
    /// answers: the waits take the rings from the doorbell words themselves (or the watch
    /// does), and every signal is counted once.
    #[test]
    fn round_trips_count_every_signal_once() {
        use crate::{Node, SignalFlags};
        use std::time::Duration;
        let rt = runtime();
        let five = Some(Duration::from_secs(5));
        rt.block_on(async {
            let (a, b, seg, imp) = pair_of_nodes(5_000_000, false).await;
            const TRIPS: u64 = 500;
            let echo_seg = seg.clone();
            let echo = tokio::spawn(async move {
                for _ in 0..TRIPS {
                    echo_seg.wait_signal(five).await.unwrap();
                    echo_seg.signal(SignalFlags::empty()).await.unwrap();
                }
            });
            for _ in 0..TRIPS {
                imp.signal(SignalFlags::empty()).await.unwrap();
                imp.wait_signal(five).await.unwrap();
            }
            echo.await.unwrap();
            assert_eq!((seg.pending_signals(), imp.pending_signals()), (0, 0));
            let late = imp.wait_signal(Some(Duration::from_millis(50))).await;
            assert_eq!(late.unwrap_err().code(), 42, "no signal left over");
            let by_bell = |n: &Node| n.inner.state.signals.sent_by_bell.load(Ordering::Relaxed);
            assert_eq!((by_bell(&a), by_bell(&b)), (TRIPS, TRIPS));
            imp.disconnect().await.unwrap();
            seg.destroy().await.unwrap();
            b.shutdown().await;
            a.shutdown().await;
        });
    }

    #[test]
    fn a_batch_keeps_what_the_order_decides_and_rings_once() {
        let (map, bell, fd) = pair();
        // NO_ACCUMULATE first, then plain ones: the first may count, each plain one does.
        bell.ring(true).unwrap();
        bell.ring(false).unwrap();
        bell.ring(true).unwrap();
        bell.ring(false).unwrap();
        assert_eq!(take(&map, &fd), (true, true, 2));
        // Plain first: every later NO_ACCUMULATE is dropped.
        bell.ring(false).unwrap();
        bell.ring(true).unwrap();
        assert_eq!(take(&map, &fd), (true, false, 1));
        // Nothing since: not rung, nothing to deliver.
        assert_eq!(take(&map, &fd), (false, false, 0));
    }

    #[test]
    fn a_post_after_the_receiver_looked_rings_again() {
        let (map, bell, fd) = pair();
        bell.ring(false).unwrap();
        assert!(wake::drain(fd.as_fd()).unwrap().rung);
        // Between the reset and the swap: no new ring needed, the swap takes it.
        bell.ring(false).unwrap();
        assert!(!wake::drain(fd.as_fd()).unwrap().rung);
        assert_eq!(word(&map, TO_IMPORTER).swap(0, Ordering::AcqRel), 2);
        bell.ring(false).unwrap();
        assert!(
            wake::drain(fd.as_fd()).unwrap().rung,
            "after the swap it rings"
        );
    }

    /// While the receiver reads its word, a post leaves the word set and does not ring; the
    /// reader's last look, as it stops, takes the post.
    #[test]
    fn a_post_to_a_reading_receiver_skips_the_ring_and_its_last_look_takes_it() {
        let (map, bell, fd) = pair();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let (_, theirs) = wake::pair().unwrap();
        let on_ring: OnRing = Arc::new(move |r| {
            record.lock().unwrap().push(r);
            true
        });
        let receiver = [Arc::new(unwatched(&map, false, theirs, on_ring))];
        let looking = Looking::new(&receiver);
        let again = Looking::new(&receiver);
        bell.ring(false).unwrap();
        bell.ring(false).unwrap();
        assert!(
            !wake::drain(fd.as_fd()).unwrap().rung,
            "no ring while it reads"
        );
        drop(again);
        assert!(
            seen.lock().unwrap().is_empty(),
            "one reader is still reading"
        );
        drop(looking);
        let rings = seen.lock().unwrap().clone();
        assert_eq!(rings.len(), 1, "the last look took the posts: {rings:?}");
        assert_eq!(rings[0].plain, 2);
        assert_eq!(word(&map, TO_IMPORTER).load(Ordering::SeqCst), 0);
        bell.ring(false).unwrap();
        assert!(
            wake::drain(fd.as_fd()).unwrap().rung,
            "rings again once nobody reads"
        );
    }

    /// A hostile importer clears `O_NONBLOCK` on its end and, as if it shared ours, on ours
    /// too; it floods us and never reads what we send. Our rings still return, our watch
    /// still delivers, and the runtime stays responsive.
    #[test]
    fn a_peer_that_clears_o_nonblock_cannot_stall_the_node() {
        use std::time::Duration;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = runtime();
            let page_fd = sealed_memfd("rsm-test", crate::sys::limits::page_size() as u64).unwrap();
            let map = Arc::new(map_page(&page_fd).unwrap());
            let (ours, theirs) = wake::pair().unwrap();
            let ours_too = rustix::io::dup(&ours).unwrap();
            for fd in [&theirs, &ours_too] {
                let flags = rustix::fs::fcntl_getfl(fd).unwrap();
                rustix::fs::fcntl_setfl(fd, flags - rustix::fs::OFlags::NONBLOCK).unwrap();
            }
            let got = Arc::new(AtomicU64::new(0));
            let seen = Arc::clone(&got);
            let on_ring: OnRing = Arc::new(move |r| {
                seen.fetch_add(r.plain, Ordering::SeqCst);
                true
            });
            let bell = start(rt.handle(), on_ring, Arc::clone(&map), Arc::new(ours), true);
            // The peer never reads: every ring of ours finds its word 0 again and sends.
            for _ in 0..20_000 {
                bell.ring(false).unwrap();
                word(&map, TO_IMPORTER).store(0, Ordering::SeqCst);
            }
            // The peer floods our end, then posts 3 signals the proper way.
            for _ in 0..5_000 {
                let _ = wake::ring(theirs.as_fd());
            }
            word(&map, TO_EXPORTER).fetch_add(3, Ordering::SeqCst);
            wake::ring(theirs.as_fd()).unwrap();
            rt.block_on(async {
                let t = std::time::Instant::now();
                while got.load(Ordering::SeqCst) < 3 && t.elapsed() < Duration::from_secs(5) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
            assert_eq!(
                got.load(Ordering::SeqCst),
                3,
                "the watch delivered the signals"
            );
            drop(bell);
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the node stalled: a ring or the watch blocked");
    }
}
