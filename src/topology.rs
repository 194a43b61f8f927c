//! Topology (docs/rsmapi.md §4.9, `rsm_get_interconnect_topology`): the local node, its controllers
//! with their addresses, and per controller the remote nodes that answer on the side channel.

use crate::controller::ControllerRegistry;
use crate::{NodeId, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// `RSM_CONNECTION_ACTIVE`: the path to a remote controller is usable.
pub const RSM_CONNECTION_ACTIVE: u32 = 3;

/// The state of the path to a remote node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum ConnectionState {
    /// Answered on the side channel (`RSM_CONNECTION_ACTIVE`).
    Active,
}

/// A remote controller reachable from a local one (`rsm_remote_cntlr_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RemoteController {
    /// The remote node id.
    pub node: NodeId,
    /// The remote controller's name.
    pub controller: String,
    /// The remote node's side-channel address.
    pub address: SocketAddr,
    /// The state of the path.
    pub state: ConnectionState,
}

/// A local controller and what it reaches (`rsm_connections_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ControllerConnections {
    /// The local controller's name.
    pub controller: String,
    /// Its local address, as the provider formats it.
    pub address: String,
    /// The remote controllers it has a path to.
    pub remotes: Vec<RemoteController>,
}

/// The interconnect topology seen from one node (`rsm_topology_t`).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let node = rsm::Node::builder().ignore_environment().id(9052).start().await?;
///     let topo = node.topology().await?;
///     assert_eq!(topo.local_node, rsm::NodeId(9052));
///     assert!(topo.controllers.iter().any(|c| c.controller == "tcp0"));
///     Ok::<_, rsm::Error>(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Topology {
    /// The local node id.
    pub local_node: NodeId,
    /// The local controllers, loopback excluded (as in RSMAPI: it reaches no other host).
    pub controllers: Vec<ControllerConnections>,
}

impl Topology {
    /// `peers` answered; of them, `same_host` run on this host, the only ones listed under
    /// shm controllers (DESIGN.md §8, "Hosts").
    pub(crate) fn build(
        node_id: u32,
        local_ip: IpAddr,
        peers: &BTreeMap<u32, SocketAddr>,
        same_host: &BTreeSet<u32>,
    ) -> Result<Topology> {
        let list = ControllerRegistry::new(local_ip, std::sync::Weak::new()).list()?;
        let controllers = list
            .into_iter()
            .filter(|c| c.provider != "loopback")
            .map(|c| ControllerConnections {
                remotes: peers
                    .iter()
                    .filter(|(node, _)| c.provider != "shm" || same_host.contains(node))
                    .map(|(&node, &address)| RemoteController {
                        node: NodeId(node),
                        controller: c.name.clone(),
                        address,
                        state: ConnectionState::Active,
                    })
                    .collect(),
                controller: c.name,
                address: c.address,
            })
            .collect();
        Ok(Topology {
            local_node: NodeId(node_id),
            controllers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_appear_under_every_controller() {
        let mut peers = BTreeMap::new();
        peers.insert(2, "127.0.0.1:7402".parse().unwrap());
        peers.insert(5, "127.0.0.1:7405".parse().unwrap());
        let here = BTreeSet::from([2, 5]);
        let t = Topology::build(1, "127.0.0.1".parse().unwrap(), &peers, &here).unwrap();
        assert_eq!(t.local_node, NodeId(1));
        assert!(!t.controllers.is_empty());
        assert!(t.controllers.iter().all(|c| c.controller != "loopback"));
        for c in &t.controllers {
            let nodes: Vec<u32> = c.remotes.iter().map(|r| r.node.get()).collect();
            assert_eq!(nodes, vec![2, 5]);
            assert!(c.remotes.iter().all(|r| r.controller == c.controller));
        }
        let tcp = t
            .controllers
            .iter()
            .find(|c| c.controller == "tcp0")
            .unwrap();
        assert!(tcp.address.starts_with("127.0.0.1"), "{}", tcp.address);
        // Node 5 on another host: not under shm0, still under tcp0.
        let here = BTreeSet::from([2]);
        let t = Topology::build(1, "127.0.0.1".parse().unwrap(), &peers, &here).unwrap();
        for c in &t.controllers {
            let nodes: Vec<u32> = c.remotes.iter().map(|r| r.node.get()).collect();
            let want = if c.controller.starts_with("shm") {
                vec![2]
            } else {
                vec![2, 5]
            };
            assert_eq!(nodes, want, "{}", c.controller);
        }
    }
}
