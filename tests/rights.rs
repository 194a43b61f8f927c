//! Attacks with a granted key (DESIGN.md §8, "Grants"; SECURITY.md): a grantee that
//! leaves rsm for raw libfabric gets exactly what its grant allows, for as long as its
//! connection lasts. On tcp0 and sockets0 an exporter node and an importer node of
//! this process connect through rsm; a child process then posts with the importer's key
//! from an endpoint of its own, as a hostile grantee would (a fresh endpoint per attack:
//! tcp ends a connection that made a refused access).

mod common;

use rsm::{Access, ExportFlags, Perm};
use rsm_fabric::endpoint::PostError;
use rsm_fabric::{CompletionQueue, CqReadError, Domain, Endpoint, Fabric, Hints, InfoList, ffi};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: usize = 64 * 1024;
/// The exporter's bytes, which a grantee without read must never see.
const SECRET: u8 = 0xA5;

/// A raw libfabric endpoint on the provider of an rsm controller.
struct Raw {
    _domain: Arc<Domain>,
    ep: Arc<Endpoint>,
    cq: Arc<CompletionQueue>,
    /// Buffers and contexts handed to the provider: kept until the endpoint closes, for a
    /// post that never got an answer.
    kept: Vec<(Box<[u8]>, Box<ffi::fi_context2>)>,
}

/// What became of a raw post.
#[derive(Debug, PartialEq)]
enum Outcome {
    Done,
    Failed(String),
    /// Neither a completion nor an error within the wait (shm drops some refused accesses
    /// without an answer).
    NoAnswer,
}

impl Raw {
    fn open(provider: &str) -> Raw {
        let mut hints = Hints::for_provider(provider).expect("hints");
        if provider.contains("ofi_rxm") {
            hints.atomics();
        }
        let list = InfoList::get(&hints, Some("127.0.0.1")).expect("fi_getinfo");
        let info = Arc::new(
            list.iter()
                .next()
                .expect("provider present")
                .dup()
                .expect("dup"),
        );
        let domain = Domain::open(Fabric::open(info).expect("fabric")).expect("domain");
        let cq = CompletionQueue::open(&domain, 64, true).expect("cq");
        let ep = Endpoint::open_for(&domain, Arc::clone(&cq)).expect("endpoint");
        Raw {
            _domain: domain,
            ep,
            cq,
            kept: Vec::new(),
        }
    }

    /// Reads `len` bytes at `addr` under `key` from `peer`: the outcome and what arrived.
    fn read(
        &mut self,
        peer: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        len: usize,
    ) -> (Outcome, Vec<u8>) {
        let mut buf = vec![0u8; len].into_boxed_slice();
        let mut ctx = Box::new(ffi::fi_context2::default());
        let (ptr, ctx_ptr) = (buf.as_mut_ptr(), &mut *ctx as *mut ffi::fi_context2);
        // SAFETY: the buffer and the context are kept in `self.kept` until the endpoint
        // closes, whatever the provider does with the post.
        let post = || unsafe {
            self.ep
                .read(ptr, len, std::ptr::null_mut(), peer, addr, key, ctx_ptr)
        };
        let outcome = self.post_and_wait(post, ctx_ptr as usize);
        // SAFETY: the post completed or failed (or the provider never answers, and the
        // bytes are only compared); nothing writes them concurrently in this test.
        let got = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
        self.kept.push((buf, ctx));
        (outcome, got)
    }

    /// Adds `n` to the u64 at `addr` under `key` at `peer` (`fi_fetch_atomic`): the outcome
    /// and the previous value.
    fn fetch_add(&mut self, peer: ffi::fi_addr_t, addr: u64, key: u64, n: u64) -> (Outcome, u64) {
        let mut buf = [n.to_ne_bytes(), [0u8; 8]].concat().into_boxed_slice();
        let mut ctx = Box::new(ffi::fi_context2::default());
        let (ptr, ctx_ptr) = (buf.as_mut_ptr(), &mut *ctx as *mut ffi::fi_context2);
        // SAFETY: as in `read`: operand and result (the second word) stay in `self.kept`.
        let post = || unsafe {
            self.ep.fetch_atomic(
                ptr,
                1,
                std::ptr::null_mut(),
                ptr.add(8),
                std::ptr::null_mut(),
                peer,
                addr,
                key,
                ffi::fi_datatype_FI_UINT64,
                ffi::fi_op_FI_SUM,
                ctx_ptr,
            )
        };
        let outcome = self.post_and_wait(post, ctx_ptr as usize);
        // SAFETY: as in `read`.
        let prev = unsafe { std::ptr::read_unaligned(ptr.add(8).cast::<u64>()) };
        self.kept.push((buf, ctx));
        (outcome, prev)
    }

    /// Writes `bytes` at `addr` under `key` at `peer`.
    fn write(&mut self, peer: ffi::fi_addr_t, addr: u64, key: u64, bytes: &[u8]) -> Outcome {
        self.write_with(peer, addr, key, bytes, ffi::FI_DELIVERY_COMPLETE as u64)
    }

    /// Writes with `flags` (0: the completion says only that the bytes left).
    fn write_with(
        &mut self,
        peer: ffi::fi_addr_t,
        addr: u64,
        key: u64,
        bytes: &[u8],
        flags: u64,
    ) -> Outcome {
        let buf: Box<[u8]> = bytes.into();
        let mut ctx = Box::new(ffi::fi_context2::default());
        let (ptr, ctx_ptr) = (buf.as_ptr(), &mut *ctx as *mut ffi::fi_context2);
        // SAFETY: as in `read`.
        let post = || unsafe {
            self.ep.write(
                ptr,
                bytes.len(),
                std::ptr::null_mut(),
                peer,
                addr,
                key,
                ctx_ptr,
                flags,
                0,
            )
        };
        let outcome = self.post_and_wait(post, ctx_ptr as usize);
        self.kept.push((buf, ctx));
        outcome
    }

    fn post_and_wait(&self, post: impl Fn() -> Result<(), PostError>, ctx: usize) -> Outcome {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match post() {
                Ok(()) => break,
                Err(PostError::Again | PostError::Connecting { .. })
                    if Instant::now() < deadline =>
                {
                    let _ = self.cq.read(&mut Vec::new());
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Outcome::Failed(format!("post: {e:?}")),
            }
        }
        let mut got = Vec::new();
        while Instant::now() < deadline {
            match self.cq.read(&mut got) {
                Ok(_) => {}
                Err(CqReadError::Entry(e)) => return Outcome::Failed(e.failure.to_string()),
                Err(CqReadError::Failed(f)) => return Outcome::Failed(f.to_string()),
            }
            if got.iter().any(|e| e.context == ctx) {
                return Outcome::Done;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Outcome::NoAnswer
    }
}

/// The provider behind an rsm controller name.
fn provider(ctrl: &str) -> &'static str {
    match ctrl {
        "tcp0" => "tcp",
        "sockets0" => "sockets",
        other => panic!("no provider for {other}"),
    }
}

/// The exporter's view of the first bytes of its segment.
fn first_bytes(seg: &rsm::ExportSegment) -> [u8; 16] {
    let mut b = [0u8; 16];
    seg.read_at(0, &mut b).expect("read_at");
    b
}

#[test]
fn role_entry() {
    match common::role().as_deref() {
        None => {}
        Some("raw") => raw_role(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// A hostile grantee on `PROVIDER`: for each command `read ADDR TICKET BASE KEY` or
/// `write ADDR TICKET BASE KEY BYTE` (the exporter's fabric address and the ticket its
/// connection carries in hex, `-` for none), a fresh endpoint posts 16 bytes and says
/// `done HEX` (what a read got), `failed WHY` or `no answer`.
fn raw_role() {
    let provider = common::arg("PROVIDER");
    while let Some(cmd) = common::next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        if !matches!(
            words.first(),
            Some(&"read" | &"write" | &"fastwrite" | &"fetchadd")
        ) {
            break;
        }
        let num = |i: usize| u64::from_str_radix(words[i], 16).expect("hex");
        let mut raw = Raw::open(&provider);
        let peer = raw
            .ep
            .add_peer(&unhex(words[1]), &unhex(words[2]))
            .expect("the exporter's address");
        let (outcome, got) = match words[0] {
            "read" => raw.read(peer, num(3), num(4), 16),
            "write" => (
                raw.write(peer, num(3), num(4), &[num(5) as u8; 16]),
                Vec::new(),
            ),
            "fastwrite" => (
                raw.write_with(peer, num(3), num(4), &[num(5) as u8; 16], 0),
                Vec::new(),
            ),
            "fetchadd" => {
                let (outcome, prev) = raw.fetch_add(peer, num(3), num(4), num(5));
                (outcome, prev.to_be_bytes().to_vec())
            }
            _ => break,
        };
        common::say(match outcome {
            Outcome::Done => format!("done {}", hex(&got).trim_start_matches('-')),
            Outcome::Failed(why) => format!("failed {why}"),
            Outcome::NoAnswer => "no answer".to_string(),
        });
        drop(raw);
    }
}

/// Asks the exporting node's engines of `ctrl` to read their queues every 2 ms, from `node`.
fn keep_awake(node: rsm::Node, exporter: u32, ctrl: &str) -> tokio::task::JoinHandle<()> {
    // A tcp controller's endpoint for atomics has an engine, and a `Wake`, of its own.
    let wakes = [ctrl.to_string(), format!("{ctrl}+atomics")]
        .map(|controller| rsm::test_util::wire::Message::Wake { controller });
    tokio::spawn(async move {
        loop {
            for wake in &wakes {
                let _ =
                    rsm::test_util::send_message(&node, rsm::NodeId(exporter), wake.clone()).await;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// Bytes in hex, `-` for none (a command's word).
fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A write-only grantee reads nothing with its key, writes with it while connected, and
/// nothing once disconnected; a grantee of nothing holds no key.
fn grants_hold(ctrl: &'static str) {
    common::logs();
    let rt = common::runtime();
    let mut attacker = common::Peer::start(
        "role_entry",
        "raw",
        &[("PROVIDER", provider(ctrl).to_string())],
    );
    rt.block_on(async {
        let (exporter, importer, exporter_id) = common::two_nodes().await;
        let ce = exporter
            .controller(ctrl)
            .await
            .expect("exporter's controller");
        let seg = ce.export(SIZE, ExportFlags::empty()).expect("export");
        seg.write_at(0, &[SECRET; 16]).expect("write_at");
        let id = seg
            .publish(None, &[Access::new(importer.id(), 0o200)])
            .await
            .expect("publish");
        let ci = importer
            .controller(ctrl)
            .await
            .expect("importer's controller");
        let imp = ci
            .import(rsm::NodeId(exporter_id), id, Perm::WRITE)
            .await
            .expect("import");
        let (key, base, addr) = rsm::test_util::grant_of(&imp);
        assert_ne!(key, 0, "{ctrl}: a write grant holds a key");
        let ticket = rsm::test_util::ticket_of(&imp);
        assert_eq!(
            ticket.is_empty(),
            ctrl != "tcp0",
            "{ctrl}: a ticket where peers connect (tcp), none where they do not"
        );
        let (addr, base_key) = (
            format!("{} {}", hex(&addr), hex(&ticket)),
            format!("{base:x} {key:x}"),
        );
        // Another connection of the grantee, alive throughout: its ticket stays admitted.
        let keeper = ci
            .import(rsm::NodeId(exporter_id), id, Perm::WRITE)
            .await
            .expect("a second import");
        let kept = hex(&rsm::test_util::ticket_of(&keeper));
        // The exporter's engine reads its queue, which places remote accesses on tcp and
        // shm, while a peer asks it to (`Wake`); the attacker never would.
        let awake = keep_awake(importer.clone(), exporter_id, ctrl);

        // It writes, as granted.
        let said = attacker.ask(&format!("write {addr} {base_key} 1"));
        assert_eq!(said, "done ", "{ctrl}: the granted write");
        assert_eq!(
            first_bytes(&seg),
            [1u8; 16],
            "{ctrl}: the granted write landed"
        );
        // Write-only: the key reads nothing.
        let said = attacker.ask(&format!("read {addr} {base_key}"));
        assert!(
            !said.starts_with("done"),
            "{ctrl}: a write-only key read: {said}"
        );

        if ctrl == "tcp0" {
            // Without a ticket the exporter's endpoint refuses the connection.
            let bare = format!("{} -", hex(&rsm::test_util::grant_of(&imp).2));
            let said = attacker.ask(&format!("write {bare} {base_key} 4"));
            assert!(said.starts_with("failed"), "{ctrl}: no ticket: {said}");
            assert_eq!(
                first_bytes(&seg),
                [1u8; 16],
                "{ctrl}: a write without a ticket"
            );
        }

        // Disconnected: the key writes no more, whether the write waits for delivery or
        // only for its transmission (whose completion says nothing of the target), and
        // whether the connection carries its own ticket (withdrawn) or a live one.
        imp.disconnect().await.expect("disconnect");
        // The grant lasts until the exporter hears the disconnect (a notice, not a request).
        common::eventually("the exporter forgets the connection", || {
            seg.importers().len() == 1
        })
        .await;
        let raw_addr = hex(&rsm::test_util::grant_of(&keeper).2);
        for via in [addr.clone(), format!("{raw_addr} {kept}")] {
            for (how, byte) in [("write", 2), ("fastwrite", 3)] {
                attacker.ask(&format!("{how} {via} {base_key} {byte}"));
                assert_eq!(
                    first_bytes(&seg),
                    [1u8; 16],
                    "{ctrl}: a disconnected key wrote ({how} via {via})"
                );
            }
        }
        keeper.disconnect().await.expect("disconnect");

        // A grant of nothing holds no key.
        let none = ci
            .import(rsm::NodeId(exporter_id), id, Perm::NONE)
            .await
            .expect("import of nothing");
        let (key, _, _) = rsm::test_util::grant_of(&none);
        assert_eq!(key, 0, "{ctrl}: a grant of nothing holds a key");
        none.disconnect().await.expect("disconnect");

        awake.abort();
        seg.destroy().await.expect("destroy");
        importer.shutdown().await;
        exporter.shutdown().await;
    });
    attacker.quit();
}
/// Two nodes, a segment exported on `ctrl` with a read-write grant to the importer, and
/// the importer's read-write import of it.
struct ReadWrite {
    exporter: rsm::Node,
    importer: rsm::Node,
    exporter_id: u32,
    ce: rsm::Controller,
    ci: rsm::Controller,
    seg: rsm::ExportSegment,
    id: rsm::SegmentId,
    imp: rsm::ImportSegment,
}

async fn read_write_grant(ctrl: &str) -> ReadWrite {
    let (exporter, importer, exporter_id) = common::two_nodes().await;
    let ce = exporter.controller(ctrl).await.expect("controller");
    let seg = ce.export(SIZE, ExportFlags::empty()).expect("export");
    let id = seg
        .publish(None, &[Access::new(importer.id(), 0o600)])
        .await
        .expect("publish");
    let ci = importer.controller(ctrl).await.expect("controller");
    let imp = ci
        .import(rsm::NodeId(exporter_id), id, Perm::RDWR)
        .await
        .expect("import");
    ReadWrite {
        exporter,
        importer,
        exporter_id,
        ce,
        ci,
        seg,
        id,
        imp,
    }
}

/// On tcp0 the provider performs a read-write grant's atomics on the exporter's endpoint
/// for them (`tcp;ofi_rxm`), under the grant's key, once an atomic's answer named the
/// endpoint (the first starts its opening): a hostile grantee's raw fetch-add there
/// lands while connected and never once disconnected; a read-only or write-only grant
/// names no such endpoint, and its atomics are refused before anything is posted.
#[test]
fn tcp0_atomics_key_holds() {
    let ctrl = "tcp0";
    common::logs();
    let rt = common::runtime();
    let mut attacker = common::Peer::start(
        "role_entry",
        "raw",
        &[("PROVIDER", "tcp;ofi_rxm".to_string())],
    );
    rt.block_on(async {
        let ReadWrite {
            exporter,
            importer,
            exporter_id,
            ci,
            seg,
            id,
            imp,
            ..
        } = read_write_grant(ctrl).await;
        assert_eq!(ci.info().atomics.path, "provider", "{ctrl}: rxm's atomics");
        assert!(rsm::test_util::atomics_addr_of(&imp).is_empty());
        // The first atomic starts the opening of the endpoints for atomics; an answer once
        // the exporter's is open names it, and the next ones go there and count.
        assert_eq!(imp.fetch_add(0, 2u64).await.expect("fetch_add"), 0);
        let rxm = common::atomics_adopted(&imp, 0).await;
        assert_eq!(rsm::test_util::atomics_endpoint(&ci), "open", "{ctrl}");
        assert_eq!(imp.fetch_add(0, 3u64).await.expect("fetch_add"), 2);
        assert_eq!(seg.atomic_load::<u64>(0).expect("load"), 5);
        let (key, base, _) = rsm::test_util::grant_of(&imp);
        let target = format!("{} - {base:x} {key:x}", hex(&rxm));
        let awake = keep_awake(importer.clone(), exporter_id, ctrl);
        let said = attacker.ask(&format!("fetchadd {target} 1"));
        assert_eq!(said, format!("done {}", hex(&5u64.to_be_bytes())), "{ctrl}");
        assert_eq!(seg.atomic_load::<u64>(0).expect("load"), 6);

        // A later read-write grant names it at once.
        let second = ci
            .import(rsm::NodeId(exporter_id), id, Perm::RDWR)
            .await
            .expect("import");
        assert_eq!(second.fetch_add(8, 1u64).await.expect("fetch_add"), 0);
        assert_eq!(rsm::test_util::atomics_addr_of(&second), rxm, "{ctrl}");
        second.disconnect().await.expect("disconnect");
        for perm in [Perm::READ, Perm::WRITE] {
            let other = ci
                .import(rsm::NodeId(exporter_id), id, perm)
                .await
                .expect("import");
            assert!(
                rsm::test_util::atomics_addr_of(&other).is_empty(),
                "{ctrl}: a {perm:?} grant names an endpoint for atomics"
            );
            let e = other.fetch_add(0, 1u64).await.expect_err("refused");
            assert_eq!(e.name(), "RSMERR_PERM_DENIED", "{ctrl}: {e}");
            other.disconnect().await.expect("disconnect");
        }

        // Disconnected: the key adds nothing more.
        imp.disconnect().await.expect("disconnect");
        let said = attacker.ask(&format!("fetchadd {target} 100"));
        assert!(
            !said.starts_with("done"),
            "{ctrl}: a disconnected key: {said}"
        );
        assert_eq!(seg.atomic_load::<u64>(0).expect("load"), 6, "{ctrl}");

        awake.abort();
        seg.destroy().await.expect("destroy");
        importer.shutdown().await;
        exporter.shutdown().await;
    });
    attacker.quit();
}

/// On tcp0 the endpoints for atomics open on blocking threads from a node's first atomic:
/// neither is open before; the first atomics, many at once, are the exporter's and all
/// complete while they open; once the exporter's is named the later ones, many at once
/// again, go there, and every one counts once.
#[test]
fn tcp0_first_atomics_while_the_endpoints_open() {
    let ctrl = "tcp0";
    const N: u64 = 16;
    common::logs();
    common::runtime().block_on(async {
        let ReadWrite {
            exporter,
            importer,
            ce,
            ci,
            seg,
            imp,
            ..
        } = read_write_grant(ctrl).await;
        for c in [&ce, &ci] {
            assert_eq!(rsm::test_util::atomics_endpoint(c), "closed", "{ctrl}");
        }
        let firsts = (0..N).map(|_| imp.fetch_add(0, 1u64));
        let mut got = futures::future::try_join_all(firsts)
            .await
            .expect("first atomics");
        got.sort_unstable();
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "{ctrl}: each counted once");
        for c in [&ce, &ci] {
            assert_ne!(
                rsm::test_util::atomics_endpoint(c),
                "closed",
                "{ctrl}: the first atomics started the opening"
            );
        }
        common::atomics_adopted(&imp, 0).await;
        for c in [&ce, &ci] {
            assert_eq!(rsm::test_util::atomics_endpoint(c), "open", "{ctrl}");
        }
        let later = (0..N).map(|_| imp.fetch_add(0, 1u64));
        let mut got = futures::future::try_join_all(later)
            .await
            .expect("later atomics");
        got.sort_unstable();
        assert_eq!(
            got,
            (N..2 * N).collect::<Vec<_>>(),
            "{ctrl}: by the provider"
        );
        assert_eq!(seg.atomic_load::<u64>(0).expect("load"), 2 * N);
        imp.disconnect().await.expect("disconnect");
        seg.destroy().await.expect("destroy");
        importer.shutdown().await;
        exporter.shutdown().await;
    });
}

#[test]
fn tcp0_grants_hold() {
    grants_hold("tcp0");
}

#[test]
fn sockets0_grants_hold() {
    grants_hold("sockets0");
}

/// On loopback a grantee holds the segment's memfd itself, opened with its grant's access:
/// a write-only grantee's descriptor reads nothing (`pread` fails, it cannot be mapped)
/// and writes; a read-only one's cannot write; a grant of nothing holds no descriptor.
#[test]
fn loopback_descriptors_hold_exactly_the_grant() {
    common::logs();
    let rt = common::runtime();
    rt.block_on(async {
        let (exporter, importer, exporter_id) = common::two_nodes().await;
        let ce = exporter.controller("loopback").await.expect("controller");
        let seg = ce.export(SIZE, ExportFlags::empty()).expect("export");
        seg.write_at(0, &[SECRET; 16]).expect("write_at");
        let id = seg
            .publish(None, &[Access::new(importer.id(), 0o600)])
            .await
            .expect("publish");
        let ci = importer.controller("loopback").await.expect("controller");
        let import = |perm| ci.import(rsm::NodeId(exporter_id), id, perm);

        let wo = import(Perm::WRITE).await.expect("write-only import");
        let fd = rsm::test_util::descriptor_of(&wo).expect("a descriptor");
        let mut b = [0u8; 16];
        let read = rustix::io::pread(&fd, &mut b, 0);
        assert!(
            read.is_err(),
            "a write-only descriptor read {read:?}: {b:?}"
        );
        assert!(!b.contains(&SECRET));
        assert_eq!(rustix::io::pwrite(&fd, &[5u8; 16], 0).ok(), Some(16));
        assert_eq!(first_bytes(&seg), [5u8; 16], "its grant's write");
        // Through rsm: it writes, and gets nothing.
        let (r, _) = common::split(wo.put(16, vec![6u8; 16]).await);
        r.expect("put");
        let (r, _) = common::split(wo.get(0, vec![0u8; 16]).await);
        assert!(r.is_err(), "a write-only import read");
        wo.disconnect().await.expect("disconnect");

        let ro = import(Perm::READ).await.expect("read-only import");
        let fd = rsm::test_util::descriptor_of(&ro).expect("a descriptor");
        assert!(
            rustix::io::pwrite(&fd, &[7u8; 16], 0).is_err(),
            "a read-only descriptor wrote"
        );
        assert_eq!(first_bytes(&seg), [5u8; 16]);
        ro.disconnect().await.expect("disconnect");

        let none = import(Perm::NONE).await.expect("import of nothing");
        assert!(
            rsm::test_util::descriptor_of(&none).is_none(),
            "a grant of nothing holds a descriptor"
        );
        none.disconnect().await.expect("disconnect");

        seg.destroy().await.expect("destroy");
        importer.shutdown().await;
        exporter.shutdown().await;
    });
}

// Not shm0: libfabric 1.17's shm checks no key on its fast path (one range, no delivery
// completion, cross-memory attach), so a process of the exporter's user reads and writes
// its registered memory whatever it holds; rsm connects no other user (SECURITY.md).
