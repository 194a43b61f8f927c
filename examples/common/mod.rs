//! What the service examples share: their command line and how they start their node.
//!
//! The examples (each file's first lines show how to start its processes):
//!
//! - `signal_service.rs`: two microservices, a segment of records, signals answered with
//!   `signal_to` (stand-alone: it does not use this module);
//! - `kv_store.rs`: a key-value table one service exports; clients put through mailboxes the
//!   service serializes, get under per-slot seqlocks, and hear of changes by signals;
//! - `pubsub_ring.rs`: a producer's ring of records; subscribers stream events, one too slow
//!   gets `Lagged` and recovers from the ring's head;
//! - `pollfd_select.rs`: a `PollFd` in `AsyncFd`, beside a timer and a channel in `select!`;
//! - `graceful_shutdown.rs`: ctrl-c or SIGTERM, in-flight work finished, disconnect, destroy,
//!   `Node::shutdown`.
//!
//! Every example takes
//!
//! - `--config FILE`: the node's TOML configuration (otherwise `RSM_CONFIG` or
//!   `/etc/rsm/rsm.toml`, if present), then the variables `RSM_NODE_ID`, `RSM_LISTEN`,
//!   `RSM_PEERS`, `RSM_KEY_FILE` and `RSM_TRUST_FILE` over it: the same node runs on one host
//!   or across hosts without a change to the program;
//! - `--role ROLE`: which side of the example this process plays;
//! - `--controller NAME`: `loopback` (the default: nodes of one host, through shared memory),
//!   `tcp0`, `shm0`, ...;
//! - `--server ID` (the exporting node's id, for the importing roles) and `--segment ID` (the
//!   segment id the service publishes under; each example has a default);
//! - a few `--name value` options of its own.

#![allow(dead_code)] // each example uses part of it

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// An example's error type: anything, with its message.
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The parsed command line.
#[derive(Debug, Default)]
pub struct Args {
    /// `--role`.
    pub role: Option<String>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--controller` (default `loopback`).
    pub controller: String,
    /// Every other `--name value` (or `--name` alone, as `"true"`).
    options: HashMap<String, String>,
}

impl Args {
    /// Parses `std::env::args()` by hand: the examples need no argument-parsing crate.
    pub fn parse(usage: &str) -> Args {
        let mut a = Args {
            controller: "loopback".into(),
            ..Args::default()
        };
        let mut it = std::env::args().skip(1).peekable();
        while let Some(arg) = it.next() {
            let Some(name) = arg.strip_prefix("--") else {
                eprintln!("unexpected argument {arg}\n{usage}");
                std::process::exit(2);
            };
            if name == "help" {
                println!("{usage}");
                std::process::exit(0);
            }
            // A value follows unless the next word is another option (`--slow`).
            let value = match it.peek() {
                Some(v) if !v.starts_with("--") => it.next().unwrap_or_default(),
                _ => "true".to_string(),
            };
            match name {
                "role" => a.role = Some(value),
                "config" => a.config = Some(value.into()),
                "controller" => a.controller = value,
                _ => {
                    a.options.insert(name.to_string(), value);
                }
            }
        }
        a
    }

    /// Option `--name`, parsed, or `default` when absent (a bad value stops the program).
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> T {
        match self.options.get(name) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("bad value for --{name}: {v}");
                std::process::exit(2);
            }),
        }
    }

    /// Option `--name` as a string, if given.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }

    /// Whether the flag `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.options.contains_key(name)
    }

    /// The exporting node (`--server`), which importing roles need.
    pub fn server(&self) -> Result<rsm::NodeId, AnyError> {
        let id: u32 = self.get("server", 0);
        if id == 0 {
            return Err("this role needs --server ID (the exporting node's id)".into());
        }
        Ok(rsm::NodeId(id))
    }

    /// The segment id (`--segment`, decimal or `0x` hex), or the example's default.
    pub fn segment(&self, default: u32) -> rsm::SegmentId {
        let id = match self.get_str("segment") {
            None => default,
            Some(v) => v
                .strip_prefix("0x")
                .map_or_else(|| v.parse().ok(), |h| u32::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| {
                    eprintln!("bad segment id {v}");
                    std::process::exit(2);
                }),
        };
        rsm::SegmentId(id)
    }

    /// The exporting node's segment (`--server`, `--segment` or `default_segment`), imported
    /// with `perm` once it is published (a client may start first; it waits up to 10 s).
    pub async fn import_server(
        &self,
        ctrl: &rsm::Controller,
        default_segment: u32,
        perm: rsm::Perm,
    ) -> Result<rsm::ImportSegment, AnyError> {
        let segment = self.segment(default_segment);
        let limit = Duration::from_secs(10);
        Ok(import_when_published(ctrl, self.server()?, segment, perm, limit).await?)
    }

    /// Starts this process's node from `--config` (or `RSM_CONFIG`) and the `RSM_*`
    /// variables: nothing about the cluster is written in the program.
    pub async fn start_node(&self) -> rsm::Result<rsm::Node> {
        let mut builder = rsm::Node::builder();
        if let Some(file) = &self.config {
            builder = builder.config_file(file);
        }
        builder.start().await
    }
}

/// Waits until `seg` has at least `n` importers, for at most `limit`.
pub async fn wait_for_importers(
    seg: &rsm::ExportSegment,
    n: usize,
    limit: Duration,
) -> Result<(), AnyError> {
    let deadline = Instant::now() + limit;
    while seg.importers().len() < n {
        if Instant::now() >= deadline {
            return Err(format!("only {} of {n} importers came", seg.importers().len()).into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Waits until every importer of `seg` left, for at most `limit`; whether they did.
pub async fn wait_until_alone(seg: &rsm::ExportSegment, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !seg.importers().is_empty() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Imports `segment` of `server`, retrying for up to `limit` while it is not published yet
/// (a client started before its service).
pub async fn import_when_published(
    ctrl: &rsm::Controller,
    server: rsm::NodeId,
    segment: rsm::SegmentId,
    perm: rsm::Perm,
    limit: Duration,
) -> rsm::Result<rsm::ImportSegment> {
    when_published(limit, || ctrl.import(server, segment, perm)).await
}

/// `connect()`, again every 100 ms for up to `limit` while what it imports is not published
/// yet or its node not up.
pub async fn when_published<T, F: Future<Output = rsm::Result<T>>>(
    limit: Duration,
    mut connect: impl FnMut() -> F,
) -> rsm::Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        match connect().await {
            Ok(seg) => return Ok(seg),
            Err(e) if Instant::now() < deadline && is_not_there_yet(&e) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The errors of an import that can succeed later: no such segment yet, or its node not up.
fn is_not_there_yet(e: &rsm::Error) -> bool {
    matches!(e, rsm::Error::SegNotPublished(_)) || e.is_unreachable()
}

/// Little-endian `u64` at `at` in `b`.
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}
