//! The link from a node to itself, so that it imports its own segments (DESIGN.md §8,
//! "Self-import").
//!
//! It runs as every link does (`link.rs`: the same reader, writer, heartbeats and dispatch),
//! over an in-process pipe whose written frames the same link reads back: a request to this
//! node reaches the handler as any peer's would, and its reply comes back to the request. The
//! peer it names is this node: its id, incarnation and doorbells, and as credentials this
//! process's own ids, so the access check treats it as it treats any importer of this host.
//! No handshake: nothing crosses a process boundary, and no descriptor is used.

use std::sync::Arc;

use tokio_util::codec::{FramedRead, FramedWrite};

use super::creds::PeerCreds;
use super::link::{Greeted, codec, establish};
use super::peers::LinkHandle;
use super::shared::Shared;
use crate::sans_io::wire::{self, MAX_FRAME, Message};

/// Opens the node's link to itself and enters it into the peer table.
pub(super) fn open(shared: &Arc<Shared>) -> Result<LinkHandle, String> {
    let Ok(Message::Hello(hello)) = wire::decode(&shared.hello) else {
        return Err("this node's own hello does not decode".to_string());
    };
    // What the writer sends into one end, the reader takes from the other; the unused halves
    // live as long as the used ones, so the pipe ends when the writer does.
    let (near, far) = tokio::io::duplex(2 * MAX_FRAME);
    let (_unused_read, write) = tokio::io::split(near);
    let (read, _unused_write) = tokio::io::split(far);
    let (uid, gid, groups) = crate::sys::creds::current();
    let creds = PeerCreds {
        pid: Some(crate::sys::creds::pid()),
        uid,
        gid,
        groups,
    };
    let greeted = Greeted {
        reader: FramedRead::new(read, codec()),
        writer: FramedWrite::new(write, codec()),
        hello,
        cipher: None,
    };
    establish(shared, greeted, Some(creds), None)
}
