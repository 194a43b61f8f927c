//! The few OS calls `rsm` makes outside libfabric, in one small place: system limits now; the
//! memory mappings, memfds, eventfds and descriptor passing arrive with the data path.

pub(crate) mod limits;
