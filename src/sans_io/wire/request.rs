//! Requests and their replies: each request type names the reply it expects, so a reply has
//! one generic path back to the request waiting for it ([`Message::reply_to`]), and a
//! request without a reply type, or a reply the routing does not know, does not compile.

use super::message::{
    AtomicReply, AtomicRequest, ConnectReply, ConnectRequest, Message, SegmentsReply,
    SegmentsRequest,
};

/// A message that expects a reply from its peer.
///
/// ```
/// use rsm::test_util::wire::{AtomicRequest, Message, Request};
///
/// let r = AtomicRequest {
///     req: 0, conn_id: 1, class: 0, op: 0, datatype: 0, offset: 0, operand: 1, compare: 0,
/// };
/// let msg = r.into_message(42);
/// assert!(matches!(msg, Message::AtomicRequest(AtomicRequest { req: 42, .. })));
/// assert_eq!(msg.reply_to(), None);
/// assert!(AtomicRequest::reply_of(msg).is_none(), "a request is not its own reply");
/// ```
pub trait Request: Send + 'static {
    /// What the peer answers.
    type Reply: Send + 'static;

    /// The message that carries this request under the request id `req`.
    fn into_message(self, req: u64) -> Message;

    /// The reply `msg` carries; `None` when it is another message.
    fn reply_of(msg: Message) -> Option<Self::Reply>;
}

impl Request for ConnectRequest {
    type Reply = ConnectReply;

    fn into_message(mut self, req: u64) -> Message {
        self.req = req;
        Message::ConnectRequest(self)
    }

    fn reply_of(msg: Message) -> Option<ConnectReply> {
        match msg {
            Message::ConnectReply(r) => Some(r),
            _ => None,
        }
    }
}

impl Request for AtomicRequest {
    type Reply = AtomicReply;

    fn into_message(mut self, req: u64) -> Message {
        self.req = req;
        Message::AtomicRequest(self)
    }

    fn reply_of(msg: Message) -> Option<AtomicReply> {
        match msg {
            Message::AtomicReply(r) => Some(r),
            _ => None,
        }
    }
}

impl Request for SegmentsRequest {
    type Reply = SegmentsReply;

    fn into_message(mut self, req: u64) -> Message {
        self.req = req;
        Message::SegmentsRequest(self)
    }

    fn reply_of(msg: Message) -> Option<SegmentsReply> {
        match msg {
            Message::SegmentsReply(r) => Some(r),
            _ => None,
        }
    }
}

impl Message {
    /// The request id a reply answers; `None` for every message that is not a reply. Every
    /// kind is named, so a new message must say whether it is one.
    pub fn reply_to(&self) -> Option<u64> {
        match self {
            Message::ConnectReply(r) => Some(r.req),
            Message::AtomicReply(r) => Some(r.req),
            Message::SegmentsReply(r) => Some(r.req),
            Message::Hello(_)
            | Message::ConnectRequest(_)
            | Message::Disconnect { .. }
            | Message::Revoke { .. }
            | Message::RevokeAck { .. }
            | Message::Rebind { .. }
            | Message::RebindAck { .. }
            | Message::Signal { .. }
            | Message::Wake { .. }
            | Message::Heartbeat { .. }
            | Message::Goodbye
            | Message::Handshake { .. }
            | Message::AtomicRequest(_)
            | Message::SegmentsRequest(_) => None,
        }
    }
}
