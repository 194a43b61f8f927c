//! The few OS calls `rsm` makes outside libfabric, in one small place: system limits, segment
//! memory, and the eventfd and poll that progress threads sleep on.

pub(crate) mod creds;
pub(crate) mod eventfd;
pub(crate) mod limits;
pub(crate) mod mem;
pub(crate) mod wake;
