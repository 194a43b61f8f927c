//! The task behind a [`Subscription`](super::Subscription): connect with backoff, hand the
//! import over, watch it until it ends, and again; it ends when the subscription is dropped,
//! the node shuts down, or a connect is refused for good.

use super::event::{EndReason, Ended, SubscribeOptions, Subscribed, SubscriptionEvent};
use crate::controller::Controller;
use crate::error::clone_error;
use crate::events::SegmentEvent;
use crate::import::ImportSegment;
use crate::perm::Perm;
use crate::{Error, NodeId, Result, SegmentId};
use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often a connected subscription looks at its node and its import besides their
/// events: what ends it when its own node shuts down.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// What the task sends to its [`Subscription`](super::Subscription).
pub(super) type Tx = mpsc::Sender<Result<SubscriptionEvent>>;

/// What to subscribe to.
pub(super) struct Target {
    pub(super) node: NodeId,
    pub(super) segment: SegmentId,
    pub(super) perm: Perm,
    pub(super) opts: SubscribeOptions,
}

/// Exponential backoff with jitter: a random wait between half and all of the step, which
/// doubles up to the cap.
pub(super) struct Backoff {
    step: Duration,
    opts: SubscribeOptions,
}

impl Backoff {
    pub(super) fn new(opts: SubscribeOptions) -> Backoff {
        Backoff {
            step: opts.min(),
            opts,
        }
    }

    /// The wait before the next attempt.
    pub(super) fn next_wait(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.opts.max());
        let half = step / 2;
        half + half.mul_f64(rand::random::<f64>())
    }

    pub(super) fn reset(&mut self) {
        self.step = self.opts.min();
    }
}

/// Whether a connect refusal cannot change until the exporter's owner (or this caller)
/// changes its configuration: its access list refuses this node or this process, or the
/// request itself is invalid. Everything else may pass on a later attempt.
pub(super) fn is_final(e: &Error) -> bool {
    matches!(
        e,
        Error::PermDenied(_)
            | Error::SegNotPublishedToNode(_)
            | Error::BadSegid(_)
            | Error::ReservedSegid(_)
    )
}

/// Whether the controller's node was shut down (or dropped): no connect can work again.
fn node_stopped(ctrl: &Controller) -> bool {
    match ctrl.context("subscribe") {
        Err(_) => true,
        Ok(state) => state.side().map_or(true, |side| side.listeners_closed()),
    }
}

impl ImportSegment {
    /// Why this import has ended, if it has, from its connection's state.
    pub(super) fn end_reason(&self) -> Option<EndReason> {
        let inner = &self.inner;
        if inner.disconnected.load(Ordering::SeqCst) {
            Some(EndReason::Disconnected)
        } else if inner.lost.load(Ordering::SeqCst) || inner.events.is_peer_lost() {
            Some(EndReason::ExporterUnreachable)
        } else if inner.tracker.aborted().is_some() {
            // Only a revoke aborts a connection whose exporter is not lost.
            Some(EndReason::Revoked)
        } else {
            None
        }
    }
}

/// Waits until `seg` ends, from its events and, now and then, its state; `None` when the
/// node stopped first.
async fn watch(ctrl: &Controller, seg: &ImportSegment) -> Option<EndReason> {
    let mut events = seg.events();
    let mut look = tokio::time::interval(LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Also the first thing: it may have ended before the stream was made.
        if let Some(why) = seg.end_reason() {
            return Some(why);
        }
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(SegmentEvent::Revoked)) => return Some(EndReason::Revoked),
                Some(Ok(SegmentEvent::PeerUnreachable { .. })) => {
                    return Some(EndReason::ExporterUnreachable);
                }
                // Signals and rebinds change nothing; a lag is looked into above.
                Some(_) => {}
                None => return Some(seg.end_reason().unwrap_or(EndReason::Disconnected)),
            },
            _ = look.tick() => {
                if node_stopped(ctrl) {
                    return None;
                }
            }
        }
    }
}

/// Connects until a connect works; `None` when the task is to end (the subscription was
/// dropped, the node stopped, or a final refusal was sent).
async fn connect(
    ctrl: &Controller,
    t: &Target,
    tx: &Tx,
    backoff: &mut Backoff,
    previous: &mut Option<Ended>,
) -> Option<ImportSegment> {
    let mut attempt = 0u32;
    loop {
        if node_stopped(ctrl) || tx.is_closed() {
            return None;
        }
        // Not raced with the subscription's drop: a connect abandoned after the exporter
        // granted it would leave the grant there; this one, dropped, disconnects.
        let error = match ctrl.import(t.node, t.segment, t.perm).await {
            Ok(seg) => return Some(seg),
            Err(e) if is_final(&e) => {
                let _ = tx.send(Err(e)).await;
                return None;
            }
            Err(e) => e,
        };
        if node_stopped(ctrl) {
            return None;
        }
        attempt = attempt.saturating_add(1);
        if let Some(p) = previous.as_mut() {
            p.attempts = attempt;
            p.last_error = Some(clone_error(&error));
        }
        let retry_in = backoff.next_wait();
        tracing::debug!(
            node = t.node.get(),
            segment = format_args!("{:#x}", t.segment.get()),
            attempt,
            error = %error,
            ?retry_in,
            "subscription: connect failed"
        );
        // Informational: dropped while the reader is behind.
        let _ = tx.try_send(Ok(SubscriptionEvent::Retrying {
            error,
            attempt,
            retry_in,
        }));
        tokio::select! {
            () = tokio::time::sleep(retry_in) => {}
            () = tx.closed() => return None,
        }
    }
}

/// The subscription's task.
pub(super) async fn run(ctrl: Controller, t: Target, tx: Tx) {
    let mut backoff = Backoff::new(t.opts);
    let mut previous: Option<Ended> = None;
    loop {
        let Some(seg) = connect(&ctrl, &t, &tx, &mut backoff, &mut previous).await else {
            return;
        };
        backoff.reset();
        let incarnation = seg.exporter_incarnation();
        let restarted = previous
            .as_ref()
            .is_some_and(|p| p.incarnation != incarnation);
        let item = Subscribed {
            segment: seg.clone(),
            previous: previous.take(),
            restarted,
        };
        if tx
            .send(Ok(SubscriptionEvent::Connected(item)))
            .await
            .is_err()
        {
            return;
        }
        let reason = tokio::select! {
            why = watch(&ctrl, &seg) => why,
            () = tx.closed() => None,
        };
        // The subscription's clone goes; the caller's fail as `Ended::error` says.
        drop(seg);
        let Some(reason) = reason else { return };
        tracing::debug!(
            node = t.node.get(),
            segment = format_args!("{:#x}", t.segment.get()),
            ?reason,
            "subscription: the import ended"
        );
        let ended = Ended {
            reason,
            incarnation,
            at: Instant::now(),
            attempts: 0,
            last_error: None,
        };
        if tx
            .send(Ok(SubscriptionEvent::Ended(ended.clone())))
            .await
            .is_err()
        {
            return;
        }
        previous = Some(ended);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_cap() {
        let opts = SubscribeOptions::default()
            .min_backoff(Duration::from_millis(40))
            .max_backoff(Duration::from_millis(300));
        let mut b = Backoff::new(opts);
        let steps = [40u64, 80, 160, 300, 300, 300];
        for step in steps {
            let w = b.next_wait();
            let step = Duration::from_millis(step);
            assert!(w >= step / 2 && w <= step, "{w:?} for a step of {step:?}");
        }
        b.reset();
        assert!(b.next_wait() <= Duration::from_millis(40));
    }

    #[test]
    fn only_access_refusals_and_bad_ids_are_final() {
        assert!(is_final(&Error::perm_denied()));
        assert!(is_final(&Error::seg_not_published_to_node()));
        assert!(!is_final(&Error::seg_not_published()));
        assert!(!is_final(&Error::remote_node_unreachable()));
        assert!(!is_final(&Error::conn_aborted()));
        assert!(!is_final(&Error::insufficient_resources()));
    }
}
