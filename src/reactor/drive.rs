//! Posting, seen from an explicit barrier: the one thing it asks of the operations attached
//! to it, so that it needs nothing else of the slot.

use std::sync::Arc;
use std::task::{Context, Poll};

/// Posting, seen from a barrier that must make sure every attached operation is posted.
pub(crate) trait Drive: Send + Sync {
    /// Posts what is not posted yet; `Pending` when the transmit queue is full (the waker is
    /// called when there is space).
    fn drive(self: Arc<Self>, cx: &mut Context<'_>) -> Poll<()>;
}
