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
    /// Descriptors this node holds for all its peers together: their accepted side-channel
    /// links and their loopback connections. 0 (the default) derives it from the process's
    /// open-file limit, which a node raises to its hard limit when it starts: half of it,
    /// less a reserve of [`Limits::FD_RESERVE`] for the node's own use.
    pub descriptors: usize,
    /// Of those, held for the peers of one uid on this host (the kernel proves a Unix
    /// peer's uid, not its node id: one process may claim many ids). 0 (the default) is
    /// half of [`Limits::descriptors`], so peers of other users still get in.
    pub descriptors_per_uid: usize,
    /// Live side-channel links per peer node; a further one is closed. Default
    /// [`Limits::LINKS_PER_PEER`].
    pub links_per_peer: usize,
    /// Open connections (granted imports of this node's segments) of all peers together;
    /// on a fabric each holds a registration of its own. Default [`Limits::CONNECTIONS`].
    pub connections: usize,
    /// Of those, of the peers of one uid on this host (the kernel's, as for
    /// [`Limits::descriptors_per_uid`]). 0 (the default) is half of
    /// [`Limits::connections`].
    pub connections_per_uid: usize,
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
    /// The default of [`Limits::connections`].
    pub const CONNECTIONS: usize = 65_536;
    /// Descriptors a node keeps for its own use out of its open-file limit, when
    /// [`Limits::descriptors`] is derived from it.
    pub const FD_RESERVE: usize = 256;

    /// Sets [`Limits::descriptors`] (0: derived from the open-file limit).
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().descriptors(512).descriptors, 512);
    /// ```
    #[must_use]
    pub fn descriptors(mut self, n: usize) -> Self {
        self.descriptors = n;
        self
    }

    /// Sets [`Limits::connections`].
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().connections(1000).connections, 1000);
    /// ```
    #[must_use]
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// Sets [`Limits::connections_per_uid`] (0: half of the node's).
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().connections_per_uid(10).connections_per_uid, 10);
    /// ```
    #[must_use]
    pub fn connections_per_uid(mut self, n: usize) -> Self {
        self.connections_per_uid = n;
        self
    }

    /// The connections one uid's peers may hold ([`Limits::connections_per_uid`], 0: half
    /// of [`Limits::connections`]).
    pub(crate) fn connections_of_a_uid(&self) -> usize {
        match self.connections_per_uid {
            0 => self.connections / 2,
            n => n.min(self.connections),
        }
    }

    /// Sets [`Limits::descriptors_per_uid`] (0: half of the node's).
    ///
    /// ```
    /// assert_eq!(rsm::Limits::default().descriptors_per_uid(64).descriptors_per_uid, 64);
    /// ```
    #[must_use]
    pub fn descriptors_per_uid(mut self, n: usize) -> Self {
        self.descriptors_per_uid = n;
        self
    }

    /// The node-wide budget and the per-uid one, as this process's open-file limit
    /// `nofile` (`None`: unlimited) makes the defaults.
    pub(crate) fn descriptor_budgets(&self, nofile: Option<u64>) -> (usize, usize) {
        let node = match (self.descriptors, nofile) {
            (0, Some(n)) => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                n.saturating_sub(Self::FD_RESERVE) / 2
            }
            (0, None) => usize::MAX,
            (n, _) => n,
        };
        let per_uid = match self.descriptors_per_uid {
            0 => node / 2,
            n => n.min(node),
        };
        (node, per_uid)
    }

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
            descriptors: 0,
            descriptors_per_uid: 0,
            connections: Self::CONNECTIONS,
            connections_per_uid: 0,
        }
    }
}

/// The descriptors a node holds for its peers, against a node-wide budget and a budget per
/// uid of the peers of this host ([`Limits::descriptors`], [`Limits::descriptors_per_uid`]).
#[derive(Debug)]
pub(crate) struct PeerDescriptors {
    node: usize,
    per_uid: usize,
    held: std::sync::Mutex<(usize, std::collections::HashMap<u32, usize>)>,
}

/// Descriptors taken from a [`PeerDescriptors`]; given back when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    from: std::sync::Arc<PeerDescriptors>,
    uid: Option<u32>,
    n: usize,
}

impl PeerDescriptors {
    /// Budgets of `node` descriptors, `per_uid` of them for the peers of one uid.
    pub(crate) fn new(node: usize, per_uid: usize) -> std::sync::Arc<Self> {
        std::sync::Arc::new(PeerDescriptors {
            node,
            per_uid,
            held: std::sync::Mutex::new((0, std::collections::HashMap::new())),
        })
    }

    /// No budget (tests of one layer).
    pub(crate) fn unbounded() -> std::sync::Arc<Self> {
        Self::new(usize::MAX, usize::MAX)
    }

    /// Takes `n` descriptors for a peer of `uid` (`None`: a peer whose uid the kernel did
    /// not give, over TCP); what is wrong when the node or that uid is at its budget.
    pub(crate) fn take(
        self: &std::sync::Arc<Self>,
        uid: Option<u32>,
        n: usize,
    ) -> Result<Held, String> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.0.saturating_add(n) > self.node {
            return Err(format!(
                "this node holds {} descriptors for its peers, its budget (Limits::descriptors)",
                held.0
            ));
        }
        if let Some(uid) = uid {
            let of_uid = held.1.get(&uid).copied().unwrap_or(0);
            if of_uid.saturating_add(n) > self.per_uid {
                return Err(format!(
                    "this node holds {of_uid} descriptors for the peers of uid {uid}, its \
                     budget for one uid (Limits::descriptors_per_uid)"
                ));
            }
            *held.1.entry(uid).or_insert(0) += n;
        }
        held.0 += n;
        Ok(Held {
            from: std::sync::Arc::clone(self),
            uid,
            n,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.from.held.lock().unwrap_or_else(|p| p.into_inner());
        held.0 = held.0.saturating_sub(self.n);
        if let Some(uid) = self.uid {
            if let Some(h) = held.1.get_mut(&uid) {
                *h = h.saturating_sub(self.n);
                if *h == 0 {
                    held.1.remove(&uid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_bound_the_node_and_each_uid_and_come_back() {
        let b = PeerDescriptors::new(10, 6);
        let a = b.take(Some(1), 6).expect("uid 1's budget");
        assert!(b.take(Some(1), 1).unwrap_err().contains("uid 1"));
        let c = b.take(Some(2), 4).expect("another uid still gets in");
        assert!(b.take(None, 1).unwrap_err().contains("Limits::descriptors"));
        drop(a);
        let _d = b.take(Some(1), 6).expect("given back");
        drop(c);
        assert!(b.take(None, 4).is_ok());
    }

    #[test]
    fn the_defaults_come_from_the_open_file_limit() {
        let l = Limits::default();
        assert_eq!(l.descriptor_budgets(Some(1024)), (384, 192));
        assert_eq!(l.descriptor_budgets(None), (usize::MAX, usize::MAX / 2));
        assert_eq!(l.descriptors(100).descriptor_budgets(Some(1024)), (100, 50));
        let l = l.descriptors(100).descriptors_per_uid(500);
        assert_eq!(l.descriptor_budgets(Some(1024)), (100, 100));
    }
}
