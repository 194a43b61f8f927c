//! The gate of accepted links still in their handshake: at most so many at once, and at most
//! so many from one source (an IP address on TCP, a uid on the Unix socket), so that a flood
//! from one place neither exhausts the node's descriptors nor keeps its real peers out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Where an accepted link comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Source {
    /// A TCP peer's address.
    Ip(IpAddr),
    /// A Unix peer's uid, as the kernel reports it.
    Uid(u32),
}

/// Counts the handshakes in progress, in total and per source.
pub(super) struct Gate {
    max: usize,
    max_per_source: usize,
    open: Mutex<(usize, HashMap<Source, usize>)>,
}

/// A place in the gate, given back on drop.
pub(super) struct Pass {
    gate: Arc<Gate>,
    source: Source,
}

impl Gate {
    pub(super) fn new(max: usize, max_per_source: usize) -> Arc<Gate> {
        Arc::new(Gate {
            max,
            max_per_source,
            open: Mutex::new((0, HashMap::new())),
        })
    }

    /// A place for a handshake from `source`, or `None` when the gate or that source is full.
    pub(super) fn enter(self: &Arc<Self>, source: Source) -> Option<Pass> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, per) = &mut *open;
        let mine = per.entry(source).or_insert(0);
        if *total >= self.max || *mine >= self.max_per_source {
            if *mine == 0 {
                per.remove(&source);
            }
            return None;
        }
        *mine += 1;
        *total += 1;
        Some(Pass {
            gate: Arc::clone(self),
            source,
        })
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|p| p.into_inner());
        let (total, per) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(n) = per.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_source_cannot_take_every_place() {
        let gate = Gate::new(3, 2);
        let a = Source::Ip("10.0.0.1".parse().expect("ip"));
        let b = Source::Uid(1000);
        let a1 = gate.enter(a).expect("first");
        let _a2 = gate.enter(a).expect("second");
        assert!(gate.enter(a).is_none(), "a third from one source");
        let _b1 = gate.enter(b).expect("another source");
        assert!(gate.enter(Source::Uid(7)).is_none(), "the gate is full");
        drop(a1);
        assert!(gate.enter(a).is_some(), "a place came back");
    }
}
