//! `rsm bench-peer`: the target process. It registers a buffer with plain libfabric (for
//! the baseline) and, unless told not to, exports a segment through rsm; prints its hello;
//! then answers commands on its standard input (see [`super::proto`]).

use super::BenchError;
use super::cli::PeerArgs;
use super::pattern;
use super::proto::{Command, PeerHello, Target, hex_encode};
use super::raw::{
    RawTarget, SOURCE, YIELD_EVERY, fabric_info_for, fabric_info_for_atomics, round_up,
};
use super::rsm_side::RsmPeer;
use super::shm_bell::{BELL_IDLE, BellEcho};
use rsm::test_util::ControllerName;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Instant;

/// Runs the peer until `quit` or the end of its input. Call it on a multi-thread runtime: it
/// blocks its own thread while it waits for commands and while it progresses.
pub(crate) async fn run_peer(args: PeerArgs) -> ExitCode {
    run_peer_as(args, "rsm bench-peer").await
}

/// [`run_peer`], its errors said as `name` (`rsm bench --serve`).
pub(crate) async fn run_peer_as(args: PeerArgs, name: &str) -> ExitCode {
    match peer(args, name).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn peer(args: PeerArgs, name: &str) -> Result<(), BenchError> {
    let len = round_up(args.max_size.max(1), crate::sys::limits::page_size());
    let loopback = ControllerName::parse(Some(&args.controller))? == ControllerName::Loopback;
    // The baseline's endpoint sits where the node's controllers do: on the interface of
    // the node's side-channel address.
    let source = args.node_listen.map_or(SOURCE, |a| a.ip());
    let raw = if loopback {
        None
    } else {
        let info = if args.atomics {
            fabric_info_for_atomics(&args.controller, source)?
        } else {
            fabric_info_for(&args.controller, source)?
        };
        Some(RawTarget::open(info, len, args.baseline_wait)?)
    };
    let (rsm, rsm_info, rsm_error) = if args.no_rsm {
        (None, None, None)
    } else {
        let started = match args.node_listen {
            None => RsmPeer::start(&args.controller, len).await,
            Some(addr) => RsmPeer::start_at(&args.controller, len, Some(addr)).await,
        };
        match started {
            Ok((p, info)) => (Some(p), Some(info), None),
            Err(e) => (None, None, Some(e.to_string())),
        }
    };
    let hello = PeerHello {
        provider: raw.as_ref().map(|r| r.raw.provider()),
        addr: raw.as_ref().map(|r| hex_encode(r.raw.ep.name())),
        key: raw.as_ref().map_or(0, |r| r.region.key()),
        base: raw.as_ref().map_or(0, RawTarget::base),
        len: len as u64,
        rsm: rsm_info,
        rsm_error,
        baseline_wait: args.baseline_wait,
    };
    let line = serde_json::to_string(&hello)
        .map_err(|e| BenchError::Peer(format!("cannot encode the hello: {e}")))?;
    let result = match args.serve {
        Some(addr) => serve_tcp(addr, &line, raw.as_ref(), rsm.as_ref(), name),
        None => {
            let mut out = std::io::stdout();
            reply(&mut out, &line)?;
            let commands = lines_of(std::io::stdin());
            serve(raw.as_ref(), rsm.as_ref(), &commands, &mut out)
        }
    };
    drop(raw);
    if let Some(p) = rsm {
        p.shutdown().await;
    }
    result
}

/// `--serve`: prints the bound address, then serves one `rsm bench --peer` run after the
/// other on TCP, each starting with the hello, until a `quit` line on standard input.
fn serve_tcp(
    addr: SocketAddr,
    hello: &str,
    raw: Option<&RawTarget>,
    rsm: Option<&RsmPeer>,
    name: &str,
) -> Result<(), BenchError> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| BenchError::Usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| BenchError::Usage(format!("cannot read the bound address: {e}")))?;
    reply(&mut std::io::stdout(), &bound.to_string())?;
    eprintln!("{name}: serving on {bound}; a `quit` line on standard input ends it");
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        // Only a `quit` line stops: a peer started in the background may have no input.
        let _ = std::thread::Builder::new()
            .name("rsm-bench-peer-quit".into())
            .spawn(move || {
                for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                    if line.trim() == "quit" {
                        stop.store(true, Ordering::SeqCst);
                        // Wake the accept below.
                        let _ = TcpStream::connect(bound);
                        return;
                    }
                }
            });
    }
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let session = stream
            .and_then(|s| {
                s.set_nodelay(true)?;
                Ok((s.try_clone()?, s))
            })
            .map_err(|e| BenchError::Peer(format!("accept: {e}")))
            .and_then(|(reader, mut writer)| {
                reply(&mut writer, hello)?;
                serve(raw, rsm, &lines_of(reader), &mut writer)
            });
        if let Err(e) = session {
            eprintln!("rsm bench-peer: session ended: {e}");
        }
    }
    Ok(())
}

fn reply(out: &mut dyn Write, line: &str) -> Result<(), BenchError> {
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::Peer(format!("cannot answer: {e}")))
}

/// The commands (standard input or a served connection), line by line, from a reader
/// thread, so that a progressing peer can look for the next command without blocking.
fn lines_of(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("rsm-bench-peer-in".into())
        .spawn(move || {
            for line in BufReader::new(from).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        // The sender was dropped with the closure: the peer sees the end of its input.
        eprintln!("rsm bench-peer: cannot start the input thread: {e}");
    }
    rx
}

fn serve(
    raw: Option<&RawTarget>,
    rsm: Option<&RsmPeer>,
    commands: &Receiver<String>,
    out: &mut dyn Write,
) -> Result<(), BenchError> {
    let mut pending: Option<String> = None;
    let mut scratch = Vec::with_capacity(64);
    // The signal baseline: the initiator's address and doorbell, once told.
    let mut initiator: Option<rsm_fabric::ffi::fi_addr_t> = None;
    let mut echo: Option<(u64, u64)> = None;
    // The loopback signal baseline's page, once handed over.
    let mut bell: Option<BellEcho> = None;
    let mut reported = false;
    loop {
        let line = match pending.take() {
            Some(l) => l,
            None => match commands.recv() {
                Ok(l) => l,
                Err(_) => return Ok(()), // the initiator is gone
            },
        };
        let cmd = match Command::parse(&line) {
            Ok(c) => c,
            Err(e) => {
                reply(out, &format!("err {e}"))?;
                continue;
            }
        };
        if cmd == Command::Quit {
            reply(out, "bye")?;
            return Ok(());
        }
        if cmd == Command::Progress {
            reply(out, "ok")?;
            // Busy-poll until the next command: shm and tcp place remote writes and
            // answer reads only while the target reads its queue. Providers with progress
            // threads of their own (sockets) need no poller, and are slowed by one.
            let spin = raw.filter(|r| echo.is_some() || !r.raw.auto_progress());
            // The bell page is polled until the next command too, but only while rings
            // come: an initiator that stops ringing without a word costs no core for long.
            let mut ringing = bell.is_some();
            let mut heard = (bell.as_ref().map_or(0, BellEcho::answered), Instant::now());
            let mut polls = 0u32;
            loop {
                polls = polls.wrapping_add(1);
                if polls % YIELD_EVERY == 0 {
                    std::thread::yield_now();
                    if let (true, Some(b)) = (ringing, bell.as_ref()) {
                        let now = Instant::now();
                        if b.answered() != heard.0 {
                            heard = (b.answered(), now);
                        } else if now.duration_since(heard.1) > BELL_IDLE {
                            ringing = false;
                        }
                    }
                }
                if let (true, Some(b)) = (ringing, bell.as_mut()) {
                    b.answer();
                }
                if let Some(t) = spin {
                    if let Err(e) = t.progress(&mut scratch) {
                        if !reported {
                            eprintln!("rsm bench-peer: completion queue: {e}");
                            reported = true;
                        }
                    }
                    if let (Some(dest), Some(bell)) = (initiator, echo) {
                        let rings = scratch.iter().filter(|e| e.has_remote_data()).count();
                        answer_rings(t, dest, bell, rings, &mut scratch);
                        if rings == 0 {
                            t.rest();
                        }
                    }
                }
                match commands.try_recv() {
                    Ok(l) => {
                        pending = Some(l);
                        break;
                    }
                    Err(TryRecvError::Empty) if spin.is_some() || ringing => {}
                    Err(TryRecvError::Empty) => match commands.recv() {
                        Ok(l) => {
                            pending = Some(l);
                            break;
                        }
                        Err(_) => return Ok(()),
                    },
                    Err(TryRecvError::Disconnected) => return Ok(()),
                }
            }
            continue;
        }
        if let Command::Bell(name) = &cmd {
            let answer = match BellEcho::fetch(name) {
                Ok(b) => {
                    bell = Some(b);
                    "ok".to_string()
                }
                Err(e) => format!("err {e}"),
            };
            reply(out, &answer)?;
            continue;
        }
        if cmd == Command::Rings {
            let answer = bell
                .as_ref()
                .map_or_else(|| "err no bell page".into(), |b| b.answered().to_string());
            reply(out, &answer)?;
            continue;
        }
        if let Command::Echo { key, base } = cmd {
            echo = Some((key, base));
            reply(out, "ok")?;
            continue;
        }
        if let (Command::Addr(a), Some(r)) = (&cmd, raw) {
            let answer = match r.raw.ep.add_peer(a, &[]) {
                Ok(fi) => {
                    initiator = Some(fi);
                    "ok".to_string()
                }
                Err(e) => format!("err {e}"),
            };
            reply(out, &answer)?;
            continue;
        }
        let answer = match execute(&cmd, raw, rsm) {
            Ok(a) => a,
            Err(e) => format!("err {e}"),
        };
        reply(out, &answer)?;
    }
}

fn execute(
    cmd: &Command,
    raw: Option<&RawTarget>,
    rsm: Option<&RsmPeer>,
) -> Result<String, String> {
    let raw = |t: Target| match (t, raw) {
        (Target::Raw, Some(r)) => Ok(Some(r)),
        (Target::Raw, None) => Err("no libfabric buffer on the loopback controller".to_string()),
        (Target::Rsm, _) => Ok(None),
    };
    let rsm = || rsm.ok_or_else(|| "this peer has no rsm segment".to_string());
    let e = |e: rsm::Error| e.to_string();
    let fe = |e: rsm_fabric::Error| e.to_string();
    match *cmd {
        Command::Addr(ref a) => {
            let r = raw(Target::Raw)?.ok_or("no endpoint")?;
            r.raw.ep.add_peer(a, &[]).map_err(fe)?;
            Ok("ok".into())
        }
        Command::Fill { seed, len, target } => {
            match raw(target)? {
                Some(r) => r.region.fill(0, seed, len).map_err(e)?,
                None => rsm()?
                    .write_at(0, &pattern::pattern(seed, len))
                    .map_err(e)?,
            }
            Ok("ok".into())
        }
        Command::Sum { len, target } => {
            let bytes = match raw(target)? {
                Some(r) => r.region.read(0, len).map_err(e)?,
                None => {
                    let mut v = vec![0u8; len];
                    rsm()?.read_at(0, &mut v).map_err(e)?;
                    v
                }
            };
            Ok(format!("{:016x}", pattern::fnv1a64(&bytes)))
        }
        Command::Corrupt { offset, target } => {
            match raw(target)? {
                Some(r) => r.region.corrupt(offset).map_err(e)?,
                None => {
                    let p = rsm()?;
                    let mut b = [0u8; 1];
                    p.read_at(offset, &mut b).map_err(e)?;
                    p.write_at(offset, &[!b[0]]).map_err(e)?;
                }
            }
            Ok("ok".into())
        }
        Command::Trust { node, key } => {
            rsm()?.trust(node, key).map_err(e)?;
            Ok("ok".into())
        }
        Command::Check { next } => {
            rsm()?.check_records(next);
            Ok("ok".into())
        }
        Command::Checked => {
            let (seen, wrong) = rsm()?.records_checked();
            Ok(format!("{seen} {wrong}"))
        }
        Command::Progress
        | Command::Quit
        | Command::Echo { .. }
        | Command::Bell(_)
        | Command::Rings => Err("handled by the loop".into()),
    }
}

/// Answers `owed` doorbell rings with one each to the initiator's doorbell (the signal
/// baseline), progressing (and counting the rings that brings) while the transmit queue is
/// full.
fn answer_rings(
    t: &RawTarget,
    dest: rsm_fabric::ffi::fi_addr_t,
    (key, base): (u64, u64),
    mut owed: usize,
    scratch: &mut Vec<rsm_fabric::CqEntry>,
) {
    while owed > 0 {
        match t.raw.ep.inject_writedata(&[0u8; 8], 1, dest, base, key) {
            Ok(()) => owed -= 1,
            Err(
                rsm_fabric::endpoint::PostError::Again
                | rsm_fabric::endpoint::PostError::Connecting { .. },
            ) => {
                if t.progress(scratch).is_ok() {
                    owed += scratch.iter().filter(|e| e.has_remote_data()).count();
                }
            }
            Err(rsm_fabric::endpoint::PostError::Failed(f)) => {
                eprintln!("rsm bench-peer: echo: {f}");
                return;
            }
        }
    }
}
