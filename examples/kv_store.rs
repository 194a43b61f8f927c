//! A key-value store in remote shared memory: one service exports a table, clients on other
//! nodes put and get records, and every client is told of changes by signals.
//!
//! ```text
//! RSM_NODE_ID=10 cargo run --example kv_store -- --role server
//! RSM_NODE_ID=11 cargo run --example kv_store -- --role client --server 10 --name a --puts 20
//! RSM_NODE_ID=12 cargo run --example kv_store -- --role client --server 10 --watch a-19
//! ```
//!
//! Across hosts, give each node `--config FILE` (or `RSM_LISTEN`, `RSM_PEERS`, keys) and
//! `--controller tcp0`.
//!
//! # The protocol, and why
//!
//! `rsm` has no remote atomics yet, so a client cannot take a lock in the table or bump a
//! counter there: two clients writing the same slot would interleave. Instead **the service
//! is the table's only writer**, and clients send it their puts:
//!
//! - Each client gets a *mailbox* (a request area only it writes, and a reply area only the
//!   service writes). Its first signal says hello; the service assigns a free mailbox, writes
//!   the client's node id into the directory entry of that mailbox, and answers it alone
//!   (`ExportSegment::signal_to`).
//! - A put: the client writes its request (with a sequence number) into its mailbox, and
//!   signals once the put resolved (its data is then visible to the service, DESIGN.md,
//!   decision 18). The service, which takes the signals one at a time, applies it, writes
//!   the reply with the same sequence number, and signals *every* importer: the table
//!   changed. Writers are serialized by the service's loop; no two writes meet.
//! - A get needs no round trip: clients read the slot straight from the exporter's memory
//!   under a **seqlock**. Each slot begins with a version word that the writer makes odd
//!   before it changes the slot and even again after it; a reader reads the version, the
//!   slot, the version again, and retries unless both versions are equal and even. Three
//!   separate gets keep that order (one get copies its bytes in no promised order).
//! - Changes: the header holds a change counter and the last slot changed; a client's
//!   event stream (`ImportSegment::events`) sees each change signal and reads them.
//!
//! Signals are counted, not typed: a client waiting for its reply may consume a change
//! signal meant for the others' news, so it checks the reply's sequence number and waits
//! again until its own reply is there.

#[path = "common/mod.rs"]
mod common;

use common::{AnyError, Args, u64_at};
use futures::StreamExt;
use rsm::{ExportFlags, ExportSegment, ImportSegment, Importer, Perm, SegmentEvent, SignalFlags};
use std::collections::HashMap;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

const USAGE: &str = "kv_store --role server [--clients N] | --role client --server ID \
                     [--name NAME --puts N] [--watch KEY]  [--controller C] [--config FILE] \
                     [--segment ID]";

/// The segment id the service publishes under unless `--segment` says otherwise.
const DEFAULT_SEGMENT: u32 = 0x4B_5600;

// The segment's layout (little-endian words).
const MAGIC: u64 = 0x6b76_7374_6f72_6531; // "kvstore1"
const CHANGES: u64 = 8; // header: how many puts were applied
const LAST_SLOT: u64 = 16; // header: the slot the last put changed
const DIRECTORY: u64 = 64; // one word per mailbox: its client's node id + 1 (0: free)
const MAX_CLIENTS: usize = 16;
const REQUESTS: u64 = 256; // a 64-byte request per mailbox, written by its client
const REPLIES: u64 = REQUESTS + 64 * MAX_CLIENTS as u64; // 16 bytes per mailbox: seq, status
const TABLE: u64 = 4096;
const SLOTS: u64 = 64;
const SLOT: u64 = 64; // version word, key and value lengths, 24-byte key, 24-byte value
const SIZE: usize = (TABLE + SLOTS * SLOT) as usize;
const MAX_LEN: usize = 24;

/// Reply statuses.
const OK: u64 = 1;
const FULL: u64 = 2;

/// FNV-1a: a hash every node computes alike, on any host and any Rust version.
fn home_slot(key: &[u8]) -> u64 {
    let h = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    h % SLOTS
}

/// A slot's (or a request's) body: lengths, key, value.
fn encode(key: &[u8], value: &[u8]) -> [u8; 56] {
    let mut b = [0u8; 56];
    b[0..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
    b[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    b[8..8 + key.len()].copy_from_slice(key);
    b[32..32 + value.len()].copy_from_slice(value);
    b
}

/// The key and value of a body (`None` for an empty slot or a malformed body).
fn decode(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let k = u32::from_le_bytes(b[0..4].try_into().ok()?) as usize;
    let v = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
    (k > 0 && k <= MAX_LEN && v <= MAX_LEN).then(|| (&b[8..8 + k], &b[32..32 + v]))
}

#[tokio::main]
async fn main() -> Result<(), AnyError> {
    let args = Args::parse(USAGE);
    match args.role.as_deref() {
        Some("server") => server(&args).await,
        Some("client") => client(&args).await,
        _ => Err(format!("--role server or --role client\n{USAGE}").into()),
    }
}

// ---------------------------------------------------------------------------------------
// The service: the table's one writer.

async fn server(a: &Args) -> Result<(), AnyError> {
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let seg = ctrl.export(SIZE, ExportFlags::empty())?;
    seg.write_at(0, &MAGIC.to_le_bytes())?;
    // An empty access list: every node may connect (read-write with the creator's umask).
    let id = seg.publish(a.segment(DEFAULT_SEGMENT), &[]).await?;
    println!(
        "kv server: node {}, segment {id:#x} on {}, {SLOTS} slots",
        node.id().get(),
        ctrl.name()
    );
    println!("kv server: ready");

    // With --clients N the service ends once N clients came and all of them left.
    let expected: usize = a.get("clients", 0);
    let mut mailboxes: HashMap<Importer, usize> = HashMap::new();
    let (mut clients, mut puts) = (0usize, 0u64);
    loop {
        let who = match seg.wait_signal(Some(Duration::from_millis(200))).await {
            Ok(who) => who,
            Err(e) if e.is_timeout() => {
                if expected > 0 && clients >= expected && seg.importers().is_empty() {
                    break;
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // Free the mailboxes of clients that left (their node may come back as another
        // importer).
        let connected = seg.importers();
        mailboxes.retain(|imp, slot| {
            let keep = connected.contains(imp);
            if !keep {
                let _ = seg.write_at(DIRECTORY + 8 * *slot as u64, &0u64.to_le_bytes());
            }
            keep
        });
        match mailboxes.get(&who).copied() {
            Some(mailbox) => {
                let status = apply_put(&seg, mailbox)?;
                if status == OK {
                    puts += 1;
                }
                // The table changed: tell everyone (the requester finds its reply too).
                if let Err(e) = seg.signal(SignalFlags::empty()).await {
                    // A client that died is no reason to stop serving the others.
                    println!("kv server: a change signal failed: {e}");
                }
            }
            // A signal from a client that already left: nothing to answer.
            None if !connected.contains(&who) => {}
            None => {
                let Some(free) = (0..MAX_CLIENTS).find(|m| !mailboxes.values().any(|v| v == m))
                else {
                    println!("kv server: no mailbox left for node {}", who.node().get());
                    continue;
                };
                mailboxes.insert(who, free);
                clients += 1;
                let entry = u64::from(who.node().get()) + 1;
                seg.write_at(DIRECTORY + 8 * free as u64, &entry.to_le_bytes())?;
                println!("kv server: node {} has mailbox {free}", who.node().get());
                match seg.signal_to(who, SignalFlags::empty()).await {
                    Err(e) if !e.is_disconnected() => return Err(e.into()),
                    _ => {}
                }
            }
        }
    }
    let keys = (0..SLOTS)
        .filter(|s| {
            let mut b = [0u8; 56];
            seg.read_at(TABLE + s * SLOT + 8, &mut b).is_ok() && decode(&b).is_some()
        })
        .count();
    println!("kv server: {puts} puts from {clients} clients, {keys} keys in the table");
    seg.destroy().await?;
    node.shutdown().await;
    println!("kv server: ok");
    Ok(())
}

/// Applies the put in `mailbox`'s request area and writes its reply; the reply's status.
fn apply_put(seg: &ExportSegment, mailbox: usize) -> rsm::Result<u64> {
    let mut req = [0u8; 64];
    seg.read_at(REQUESTS + 64 * mailbox as u64, &mut req)?;
    let seq = u64_at(&req, 0);
    let status = match decode(&req[8..]) {
        None => FULL, // malformed: refuse it
        Some((key, value)) => match find_slot(seg, key)? {
            None => FULL,
            Some(slot) => {
                let at = TABLE + slot * SLOT;
                let mut v = [0u8; 8];
                seg.read_at(at, &mut v)?;
                let version = u64::from_le_bytes(v);
                // The seqlock's write side. The fences keep the three copies in this order
                // for readers on other CPUs (write_at is a plain copy into shared memory).
                seg.write_at(at, &(version + 1).to_le_bytes())?; // odd: being written
                fence(Ordering::SeqCst);
                seg.write_at(at + 8, &encode(key, value))?;
                fence(Ordering::SeqCst);
                seg.write_at(at, &(version + 2).to_le_bytes())?; // even: stable again
                let mut header = [0u8; 8];
                seg.read_at(CHANGES, &mut header)?;
                let changes = u64::from_le_bytes(header) + 1;
                seg.write_at(LAST_SLOT, &slot.to_le_bytes())?;
                seg.write_at(CHANGES, &changes.to_le_bytes())?;
                OK
            }
        },
    };
    let mut reply = [0u8; 16];
    reply[..8].copy_from_slice(&seq.to_le_bytes());
    reply[8..].copy_from_slice(&status.to_le_bytes());
    fence(Ordering::SeqCst);
    seg.write_at(REPLIES + 16 * mailbox as u64, &reply)?;
    Ok(status)
}

/// The slot that holds `key`, or the empty one it goes to (linear probing from its home).
fn find_slot(seg: &ExportSegment, key: &[u8]) -> rsm::Result<Option<u64>> {
    let home = home_slot(key);
    for i in 0..SLOTS {
        let slot = (home + i) % SLOTS;
        let mut b = [0u8; 56];
        seg.read_at(TABLE + slot * SLOT + 8, &mut b)?;
        match decode(&b) {
            None => return Ok(Some(slot)),
            Some((k, _)) if k == key => return Ok(Some(slot)),
            Some(_) => {}
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// A client.

/// A connection to the store.
struct Client {
    seg: ImportSegment,
    mailbox: u64,
    seq: u64,
}

impl Client {
    /// Imports the table and asks the service for a mailbox.
    async fn connect(seg: ImportSegment, me: rsm::NodeId) -> Result<Client, AnyError> {
        let magic = seg.get64(0, 1).await?;
        if magic != [MAGIC] {
            return Err("this segment is not a kv_store table".into());
        }
        seg.signal(SignalFlags::empty()).await?; // hello
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            seg.wait_signal(Some(left)).await?;
            let dir = seg.get64(DIRECTORY, MAX_CLIENTS).await?;
            if let Some(m) = dir.iter().position(|e| *e == u64::from(me.get()) + 1) {
                return Ok(Client {
                    seg,
                    mailbox: m as u64,
                    seq: 0,
                });
            }
            // A change signal for the others came first: wait for the answer.
        }
    }

    /// Puts `key = value` through the service; resolves once the table holds it.
    async fn put(&mut self, key: &str, value: &str) -> Result<(), AnyError> {
        if key.is_empty() || key.len() > MAX_LEN || value.len() > MAX_LEN {
            return Err(format!("keys are 1 to {MAX_LEN} bytes, values up to {MAX_LEN}").into());
        }
        self.seq += 1;
        let mut req = self.seq.to_le_bytes().to_vec();
        req.extend_from_slice(&encode(key.as_bytes(), value.as_bytes()));
        // Resolves once the request is visible at the service (implicit barrier mode).
        self.seg.put(REQUESTS + 64 * self.mailbox, req).await?;
        self.seg.signal(SignalFlags::empty()).await?;
        loop {
            self.seg.wait_signal(Some(Duration::from_secs(10))).await?;
            let reply = self.seg.get64(REPLIES + 16 * self.mailbox, 2).await?;
            if reply[0] == self.seq {
                return match reply[1] {
                    OK => Ok(()),
                    _ => Err("the table is full".into()),
                };
            }
        }
    }

    /// Gets `key`'s value straight from the table, without the service.
    async fn get(&self, key: &str) -> Result<Option<String>, AnyError> {
        get(&self.seg, key.as_bytes()).await
    }
}

/// Reads one slot under its seqlock: `Some((key, value))`, or `None` when empty.
async fn read_slot(seg: &ImportSegment, slot: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>, AnyError> {
    let at = TABLE + slot * SLOT;
    for _ in 0..1000 {
        let before = seg.get64(at, 1).await?[0];
        if before % 2 == 1 {
            tokio::task::yield_now().await; // being written
            continue;
        }
        let (_, body) = seg.get(at + 8, vec![0u8; 56]).await?;
        let after = seg.get64(at, 1).await?[0];
        if before == after {
            return Ok(decode(&body).map(|(k, v)| (k.to_vec(), v.to_vec())));
        }
    }
    Err("a slot kept changing under the reader".into())
}

/// Looks `key` up (linear probing, as the service placed it).
async fn get(seg: &ImportSegment, key: &[u8]) -> Result<Option<String>, AnyError> {
    let home = home_slot(key);
    for i in 0..SLOTS {
        match read_slot(seg, (home + i) % SLOTS).await? {
            None => return Ok(None),
            Some((k, v)) if k == key => return Ok(Some(String::from_utf8_lossy(&v).into())),
            Some(_) => {}
        }
    }
    Ok(None)
}

async fn client(a: &Args) -> Result<(), AnyError> {
    let name = a.get_str("name").unwrap_or("client").to_string();
    let node = a.start_node().await?;
    let ctrl = node.controller(&a.controller).await?;
    let server = a.server()?;
    let seg = common::import_when_published(
        &ctrl,
        server,
        a.segment(DEFAULT_SEGMENT),
        Perm::RDWR,
        Duration::from_secs(10),
    )
    .await?;

    // Change notifications: a stream that observes every signal the service sends (it
    // consumes none, so the put path's waits are not disturbed).
    let watch = a.get_str("watch").map(str::to_string);
    let mut events = seg.events();
    let watcher = {
        let seg = seg.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let mut seen = 0u64;
            // The key may be there already.
            if let Some(key) = &watch {
                if let Some(value) = get(&seg, key.as_bytes()).await? {
                    println!("kv {name}: watched key {key} = {value} (already there)");
                    return Ok::<u64, AnyError>(0);
                }
            }
            while let Some(event) = events.next().await {
                match event {
                    Ok(SegmentEvent::Signal { .. }) => {}
                    Ok(SegmentEvent::Revoked) => return Err("the table went away".into()),
                    Ok(_) => continue,
                    // Missed signals cost nothing here: the header says what changed last.
                    Err(lagged) => println!("kv {name}: {lagged}"),
                }
                let header = seg.get64(CHANGES, 2).await?;
                if header[0] == seen {
                    continue; // a mailbox answer, or a change already reported
                }
                seen = header[0];
                if let Some(key) = &watch {
                    if let Some(value) = get(&seg, key.as_bytes()).await? {
                        println!("kv {name}: watched key {key} = {value} (after {seen} changes)");
                        return Ok::<u64, AnyError>(seen);
                    }
                }
            }
            Ok(seen)
        })
    };

    let mut store = Client::connect(seg.clone(), node.id()).await?;
    println!(
        "kv {name}: node {} connected to node {} with mailbox {}",
        node.id().get(),
        server.get(),
        store.mailbox
    );
    let puts: u64 = a.get("puts", 0);
    for i in 0..puts {
        let (key, value) = (format!("{name}-{i}"), format!("value {i} of {name}"));
        store.put(&key, &value).await?;
        // Read it back from the table itself: the service has applied it.
        let got = store.get(&key).await?;
        assert_eq!(got.as_deref(), Some(value.as_str()), "read back {key}");
        // And one key every writer puts: the last write wins, readers never see it torn.
        store.put("shared", &format!("from {name} {i}")).await?;
    }
    if puts > 0 {
        let shared = store.get("shared").await?.unwrap_or_default();
        println!("kv {name}: {puts} puts read back; shared = {shared}");
    }
    if a.get_str("watch").is_some() {
        let seen = tokio::time::timeout(Duration::from_secs(30), watcher).await???;
        println!("kv {name}: watch done after {seen} changes");
    } else {
        watcher.abort();
    }
    seg.disconnect().await?;
    node.shutdown().await;
    println!("kv {name}: ok");
    Ok(())
}
