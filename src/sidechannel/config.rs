//! How a side channel is set up: its timing and transports, and what this node says about
//! itself.

use std::time::Duration;

use crate::sans_io::wire::{ByteOrder, Doorbell};

/// Timing and transports of a side channel.
#[derive(Debug, Clone)]
pub(crate) struct SideChannelConfig {
    /// How often each side sends a heartbeat on every link (default 1 s).
    pub heartbeat_interval: Duration,
    /// A link on which nothing arrived for this long is closed (default 3 s).
    pub dead_after: Duration,
    /// The longest a dial may take, hello included (default 2 s).
    pub connect_timeout: Duration,
    /// The longest [`SideChannel::request`] waits for its reply once sent (default 5 s).
    pub request_timeout: Duration,
    /// The longest an accepted link may take to send its hello (default 5 s).
    pub hello_timeout: Duration,
    /// Listen on and dial the abstract Unix sockets (default `true`); `false` leaves TCP only.
    pub unix: bool,
}

impl Default for SideChannelConfig {
    fn default() -> Self {
        SideChannelConfig {
            heartbeat_interval: Duration::from_secs(1),
            dead_after: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(5),
            unix: true,
        }
    }
}

/// What this node says about itself in its hello.
#[derive(Debug, Clone)]
pub(crate) struct LocalIdentity {
    /// This node's id.
    pub node_id: u32,
    /// This node's incarnation.
    pub incarnation: u64,
    /// This node's signal doorbells, one per controller (at most
    /// [`MAX_DOORBELLS`](wire::MAX_DOORBELLS)).
    pub doorbells: Vec<Doorbell>,
    /// The byte order the hello announces: [`ByteOrder::native`], except where the
    /// `fault-injection` feature makes a node pretend otherwise (DESIGN.md, decision 4).
    pub byte_order: ByteOrder,
}
