//! Drives completions: per controller one progress engine that reads its completion queue
//! and completes operation slots, which own their buffers until the provider is done.
//!
//! From the bottom up: what an operation moves (`plan`), the context handed to the provider
//! (`context`), what its failures mean (`failure`), posting as a barrier sees it (`drive`),
//! buffers (`buf`), the engine's tuning and clock (`tuning`, `looks`), the connection's
//! operations (`tracker`, `verdict`, `barrier`); what waits in a peer's queue of posts
//! (`queued`); the progress `engine`; the slot that owns an
//! operation (`slot`); its posting and its spin policy (`post`, `spin`); and its future
//! (`op`). No file imports one above it.

pub(crate) mod barrier;
pub(crate) mod buf;
mod buf_result;
mod context;
pub(crate) mod copy;
mod drive;
pub(crate) mod engine;
mod failure;
pub(crate) mod held;
mod looks;
mod op;
pub(crate) mod orphans;
mod plan;
mod pool;
mod post;
pub(crate) mod progress;
mod queued;
pub(crate) mod slot;
pub(crate) mod tracker;
pub(crate) mod tuning;
pub(crate) mod verdict;
pub(crate) mod watch;

pub use buf::{IoBuf, IoBufMut};
pub use buf_result::{BufError, BufResult};
pub use op::Op;
pub(crate) use op::PooledOp;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One trip through the executor, whichever it is: the task's other futures (and other
/// tasks) run before this one goes on.
pub(crate) fn yield_now() -> impl Future<Output = ()> {
    YieldNow(false)
}

struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
