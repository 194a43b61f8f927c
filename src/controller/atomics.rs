//! Which remote atomics a controller performs natively (DESIGN.md §13): a table of
//! (class, operation, type), read from the provider when the controller opens. The others
//! are performed for importers by the exporting node, so the API is the same everywhere.

use crate::sans_io::atomic::{Class, Datatype, OPS, offered, op_name};

/// How a controller performs remote atomics, as `rsm info` shows it.
///
/// ```no_run
/// # async fn f(node: rsm::Node) -> rsm::Result<()> {
/// let ctrl = node.controller("shm0").await?;
/// let a = &ctrl.info().atomics;
/// println!("{}: {} native of {}", ctrl.name(), a.native_count(), a.offered_count());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AtomicSupport {
    /// Where every atomic goes: `"cpu"` (loopback: the importer's own CPU on the shared
    /// mapping, or the exporter for caller memory), `"provider"` (the provider performs
    /// every offered one), `"mixed"` (the provider some, the exporter the rest) or
    /// `"exporter"` (the exporting node performs each, over the side channel).
    pub path: &'static str,
    /// One bit per operation code (libfabric's `fi_op`), per class and type code: set when
    /// the provider performs it. Index `[class][datatype]`.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) native: [[u32; 10]; 3],
    /// The fewest values one native post takes, over every native combination (0: none):
    /// a vector operation goes in posts of at most this many.
    pub(crate) max_count: usize,
}

impl AtomicSupport {
    /// Loopback: CPU atomics everywhere.
    pub(crate) fn cpu() -> Self {
        AtomicSupport {
            path: "cpu",
            native: [[0; 10]; 3],
            max_count: 0,
        }
    }

    /// The table `native(class, datatype, op)` answers (how many values one post takes, or
    /// `None`), restricted to what `rsm` offers.
    pub(crate) fn from_provider(native: impl Fn(Class, Datatype, u8) -> Option<usize>) -> Self {
        let mut t = [[0u32; 10]; 3];
        let (mut all, mut any) = (true, false);
        let mut max_count = usize::MAX;
        for class in Class::ALL {
            for dt in Datatype::ALL {
                for op in 0..OPS as u8 {
                    if !offered(class, op, dt) {
                        continue;
                    }
                    if let Some(count) = native(class, dt, op) {
                        t[class as usize][dt as usize] |= 1 << op;
                        any = true;
                        max_count = max_count.min(count);
                    } else {
                        all = false;
                    }
                }
            }
        }
        let path = match (any, all) {
            (true, true) => "provider",
            (true, false) => "mixed",
            _ => "exporter",
        };
        AtomicSupport {
            path,
            native: t,
            max_count: if any { max_count } else { 0 },
        }
    }

    /// Whether the provider performs `op` of `class` on `dt` itself.
    pub(crate) fn is_native(&self, class: Class, dt: Datatype, op: u8) -> bool {
        self.native[class as usize][dt as usize] & (1 << op) != 0
    }

    /// The most values one native post of a vector takes here (0 where none is native).
    pub fn max_count(&self) -> usize {
        self.max_count
    }

    /// How many (class, operation, type) combinations the provider performs itself.
    pub fn native_count(&self) -> usize {
        self.native
            .iter()
            .flatten()
            .map(|m| m.count_ones() as usize)
            .sum()
    }

    /// How many combinations `rsm` offers on every controller.
    pub fn offered_count(&self) -> usize {
        let mut n = 0;
        for class in Class::ALL {
            for dt in Datatype::ALL {
                n += (0..OPS as u8).filter(|&op| offered(class, op, dt)).count();
            }
        }
        n
    }

    /// The offered combinations the provider does not perform, as `class:op:type` names
    /// (empty where it performs all, or on loopback).
    pub fn not_native(&self) -> Vec<String> {
        if self.path == "cpu" {
            return Vec::new();
        }
        let mut out = Vec::new();
        for class in Class::ALL {
            for dt in Datatype::ALL {
                for op in 0..OPS as u8 {
                    if offered(class, op, dt) && !self.is_native(class, dt, op) {
                        out.push(format!("{}:{}:{}", class.name(), op_name(op), dt.name()));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_table() {
        let all = AtomicSupport::from_provider(|_, _, _| Some(4));
        assert_eq!((all.path, all.max_count()), ("provider", 4));
        assert_eq!(all.native_count(), all.offered_count());
        assert!(all.not_native().is_empty());
        let none = AtomicSupport::from_provider(|_, _, _| None);
        assert_eq!((none.path, none.native_count()), ("exporter", 0));
        let some = AtomicSupport::from_provider(|_, dt, _| (dt == Datatype::U64).then_some(2));
        assert_eq!((some.path, some.max_count()), ("mixed", 2));
        assert!(some.is_native(Class::Fetch, Datatype::U64, 2));
        assert!(!some.is_native(Class::Fetch, Datatype::U32, 2));
        assert!(some.not_native().contains(&"fetch:sum:u32".to_string()));
    }
}
