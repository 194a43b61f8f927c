//! A failure that means either of two things. tcp (its connected endpoints, as tcp;ofi_rxm
//! before) fails an access under a key the target does not know, and every access in flight
//! to a process that died, the same way: `ECANCELED` with provider errno `ENOENT`
//! (measured; the target closes the connection on a bad key). The first is a failed access
//! (`RSMERR_BARRIER_FAILURE`), the second a lost exporter (`RSMERR_CONN_ABORTED`,
//! DESIGN.md, decision 19). Only the side channel tells them apart, and it learns of a death a little after the
//! provider: an awaiting thread that reads its own completions saw the cancel first and
//! called a killed exporter a failed access. So such a failure waits up to [`VERDICT_WAIT`]
//! for the connection's tracker to be aborted before it is reported.

use super::tracker::Tracker;
use crate::Error;
use crate::fabric::ffi;
use futures::channel::oneshot;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long an ambiguous failure waits for the side channel's verdict. The side channel
/// notices a killed process when its socket closes, within milliseconds here; a failed
/// access under a stale key is reported this much later.
pub(crate) const VERDICT_WAIT: Duration = Duration::from_millis(500);

/// How often the waiting thread looks at the tracker.
const LOOK_EVERY: Duration = Duration::from_millis(2);

/// Whether `e` is the failure that can mean a failed access or a lost exporter.
pub(crate) fn ambiguous(e: &Error) -> bool {
    e.code() == Error::barrier_failure().code()
        && e.fabric_failure().is_some_and(|f| {
            f.errno == ffi::FI_ECANCELED as i32
                && f.prov_errno.is_some_and(|p| p.abs() == libc::ENOENT)
        })
}

/// Resolves to the tracker's abort error if the connection is aborted within
/// [`VERDICT_WAIT`], else `None`. Needs no runtime: a short-lived thread watches the
/// tracker (this is a failure path, taken once per failed operation at most).
pub(crate) struct AbortWithin(Option<oneshot::Receiver<Option<Error>>>);

pub(crate) fn abort_within(tracker: &Arc<Tracker>) -> AbortWithin {
    if let Some(e) = tracker.aborted() {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Some(e));
        return AbortWithin(Some(rx));
    }
    let (tx, rx) = oneshot::channel();
    let tracker = Arc::clone(tracker);
    let spawned = std::thread::Builder::new()
        .name("rsm-verdict".into())
        .spawn(move || {
            let until = Instant::now() + VERDICT_WAIT;
            loop {
                if let Some(e) = tracker.aborted() {
                    let _ = tx.send(Some(e));
                    return;
                }
                if Instant::now() >= until {
                    let _ = tx.send(None);
                    return;
                }
                std::thread::sleep(LOOK_EVERY);
            }
        });
    // Without a thread there is no verdict to wait for: the failure stands as it is.
    AbortWithin(spawned.ok().map(|_| rx))
}

impl Future for AbortWithin {
    type Output = Option<Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Error>> {
        match self.0.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => Pin::new(rx).poll(cx).map(|r| r.ok().flatten()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FabricFailure;

    fn cancel() -> Error {
        Error::barrier_failure().fabric(FabricFailure {
            call: "fi_cq_read",
            errno: ffi::FI_ECANCELED as i32,
            prov_errno: Some(libc::ENOENT),
            message: String::new(),
        })
    }

    #[test]
    fn only_the_tcp_cancel_is_ambiguous() {
        assert!(ambiguous(&cancel()));
        assert!(!ambiguous(&Error::barrier_failure()));
        assert!(!ambiguous(&Error::conn_aborted()));
    }

    #[test]
    fn an_abort_in_time_decides_and_none_waits_out_the_limit() {
        let t = Arc::new(Tracker::default());
        let t2 = Arc::clone(&t);
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t2.abort(Error::conn_aborted());
        });
        let got = futures::executor::block_on(abort_within(&t));
        aborter.join().unwrap();
        assert_eq!(got.map(|e| e.code()), Some(Error::conn_aborted().code()));

        let quiet = Arc::new(Tracker::default());
        let start = Instant::now();
        assert!(futures::executor::block_on(abort_within(&quiet)).is_none());
        assert!(start.elapsed() >= VERDICT_WAIT);
    }
}
