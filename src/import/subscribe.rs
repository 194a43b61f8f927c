//! A reconnecting import: [`Controller::subscribe`] returns a [`Subscription`], a stream that
//! yields a fresh [`ImportSegment`] for each incarnation of the exporter's segment, says why
//! the previous one ended, and connects again with backoff in between.
//!
//! `event.rs` holds what it yields and its options, `task.rs` the task on the node's runtime
//! that connects, watches the import's events and state, and retries.

mod event;
mod task;

use super::ImportSegment;
use crate::controller::Controller;
use crate::perm::Perm;
use crate::{NodeId, Result, SegmentId};
use futures::Stream;
use futures::stream::FusedStream;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

pub use event::{EndReason, Ended, SubscribeOptions, Subscribed, SubscriptionEvent};

/// How many events a subscription buffers for a reader that is behind; beyond that it drops
/// [`SubscriptionEvent::Retrying`] and holds back the others (and so its reconnects).
const BUFFER: usize = 16;

impl Controller {
    /// Imports segment `segment` of node `node` with `perm`, and again each time that import
    /// ends: a [`Subscription`] with the default [`SubscribeOptions`] (backoff from 50 ms to
    /// 2 s). See [`subscribe_with`](Controller::subscribe_with).
    ///
    /// ```no_run
    /// # async fn f(ctrl: rsm::Controller) -> rsm::Result<()> {
    /// use rsm::{NodeId, Perm, SegmentId};
    ///
    /// let mut subs = ctrl.subscribe(NodeId(2), SegmentId(0x50_0030), Perm::RDWR);
    /// while let Some(s) = subs.next_connected().await {
    ///     let s = s?; // only a final refusal, such as RSMERR_PERM_DENIED
    ///     if s.restarted {
    ///         println!("the exporter restarted");
    ///     }
    ///     // Use s.segment until it fails; the next item is its successor.
    ///     while s.segment.put64(0, &[1]).await.is_ok() {}
    /// }
    /// # Ok(()) }
    /// ```
    pub fn subscribe(&self, node: NodeId, segment: SegmentId, perm: Perm) -> Subscription {
        self.subscribe_with(node, segment, perm, SubscribeOptions::default())
    }

    /// Imports segment `segment` of node `node` with `perm`, and again each time that import
    /// ends, as a [`Subscription`]: a stream of [`SubscriptionEvent`]s.
    ///
    /// - **Connected**: each import that works, the first and every one after the previous
    ///   ended (a new incarnation of the exporter's segment: republished, or published by a
    ///   restarted node), with why the previous ended and whether the exporter restarted.
    /// - **Ended**: as soon as the subscription notices, from the import's events and state
    ///   (revoke, the exporting node unreachable, a disconnect), without waiting for an
    ///   operation to fail. The ended import's handles fail from then on, as
    ///   [`Ended::error`] says; the next attempt to connect goes at once.
    /// - **Retrying**: a connect that failed, and the wait before the next (backoff with
    ///   jitter, [`SubscribeOptions`]). Transient failures are retried forever: the node
    ///   unreachable, the segment not published, the exporter at its limits, a connection
    ///   aborted, anything else not named below.
    ///
    /// It ends:
    /// - with a last `Err` item, at a refusal that only a change of configuration undoes:
    ///   `RSMERR_PERM_DENIED` (the access list or the class's bits refuse `perm`, or `perm`
    ///   has other bits than read and write), `RSMERR_SEG_NOT_PUBLISHED_TO_NODE` (the access
    ///   list leaves this node out), `RSMERR_BAD_SEGID`, `RSMERR_RESERVED_SEGID`;
    /// - without one, when this node shuts down or is dropped (within half a second).
    ///
    /// Works on any executor: the subscription's work runs on the node's runtime, which
    /// connects and watches even while nobody polls it (up to 16 events ahead).
    ///
    /// **Drop.** Dropping the `Subscription` ends its task: at once while it waits to retry
    /// or watches an import, after the connect in progress otherwise (a connect is bounded),
    /// whose import it then drops, so that the exporter hears of it. The `ImportSegment`s
    /// it handed out stay the caller's, connected, until dropped or disconnected.
    ///
    /// ```no_run
    /// # async fn f(ctrl: rsm::Controller) -> rsm::Result<()> {
    /// use futures::StreamExt;
    /// use rsm::{NodeId, Perm, SegmentId, SubscribeOptions, SubscriptionEvent};
    /// use std::time::Duration;
    ///
    /// let opts = SubscribeOptions::default().max_backoff(Duration::from_millis(500));
    /// let mut subs = ctrl.subscribe_with(NodeId(2), SegmentId(0x50_0030), Perm::READ, opts);
    /// while let Some(event) = subs.next().await {
    ///     match event? {
    ///         SubscriptionEvent::Connected(s) => println!("{} bytes", s.segment.len()),
    ///         SubscriptionEvent::Ended(e) => println!("ended: {:?}", e.reason),
    ///         SubscriptionEvent::Retrying { error, .. } => println!("{}", error.name()),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn subscribe_with(
        &self,
        node: NodeId,
        segment: SegmentId,
        perm: Perm,
        opts: SubscribeOptions,
    ) -> Subscription {
        let (tx, rx) = mpsc::channel(BUFFER);
        match self.context("subscribe") {
            Ok(state) => {
                let target = task::Target {
                    node,
                    segment,
                    perm,
                    opts,
                };
                state.runtime().spawn(task::run(self.clone(), target, tx));
            }
            Err(e) => {
                let _ = tx.try_send(Err(e));
            }
        }
        Subscription {
            rx,
            ended: false,
            node,
            segment,
        }
    }
}

impl ImportSegment {
    /// The incarnation of the exporting node this import was granted by: a restarted node
    /// has a new one ([`Node::incarnation`](crate::Node::incarnation)).
    ///
    /// ```no_run
    /// # fn f(seg: rsm::ImportSegment) {
    /// println!("exporter incarnation {:#018x}", seg.exporter_incarnation());
    /// # }
    /// ```
    pub fn exporter_incarnation(&self) -> u64 {
        self.inner.peer_incarnation
    }
}

/// A reconnecting import ([`Controller::subscribe`]): a [`futures::Stream`] of
/// [`SubscriptionEvent`]s, fused (once ended it stays ended), usable from any executor.
///
/// # Cancel safety
/// Its `next()` is cancel safe (a channel's receive): an event is taken only when it is
/// returned, so it may sit in a `select!` loop beside the work on the current import.
///
/// ```no_run
/// # async fn f(ctrl: rsm::Controller) -> rsm::Result<()> {
/// use rsm::{NodeId, Perm, SegmentId};
///
/// let mut subs = ctrl.subscribe(NodeId(2), SegmentId(0x50_0030), Perm::READ);
/// let first = subs.next_connected().await.expect("until the node shuts down")?;
/// println!("{:?}", first.segment);
/// drop(subs); // its task ends; `first.segment` stays connected
/// # Ok(()) }
/// ```
pub struct Subscription {
    rx: mpsc::Receiver<Result<SubscriptionEvent>>,
    ended: bool,
    node: NodeId,
    segment: SegmentId,
}

impl Subscription {
    /// The next [`SubscriptionEvent::Connected`], skipping the other events: `None` once the
    /// subscription ended, `Err` for its final refusal.
    ///
    /// ```no_run
    /// # async fn f(mut subs: rsm::Subscription) -> rsm::Result<()> {
    /// while let Some(s) = subs.next_connected().await {
    ///     println!("connected to incarnation {:#x}", s?.segment.exporter_incarnation());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: an event is taken only when this returns it (or skips it).
    pub async fn next_connected(&mut self) -> Option<Result<Subscribed>> {
        use futures::StreamExt;
        while let Some(event) = self.next().await {
            match event {
                Ok(SubscriptionEvent::Connected(s)) => return Some(Ok(s)),
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// The exporting node.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The segment id.
    pub fn segment_id(&self) -> SegmentId {
        self.segment
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("node", &self.node)
            .field("segment", &format_args!("{:#x}", self.segment.get()))
            .field("ended", &self.ended)
            .finish()
    }
}

impl Stream for Subscription {
    type Item = Result<SubscriptionEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = self.rx.poll_recv(cx);
        if let Poll::Ready(None) = next {
            self.ended = true;
        }
        next
    }
}

impl FusedStream for Subscription {
    fn is_terminated(&self) -> bool {
        self.ended
    }
}
