//! What a node grants its peers at most (DESIGN.md §8, Owners and limits, and Trust): beyond a
//! limit that peer's request is refused with `RSMERR_INSUFFICIENT_RESOURCES`, or its link
//! closed, and the node keeps serving every other peer.

/// The limits a node sets its peers, set with [`NodeBuilder::limits`](crate::NodeBuilder::limits).
///
/// A peer is a node id: every incarnation and every link of that id counts together.
/// `Default` gives the documented defaults; the setters change one field each.
///
/// ```
/// let limits = rsm::Limits::default()
///     .connections_per_peer(64)
///     .connects_in_progress_per_peer(8);
/// assert_eq!(limits.connections_per_peer, 64);
/// assert_eq!(limits.descriptors_per_peer, rsm::Limits::default().descriptors_per_peer);
/// let builder = rsm::Node::builder().limits(limits);
/// # let _ = builder;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Open connections (granted imports of this node's segments) per peer node; default
    /// [`Limits::CONNECTIONS_PER_PEER`].
    pub connections_per_peer: usize,
    /// Connect requests of one peer node being answered at once; default
    /// [`Limits::CONNECTS_IN_PROGRESS_PER_PEER`].
    pub connects_in_progress_per_peer: usize,
    /// Descriptors (memfds, doorbell pages and sockets on `loopback`) this node holds for
    /// one peer node's open connections; default [`Limits::DESCRIPTORS_PER_PEER`].
    pub descriptors_per_peer: usize,
    /// Accepted side-channel links still in their handshake, on each listener (TCP, Unix);
    /// a link beyond it waits up to 1 s for a place (among at most four times as many
    /// waiters, and as many as this from one source), then is closed. Default
    /// [`Limits::HANDSHAKES`].
    pub handshakes: usize,
    /// Of those, from one IP address (TCP) or one uid (Unix); default
    /// [`Limits::HANDSHAKES_PER_SOURCE`].
    pub handshakes_per_source: usize,
    /// Live side-channel links per peer node; a further one is closed. Default
    /// [`Limits::LINKS_PER_PEER`].
    pub links_per_peer: usize,
}

impl Limits {
    /// The default of [`Limits::connections_per_peer`].
    pub const CONNECTIONS_PER_PEER: usize = 4096;
    /// The default of [`Limits::connects_in_progress_per_peer`].
    pub const CONNECTS_IN_PROGRESS_PER_PEER: usize = 64;
    /// The default of [`Limits::descriptors_per_peer`]: four per connection (a loopback
    /// connection holds its memfd, a doorbell page and its doorbell socket) for 1024
    /// connections.
    pub const DESCRIPTORS_PER_PEER: usize = 4096;
    /// The default of [`Limits::handshakes`].
    pub const HANDSHAKES: usize = 64;
    /// The default of [`Limits::handshakes_per_source`].
    pub const HANDSHAKES_PER_SOURCE: usize = 8;
    /// The default of [`Limits::links_per_peer`].
    pub const LINKS_PER_PEER: usize = 8;

    /// Sets [`Limits::handshakes`].
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().handshakes(16).handshakes, 16);
    /// ```
    #[must_use]
    pub fn handshakes(mut self, n: usize) -> Self {
        self.handshakes = n;
        self
    }

    /// Sets [`Limits::handshakes_per_source`].
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().handshakes_per_source(2).handshakes_per_source, 2);
    /// ```
    #[must_use]
    pub fn handshakes_per_source(mut self, n: usize) -> Self {
        self.handshakes_per_source = n;
        self
    }

    /// Sets [`Limits::links_per_peer`].
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().links_per_peer(2).links_per_peer, 2);
    /// ```
    #[must_use]
    pub fn links_per_peer(mut self, n: usize) -> Self {
        self.links_per_peer = n;
        self
    }

    /// Sets [`Limits::connections_per_peer`].
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().connections_per_peer(2).connections_per_peer, 2);
    /// ```
    #[must_use]
    pub fn connections_per_peer(mut self, n: usize) -> Self {
        self.connections_per_peer = n;
        self
    }

    /// Sets [`Limits::connects_in_progress_per_peer`].
    ///
    /// ```
    /// let l = rsm::Limits::default().connects_in_progress_per_peer(1);
    /// assert_eq!(l.connects_in_progress_per_peer, 1);
    /// ```
    #[must_use]
    pub fn connects_in_progress_per_peer(mut self, n: usize) -> Self {
        self.connects_in_progress_per_peer = n;
        self
    }

    /// Sets [`Limits::descriptors_per_peer`].
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().descriptors_per_peer(8).descriptors_per_peer, 8);
    /// ```
    #[must_use]
    pub fn descriptors_per_peer(mut self, n: usize) -> Self {
        self.descriptors_per_peer = n;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections_per_peer: Self::CONNECTIONS_PER_PEER,
            connects_in_progress_per_peer: Self::CONNECTS_IN_PROGRESS_PER_PEER,
            descriptors_per_peer: Self::DESCRIPTORS_PER_PEER,
            handshakes: Self::HANDSHAKES,
            handshakes_per_source: Self::HANDSHAKES_PER_SOURCE,
            links_per_peer: Self::LINKS_PER_PEER,
        }
    }
}
