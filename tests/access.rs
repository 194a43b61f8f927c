//! Access control across real processes (docs/rsmapi.md §6, DESIGN.md, decisions 10, 12, 14, 15): the error codes
//! of publish, republish and connect, and the owner/group/other classes, on `tcp0`, `shm0` and
//! `sockets0`; mode 0000 on `loopback` and `tcp0`; and that a read-only `loopback` grant held
//! by another uid cannot be made writable.
//!
//! The permission cases run importers in children that drop to unprivileged ids before their
//! node starts (CI runs as root, and the check has no root bypass); the exporter runs as an
//! unprivileged user of its own, so that every class can be reached without root.

mod common;

use common::*;
use futures::FutureExt;
use rsm::{Access, ExportFlags, Perm};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The size of every test segment.
const SIZE: usize = 2 * 4096;
/// The bytes a reader checks: the exporter fills them with `pattern(SEED, PROBE)` at publish.
const SEED: u64 = 77;
const PROBE: usize = 64;

/// The unprivileged exporter, and the ids of the importers that land in each class.
const EXPORTER_UID: u32 = 65533;
const EXPORTER_AS: &str = "65533:65533:";
const OWNER_AS: &str = "65533:65532:";
const GROUP_AS: &str = "65534:65533:";
const SUPPLEMENTARY_AS: &str = "65534:65534:65533";
const OTHER_AS: &str = "65534:65534:";

/// The entry every child role runs through; a no-op in the parent's own test run.
#[test]
fn role_entry() {
    match role().as_deref() {
        None => {}
        Some("exporter") => exporter(),
        Some("importer") => importer(),
        Some(other) => panic!("unknown role {other}"),
    }
}

/// Switches this process to `uid:gid:groups` (groups comma-separated, maybe none), as the
/// first thing a role does; an empty spec keeps the ids.
fn run_as(spec: &str) {
    if spec.is_empty() {
        return;
    }
    let mut parts = spec.split(':');
    let uid: libc::uid_t = parts.next().unwrap().parse().unwrap();
    let gid: libc::gid_t = parts.next().unwrap().parse().unwrap();
    let groups: Vec<libc::gid_t> = parts
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|g| !g.is_empty())
        .map(|g| g.parse().unwrap())
        .collect();
    // SAFETY: plain system calls on valid arguments (`groups` outlives the call); glibc applies
    // them to every thread of the process. The order matters: groups and gid while still root.
    unsafe {
        assert_eq!(
            libc::setgroups(groups.len(), groups.as_ptr()),
            0,
            "setgroups"
        );
        assert_eq!(libc::setgid(gid), 0, "setgid");
        assert_eq!(libc::setuid(uid), 0, "setuid");
    }
    assert_eq!(rustix::process::geteuid().as_raw(), uid);
}

/// `-` for an empty list, else `node:octal,node:octal`.
fn parse_acl(s: &str) -> Vec<Access> {
    if s == "-" {
        return Vec::new();
    }
    s.split(',')
        .map(|e| {
            let (n, p) = e.split_once(':').expect("node:perm");
            Access::new(n.parse().unwrap(), u32::from_str_radix(p, 8).unwrap())
        })
        .collect()
}

fn acl_arg(acl: &[(u32, u32)]) -> String {
    if acl.is_empty() {
        return "-".into();
    }
    acl.iter()
        .map(|(n, p)| format!("{n}:{p:o}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn answer<T>(r: rsm::Result<T>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(e) => {
            eprintln!("  (child {}: {e})", std::process::id());
            format!("err {}", e.code())
        }
    }
}

/// The exporter: publishes named segments and answers commands about them.
fn exporter() {
    run_as(&arg("RUN_AS"));
    let rt = runtime();
    let node_id: u32 = arg("NODE_ID").parse().unwrap();
    let (node, ctrl) = rt.block_on(async {
        let node = node(node_id).await;
        let ctrl = node.controller(&arg("CTRL")).await.unwrap();
        (node, ctrl)
    });
    let mut segs: HashMap<String, rsm::ExportSegment> = HashMap::new();
    say("ready");
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["publish", name, id, acl] => {
                let seg = segs.entry(name.to_string()).or_insert_with(|| {
                    let seg = ctrl.export(SIZE, ExportFlags::empty()).unwrap();
                    seg.write_at(0, &pattern(SEED, PROBE)).unwrap();
                    seg
                });
                let r = rt
                    .block_on(seg.publish(id.parse::<rsm::SegmentId>().unwrap(), &parse_acl(acl)));
                say(answer(r, |id| format!("ok {}", id.get())));
            }
            ["republish", name, acl] => {
                let r = rt.block_on(segs[*name].republish(&parse_acl(acl)));
                say(answer(r, |()| "ok".into()));
            }
            ["unpublish", name] => {
                let r = rt.block_on(segs[*name].unpublish());
                say(answer(r, |()| "ok".into()));
            }
            ["forkrepublish", name] => say(format!("code {}", fork_republish(&segs[*name]))),
            ["sum", name, off, len] => {
                let mut buf = vec![0u8; len.parse().unwrap()];
                segs[*name].read_at(off.parse().unwrap(), &mut buf).unwrap();
                say(checksum(&buf));
            }
            ["importers", name] => say(segs[*name].importer_count()),
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    rt.block_on(async {
        for (_, seg) in segs.drain() {
            let _ = seg.destroy().await;
        }
        node.shutdown().await;
    });
}

/// Republishes from a forked child of the exporter, which is not the segment's creator, and
/// returns the error code the child got (0 for success).
fn fork_republish(seg: &rsm::ExportSegment) -> i32 {
    // SAFETY: the child only runs `republish`, which refuses a process that is not the
    // creator before it takes any lock (another thread may have held one at the fork; glibc
    // makes malloc fork-safe), allocates an error and exits with `_exit`, never returning
    // into the test or running destructors.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let r = futures::executor::block_on(seg.republish(&[]));
            libc::_exit(r.map_or_else(|e| e.code(), |()| 0));
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status)
    }
}

/// The importer: connects to segments and checks what the connection allows.
fn importer() {
    run_as(&arg("RUN_AS"));
    let rt = runtime();
    let node_id: u32 = arg("NODE_ID").parse().unwrap();
    let (node, ctrl) = rt.block_on(async {
        let node = node(node_id).await;
        let ctrl = node.controller(&arg("CTRL")).await.unwrap();
        (node, ctrl)
    });
    let mut held: Option<rsm::ImportSegment> = None;
    say("ready");
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["whoami"] => {
                let (uid, gid) = (
                    rustix::process::geteuid().as_raw(),
                    rustix::process::getegid().as_raw(),
                );
                let groups: Vec<String> = rustix::process::getgroups()
                    .unwrap()
                    .iter()
                    .map(|g| g.as_raw().to_string())
                    .collect();
                say(format!("{uid}:{gid}:{}", groups.join(",")));
            }
            ["check", exporter, segid, perm] => {
                let perm = Perm::from_bits(u32::from_str_radix(perm, 8).unwrap());
                let r = rt.block_on(ctrl.import(
                    exporter.parse().unwrap(),
                    segid.parse().unwrap(),
                    perm,
                ));
                let verdict = match r {
                    Ok(imp) => {
                        let v = exercise(&rt, &imp, perm);
                        let _ = rt.block_on(imp.disconnect());
                        v
                    }
                    Err(e) => {
                        eprintln!("  (importer {node_id}: {e})");
                        format!("err {}", e.code())
                    }
                };
                say(verdict);
            }
            ["hold", exporter, segid, perm] => {
                let perm = Perm::from_bits(u32::from_str_radix(perm, 8).unwrap());
                let r = rt.block_on(ctrl.import(
                    exporter.parse().unwrap(),
                    segid.parse().unwrap(),
                    perm,
                ));
                say(answer(r, |imp| {
                    held = Some(imp);
                    "ok".into()
                }));
            }
            ["put", off, seed] => {
                let imp = held.as_ref().expect("a held connection");
                let data = pattern(seed.parse().unwrap(), PROBE);
                let (r, _) = common::split(rt.block_on(imp.put(off.parse().unwrap(), data)));
                say(answer(r, |()| "ok".into()));
            }
            ["attack"] => say(attack_read_only_grant()),
            ["quit"] | [] => break,
            _ => panic!("unknown command {cmd}"),
        }
    }
    drop(held);
    rt.block_on(node.shutdown());
}

/// What a read-only loopback importer of another uid could try on the memfd it was passed
/// (found in `/proc/self/fd`): reopen it read-write through `/proc/self/fd/N`, map it
/// writable and shared, or `fchmod` its inode open. Each must fail; a read-only shared
/// mapping works and shows the exporter's bytes (so the attack aimed at the right
/// descriptor). Returns `ok` or `fail ...`.
fn attack_read_only_grant() -> String {
    let mut found = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("/memfd:rsm-segment") {
            continue;
        }
        let fd: i32 = entry.file_name().to_string_lossy().parse().unwrap();
        found += 1;
        let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap();
        // SAFETY: plain system calls on a valid path and descriptor; every mapping made is
        // unmapped before returning, and no Rust reference to it is formed.
        unsafe {
            let rw = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if rw >= 0 {
                libc::close(rw);
                return format!("fail reopened fd {fd} read-write");
            }
            let page = 4096;
            let w = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if w != libc::MAP_FAILED {
                libc::munmap(w, page);
                return format!("fail mapped fd {fd} writable");
            }
            if libc::fchmod(fd, 0o666) == 0 {
                return format!("fail changed the mode of fd {fd}");
            }
            let r = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if r == libc::MAP_FAILED {
                return format!("fail fd {fd} cannot even be read");
            }
            let seen = std::slice::from_raw_parts(r.cast::<u8>(), PROBE).to_vec();
            libc::munmap(r, page);
            if seen != pattern(SEED, PROBE) {
                return format!("fail fd {fd} is not the segment");
            }
        }
    }
    if found == 0 {
        return "fail no segment memfd in /proc/self/fd".into();
    }
    "ok".into()
}

/// Uses a connection granted `perm`: reads the probe if read was granted, writes it back if
/// write was; without write, a put must be refused locally before anything is posted.
/// Returns `ok`, or `fail ...` saying what went wrong.
fn exercise(rt: &tokio::runtime::Runtime, imp: &rsm::ImportSegment, perm: Perm) -> String {
    if imp.perm() != perm {
        return format!("fail granted {:?} for {perm:?}", imp.perm());
    }
    if perm.allows(Perm::READ) {
        match rt.block_on(imp.get(0, vec![0u8; PROBE])) {
            Ok((_, got)) if got == pattern(SEED, PROBE) => {}
            Ok(_) => return "fail get read other bytes".into(),
            Err(e) => return format!("fail get: {e}"),
        }
    } else {
        let (res, buf) = common::split(rt.block_on(imp.get(0, vec![0u8; PROBE])));
        match res {
            Err(e) if e.code() == 27 && buf.is_some() => {}
            other => return format!("fail get without read: {other:?}"),
        }
    }
    if perm.allows(Perm::WRITE) {
        if let Err(e) = rt.block_on(imp.put(0, pattern(SEED, PROBE))) {
            return format!("fail put: {e}");
        }
    } else {
        // Refused on the spot: the operation is ready at its first poll and nothing is in
        // flight, so no key was ever used.
        let op = imp.put(0, pattern(SEED + 1, PROBE));
        let Some((res, buf)) = op.now_or_never().map(common::split) else {
            return "fail the refused put was not ready at once".into();
        };
        match res {
            Err(e) if e.code() == 27 && buf.is_some() && imp.in_flight() == 0 => {}
            other => return format!("fail put without write: {other:?}"),
        }
    }
    "ok".into()
}

/// A started exporter child and its node id.
struct Exporter {
    peer: Peer,
    node: u32,
}

impl Exporter {
    fn start(ctrl: &str, node: u32, run_as: &str) -> Exporter {
        let peer = Peer::start(
            "role_entry",
            "exporter",
            &[
                ("NODE_ID", node.to_string()),
                ("CTRL", ctrl.to_string()),
                ("RUN_AS", run_as.to_string()),
            ],
        );
        assert_eq!(peer.recv(), "ready");
        Exporter { peer, node }
    }

    /// Publishes segment `name` (created on first use) and returns its id.
    fn publish(&mut self, name: &str, acl: &[(u32, u32)]) -> u32 {
        let a = self.peer.ask(&format!("publish {name} 0 {}", acl_arg(acl)));
        a.strip_prefix("ok ")
            .unwrap_or_else(|| panic!("publish {name}: {a}"))
            .parse()
            .unwrap()
    }
}

/// A started importer child, running as `run_as`.
struct Importer {
    peer: Peer,
    node: u32,
    name: &'static str,
}

impl Importer {
    fn start(ctrl: &str, node: u32, name: &'static str, run_as: &str) -> Importer {
        let mut peer = Peer::start(
            "role_entry",
            "importer",
            &[
                ("NODE_ID", node.to_string()),
                ("CTRL", ctrl.to_string()),
                ("RUN_AS", run_as.to_string()),
            ],
        );
        assert_eq!(peer.recv(), "ready");
        assert_eq!(peer.ask("whoami"), run_as, "{name} switched its ids");
        Importer { peer, node, name }
    }

    fn check(&mut self, exporter: u32, segid: u32, perm: Perm) -> String {
        self.peer
            .ask(&format!("check {exporter} {segid} {:o}", perm.bits()))
    }
}

/// What a class's digit of `mode` allows for `perm`: `ok` or `err 27`.
fn expected(digit: u32, perm: Perm) -> &'static str {
    let need = perm.bits() >> 6; // 4 read, 2 write, 6 both
    if digit & need == need { "ok" } else { "err 27" }
}

/// On shm, processes of different users cannot connect at all: libfabric 1.17 creates each
/// endpoint's region in `/dev/shm` with mode 0600, so a process of another user cannot map it
/// (its `fi_av_insert` fails), and an exporter that cannot map a root importer's region
/// segfaults on the first request. The exporter refuses such importers with PERM_DENIED after
/// the access check passed; what the access check says is tested on tcp and sockets.
fn across_users(ctrl: &str, importer_uid: u32, verdict: &'static str) -> &'static str {
    if ctrl == "shm0" && importer_uid != EXPORTER_UID && verdict == "ok" {
        "err 27"
    } else {
        verdict
    }
}

fn umask_of_this_process() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .expect("a Umask line");
    u32::from_str_radix(line.trim(), 8).unwrap()
}

/// Owner, group (by primary gid and by a supplementary group) and other importers against
/// an unprivileged exporter, for several modes; root (this process) is "other" and gets no
/// more than the mode grants.
fn classes(ctrl: &str) {
    let _serial = serial();
    let base = fresh_node_id();
    let mut exp = Exporter::start(ctrl, base, EXPORTER_AS);
    let mut importers = [
        Importer::start(ctrl, base + 1, "owner", OWNER_AS),
        Importer::start(ctrl, base + 2, "group", GROUP_AS),
        Importer::start(ctrl, base + 3, "supplementary group", SUPPLEMENTARY_AS),
        Importer::start(ctrl, base + 4, "other", OTHER_AS),
    ];
    // Which digit of the mode each importer's class uses (owner, group, group, other), and
    // each importer's uid.
    let shifts = [6u32, 3, 3, 0];
    let uids = [EXPORTER_UID, 65534, 65534, 65534];
    let rt = runtime();
    let root_id = base + 5;
    let root = rt.block_on(async { node(root_id).await });
    let root_ctrl = rt.block_on(root.controller(ctrl)).unwrap();

    let umask = umask_of_this_process(); // the children inherit it
    let modes: [Option<u32>; 7] = [
        Some(0o600),
        Some(0o060),
        Some(0o006),
        Some(0o640),
        Some(0o444),
        Some(0o266),
        None, // empty list: 0666 & !umask of the exporter
    ];
    let mut failures = Vec::new();
    for (i, mode) in modes.iter().enumerate() {
        let acl: Vec<(u32, u32)> = match mode {
            Some(m) => (1..=5).map(|k| (base + k, *m)).collect(),
            None => Vec::new(),
        };
        let mode = mode.unwrap_or(0o666 & !umask);
        let segid = exp.publish(&format!("s{i}"), &acl);
        for perm in [Perm::READ, Perm::WRITE, Perm::RDWR] {
            for ((imp, shift), uid) in importers.iter_mut().zip(shifts).zip(uids) {
                let want = across_users(ctrl, uid, expected((mode >> shift) & 7, perm));
                let got = imp.check(rsm::NodeId(exp.node).get(), segid, perm);
                if got != want {
                    failures.push(format!(
                        "{ctrl}: mode {mode:04o}, {} ({}) asking {perm:?}: {got}, expected {want}",
                        imp.name, imp.node
                    ));
                }
            }
            // Root in the parent: the "other" class, no bypass.
            let want = across_users(ctrl, 0, expected(mode & 7, perm));
            let r =
                rt.block_on(root_ctrl.import(rsm::NodeId(exp.node), rsm::SegmentId(segid), perm));
            let got = match r {
                Ok(imp) => {
                    let v = exercise(&rt, &imp, perm);
                    let _ = rt.block_on(imp.disconnect());
                    v
                }
                Err(e) => format!("err {}", e.code()),
            };
            if got != want {
                failures.push(format!(
                    "{ctrl}: mode {mode:04o}, root asking {perm:?}: {got}, expected {want}"
                ));
            }
        }
    }
    // Node ids outside the list are refused before any class test, root included.
    let segid = exp.publish("narrow", &[(base + 1, 0o666)]);
    for imp in importers.iter_mut().skip(1) {
        let got = imp.check(rsm::NodeId(exp.node).get(), segid, Perm::READ);
        if got != "err 8" {
            failures.push(format!("{ctrl}: {} not in the list: {got}", imp.name));
        }
    }
    // The owner is the exporter's user, so this works on shm too.
    let got = importers[0].check(rsm::NodeId(exp.node).get(), segid, Perm::RDWR);
    if got != "ok" {
        failures.push(format!("{ctrl}: owner in the narrow list: {got}"));
    }
    rt.block_on(root.shutdown());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The error codes of publish and connect: SEG_NOT_PUBLISHED (7), SEG_NOT_PUBLISHED_TO_NODE
/// (8), PERM_DENIED (27) for read-write where the class has 0444 and for a read-only
/// importer's put, BAD_ACL (21), REMOTE_NODE_UNREACHABLE (39).
fn errors(ctrl: &str) {
    let _serial = serial();
    let base = fresh_node_id();
    let mut exp = Exporter::start(ctrl, base, "");
    let mut other = Importer::start(ctrl, base + 1, "other", OTHER_AS);
    let rt = runtime();
    let me = base + 2;
    let node = rt.block_on(async { node(me).await });
    let c = rt.block_on(node.controller(ctrl)).unwrap();
    let code = |r: rsm::Result<rsm::ImportSegment>| r.map_or_else(|e| e.code(), |_| 0);

    // 7: no such segment on that node.
    let open = exp.publish("open", &[]);
    let wrong = rsm::SegmentId(if open == 0x7FFF_FFF0 {
        0x7FFF_FFF1
    } else {
        0x7FFF_FFF0
    });
    assert_eq!(
        code(rt.block_on(c.import(rsm::NodeId(exp.node), wrong, Perm::READ))),
        7,
        "{ctrl}: wrong segment id"
    );
    assert_eq!(
        other.check(rsm::NodeId(exp.node).get(), wrong.get(), Perm::READ),
        "err 7",
        "{ctrl}: wrong segment id, unprivileged"
    );
    // An unpublished segment is not published either.
    let gone = exp.publish("gone", &[]);
    assert_eq!(exp.peer.ask("unpublish gone"), "ok");
    assert_eq!(
        code(rt.block_on(c.import(rsm::NodeId(exp.node), rsm::SegmentId(gone), Perm::READ))),
        7,
        "{ctrl}: unpublished segment"
    );

    // 8: a list without the importer's node.
    let narrow = exp.publish("narrow", &[(base + 9, 0o666), (u32::MAX, 0o666)]);
    assert_eq!(
        code(rt.block_on(c.import(rsm::NodeId(exp.node), rsm::SegmentId(narrow), Perm::READ))),
        8,
        "{ctrl}: node not listed"
    );
    assert_eq!(
        other.check(rsm::NodeId(exp.node).get(), narrow, Perm::READ),
        "err 8"
    );

    // 27: the other class has 0444 (the exporter is root, the importer 65534).
    let ro = exp.publish("ro", &[(other.node, 0o644), (me, 0o444)]);
    assert_eq!(
        other.check(rsm::NodeId(exp.node).get(), ro, Perm::RDWR),
        "err 27",
        "{ctrl}"
    );
    assert_eq!(
        other.check(rsm::NodeId(exp.node).get(), ro, Perm::WRITE),
        "err 27",
        "{ctrl}"
    );
    // Read-only: get works, a put is refused locally, before anything is posted (on shm the
    // unprivileged importer cannot reach the root exporter at all: see `across_users`).
    let want = if ctrl == "shm0" { "err 27" } else { "ok" };
    assert_eq!(
        other.check(rsm::NodeId(exp.node).get(), ro, Perm::READ),
        want,
        "{ctrl}"
    );
    // Root owns the segment here, but the list gives even the owner read only.
    assert_eq!(
        code(rt.block_on(c.import(rsm::NodeId(exp.node), rsm::SegmentId(ro), Perm::RDWR))),
        27
    );
    let imp = rt
        .block_on(c.import(rsm::NodeId(exp.node), rsm::SegmentId(ro), Perm::READ))
        .unwrap();
    assert_eq!(exercise(&rt, &imp, Perm::READ), "ok", "{ctrl}");
    let before = exp.peer.ask("sum ro 0 64");
    let (res, buf) = common::split(rt.block_on(imp.put(0, vec![9u8; 64])));
    assert_eq!(res.unwrap_err().code(), 27);
    assert!(buf.is_some(), "the refused put gives its buffer back");
    assert_eq!(exp.peer.ask("sum ro 0 64"), before, "nothing was written");
    // Bits other than read and write are refused before anything is sent.
    assert_eq!(
        code(rt.block_on(c.import(
            rsm::NodeId(exp.node),
            rsm::SegmentId(ro),
            Perm::from_bits(0o700)
        ))),
        27
    );
    rt.block_on(imp.disconnect()).unwrap();

    // 21: execute bits, or more than 4096 entries; nothing changes.
    assert_eq!(
        exp.peer.ask(&format!("publish bad 0 {}:700", me)),
        "err 21",
        "{ctrl}: 0700"
    );
    assert_eq!(exp.peer.ask(&format!("publish bad 0 {}:611", me)), "err 21");
    let seg = c.export(SIZE, ExportFlags::empty()).unwrap();
    let id = rsm::SegmentId(0x0040_0000 + (base % 0x10_0000));
    let e = rt
        .block_on(seg.publish(
            id,
            &[
                Access::new(rsm::NodeId(1), 0o600),
                Access::new(rsm::NodeId(2), 0o700),
            ],
        ))
        .unwrap_err();
    assert_eq!(e.code(), 21);
    assert!(e.to_string().contains("entry 1"), "{e}");
    let many: Vec<Access> = (0..4097)
        .map(|n| Access::new(rsm::NodeId(n), 0o600))
        .collect();
    assert_eq!(rt.block_on(seg.publish(id, &many)).unwrap_err().code(), 21);
    assert_eq!(
        seg.id(),
        None,
        "a refused publish leaves the segment unpublished"
    );
    // The id was not taken by the refused publishes; 4096 entries and any node id are fine.
    let mut most: Vec<Access> = (0..4095)
        .map(|n| Access::new(rsm::NodeId(n), 0o600))
        .collect();
    most.push(Access::new(rsm::NodeId(u32::MAX), 0o666));
    assert_eq!(rt.block_on(seg.publish(id, &most)).unwrap(), id);
    rt.block_on(seg.destroy()).unwrap();

    // 39: a node nobody runs.
    let t = Instant::now();
    assert_eq!(
        code(rt.block_on(c.import(rsm::NodeId(base + 500), rsm::SegmentId(open), Perm::READ))),
        39,
        "{ctrl}: unknown node"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    rt.block_on(node.shutdown());
}

/// Republish replaces the list for later connects only; its own errors are
/// SEG_NOT_PUBLISHED, BAD_ACL and NOT_CREATOR (from a forked child). Exporter and importers
/// run as one unprivileged user (so that shm works too), the importers with other gids.
fn republish(ctrl: &str) {
    let _serial = serial();
    let base = fresh_node_id();
    let mut exp = Exporter::start(ctrl, base, EXPORTER_AS);
    let mut a = Importer::start(ctrl, base + 1, "a", OWNER_AS);
    let mut b = Importer::start(ctrl, base + 2, "b", "65533:65534:");

    let segid = exp.publish("r", &[(a.node, 0o666), (b.node, 0o666)]);
    let hold = format!("hold {} {segid} 600", exp.node);
    assert_eq!(a.peer.ask(&hold), "ok", "{ctrl}");
    assert_eq!(
        b.check(rsm::NodeId(exp.node).get(), segid, Perm::RDWR),
        "ok",
        "{ctrl}"
    );

    // Drop node a, and give node b read only.
    let acl = acl_arg(&[(b.node, 0o444)]);
    assert_eq!(exp.peer.ask(&format!("republish r {acl}")), "ok");
    // The existing connection keeps its grant.
    assert_eq!(
        a.peer.ask("put 128 5"),
        "ok",
        "{ctrl}: put on the old connection"
    );
    assert_eq!(
        exp.peer.ask(&format!("sum r 128 {PROBE}")),
        checksum(&pattern(5, PROBE)).to_string()
    );
    // b's disconnect notice travels on its own link, without an answer: give it a moment.
    let t = Instant::now();
    let mut importers = exp.peer.ask("importers r");
    while importers != "1" && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        importers = exp.peer.ask("importers r");
    }
    assert_eq!(importers, "1", "{ctrl}: only a's connection is left");
    // Later connects see the new list, from the node that holds a connection too.
    assert_eq!(
        a.check(rsm::NodeId(exp.node).get(), segid, Perm::READ),
        "err 8",
        "{ctrl}"
    );
    assert_eq!(
        b.check(rsm::NodeId(exp.node).get(), segid, Perm::RDWR),
        "err 27",
        "{ctrl}"
    );
    assert_eq!(
        b.check(rsm::NodeId(exp.node).get(), segid, Perm::READ),
        "ok",
        "{ctrl}"
    );

    // A bad list is refused and the old one stays.
    assert_eq!(
        exp.peer.ask(&format!("republish r {}:700", b.node)),
        "err 21"
    );
    assert_eq!(
        b.check(rsm::NodeId(exp.node).get(), segid, Perm::READ),
        "ok"
    );
    assert_eq!(
        b.check(rsm::NodeId(exp.node).get(), segid, Perm::RDWR),
        "err 27"
    );
    assert_eq!(
        a.check(rsm::NodeId(exp.node).get(), segid, Perm::READ),
        "err 8"
    );

    // Back to every node with the umask-derived mode, whose owner digit is rw.
    assert_eq!(exp.peer.ask("republish r -"), "ok");
    let mode = 0o666 & !umask_of_this_process();
    assert_eq!(
        a.check(rsm::NodeId(exp.node).get(), segid, Perm::RDWR),
        expected(mode >> 6, Perm::RDWR)
    );

    // Only the creator may republish; the forked child is told NOT_CREATOR (12).
    assert_eq!(exp.peer.ask("forkrepublish r"), "code 12");

    // Not published: 7, and the held connection is aborted.
    assert_eq!(exp.peer.ask("unpublish r"), "ok");
    assert_eq!(exp.peer.ask("republish r -"), "err 7");
    assert_eq!(a.peer.ask("put 0 1"), "err 40", "{ctrl}: unpublish aborts");
}

/// Mode 0000 for the importer's class (an entry of 0000, or a mode that leaves its class
/// out) is PERM_DENIED whatever is asked, nothing included (the denial carries only the
/// code, so no key, descriptor or address leaves the exporter); a class with some bit may
/// still connect asking for nothing.
fn mode_0000(ctrl: &str) {
    let _serial = serial();
    let base = fresh_node_id();
    let mut exp = Exporter::start(ctrl, base, EXPORTER_AS);
    let mut owner = Importer::start(ctrl, base + 1, "owner", OWNER_AS);
    let mut other = Importer::start(ctrl, base + 2, "other", OTHER_AS);
    let rt = runtime();
    let me = base + 3;
    let node = rt.block_on(async { node(me).await });
    let c = rt.block_on(node.controller(ctrl)).unwrap();
    let e = rsm::NodeId(exp.node);
    let code = |r: rsm::Result<rsm::ImportSegment>| r.map_or_else(|e| e.code(), |_| 0);
    let asks = [Perm::NONE, Perm::READ, Perm::WRITE, Perm::RDWR];

    let zero = exp.publish("zero", &[(owner.node, 0), (other.node, 0), (me, 0)]);
    for perm in asks {
        assert_eq!(
            owner.check(e.get(), zero, perm),
            "err 27",
            "{ctrl}: owner, 0000, {perm:?}"
        );
        assert_eq!(
            other.check(e.get(), zero, perm),
            "err 27",
            "{ctrl}: other, 0000, {perm:?}"
        );
        let r = rt.block_on(c.import(e, rsm::SegmentId(zero), perm));
        assert_eq!(code(r), 27, "{ctrl}: root, 0000, {perm:?}");
    }
    // 0066: the owner's class has nothing; others may ask for nothing, or more.
    let no_owner = exp.publish("no-owner", &[(owner.node, 0o066), (other.node, 0o066)]);
    assert_eq!(
        owner.check(e.get(), no_owner, Perm::NONE),
        "err 27",
        "{ctrl}"
    );
    assert_eq!(other.check(e.get(), no_owner, Perm::NONE), "ok", "{ctrl}");
    assert_eq!(other.check(e.get(), no_owner, Perm::RDWR), "ok", "{ctrl}");
    assert_eq!(
        exp.peer.ask("importers zero"),
        "0",
        "{ctrl}: nobody was admitted"
    );
    rt.block_on(node.shutdown());
}

/// A read-only loopback grant held by a process of another uid cannot be made writable:
/// not by reopening `/proc/self/fd/N`, not by a writable shared mapping, not by `fchmod`.
#[test]
fn loopback_read_only_grant_stays_read_only() {
    let _serial = serial();
    let base = fresh_node_id();
    let mut exp = Exporter::start("loopback", base, "");
    let mut other = Importer::start("loopback", base + 1, "other", OTHER_AS);
    let segid = exp.publish("ro", &[(other.node, 0o644)]);
    let hold = other.peer.ask(&format!(
        "hold {} {segid} {:o}",
        exp.node,
        Perm::READ.bits()
    ));
    assert_eq!(hold, "ok");
    assert_eq!(other.peer.ask("attack"), "ok");
    // Nothing the attempts did reached the segment.
    let probe = exp.peer.ask(&format!("sum ro 0 {PROBE}"));
    assert_eq!(probe, checksum(&pattern(SEED, PROBE)).to_string());
}

#[test]
fn loopback_mode_0000() {
    mode_0000("loopback");
}
#[test]
fn tcp_mode_0000() {
    mode_0000("tcp0");
}

#[test]
fn tcp_errors() {
    errors("tcp0");
}
#[test]
fn shm_errors() {
    errors("shm0");
}
#[test]
fn sockets_errors() {
    errors("sockets0");
}

#[test]
fn tcp_classes() {
    classes("tcp0");
}
#[test]
fn shm_classes() {
    classes("shm0");
}
#[test]
fn sockets_classes() {
    classes("sockets0");
}

#[test]
fn tcp_republish() {
    republish("tcp0");
}
#[test]
fn shm_republish() {
    republish("shm0");
}
#[test]
fn sockets_republish() {
    republish("sockets0");
}
