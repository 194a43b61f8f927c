//! The [`EventStream`]: a broadcast receiver as a `futures::Stream`.

use super::event::SegmentEvent;
use futures::Stream;
use futures::stream::FusedStream;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::broadcast;

/// A stream that fell behind: `0` events were dropped from its buffer before it read them
/// (it goes on with the oldest event still buffered).
///
/// ```
/// let l = rsm::Lagged(3);
/// assert_eq!(l.to_string(), "the event stream fell behind and missed 3 events");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("the event stream fell behind and missed {0} events")]
pub struct Lagged(pub u64);

type Inner = Pin<Box<dyn Stream<Item = Result<SegmentEvent, Lagged>> + Send>>;

/// The events of one segment, as a [`futures::Stream`] (DESIGN.md §7): every stream sees
/// every event from its creation on, buffers up to
/// [`STREAM_CAPACITY`](crate::events::STREAM_CAPACITY) of them, and yields `Err(Lagged(n))` when it fell behind. Streams observe: they consume
/// nothing that waits count. A stream ends when its segment is destroyed or disconnected.
///
/// Works on any executor. It is a [`FusedStream`]: once it ended, it stays ended (and says
/// so), so it can sit in a `futures::select!` loop.
///
/// ```no_run
/// # async fn f(seg: rsm::ExportSegment) {
/// use futures::StreamExt;
/// use rsm::SegmentEvent;
///
/// let mut events = seg.events();
/// while let Some(e) = events.next().await {
///     match e {
///         Ok(SegmentEvent::Signal { from }) => println!("signal from node {}", from.node()),
///         Ok(other) => println!("{other:?}"),
///         Err(lagged) => println!("{lagged}"),
///     }
/// }
/// # }
/// ```
///
/// **Drop.** Dropping it unsubscribes it; nothing else changes (it consumes no signal).
pub struct EventStream {
    inner: Inner,
    /// The stream ended: the inner one is not polled again.
    ended: bool,
}

impl EventStream {
    pub(crate) fn new(rx: Option<broadcast::Receiver<SegmentEvent>>) -> EventStream {
        let ended = rx.is_none();
        let inner: Inner = match rx {
            None => Box::pin(futures::stream::empty()),
            Some(rx) => Box::pin(futures::stream::unfold(rx, |mut rx| async move {
                match rx.recv().await {
                    Ok(e) => Some((Ok(e), rx)),
                    Err(broadcast::error::RecvError::Lagged(n)) => Some((Err(Lagged(n)), rx)),
                    Err(broadcast::error::RecvError::Closed) => None,
                }
            })),
        };
        EventStream { inner, ended }
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Stream for EventStream {
    type Item = Result<SegmentEvent, Lagged>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(None) = next {
            self.ended = true;
        }
        next
    }
}

impl FusedStream for EventStream {
    fn is_terminated(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn an_ended_stream_stays_ended_and_says_so() {
        let (tx, rx) = broadcast::channel(4);
        let mut s = EventStream::new(Some(rx));
        assert!(!s.is_terminated());
        tx.send(SegmentEvent::Revoked).unwrap();
        drop(tx);
        futures::executor::block_on(async {
            assert_eq!(s.next().await, Some(Ok(SegmentEvent::Revoked)));
            assert_eq!(s.next().await, None);
            assert!(s.is_terminated());
            assert_eq!(s.next().await, None);
        });
        assert!(EventStream::new(None).is_terminated());
    }
}
