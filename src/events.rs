//! Segment events (docs/rsmapi.md §4.7, DESIGN.md §6 and §7): signal counting with exact
//! consumption, `NO_ACCUMULATE`, waits with timeouts, the pollable descriptor, and the
//! broadcast [`EventStream`] that observes what happens to a segment.
//!
//! Two kinds of consumers see a segment's signals differently:
//! - **waits** ([`ImportSegment::wait_signal`](crate::ImportSegment::wait_signal),
//!   [`ExportSegment::wait_signal`](crate::ExportSegment::wait_signal)) and the pollable
//!   descriptor consume them: every signal posted is one pending event, and one successful
//!   wait takes exactly one;
//! - **streams** ([`ImportSegment::events`](crate::ImportSegment::events),
//!   [`ExportSegment::events`](crate::ExportSegment::events)) observe: each stream sees every
//!   event (signals, importers connecting and leaving, revokes, rebinds, unreachable peers),
//!   consumes nothing, and reports [`Lagged`] when it falls more than its buffer behind.
//!
//! How a signal travels (`events/route.rs`): an 8-byte `fi_inject_writedata` to the peer's
//! doorbell registration, on `loopback` a shared word and a datagram socket
//! (`events/loopback_bell.rs`), or the side channel.

mod event;
pub(crate) mod hub;
pub(crate) mod loopback_bell;
pub(crate) mod route;
mod stream;
mod timer;

pub use event::{Importer, STREAM_CAPACITY, SegmentEvent, SignalFlags, Signaller};
pub use hub::PollFd;
pub use stream::{EventStream, Lagged};
