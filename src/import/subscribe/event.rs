//! What a [`Subscription`](super::Subscription) yields ([`SubscriptionEvent`]: a fresh
//! import, the end of one, a failed connect) and how it retries ([`SubscribeOptions`]).

use crate::Error;
use crate::error::clone_error;
use crate::import::ImportSegment;
use std::time::{Duration, Instant};

/// How a [`Subscription`](super::Subscription) retries: a failed connect waits a random time
/// between half and all of the current step, which starts at `min_backoff` and doubles after
/// each failure up to `max_backoff` (exponential backoff with jitter, so that the importers
/// of a restarted exporter do not all knock at once). A successful connect starts again from
/// `min_backoff`, and the first attempt after an import ended goes at once.
///
/// ```
/// use rsm::SubscribeOptions;
/// use std::time::Duration;
///
/// let o = SubscribeOptions::default();
/// assert_eq!((o.min(), o.max()), (Duration::from_millis(50), Duration::from_secs(2)));
/// let o = SubscribeOptions::default()
///     .min_backoff(Duration::from_millis(10))
///     .max_backoff(Duration::from_millis(5));
/// // At least 1 ms, and the cap never below the first step.
/// assert_eq!((o.min(), o.max()), (Duration::from_millis(10), Duration::from_millis(10)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeOptions {
    min: Duration,
    max: Duration,
}

impl Default for SubscribeOptions {
    fn default() -> SubscribeOptions {
        SubscribeOptions {
            min: Duration::from_millis(50),
            max: Duration::from_secs(2),
        }
    }
}

impl SubscribeOptions {
    /// The first step of the backoff (default 50 ms; at least 1 ms).
    pub fn min_backoff(mut self, d: Duration) -> SubscribeOptions {
        self.min = d.max(Duration::from_millis(1));
        self
    }

    /// The longest step of the backoff (default 2 s; never below the first step).
    pub fn max_backoff(mut self, d: Duration) -> SubscribeOptions {
        self.max = d;
        self
    }

    /// The first step.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The longest step.
    pub fn max(&self) -> Duration {
        self.max.max(self.min)
    }
}

/// What a [`Subscription`](super::Subscription) reports.
///
/// ```no_run
/// # async fn f(mut subs: rsm::Subscription) -> rsm::Result<()> {
/// use futures::StreamExt;
/// use rsm::SubscriptionEvent;
///
/// while let Some(event) = subs.next().await {
///     match event? {
///         SubscriptionEvent::Connected(s) => println!("connected, restarted: {}", s.restarted),
///         SubscriptionEvent::Ended(e) => println!("ended: {:?}", e.reason),
///         SubscriptionEvent::Retrying { error, retry_in, .. } => {
///             println!("{}, again in {retry_in:?}", error.name())
///         }
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SubscriptionEvent {
    /// A fresh import of the segment: the first one, or the first after the previous ended.
    Connected(Subscribed),
    /// The current import ended (reported as soon as the subscription notices, before it
    /// connects again): its handles now fail (see [`Ended::error`]).
    Ended(Ended),
    /// A connect failed with a transient error; the next attempt goes in `retry_in`. These
    /// are dropped while the subscription's buffer is full (a reader that is away for long).
    Retrying {
        /// Why it failed, such as `RSMERR_REMOTE_NODE_UNREACHABLE` (the exporting node is
        /// not up) or `RSMERR_SEG_NOT_PUBLISHED` (it is, but has not published the segment).
        error: Error,
        /// Failed attempts in a row, this one included (1 for the first).
        attempt: u32,
        /// The wait before the next attempt.
        retry_in: Duration,
    },
}

/// A fresh import, as [`SubscriptionEvent::Connected`] reports it.
///
/// ```no_run
/// # fn f(s: rsm::Subscribed) {
/// match &s.previous {
///     None => println!("connected"),
///     Some(p) if s.restarted => println!("the exporter restarted ({:?})", p.reason),
///     Some(p) => println!("connected again after {:?}, {} failed tries", p.reason, p.attempts),
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Subscribed {
    /// The import: a handle of the caller's (the subscription keeps a clone to watch it).
    pub segment: ImportSegment,
    /// How the previous import ended, and the connects that failed since; `None` for the
    /// first.
    pub previous: Option<Ended>,
    /// The exporter is a new incarnation of its node (it restarted since the previous
    /// import): `previous.incarnation` differs from
    /// [`segment.exporter_incarnation()`](ImportSegment::exporter_incarnation).
    pub restarted: bool,
}

/// How an import of a [`Subscription`](super::Subscription) ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct Ended {
    /// Why it ended.
    pub reason: EndReason,
    /// The exporter's incarnation the import was connected to.
    pub incarnation: u64,
    /// When the subscription noticed the end.
    pub at: Instant,
    /// Connects that failed after the end (0 in [`SubscriptionEvent::Ended`], counted in
    /// [`Subscribed::previous`]).
    pub attempts: u32,
    /// The last of them.
    pub last_error: Option<Error>,
}

impl Clone for Ended {
    fn clone(&self) -> Ended {
        Ended {
            reason: self.reason,
            incarnation: self.incarnation,
            at: self.at,
            attempts: self.attempts,
            last_error: self.last_error.as_ref().map(clone_error),
        }
    }
}

impl Ended {
    /// What the ended import's handles return from now on (the class of error; the
    /// operations' own errors carry their context): `RSMERR_CONN_ABORTED` once revoked or
    /// once the exporter is unreachable (its signals say `RSMERR_REMOTE_NODE_UNREACHABLE`;
    /// both are [`Error::is_unreachable`]), `RSMERR_BAD_SEG_HNDL` once disconnected.
    ///
    /// ```
    /// # fn f(e: rsm::Ended) {
    /// println!("lost the segment: {}", e.error().name());
    /// # }
    /// ```
    pub fn error(&self) -> Error {
        match self.reason {
            EndReason::Revoked => Error::conn_aborted()
                .detail("the exporter withdrew the segment (unpublish or destroy)"),
            EndReason::ExporterUnreachable => Error::conn_aborted()
                .detail("the exporting node is unreachable (it died, restarted or shut down)"),
            EndReason::Disconnected => Error::bad_seg_hndl().detail("the segment was disconnected"),
        }
    }
}

/// Why an import ended.
///
/// ```
/// use rsm::EndReason;
/// assert_ne!(EndReason::Revoked, EndReason::ExporterUnreachable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EndReason {
    /// The exporter withdrew the segment ([`SegmentEvent::Revoked`](crate::SegmentEvent)):
    /// it unpublished or destroyed it, or its node shut down, which withdraws every export
    /// first (the importer cannot tell these apart).
    Revoked,
    /// The exporting node died, restarted or became unreachable: its side channel closed or
    /// missed its heartbeats ([`SegmentEvent::PeerUnreachable`](crate::SegmentEvent)).
    ExporterUnreachable,
    /// A clone of the import's handle was disconnected
    /// ([`ImportSegment::disconnect`]): the subscription connects again.
    Disconnected,
}
