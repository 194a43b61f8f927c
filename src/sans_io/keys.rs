//! Node keys (DESIGN.md §8): the X25519 key pair a node proves its identity with, the text
//! forms of its key file and of public keys, and the trust file that names each node's key.
//!
//! Sans-I/O: the caller reads the files; everything here parses text or makes keys.
//!
//! ```
//! use rsm::{NodeKey, PublicKey};
//!
//! let key = NodeKey::generate();
//! let text = key.to_text();
//! assert_eq!(NodeKey::parse(&text, "node.key")?.public(), key.public());
//! let public: PublicKey = key.public().to_string().parse()?;
//! assert_eq!(public, key.public());
//! # Ok::<(), rsm::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};

use crate::{Error, Result};

/// The length of a key, secret or public, in bytes.
pub const KEY_LEN: usize = 32;

/// The most nodes a trust file lists (as many as a configuration's peers).
pub const MAX_TRUSTED: usize = 4096;

/// The Noise pattern of every authenticated link.
pub(crate) const NOISE_PATTERN: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";

fn bad_conf(detail: impl Into<String>) -> Error {
    Error::bad_conf().op("configure").detail(detail)
}

/// 64 hex digits (either case) as 32 bytes.
fn parse_hex(text: &str) -> Option<[u8; KEY_LEN]> {
    let text = text.as_bytes();
    if text.len() != 2 * KEY_LEN {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut out = [0u8; KEY_LEN];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A node's public key: what its peers list to recognise it (64 hex digits in text).
///
/// ```
/// use rsm::PublicKey;
///
/// let text = "8f".repeat(32);
/// let key: PublicKey = text.parse()?;
/// assert_eq!(key.to_string(), text);
/// assert!("8f".parse::<PublicKey>().is_err());
/// # Ok::<(), rsm::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// The key from its 32 bytes.
    ///
    /// ```
    /// let key = rsm::PublicKey::from_bytes([1; 32]);
    /// assert_eq!(key.as_bytes(), &[1; 32]);
    /// ```
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        PublicKey(bytes)
    }

    /// The key's 32 bytes.
    ///
    /// ```
    /// assert_eq!(rsm::PublicKey::from_bytes([2; 32]).as_bytes()[0], 2);
    /// ```
    pub const fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl FromStr for PublicKey {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        parse_hex(text.trim()).map(PublicKey).ok_or_else(|| {
            bad_conf(format!(
                "invalid public key {:?}: expected 64 hex digits, as `rsm keygen` prints",
                text.chars().take(80).collect::<String>()
            ))
        })
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// A node's key pair: the secret it proves its identity with on every side-channel link, and
/// the public key its peers know it by. `Debug` never shows the secret.
///
/// ```
/// let key = rsm::NodeKey::generate();
/// assert!(!format!("{key:?}").contains(&key.to_text()[..]));
/// assert_ne!(key.public(), rsm::NodeKey::generate().public());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct NodeKey {
    secret: [u8; KEY_LEN],
    public: PublicKey,
}

impl NodeKey {
    /// A new random key pair, from the operating system's random source.
    ///
    /// # Panics
    /// Only if the system has no random source, which a node cannot run without.
    ///
    /// ```
    /// let key = rsm::NodeKey::generate();
    /// assert_eq!(rsm::NodeKey::from_secret(*key.secret_bytes()).public(), key.public());
    /// ```
    pub fn generate() -> Self {
        let mut secret = [0u8; KEY_LEN];
        rand::fill(&mut secret);
        NodeKey::from_secret(secret)
    }

    /// The key pair of a 32-byte X25519 secret.
    ///
    /// ```
    /// let a = rsm::NodeKey::from_secret([7; 32]);
    /// assert_eq!(a.public(), rsm::NodeKey::from_secret([7; 32]).public());
    /// ```
    pub fn from_secret(secret: [u8; KEY_LEN]) -> Self {
        let public = DefaultResolver
            .resolve_dh(&DHChoice::Curve25519)
            .map(|mut dh| {
                dh.set(&secret);
                let mut public = [0u8; KEY_LEN];
                public.copy_from_slice(&dh.pubkey()[..KEY_LEN]);
                public
            })
            .unwrap_or([0; KEY_LEN]);
        NodeKey {
            secret,
            public: PublicKey(public),
        }
    }

    /// The public key peers list for this node.
    ///
    /// ```
    /// let key = rsm::NodeKey::generate();
    /// println!("public key: {}", key.public());
    /// ```
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// The secret's 32 bytes.
    ///
    /// ```
    /// let key = rsm::NodeKey::from_secret([3; 32]);
    /// assert_eq!(key.secret_bytes(), &[3; 32]);
    /// ```
    pub fn secret_bytes(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// The text of a key file: comments (the public key among them), then the secret in hex.
    /// Keep it private: `rsm keygen` writes it with mode 0600.
    ///
    /// ```
    /// let key = rsm::NodeKey::generate();
    /// assert!(key.to_text().contains(&key.public().to_string()));
    /// ```
    pub fn to_text(&self) -> String {
        format!(
            "# rsm node key: the secret below proves this node's identity; keep it private.\n\
             # public key: {}\n{}\n",
            self.public,
            hex(&self.secret)
        )
    }

    /// Parses a key file's text (what [`to_text`](Self::to_text) writes: `#` comments and
    /// blank lines, and one line of 64 hex digits); `source` names the file in errors.
    ///
    /// # Errors
    /// `RSMERR_BAD_CONF` when there is no key line, more than one, or it is not 64 hex digits.
    ///
    /// ```
    /// let err = rsm::NodeKey::parse("# nothing here\n", "node.key").unwrap_err();
    /// assert!(err.to_string().contains("node.key"));
    /// ```
    pub fn parse(text: &str, source: &str) -> Result<Self> {
        let mut lines = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        let (Some(line), None) = (lines.next(), lines.next()) else {
            return Err(bad_conf(format!(
                "{source}: expected exactly one line of 64 hex digits (a key from `rsm keygen`)"
            )));
        };
        parse_hex(line)
            .map(NodeKey::from_secret)
            .ok_or_else(|| bad_conf(format!("{source}: the key is not 64 hex digits")))
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Drop for NodeKey {
    fn drop(&mut self) {
        self.secret.fill(0);
        std::hint::black_box(&self.secret);
    }
}

/// Parses a trust file: one `<node id> <public key>` per line, `#` comments and blank lines
/// allowed; `source` names the file in errors.
///
/// # Errors
/// `RSMERR_BAD_CONF` naming the line: a malformed line, a node listed twice, more than
/// [`MAX_TRUSTED`] entries.
///
/// ```
/// use rsm::test_util::keys::parse_trust;
///
/// let text = format!("# the cluster\n1 {}\n2 {}  # rack 2\n", "aa".repeat(32), "bb".repeat(32));
/// let trust = parse_trust(&text, "cluster.keys")?;
/// assert_eq!(trust.len(), 2);
/// assert!(parse_trust("1 zz", "cluster.keys").is_err());
/// # Ok::<(), rsm::Error>(())
/// ```
pub fn parse_trust(text: &str, source: &str) -> Result<BTreeMap<u32, PublicKey>> {
    let mut trust = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |m: &str| bad_conf(format!("{source}: line {}: {m}", n + 1));
        if trust.len() == MAX_TRUSTED {
            return Err(at(&format!("more than {MAX_TRUSTED} nodes")));
        }
        let mut words = line.split_whitespace();
        let (Some(id), Some(key), None) = (words.next(), words.next(), words.next()) else {
            return Err(at("expected `<node id> <public key>`"));
        };
        let id: u32 = id
            .parse()
            .map_err(|_| at("the node id is not an integer 0-4294967295"))?;
        let key = parse_hex(key)
            .map(PublicKey)
            .ok_or_else(|| at("the public key is not 64 hex digits"))?;
        if trust.insert(id, key).is_some() {
            return Err(at(&format!("node {id} is listed twice")));
        }
    }
    Ok(trust)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_survives_its_text_and_the_public_key_is_x25519() {
        let key = NodeKey::generate();
        let back = NodeKey::parse(&key.to_text(), "k").expect("parses");
        assert_eq!(back, key);
        // RFC 7748 §6.1: Alice's key pair.
        let secret = parse_hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
            .expect("hex");
        assert_eq!(
            NodeKey::from_secret(secret).public().to_string(),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
    }

    #[test]
    fn malformed_text_is_refused_without_panics() {
        for bad in [
            "",
            "#x\n",
            "zz",
            &"a".repeat(63),
            &"a".repeat(65),
            "é".repeat(32).as_str(),
        ] {
            assert!(NodeKey::parse(bad, "k").is_err(), "{bad:?}");
            assert!(bad.parse::<PublicKey>().is_err(), "{bad:?}");
        }
        let two = format!("{}\n{}\n", "a".repeat(64), "b".repeat(64));
        assert!(NodeKey::parse(&two, "k").is_err());
        let dup = format!("1 {}\n1 {}\n", "a".repeat(64), "b".repeat(64));
        assert!(
            parse_trust(&dup, "t")
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        assert!(parse_trust("1", "t").is_err());
        assert!(parse_trust(&format!("x {}", "a".repeat(64)), "t").is_err());
    }
}
