//! The line protocol between `rsm bench` and its `rsm bench-peer`: one JSON hello line from
//! the peer, then one command line from the initiator and one reply line from the peer.
//!
//! | command | reply |
//! |---|---|
//! | `addr <hex>` | `ok` once the initiator's fabric address is in the peer's address vector |
//! | `progress` | `ok`, then the peer busy-polls its completion queue until the next command |
//! | `fill <seed> <len> [raw\|rsm]` | `ok` once the first `len` bytes hold the pattern of `seed` |
//! | `sum <len> [raw\|rsm]` | the FNV-1a checksum of the first `len` bytes, 16 hex digits |
//! | `corrupt <offset> [raw\|rsm]` | `ok` once that byte is flipped (test hook) |
//! | `bell <name>` | `ok` once the peer fetched the bell page from the abstract Unix socket `name` (loopback signal baseline) |
//! | `rings` | how many rings of the bell page the peer answered so far, in decimal |
//! | `trust <node> <key>` | `ok` once the peer's rsm node trusts that public key for that node (runs across hosts, where the peer's node has a key) |
//! | `check <next>` | `ok` once the peer's signal answerer checks the record each signal brings (`--op round`), the first due to hold `next` |
//! | `checked` | `<seen> <wrong>`: how many signals brought a record since `check`, and how many held another value than due; ends the checking |
//! | `quit` | `bye`, then the peer closes everything and exits |
//!
//! A command that fails is answered `err <text>`. The target defaults to `raw` (the buffer
//! registered for the baseline); `rsm` is the peer's exported segment.

use super::cli::BaselineWait;
use super::rsm_side::RsmPeerInfo;
use serde::{Deserialize, Serialize};

/// The peer's first line on its standard output.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PeerHello {
    /// The libfabric provider of the controller (`tcp;ofi_rxm`), `None` for loopback.
    pub(crate) provider: Option<String>,
    /// The peer endpoint's raw fabric address (`fi_getname`), hex; `None` for loopback.
    pub(crate) addr: Option<String>,
    /// The key of the peer's registered buffer.
    pub(crate) key: u64,
    /// The address to add offsets to: the buffer's virtual address where the provider uses
    /// `FI_MR_VIRT_ADDR`, else 0.
    pub(crate) base: u64,
    /// The registered (and exported) length in bytes.
    pub(crate) len: u64,
    /// The peer's rsm node and segment, `None` when it runs without rsm.
    pub(crate) rsm: Option<RsmPeerInfo>,
    /// Why the peer has no rsm side, when it was asked for one.
    pub(crate) rsm_error: Option<String>,
    /// The wait object of its baseline queue (`rsm bench --baseline-wait`); a peer that
    /// does not say has none.
    #[serde(default)]
    pub(crate) baseline_wait: BaselineWait,
}

/// Which of the peer's buffers a command touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The buffer registered with plain libfabric for the baseline.
    Raw,
    /// The segment the peer exported through rsm.
    Rsm,
}

impl Target {
    fn as_str(self) -> &'static str {
        match self {
            Target::Raw => "raw",
            Target::Rsm => "rsm",
        }
    }
}

/// A command line from the initiator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// Insert the initiator's fabric address.
    Addr(Vec<u8>),
    /// Busy-poll the completion queue until the next command.
    Progress,
    /// Fill the first `len` bytes with the pattern of `seed`.
    Fill {
        /// The pattern's seed.
        seed: u64,
        /// How many bytes.
        len: usize,
        /// Which buffer.
        target: Target,
    },
    /// Checksum the first `len` bytes.
    Sum {
        /// How many bytes.
        len: usize,
        /// Which buffer.
        target: Target,
    },
    /// Flip one byte (test hook).
    Corrupt {
        /// Which byte.
        offset: usize,
        /// Which buffer.
        target: Target,
    },
    /// Answer every doorbell write (remote completion data) with one to the initiator's
    /// doorbell at `base`/`key`, while progressing (the signal baseline).
    Echo {
        /// The initiator's doorbell key.
        key: u64,
        /// Its address.
        base: u64,
    },
    /// Connect to the initiator's abstract Unix socket `name`, take the memfd it sends
    /// (`SCM_RIGHTS`) and answer its rings while progressing (the loopback signal baseline,
    /// `shm_bell.rs`).
    Bell(String),
    /// How many bell rings the peer answered.
    Rings,
    /// Trust the initiator's node key: its node id and public key (64 hex digits). The two
    /// processes exchange keys over this unauthenticated line, which is good enough for a
    /// measurement and nothing else.
    Trust {
        /// The initiator's node id.
        node: u32,
        /// Its public key.
        key: rsm::PublicKey,
    },
    /// Check the record of each signal from now on, the first due to hold `next`
    /// (`--op round`).
    Check {
        /// The value the first record must hold.
        next: u64,
    },
    /// Stop checking records; answered with the records seen and how many were wrong.
    Checked,
    /// Close everything and exit.
    Quit,
}

/// The longest abstract socket name `bell` accepts.
const MAX_BELL_NAME: usize = 100;

fn bell_name(s: Option<&str>) -> Result<String, String> {
    let name = s.ok_or("bell: missing socket name")?;
    if name.is_empty()
        || name.len() > MAX_BELL_NAME
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!("bell: bad socket name {name:?}"));
    }
    Ok(name.to_string())
}

impl Command {
    /// Parses one line (without its newline).
    pub(crate) fn parse(line: &str) -> Result<Command, String> {
        let mut w = line.split_whitespace();
        let verb = w.next().ok_or("empty command")?;
        let num = |s: Option<&str>, what: &str| -> Result<u64, String> {
            s.ok_or(format!("{verb}: missing {what}"))?
                .parse::<u64>()
                .map_err(|_| format!("{verb}: bad {what}"))
        };
        let size = |v: u64| usize::try_from(v).map_err(|_| format!("{verb}: too large"));
        let target = |s: Option<&str>| match s {
            None | Some("raw") => Ok(Target::Raw),
            Some("rsm") => Ok(Target::Rsm),
            Some(t) => Err(format!("{verb}: unknown target {t:?}")),
        };
        let cmd = match verb {
            "addr" => Command::Addr(hex_decode(w.next().ok_or("addr: missing address")?)?),
            "progress" => Command::Progress,
            "fill" => Command::Fill {
                seed: num(w.next(), "seed")?,
                len: size(num(w.next(), "length")?)?,
                target: target(w.next())?,
            },
            "sum" => Command::Sum {
                len: size(num(w.next(), "length")?)?,
                target: target(w.next())?,
            },
            "corrupt" => Command::Corrupt {
                offset: size(num(w.next(), "offset")?)?,
                target: target(w.next())?,
            },
            "echo" => Command::Echo {
                key: num(w.next(), "key")?,
                base: num(w.next(), "base")?,
            },
            "bell" => Command::Bell(bell_name(w.next())?),
            "rings" => Command::Rings,
            "trust" => Command::Trust {
                node: u32::try_from(num(w.next(), "node")?)
                    .map_err(|_| "trust: bad node".to_string())?,
                key: w
                    .next()
                    .ok_or("trust: missing key")?
                    .parse()
                    .map_err(|_| "trust: bad key".to_string())?,
            },
            "check" => Command::Check {
                next: num(w.next(), "value")?,
            },
            "checked" => Command::Checked,
            "quit" => Command::Quit,
            other => return Err(format!("unknown command {other:?}")),
        };
        if let Some(extra) = w.next() {
            return Err(format!("{verb}: unexpected {extra:?}"));
        }
        Ok(cmd)
    }

    /// The line to send (without its newline).
    pub(crate) fn to_line(&self) -> String {
        match self {
            Command::Addr(a) => format!("addr {}", hex_encode(a)),
            Command::Progress => "progress".into(),
            Command::Fill { seed, len, target } => {
                format!("fill {seed} {len} {}", target.as_str())
            }
            Command::Sum { len, target } => format!("sum {len} {}", target.as_str()),
            Command::Corrupt { offset, target } => {
                format!("corrupt {offset} {}", target.as_str())
            }
            Command::Echo { key, base } => format!("echo {key} {base}"),
            Command::Bell(name) => format!("bell {name}"),
            Command::Rings => "rings".into(),
            Command::Trust { node, key } => format!("trust {node} {key}"),
            Command::Check { next } => format!("check {next}"),
            Command::Checked => "checked".into(),
            Command::Quit => "quit".into(),
        }
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string (bounded: fabric addresses are at most 512 bytes).
pub(crate) fn hex_decode(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 || s.len() > 2 * 512 || s.is_empty() {
        return Err(format!("bad hex address of {} digits", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| "bad hex digit".to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        let all = [
            Command::Addr(vec![0, 1, 0xfe, 0xff]),
            Command::Progress,
            Command::Fill {
                seed: u64::MAX,
                len: 1 << 20,
                target: Target::Raw,
            },
            Command::Fill {
                seed: 3,
                len: 8,
                target: Target::Rsm,
            },
            Command::Sum {
                len: 65536,
                target: Target::Rsm,
            },
            Command::Corrupt {
                offset: 5,
                target: Target::Raw,
            },
            Command::Bell("rsm-bench-bell-12-00ff".into()),
            Command::Rings,
            Command::Trust {
                node: 7,
                key: rsm::PublicKey::from_bytes([0xab; 32]),
            },
            Command::Check { next: u64::MAX },
            Command::Checked,
            Command::Quit,
        ];
        for c in all {
            assert_eq!(Command::parse(&c.to_line()).unwrap(), c);
        }
        assert_eq!(
            Command::parse("sum 8").unwrap(),
            Command::Sum {
                len: 8,
                target: Target::Raw
            }
        );
        for bad in [
            "",
            "fly",
            "fill 1",
            "fill x 8",
            "sum 8 disk",
            "sum 8 raw extra",
            "addr 0",
            "addr zz",
            "addr",
            "bell",
            "bell a/b",
            "bell x y",
            "rings 3",
            "trust 7",
            "trust x aa",
            "trust 7 abc",
            "check",
            "check -1",
            "checked 3",
        ] {
            assert!(Command::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn hello_is_one_json_line() {
        let h = PeerHello {
            provider: Some("tcp;ofi_rxm".into()),
            addr: Some(hex_encode(&[1, 2, 3])),
            key: 0xB0,
            base: 0x7f00_0000_0000,
            len: 4096,
            rsm: None,
            rsm_error: Some("not built".into()),
            baseline_wait: BaselineWait::Fd,
        };
        let line = serde_json::to_string(&h).unwrap();
        assert!(!line.contains('\n'));
        assert!(line.contains(r#""baseline_wait":"fd""#), "{line}");
        assert_eq!(serde_json::from_str::<PeerHello>(&line).unwrap(), h);
        // A peer that does not say has a queue without a wait object.
        let older = line.replace(r#","baseline_wait":"fd""#, "");
        assert_eq!(
            serde_json::from_str::<PeerHello>(&older)
                .unwrap()
                .baseline_wait,
            BaselineWait::None
        );
        assert_eq!(
            hex_decode(h.addr.as_deref().unwrap()).unwrap(),
            vec![1, 2, 3]
        );
    }
}
