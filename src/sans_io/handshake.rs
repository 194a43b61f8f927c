//! The handshake that opens a side-channel link between nodes with keys (DESIGN.md §8), and
//! the encryption of every frame after it.
//!
//! Sans-I/O: Noise `XX` (`Noise_XX_25519_ChaChaPoly_BLAKE2s`, through the `snow` crate) over
//! three [`Message::Handshake`](super::wire::Message::Handshake) frames. The dialler is the
//! initiator:
//!
//! 1. dialler → `e`;
//! 2. acceptor → `e, ee, s, es`, with its node id as payload: the dialler checks that the node
//!    it dialled answers, with the key its trust list names for that node;
//! 3. dialler → `s, se`, with its node id: the acceptor checks the key against its trust
//!    list in the same way, and refuses its own id.
//!
//! Nothing else is sent before a side has proven its key: a node's hello (its incarnation
//! among the rest) is the first encrypted frame. Every later frame is one Noise transport
//! message ([`Sealer`], [`Opener`]), numbered by its position on the link, so a frame that
//! was dropped, replayed, reordered or altered fails to open and closes the link.
//!
//! ```
//! use std::collections::BTreeMap;
//! use rsm::NodeKey;
//! use rsm::test_util::handshake::{Credentials, Initiator, Responder};
//!
//! let (a, b) = (NodeKey::generate(), NodeKey::generate());
//! let trust = BTreeMap::from([(1, a.public()), (2, b.public())]);
//! let node1 = Credentials { node_id: 1, key: a, trust: trust.clone() };
//! let node2 = Credentials { node_id: 2, key: b, trust };
//!
//! let (dial, m1) = Initiator::start(&node1, 2)?;
//! let (accept, m2) = Responder::accept(&node2, &m1)?;
//! let (m3, mut to2, mut from2) = dial.finish(&m2)?;
//! let (peer, mut to1, mut from1) = accept.finish(&m3)?;
//! assert_eq!(peer, 1);
//! let sealed = to2.seal(b"hello")?;
//! assert_eq!(from1.open(&sealed)?, b"hello");
//! # let _ = (&mut to1, &mut from2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use snow::{HandshakeState, StatelessTransportState};

use super::keys::{NOISE_PATTERN, NodeKey, PublicKey};
use super::wire::{MAX_FRAME, MAX_HANDSHAKE, WIRE_VERSION};

/// Bound into every handshake, so that nodes of other wire versions fail it.
const PROLOGUE: &[u8] = b"rsm side channel";

/// The Noise authentication tag each transport message adds.
pub const TAG_LEN: usize = 16;

/// What a node proves and checks: its id, its key, and the key of every node it trusts.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// This node's id.
    pub node_id: u32,
    /// This node's key pair.
    pub key: NodeKey,
    /// The public key of each node this node talks to.
    pub trust: BTreeMap<u32, PublicKey>,
}

/// Why a handshake or a frame failed, in words; the link closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl From<String> for Refused {
    fn from(s: String) -> Self {
        Refused(s)
    }
}

impl From<&str> for Refused {
    fn from(s: &str) -> Self {
        Refused(s.to_string())
    }
}

fn builder_failed(e: snow::Error) -> Refused {
    Refused(format!("the noise handshake cannot start: {e}"))
}

fn state(cred: &Credentials, initiator: bool) -> Result<HandshakeState, Refused> {
    let params = NOISE_PATTERN
        .parse()
        .map_err(|e: snow::Error| builder_failed(e))?;
    let mut prologue = PROLOGUE.to_vec();
    prologue.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    let b = snow::Builder::new(params)
        .local_private_key(cred.key.secret_bytes())
        .and_then(|b| b.prologue(&prologue))
        .map_err(builder_failed)?;
    if initiator {
        b.build_initiator()
    } else {
        b.build_responder()
    }
    .map_err(builder_failed)
}

/// The node id a handshake message carries as payload.
fn claimed_id(payload: &[u8]) -> Result<u32, Refused> {
    <[u8; 4]>::try_from(payload)
        .map(u32::from_le_bytes)
        .map_err(|_| {
            Refused(format!(
                "a handshake payload of {} bytes, not a node id",
                payload.len()
            ))
        })
}

/// Whether `remote` is the key `cred` trusts for `node`; the error says why not.
fn check_key(cred: &Credentials, node: u32, remote: Option<&[u8]>) -> Result<(), Refused> {
    let expected = cred.trust.get(&node).ok_or_else(|| {
        Refused(format!(
            "node {node} has no key in this node's trust list (peer keys or trust file)"
        ))
    })?;
    match remote {
        Some(r) if r == expected.as_bytes() => Ok(()),
        Some(r) => Err(Refused(format!(
            "the peer claims node {node} but proves another key ({}...)",
            r.iter()
                .take(4)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ))),
        None => Err("the peer proved no static key".into()),
    }
}

fn write(hs: &mut HandshakeState, payload: &[u8]) -> Result<Vec<u8>, Refused> {
    let mut out = vec![0u8; MAX_HANDSHAKE];
    let n = hs
        .write_message(payload, &mut out)
        .map_err(|e| Refused(format!("cannot write a handshake message: {e}")))?;
    out.truncate(n);
    Ok(out)
}

fn read(hs: &mut HandshakeState, msg: &[u8]) -> Result<Vec<u8>, Refused> {
    if msg.len() > MAX_HANDSHAKE {
        return Err(Refused(format!(
            "a handshake message of {} bytes",
            msg.len()
        )));
    }
    let mut payload = vec![0u8; MAX_HANDSHAKE];
    let n = hs
        .read_message(msg, &mut payload)
        .map_err(|e| Refused(format!("the handshake failed: {e}")))?;
    payload.truncate(n);
    Ok(payload)
}

fn split(hs: HandshakeState) -> Result<(Sealer, Opener), Refused> {
    let t = Arc::new(
        hs.into_stateless_transport_mode()
            .map_err(|e| Refused(format!("the handshake did not finish: {e}")))?,
    );
    Ok((
        Sealer {
            transport: Arc::clone(&t),
            nonce: 0,
        },
        Opener {
            transport: t,
            nonce: 0,
        },
    ))
}

/// The dialler's side of a handshake, between its first and third message.
pub struct Initiator {
    hs: HandshakeState,
    cred: Credentials,
    expect: u32,
}

impl Initiator {
    /// Starts a handshake with node `expect`: the state, and the first message to send.
    ///
    /// # Errors
    /// When `expect` has no key in the trust list (nothing is sent), or snow fails.
    pub fn start(cred: &Credentials, expect: u32) -> Result<(Self, Vec<u8>), Refused> {
        if !cred.trust.contains_key(&expect) {
            return Err(Refused(format!(
                "node {expect} has no key in this node's trust list (peer keys or trust file)"
            )));
        }
        let mut hs = state(cred, true)?;
        let first = write(&mut hs, &[])?;
        Ok((
            Initiator {
                hs,
                cred: cred.clone(),
                expect,
            },
            first,
        ))
    }

    /// Reads the acceptor's message, checks that it is the node dialled with its trusted key,
    /// and returns the third message with the link's two directions.
    ///
    /// # Errors
    /// Whatever is wrong with the message or the peer's identity, in words.
    pub fn finish(mut self, msg: &[u8]) -> Result<(Vec<u8>, Sealer, Opener), Refused> {
        let payload = read(&mut self.hs, msg)?;
        let node = claimed_id(&payload)?;
        if node != self.expect {
            return Err(Refused(format!("a different node ({node}) answers there")));
        }
        check_key(&self.cred, node, self.hs.get_remote_static())?;
        let third = write(&mut self.hs, &self.cred.node_id.to_le_bytes())?;
        let (sealer, opener) = split(self.hs)?;
        Ok((third, sealer, opener))
    }
}

/// The acceptor's side of a handshake, between its second and third message.
pub struct Responder {
    hs: HandshakeState,
    cred: Credentials,
}

impl Responder {
    /// Reads the dialler's first message and returns the second, which names this node and
    /// proves its key. The dialler is not known yet: nothing but the node id and the public
    /// key goes to it.
    ///
    /// # Errors
    /// Whatever is wrong with the message, in words.
    pub fn accept(cred: &Credentials, msg: &[u8]) -> Result<(Self, Vec<u8>), Refused> {
        let mut hs = state(cred, false)?;
        let payload = read(&mut hs, msg)?;
        if !payload.is_empty() {
            return Err("the first handshake message carries a payload".into());
        }
        let second = write(&mut hs, &cred.node_id.to_le_bytes())?;
        Ok((
            Responder {
                hs,
                cred: cred.clone(),
            },
            second,
        ))
    }

    /// Reads the dialler's third message: the node it claims to be, proven by its trusted
    /// key; returns that node id and the link's two directions.
    ///
    /// # Errors
    /// Whatever is wrong with the message or the peer's identity, in words; this node's own
    /// id is refused.
    pub fn finish(mut self, msg: &[u8]) -> Result<(u32, Sealer, Opener), Refused> {
        let payload = read(&mut self.hs, msg)?;
        let node = claimed_id(&payload)?;
        if node == self.cred.node_id {
            return Err(Refused(format!(
                "the peer claims this node's own id {node}"
            )));
        }
        check_key(&self.cred, node, self.hs.get_remote_static())?;
        let (sealer, opener) = split(self.hs)?;
        Ok((node, sealer, opener))
    }
}

/// Encrypts the frames one direction of a link sends, in order.
pub struct Sealer {
    transport: Arc<StatelessTransportState>,
    nonce: u64,
}

impl Sealer {
    /// The next frame, encrypted: `plain` plus [`TAG_LEN`] bytes.
    ///
    /// # Errors
    /// A frame over [`MAX_FRAME`], or a link that sent 2^64 - 1 frames.
    pub fn seal(&mut self, plain: &[u8]) -> Result<Vec<u8>, Refused> {
        if plain.len() > MAX_FRAME {
            return Err(Refused(format!("a frame of {} bytes", plain.len())));
        }
        let nonce = self.nonce;
        self.nonce = nonce
            .checked_add(1)
            .filter(|n| *n != u64::MAX)
            .ok_or("the link sent all the frames its key allows")?;
        let mut out = vec![0u8; plain.len() + TAG_LEN];
        let n = self
            .transport
            .write_message(nonce, plain, &mut out)
            .map_err(|e| Refused(format!("cannot encrypt a frame: {e}")))?;
        out.truncate(n);
        Ok(out)
    }
}

/// Decrypts the frames one direction of a link receives, in order.
pub struct Opener {
    transport: Arc<StatelessTransportState>,
    nonce: u64,
}

impl Opener {
    /// The next frame, decrypted.
    ///
    /// # Errors
    /// A frame that is not the next one this key sealed (altered, replayed, reordered,
    /// dropped before it, or from someone else), or shorter than its tag.
    pub fn open(&mut self, sealed: &[u8]) -> Result<Vec<u8>, Refused> {
        if sealed.len() < TAG_LEN || sealed.len() > MAX_FRAME + TAG_LEN {
            return Err(Refused(format!(
                "an encrypted frame of {} bytes",
                sealed.len()
            )));
        }
        let mut out = vec![0u8; sealed.len()];
        let n = self
            .transport
            .read_message(self.nonce, sealed, &mut out)
            .map_err(|_| Refused::from("a frame fails its authentication"))?;
        out.truncate(n);
        self.nonce = self
            .nonce
            .checked_add(1)
            .ok_or("the link received all the frames its key allows")?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
