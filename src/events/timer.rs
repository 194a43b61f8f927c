//! Timers for waits with a timeout, with or without a tokio runtime in the caller.

use crate::context::NodeContext;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// Resolves at or after `deadline`: on the caller's tokio runtime when there is one (the
/// timer is cancelled with the future), else on the node's own runtime.
pub(crate) fn sleep_until(
    node: &Arc<NodeContext>,
    deadline: Instant,
) -> impl Future<Output = ()> + Send + 'static {
    let here = tokio::runtime::Handle::try_current().is_ok();
    let node = Arc::clone(node);
    async move {
        if here {
            tokio::time::sleep_until(deadline.into()).await;
        } else {
            let _ = node
                .run(async move {
                    tokio::time::sleep_until(deadline.into()).await;
                    Ok(())
                })
                .await;
        }
        // tokio's timer wheel rounds to the millisecond; never report early
        // (DESIGN.md, decision 11).
        let now = Instant::now();
        if now < deadline {
            std::thread::sleep(deadline - now);
        }
    }
}
