//! Put and signal as one operation (`ImportSegment::put_signal`, DESIGN.md §6.1): where the
//! signal would ring the exporter's fabric doorbell and the write is one delivery-complete
//! post, one write into the segment carries the signal word as its remote CQ data; on
//! `loopback` the copy and the ring of the connection's doorbell happen in one poll;
//! elsewhere the put, then the signal (decision 18's order).

use super::ImportSegment;
use crate::backend::path::ImportPath;
use crate::events::SignalFlags;
use crate::perm::Perm;
use crate::reactor::{BufError, BufResult, IoBuf, Op};
use crate::stats::OpKind;
use crate::{Error, Result};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

const OP: &str = "put_signal";

type SignalPost = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// The future of [`ImportSegment::put_signal`]: resolves, with the bytes written and the
/// buffer, once the data is visible at the target and the signal was posted.
///
/// # Cancel safety
/// As for [`Op`]: dropping it stops the waiting, not the write, and the buffer stays with
/// the operation until the provider is done with it. Dropped after the write resolved but
/// before the signal went (the fallback's second step), the signal may be unsent; where the
/// write carries the signal, the two are never separated.
#[must_use = "a put_signal does nothing until polled"]
pub struct PutSignal<B: Send + 'static> {
    stage: Stage<B>,
    seg: ImportSegment,
    flags: SignalFlags,
}

enum Stage<B: Send + 'static> {
    /// The write; `then_signal` when it does not carry the signal itself.
    Put {
        op: Op<B>,
        then_signal: bool,
    },
    /// The signal after the write (fallback), with what the write resolved to.
    Signalling {
        post: SignalPost,
        done: Option<(usize, B)>,
    },
    Done,
}

impl<B: Send + 'static> Unpin for PutSignal<B> {}

impl<B: Send + 'static> std::fmt::Debug for PutSignal<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutSignal")
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

impl<B: Send + 'static> Future for PutSignal<B> {
    type Output = BufResult<usize, B>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match &mut self.stage {
                Stage::Put { op, then_signal } => {
                    let then_signal = *then_signal;
                    let res = std::task::ready!(Pin::new(op).poll(cx));
                    let (n, buf) = match res {
                        Ok(done) if then_signal => done,
                        other => {
                            self.stage = Stage::Done;
                            return Poll::Ready(other);
                        }
                    };
                    let flags = self.flags;
                    // Loopback: the bell rings in this poll, after the copy.
                    if let Some(rang) = self.seg.ring_now(flags, OP) {
                        self.stage = Stage::Done;
                        return Poll::Ready(self.signalled(rang, n, buf));
                    }
                    let seg = self.seg.clone();
                    let post: SignalPost =
                        Box::pin(async move { seg.post_signal(flags, OP).await });
                    self.stage = Stage::Signalling {
                        post,
                        done: Some((n, buf)),
                    };
                }
                Stage::Signalling { post, done } => {
                    let res = std::task::ready!(post.as_mut().poll(cx));
                    let Some((n, buf)) = done.take() else {
                        self.stage = Stage::Done;
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    self.stage = Stage::Done;
                    return Poll::Ready(self.signalled(res, n, buf));
                }
                Stage::Done => return Poll::Ready(Err(polled_after_completion())),
            }
        }
    }
}

impl<B: Send + 'static> PutSignal<B> {
    /// The outcome once the write resolved with `n` bytes and the signal with `res`.
    fn signalled(&self, res: Result<()>, n: usize, buf: B) -> BufResult<usize, B> {
        match res {
            Ok(()) => Ok((n, buf)),
            Err(e) => {
                self.seg.count_failure(OpKind::Signal, &e);
                Err(BufError::new(e, Some(buf)))
            }
        }
    }
}

#[cold]
fn polled_after_completion<B>() -> BufError<B> {
    BufError::new(
        Error::bad_seg_hndl()
            .op(OP)
            .detail("put_signal polled after completion"),
        None,
    )
}

impl ImportSegment {
    /// Writes the whole of `buf` at `offset` and signals the exporter, as one operation:
    /// resolves, with the bytes written and the buffer, once the data is visible at the
    /// target and the signal was posted. The exporter's [`wait_signal`] and event streams see
    /// the signal only once the data is visible (DESIGN.md §6.1): "write a record, then tell
    /// the exporter" in one await.
    ///
    /// On a fabric controller whose provider carries 8 bytes of remote completion data
    /// with delivery complete (tcp, shm, sockets) and a write of one post, it is one
    /// `fi_writemsg` whose remote CQ data is the signal word the doorbell would carry: one
    /// network operation instead of two. On `loopback` the copy and the ring of the
    /// connection's doorbell happen in one poll. Elsewhere (udp's fenced writes, signals
    /// over the side channel, a write of several posts) it is [`put`] then [`signal`], in
    /// that order (DESIGN.md, decision 18). `flags` are the signal's
    /// ([`SignalFlags::NO_ACCUMULATE`]).
    ///
    /// # Errors
    /// The put's, in its order (`RSMERR_BAD_SEG_HNDL`, `RSMERR_CONN_ABORTED`,
    /// `RSMERR_PERM_DENIED`, `RSMERR_BAD_OFFSET`, `RSMERR_BAD_LENGTH`, then the transfer's),
    /// then the signal's (`RSMERR_REMOTE_NODE_UNREACHABLE`, `RSMERR_CONN_ABORTED`). A
    /// failed write posts no signal; a failed signal after a write that resolved gives the
    /// buffer back with its error (the data is visible).
    ///
    /// [`wait_signal`]: crate::ExportSegment::wait_signal
    /// [`put`]: ImportSegment::put
    /// [`signal`]: ImportSegment::signal
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
    /// use rsm::SignalFlags;
    ///
    /// // The exporter's wait returns once the record is there to read.
    /// seg.put_signal(0, b"record".to_vec(), SignalFlags::empty()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropped before its first poll, it did nothing. Dropped later, it stops the waiting,
    /// not the write, whose buffer stays with the operation until the provider is done with
    /// it; where the write carries the signal, the signal arrives with the data, else it may
    /// be unsent (never half-sent).
    pub fn put_signal<B: IoBuf>(&self, offset: u64, buf: B, flags: SignalFlags) -> PutSignal<B> {
        let len = buf.bytes_len();
        self.count_made(OpKind::Signal, 0);
        let mut then_signal = true;
        let op = self.observed(OpKind::Put, offset, len, || {
            let path = &self.inner.path;
            if let Err(e) = self.check_access(OP, Perm::WRITE, offset, len, path.checks_abort()) {
                return self.refused(OP, e, buf);
            }
            if len == 0 {
                return Op::done(buf);
            }
            let word = self.carried_word(flags);
            let (op, carried) = path.put_signal(&self.inner, offset, buf, word);
            if carried {
                self.count_carried();
                then_signal = false;
            }
            op
        });
        PutSignal {
            stage: Stage::Put { op, then_signal },
            seg: self.clone(),
            flags,
        }
    }
}

#[cfg(feature = "test-util")]
impl ImportSegment {
    /// A put whose write carries the signal word with its check bits flipped, as a hostile
    /// grantee could post it; `None` where no write carries a signal here.
    pub(crate) fn put_forged_signal(&self, offset: u64, buf: Vec<u8>) -> Option<Op<Vec<u8>>> {
        let word = self.carried_word(SignalFlags::empty())? ^ (1 << 40);
        let (op, carried) = self
            .inner
            .path
            .put_signal(&self.inner, offset, buf, Some(word));
        carried.then_some(op)
    }

    /// Signals this node sent as a write's remote CQ data.
    pub(crate) fn carried_signals(&self) -> u64 {
        self.inner.state.upgrade().map_or(0, |s| {
            s.signals
                .sent_with_data
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }
}
