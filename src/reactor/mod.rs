//! Drives completions: per controller one progress engine that reads its completion queue
//! and completes operation slots, which own their buffers until the provider is done.

pub(crate) mod barrier;
pub(crate) mod buf;
pub(crate) mod engine;
pub(crate) mod slot;
pub(crate) mod tracker;
pub(crate) mod verdict;

pub use buf::{IoBuf, IoBufMut};
pub use slot::Op;
