//! How a side channel is set up: its timing and transports, and what this node says about
//! itself.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::limits::PeerDescriptors;
use crate::sans_io::handshake::Credentials;
use crate::sans_io::wire::{ByteOrder, Doorbell};

/// Timing and transports of a side channel.
#[derive(Debug, Clone)]
pub(crate) struct SideChannelConfig {
    /// How often each side sends a heartbeat on a link this node waits on (default 1 s;
    /// `pulse.rs`).
    pub heartbeat_interval: Duration,
    /// A link this node waits on is closed when nothing arrived for this long since the
    /// wait began (default 3 s).
    pub dead_after: Duration,
    /// How often each side sends a heartbeat on a link nobody waits on (default 20 s).
    pub idle_heartbeat_interval: Duration,
    /// A link nobody waits on is closed when nothing arrived for this long (default 60 s).
    pub idle_dead_after: Duration,
    /// The longest a dial may take, hello included (default 2 s).
    pub connect_timeout: Duration,
    /// The longest [`SideChannel::request`] waits for its reply once sent (default 5 s).
    pub request_timeout: Duration,
    /// The longest an accepted link may take to send its hello (default 5 s).
    pub hello_timeout: Duration,
    /// Listen on and dial the abstract Unix sockets (default `true`); `false` leaves TCP only.
    pub unix: bool,
    /// Links in their handshake at once, on each listener (default 64); a link accepted
    /// beyond it is closed at once.
    pub max_handshakes: usize,
    /// Of those, from one IP address (TCP) or one uid (Unix) (default 8).
    pub max_handshakes_per_source: usize,
    /// Live links per peer node (default 8); a further link from it is refused.
    pub max_links_per_peer: usize,
    /// The descriptors the node holds for its peers: an accepted link takes one, and is
    /// closed at once beyond the node's budget or its peer's uid's (default: unbounded).
    pub fds: Arc<PeerDescriptors>,
}

impl Default for SideChannelConfig {
    fn default() -> Self {
        SideChannelConfig {
            heartbeat_interval: Duration::from_secs(1),
            dead_after: Duration::from_secs(3),
            idle_heartbeat_interval: Duration::from_secs(20),
            idle_dead_after: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            hello_timeout: Duration::from_secs(5),
            unix: true,
            max_handshakes: 64,
            max_handshakes_per_source: 8,
            max_links_per_peer: 8,
            fds: PeerDescriptors::unbounded(),
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
    /// How this node and its peers prove who they are.
    pub auth: Auth,
}

/// How the nodes at both ends of a link prove who they are (DESIGN.md §8).
#[derive(Debug, Clone)]
pub(crate) enum Auth {
    /// No keys: only nodes of this host, on the Unix sockets, where the kernel says who is at
    /// the other end; a node is the process that holds its name `rsm-node-<id>`.
    Kernel,
    /// Keys: every link, TCP or Unix, opens with a Noise handshake in which both nodes prove
    /// the key their peer trusts for them. The trust list may grow while the node runs.
    Keys(Arc<RwLock<Credentials>>),
}

impl Auth {
    /// The credentials as they are now, for one handshake.
    pub(crate) fn credentials(&self) -> Option<Credentials> {
        match self {
            Auth::Kernel => None,
            Auth::Keys(cred) => Some(cred.read().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }
}
