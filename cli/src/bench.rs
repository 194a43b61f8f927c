//! Benchmark support for `rsm bench`.
//!
//! `rsm bench --controller C --op put|get|putv|getv|signal|round|fetch-add|cswap|add
//! --sizes LIST [--mode latency|bandwidth] [--window W] [--tasks N] [--iters N] [--baseline]
//! [--rounds R] [--json]`
//! starts its own peer process (`rsm bench-peer`, the same executable), measures one row per
//! size and checks every byte it moved:
//!
//! - **latency**: one awaited operation in flight; a warm-up, then at least 1000 timed
//!   operations (`max(1000, iters)`); median and p99 by nearest rank.
//! - **bandwidth**: `W` operations in flight, each with its own buffer; a warm-up, then at
//!   least `max(iters, W)` operations (more for small sizes: up to 20 000, or 16 MiB worth);
//!   MB/s (10^6 bytes per second), operations per second, and `median_us` = time / operations.
//! - **put** is a write that completes when its data is visible at the target (rsm's
//!   implicit barrier). The baseline does what rsm does on the provider: a write with
//!   `FI_DELIVERY_COMPLETE` on shm, sockets and tcp's connected endpoints; on udp;ofi_rxd, whose
//!   delivery-complete writes complete once the bytes are in the socket, a plain write then
//!   a one-byte read of its last byte, done when both completed. **get** is a read.
//! - **putv** / **getv** move 16 entries of `size / 16` bytes, contiguous in the local buffer
//!   and in the peer's memory. The baseline posts what rsm posts for them (`shape.rs`):
//!   batches of at most the provider's `iov_limit` local and `rma_iov_limit` remote ranges
//!   through `fi_writemsg`/`fi_readmsg` (contiguous remote pieces share one range), each
//!   write with `FI_DELIVERY_COMPLETE` on shm and sockets; on tcp and udp plain writes and
//!   one fence read of the last byte per vector.
//! - **`--baseline`** repeats each row with plain libfabric calls between the same two
//!   processes (same provider and domain, same operations, sizes, window and completion
//!   semantics; no reactor, no futures, both processes busy-polling their completion queues
//!   as fabtests does, except on auto-progress providers such as sockets, where polling
//!   threads would starve the provider's own) and adds `ratio`, above 1 when rsm is better:
//!   baseline median / rsm median in latency mode, rsm MB/s / baseline MB/s in bandwidth
//!   mode. On `loopback` the baseline is `memcpy` between two mappings of one shared buffer
//!   (`memcpy.rs`), with the same slots, window and sample counts.
//! - **signal** is a round trip: a signal to the peer's segment, which answers with one.
//!   The baseline on the fabric controllers is an `fi_inject_writedata` the peer answers
//!   the same way; on `loopback` it is plain shared memory between the same two processes
//!   (`shm_bell.rs`): a one-page memfd handed to the peer with `SCM_RIGHTS`, the initiator
//!   storing a ring number in one word and spinning on another that the peer, busy-polling
//!   the first, sets to the same number. Both sides busy-poll, no system call: what rsm's
//!   doorbell (a word and an eventfd each way) costs on top of the cache-line transfers.
//! - **round** is the service round of `examples/signal_service.rs` (`round.rs`): an
//!   8-byte record put into the peer's segment, a signal, the answer awaited; the peer's
//!   task awaits the signal, reads the record and answers the importer that signalled. One
//!   8 B latency row. The records count up and the peer checks each one: the row verifies
//!   only if every round's record arrived with the value due. Its baseline is not libfabric
//!   but the round's parts, measured by rsm in the same run (alternating rounds as below):
//!   an 8 B put row and a signal round-trip row, whose medians (and p99s) add up to the
//!   baseline's; `ratio` is parts / round, above 1 when the round costs less than its parts.
//!   The rows say so (`baseline_kind: "parts"`, and each part's median).
//! - **`--tasks N`** (bandwidth, put and get; `tasks.rs`): rsm's operations come from N
//!   tokio tasks on the multi-thread runtime, each awaiting its own operations one after
//!   the other, with its own buffer and its own range of the peer's memory (the peer
//!   registers N times the size), the row's operations split over them; the baseline keeps
//!   its window of W. Verification covers every task's range. rsm's p99 and p99.9 are
//!   those of each awaited operation, timed in a further round of its own.
//! - **`--rounds R`** measures each row R times, rsm and baseline alternating, each going
//!   first in every other round (rsm, baseline, baseline, rsm, ...; same peer process, each
//!   round with its own warm-up and seeds). The row's sample count is split over the
//!   rounds (rounded up; at least 100 samples or the window per round), so R rounds take
//!   about the time of one. Each side's figures are the medians over its rounds (latency:
//!   of the rounds' medians and of their p99s; bandwidth: of their MB/s and time per
//!   operation), the ratio is taken from those medians, and a row is verified only if every
//!   round verified. A neighbour taking a core for a moment then disturbs one round of one
//!   side, not the ratio. The JSON rows carry each round's figures and ratio as well.
//! - **verification**: before a put run the source buffers hold a pattern and the peer's
//!   memory another; afterwards the peer's checksum of its memory must equal the pattern's.
//!   Before a get run the peer fills its memory with a pattern and the local buffers hold
//!   another; afterwards every local buffer must hold the peer's pattern. Each row and side
//!   has its own seed.
//!
//! The exit status is 0 when every row verified, 1 when a byte was wrong, 2 when the run
//! failed (`rsm --help` lists these). A progress line goes to standard error when it is a
//! terminal or with `--progress`; rows go to standard output (`--json`:
//! one object per line and row; `report::Row::to_json` lists the keys).
//!
//! The rsm side lives in `rsm_side.rs` (see there); the hidden `--baseline-only` runs the
//! harness without it.
//!
//! **`--peer HOST[:PORT]`** runs against a peer started by hand, on this host or another
//! one: `rsm bench --serve ADDR[:PORT] --controller C [--sizes ...|--max-size N]` (port
//! 7470 by default; the hidden `rsm bench-peer --serve ADDR --node-listen IP:PORT` is the
//! same) serves one run after the other on `ADDR` (the same line protocol over TCP) until a
//! `quit` line on its standard input. Its rsm node and baseline endpoint sit on ADDR's
//! interface (the configuration's listen address for 0.0.0.0); the initiator's on the
//! interface of its control connection's local address, so tcp and sockets pick the
//! domain between the two hosts without `FI_*_IFACE` variables.
//!
//! `rsm bench-memory` (hidden, `memory.rs`) measures what an exporting node keeps resident
//! for many published segments and their importers.

mod atomic;
mod child;
mod children;
mod cli;
mod memcpy;
mod memory;
mod pagebuf;
mod pattern;
mod peer;
mod proto;
mod raw;
mod report;
mod round;
mod rsm_run;
mod rsm_side;
mod scale;
mod shape;
mod shm_bell;
mod stats;
mod tasks;

pub(crate) use cli::{BarrierArg, BenchArgs, Mode, Op, PeerArgs};
pub(crate) use memory::{MemoryArgs, MemoryImporterArgs, run_memory, run_memory_importer};
pub(crate) use peer::run_peer;
pub(crate) use scale::{ScaleArgs, ScaleNodeArgs, run_scale, run_scale_node};

use child::PeerProcess;
use pagebuf::PageBuf;
use proto::{Command, Target};
use raw::{Baseline, fabric_info_for, fabric_info_for_atomics, round_up};
use report::{BaselineKind, Progress, Row};
use rsm_side::RsmInitiator;
use stats::Summary;
use std::io::Write;
use std::process::ExitCode;

/// Why `rsm bench` could not measure (a wrong byte is not an error: it is a row with
/// `verified: false`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// An rsm or libfabric call failed.
    #[error("{0} [{name}]", name = .0.name())]
    Rsm(#[from] rsm::Error),
    /// The peer process failed, exited, or answered nonsense.
    #[error("peer process: {0}")]
    Peer(String),
    /// The arguments cannot be measured as given.
    #[error("{0}")]
    Usage(String),
}

/// The most memory a run may use for its local buffers (window × largest size).
const MAX_LOCAL: usize = 1 << 30;

/// One row to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowSpec {
    pub(crate) op: Op,
    pub(crate) mode: Mode,
    pub(crate) size: usize,
    /// Operations in flight: 1 in latency mode.
    pub(crate) window: usize,
    pub(crate) iters: usize,
    /// Interleaved rounds the row's samples are split over (1 without `--rounds`).
    pub(crate) rounds: usize,
}

/// The fewest timed operations of one latency round.
const MIN_ROUND_SAMPLES: usize = 100;

impl RowSpec {
    /// Timed operations of one round. For the row: at least 1000 samples in latency mode;
    /// in bandwidth mode at least the window, and for small sizes enough to move 16 MiB, up
    /// to 20 000. Rounds split that evenly (rounded up), so that `--rounds` costs about
    /// what one round did; a latency round keeps at least 100 samples, a bandwidth round
    /// the window.
    pub(crate) fn timed(&self) -> usize {
        let rounds = self.rounds.max(1);
        match self.mode {
            Mode::Latency => self.iters.max(1000).div_ceil(rounds).max(MIN_ROUND_SAMPLES),
            Mode::Bandwidth => self
                .iters
                .max(self.window)
                .max(((16 << 20) / self.size).min(20_000))
                .div_ceil(rounds)
                .max(self.window),
        }
    }

    /// Untimed operations first: connection set-up, caches, page faults.
    pub(crate) fn warmup(&self) -> usize {
        (self.timed() / 10).clamp(16, 1000).max(2 * self.window)
    }

    /// Buffers (and contexts) needed: one per operation in flight.
    pub(crate) fn slots(&self) -> usize {
        self.window
    }
}

/// The two sides of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Rsm,
    Baseline,
}

/// Which side measures first in `round`: rsm in even rounds, the baseline in odd ones, so
/// that whatever the first measurement of a round pays (the side that ran last left its
/// threads asleep or its buffers out of the cache) is not paid by one side only.
fn side_order(round: usize) -> [Side; 2] {
    if round % 2 == 0 {
        [Side::Rsm, Side::Baseline]
    } else {
        [Side::Baseline, Side::Rsm]
    }
}

fn seed_for(row: usize, side: u64) -> u64 {
    0x5253_4D42_454E_4300 ^ ((row as u64) << 8) ^ side
}

/// Each round moves other bytes than the one before, so a round that moved nothing cannot
/// pass on what the last one left.
fn round_salt(round: usize) -> u64 {
    (round as u64) << 32
}

/// Runs `rsm bench`; returns 0 when every row verified, 1 when a byte was wrong, 2 when the
/// run failed. `show_progress`: whether the progress line is shown (a terminal, or
/// `--progress`). Call it on a multi-thread runtime: the baseline busy-polls on the calling
/// thread.
pub(crate) async fn run(
    args: BenchArgs,
    config: Option<std::path::PathBuf>,
    show_progress: bool,
) -> ExitCode {
    if let Some(addr) = args.serve {
        return serve(&args, addr, config.as_deref()).await;
    }
    let mut progress = Progress::new(show_progress);
    match bench(&args, &mut progress).await {
        Ok(rows) => {
            let bad: Vec<String> = rows
                .iter()
                .filter(|r| !r.verified())
                .map(|r| report::human_size(r.size))
                .collect();
            if bad.is_empty() {
                progress.finish(&format!(
                    "rsm bench: {} {}: {} rows, every byte verified",
                    args.controller,
                    args.op(),
                    rows.len()
                ));
                ExitCode::SUCCESS
            } else {
                progress.finish(&format!(
                    "rsm bench: {} {}: WRONG DATA in the rows of {}",
                    args.controller,
                    args.op(),
                    bad.join(", ")
                ));
                ExitCode::from(1)
            }
        }
        Err(e) => {
            progress.clear();
            eprintln!("rsm bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// `rsm bench --serve ADDR`: the peer of `rsm bench --peer` runs from other hosts, its node
/// and baseline endpoint on ADDR's interface (the configuration's listen address when ADDR
/// is unspecified, `--config` or `RSM_CONFIG` as the library reads it).
async fn serve(
    args: &BenchArgs,
    addr: std::net::SocketAddr,
    config: Option<&std::path::Path>,
) -> ExitCode {
    let ip = if addr.ip().is_unspecified() {
        match crate::builder(config).resolve() {
            Ok(c) => c.listen.ip(),
            Err(e) => {
                eprintln!("rsm bench --serve: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        addr.ip()
    };
    let max = args.sizes.0.iter().copied().max().unwrap_or(8);
    let peer = PeerArgs {
        controller: args.controller.clone(),
        max_size: args.max_size.unwrap_or(max),
        no_rsm: args.baseline_only,
        baseline_wait: args.baseline_wait,
        serve: Some(addr),
        node_listen: Some(std::net::SocketAddr::new(ip, 0)),
        atomics: args.op.is_some_and(Op::is_atomic),
    };
    peer::run_peer_as(peer, "rsm bench --serve").await
}

async fn bench(args: &BenchArgs, progress: &mut Progress) -> Result<Vec<Row>, BenchError> {
    // A signal is one 8-byte doorbell write, measured as a round trip: one latency row; a
    // round (put, signal, answer) too.
    let signal = args.op() == Op::Signal;
    let round_op = args.op() == Op::Round;
    // An atomic acts on one u64 per slot: one 8-byte row.
    let atomic = args.op().is_atomic();
    let sizes = if signal || atomic || round_op {
        &vec![8]
    } else {
        &args.sizes.0
    };
    let mode = if signal || round_op {
        Mode::Latency
    } else {
        args.mode
    };
    let tasks = tasks::check(args.op(), mode, args.tasks, args.barrier)?;
    let max = sizes.iter().copied().max().unwrap_or(8);
    let window = match mode {
        Mode::Latency => 1,
        Mode::Bandwidth => args.window as usize,
    };
    let iters = usize::try_from(args.iters).unwrap_or(usize::MAX);
    let use_rsm = !args.baseline_only;
    let use_baseline = args.baseline || args.baseline_only;
    if round_op && args.baseline_only {
        return Err(BenchError::Usage(
            "--op round's baseline is rsm's own put and signal: it cannot run without rsm".into(),
        ));
    }
    // Each task has a range of its own in the peer's memory.
    let peer_len = max.saturating_mul(tasks.unwrap_or(1));
    let page = crate::sys::limits::page_size();
    if round_up(max, page).saturating_mul(window.max(tasks.unwrap_or(0))) > MAX_LOCAL
        || peer_len > MAX_LOCAL
    {
        return Err(BenchError::Usage(format!(
            "{window} operations of {} in flight need more than 1 GiB of buffers: lower --window or the largest size",
            report::human_size(max)
        )));
    }
    if args.op().is_vector() {
        if let Some(&small) = sizes.iter().find(|&&s| s < rsm_run::VECTOR_ENTRIES) {
            return Err(BenchError::Usage(format!(
                "{} moves {} entries of size / {}: sizes start at {} bytes, not {small}",
                args.op(),
                rsm_run::VECTOR_ENTRIES,
                rsm_run::VECTOR_ENTRIES,
                rsm_run::VECTOR_ENTRIES
            )));
        }
    }
    let page_words = crate::sys::limits::page_size() / 8;
    if atomic && window > page_words {
        return Err(BenchError::Usage(format!(
            "{} gives each operation in flight a word of one page: --window is at most              {page_words}",
            args.op()
        )));
    }
    if args.barrier == BarrierArg::Explicit && args.op() != Op::Put {
        return Err(BenchError::Usage(
            "--barrier explicit applies to --op put".into(),
        ));
    }
    // On loopback the baseline is memcpy between two mappings of one shared buffer, and
    // for signals a busy-polled word in a page shared with the peer.
    let loopback = args.controller.to_ascii_lowercase().starts_with("loopback");
    let memcpy = if use_baseline && loopback && !signal && !atomic && !round_op {
        Some(memcpy::MemcpyBaseline::open(max, window)?)
    } else {
        None
    };
    let cpu = if use_baseline && loopback && atomic {
        Some(atomic::CpuAtomics::open()?)
    } else {
        None
    };
    let mut bell = if use_baseline && loopback && signal {
        Some(shm_bell::BellBaseline::open()?)
    } else {
        None
    };
    // Fail before starting the peer if the controller has no libfabric domain; a served
    // peer is reached first, for the address toward it (the interface this run uses).
    let served = args.peer.map(PeerProcess::connect).transpose()?;
    let source = served.as_ref().map_or(raw::SOURCE, |p| p.local_ip);
    let info = match (use_baseline && !loopback && !round_op, atomic) {
        (true, false) => Some(fabric_info_for(&args.controller, source)?),
        (true, true) => Some(fabric_info_for_atomics(&args.controller, source)?),
        (false, _) => None,
    };

    let mut peer = match served {
        Some(p) => p,
        None => PeerProcess::spawn(
            &args.controller,
            peer_len,
            !use_rsm,
            args.baseline_wait,
            atomic,
        )?,
    };
    if use_baseline && peer.hello.baseline_wait != args.baseline_wait {
        return Err(BenchError::Usage(format!(
            "the peer's baseline queue has wait object {}, this run asks for {}: start it \
             with --baseline-wait {}",
            peer.hello.baseline_wait.as_str(),
            args.baseline_wait.as_str(),
            args.baseline_wait.as_str()
        )));
    }
    if (peer.hello.len as usize) < peer_len {
        return Err(BenchError::Usage(format!(
            "the peer registered {} B, less than the largest size (times --tasks): start it \
             with --max-size {peer_len}",
            peer.hello.len
        )));
    }
    let mut rsm = None;
    if use_rsm {
        let Some(pi) = peer.hello.rsm.clone() else {
            let why = peer.hello.rsm_error.as_deref().unwrap_or("no reason given");
            return Err(BenchError::Usage(format!(
                "the peer could not start its rsm side: {why}"
            )));
        };
        // A peer with a key (beyond its host) trusts this run's key, told on the line.
        let key = pi.public_key.as_ref().map(|_| rsm::NodeKey::generate());
        if let Some(key) = &key {
            peer.expect_ok(&Command::Trust {
                node: RsmInitiator::node_id(&pi),
                key: key.public(),
            })?;
        }
        let mut init = RsmInitiator::connect(
            &args.controller,
            &pi,
            peer.hello.len as usize,
            args.spin_budget_us.map(std::time::Duration::from_micros),
            key,
            // Beyond this host (the peer has a key), listen where the peer can answer.
            args.peer.map(|_| std::net::SocketAddr::new(source, 0)),
        )
        .await?;
        if args.barrier == BarrierArg::Explicit {
            init.explicit()?;
        }
        init.round_two_ops = args.round_two_ops;
        rsm = Some(init);
    }
    if let Some(b) = &bell {
        b.hand_over(&mut peer)?;
    }
    let mut baseline = None;
    if let Some(info) = info {
        let h = &peer.hello;
        let addr = proto::hex_decode(h.addr.as_deref().unwrap_or_default())
            .map_err(|e| BenchError::Peer(format!("its fabric address: {e}")))?;
        let region = raw::PeerRegion {
            base: h.base,
            key: h.key,
            len: h.len,
        };
        let b = Baseline::open(info, args.baseline_wait, max, window, &addr, region)?;
        peer.expect_ok(&Command::Addr(b.name().to_vec()))?;
        baseline = Some(b);
    }
    let provider = baseline
        .as_ref()
        .map(Baseline::provider)
        .or_else(|| peer.hello.provider.clone())
        .unwrap_or_else(|| "loopback".into());
    let baseline_kind = if round_op {
        BaselineKind::Parts
    } else if loopback {
        BaselineKind::SharedMemory
    } else {
        BaselineKind::Libfabric
    };

    let rounds = args.rounds.max(1) as usize;
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let spec = RowSpec {
            op: args.op(),
            mode,
            size,
            window,
            iters,
            rounds,
        };
        let mut row = Row {
            controller: args.controller.clone(),
            provider: provider.clone(),
            op: args.op(),
            mode,
            size,
            window,
            rsm: None,
            rsm_verified: None,
            baseline: None,
            baseline_verified: None,
            baseline_wait: args.baseline_wait,
            rounds,
            rsm_rounds: Vec::new(),
            baseline_rounds: Vec::new(),
            baseline_kind,
            tasks: tasks.filter(|_| use_rsm),
            parts: Vec::new(),
        };
        // rsm, baseline, baseline, rsm, rsm, ...: a disturbance lands in one round of one
        // side, and the medians below leave it out; and neither side always goes first
        // (see `side_order`).
        for round in 0..rounds {
            progress.row(&args.controller, args.op(), size, mode);
            if rounds > 1 {
                progress.round(round + 1, rounds);
            }
            for side in side_order(round) {
                match side {
                    Side::Rsm => {
                        let Some(init) = &rsm else { continue };
                        let seed = seed_for(i, 1) ^ round_salt(round);
                        let corrupt = args.corrupt_for_test;
                        let (s, ok) = if atomic {
                            atomic::rsm_row(init, &mut peer, &spec, seed, progress).await?
                        } else if round_op {
                            round::rsm_row(init, &mut peer, &spec, seed, progress, corrupt).await?
                        } else if let Some(n) = tasks {
                            let seeds = seeds(spec.op, seed);
                            tasks::rsm_row(init, &mut peer, &spec, n, seeds, progress, corrupt)
                                .await?
                        } else {
                            rsm_row(
                                init,
                                &mut peer,
                                &spec,
                                seed,
                                progress,
                                args.corrupt_for_test,
                            )
                            .await?
                        };
                        row.rsm_rounds.push(s);
                        row.rsm_verified = Some(row.rsm_verified.unwrap_or(true) && ok);
                    }
                    Side::Baseline if round_op => {
                        let Some(init) = &rsm else { continue };
                        let seed = seed_for(i, 2) ^ round_salt(round);
                        let (put, signal) = parts_row(
                            init,
                            &mut peer,
                            &spec,
                            seed,
                            progress,
                            args.corrupt_for_test,
                        )
                        .await?;
                        row.baseline_rounds
                            .push(round::parts(&put.0, &signal.0, size));
                        row.baseline_verified =
                            Some(row.baseline_verified.unwrap_or(true) && put.1 && signal.1);
                        row.parts.push((put.0, signal.0));
                    }
                    Side::Baseline => {
                        let seed = seed_for(i, 2) ^ round_salt(round);
                        let measured = if let Some(m) = &memcpy {
                            Some(m.row(&spec, seed, progress))
                        } else if let Some(c) = &cpu {
                            Some(c.row(&spec, seed, progress))
                        } else if let (Some(b), true) = (&mut baseline, atomic) {
                            Some(atomic::baseline_row(b, &mut peer, &spec, seed, progress)?)
                        } else if let Some(b) = &mut bell {
                            Some(b.row(&mut peer, &spec, progress)?)
                        } else if let Some(b) = &mut baseline {
                            Some(baseline_row(
                                b,
                                &mut peer,
                                &spec,
                                seed,
                                progress,
                                args.corrupt_for_test,
                            )?)
                        } else {
                            None
                        };
                        if let Some((s, ok)) = measured {
                            row.baseline_rounds.push(s);
                            row.baseline_verified =
                                Some(row.baseline_verified.unwrap_or(true) && ok);
                        }
                    }
                }
            }
        }
        row.rsm = Summary::median_of(&row.rsm_rounds);
        row.baseline = Summary::median_of(&row.baseline_rounds);
        if args.json {
            progress.clear();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", row.to_json());
            let _ = out.flush();
        }
        rows.push(row);
    }
    if let Some(init) = rsm {
        init.shutdown().await;
    }
    drop(baseline);
    drop(peer);
    if !args.json {
        progress.clear();
        print!("{}", report::table(&rows));
    }
    Ok(rows)
}

/// The parts of a round (`--op round`), measured by rsm one after the other as rows of
/// their own: an 8 B put, then a signal round trip.
async fn parts_row(
    init: &RsmInitiator,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    seed: u64,
    progress: &mut Progress,
    corrupt: bool,
) -> Result<((Summary, bool), (Summary, bool)), BenchError> {
    let put = RowSpec {
        op: Op::Put,
        ..*spec
    };
    let signal = RowSpec {
        op: Op::Signal,
        ..*spec
    };
    let put = rsm_row(init, peer, &put, seed, progress, corrupt).await?;
    let signal = rsm_row(init, peer, &signal, seed, progress, false).await?;
    Ok((put, signal))
}

/// The seeds of the data written and of what it overwrites: a transfer that moves nothing,
/// or moves the wrong bytes, leaves the other pattern behind.
/// The signal round trip of the baseline: the peer echoes every doorbell write while it
/// progresses.
fn baseline_signal_row(
    b: &mut Baseline,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    progress: &mut Progress,
) -> Result<(Summary, bool), BenchError> {
    progress.phase("baseline", "preparing");
    let (key, base) = b.open_doorbell()?;
    peer.expect_ok(&Command::Echo { key, base })?;
    peer.expect_ok(&Command::Progress)?;
    progress.phase("baseline", "warm-up");
    let (warmup, n) = (spec.warmup(), spec.timed());
    let mut samples =
        b.signal_latency(warmup, n, &mut |done| progress.tick("baseline", done, n))?;
    // Ends the peer's polling.
    peer.sum(&Command::Sum {
        len: 8,
        target: Target::Raw,
    })?;
    Ok((Summary::from_latency(&mut samples, spec.size), true))
}

fn seeds(op: Op, seed: u64) -> (u64, u64) {
    match op {
        Op::Put | Op::Putv | Op::Signal | Op::FetchAdd | Op::Cswap | Op::Add | Op::Round => {
            (seed, !seed)
        }
        Op::Get | Op::Getv => (!seed, seed),
    }
}

async fn rsm_row(
    init: &RsmInitiator,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    seed: u64,
    progress: &mut Progress,
    corrupt: bool,
) -> Result<(Summary, bool), BenchError> {
    let (local_seed, remote_seed) = seeds(spec.op, seed);
    let size = spec.size;
    progress.phase("rsm", "preparing");
    peer.expect_ok(&Command::Fill {
        seed: remote_seed,
        len: size,
        target: Target::Rsm,
    })?;
    let mut bufs: Vec<PageBuf> = (0..spec.slots())
        .map(|_| PageBuf::copy_of(&pattern::pattern(local_seed, size)))
        .collect();
    let summary = rsm_run::measure(init, spec, &mut bufs, progress).await?;
    progress.phase("rsm", "verifying");
    let want = pattern::pattern(seed, size);
    let ok = match spec.op {
        // Every round trip got its answer, or the run failed.
        // Atomic rows are checked in `atomic.rs`; signal rows got every answer.
        Op::Signal | Op::FetchAdd | Op::Cswap | Op::Add | Op::Round => true,
        Op::Put | Op::Putv => {
            if corrupt {
                peer.expect_ok(&Command::Corrupt {
                    offset: size / 2,
                    target: Target::Rsm,
                })?;
            }
            peer.sum(&Command::Sum {
                len: size,
                target: Target::Rsm,
            })? == pattern::fnv1a64(&want)
        }
        Op::Get | Op::Getv => {
            if corrupt {
                if let Some(b) = bufs.first_mut() {
                    b[size / 2] ^= 0xFF;
                }
            }
            bufs.len() == spec.slots() && bufs.iter().all(|b| b[..] == want[..])
        }
    };
    Ok((summary, ok))
}

fn baseline_row(
    b: &mut Baseline,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    seed: u64,
    progress: &mut Progress,
    corrupt: bool,
) -> Result<(Summary, bool), BenchError> {
    if spec.op == Op::Signal {
        return baseline_signal_row(b, peer, spec, progress);
    }
    let (local_seed, remote_seed) = seeds(spec.op, seed);
    let (op, size, slots) = (spec.op, spec.size, spec.slots());
    progress.phase("baseline", "preparing");
    peer.expect_ok(&Command::Fill {
        seed: remote_seed,
        len: size,
        target: Target::Raw,
    })?;
    b.fill_local(local_seed, size, slots)?;
    // rsm's progress threads on both nodes poll on for their idle window after rsm's last
    // operation (20 ms on shm): let them go to sleep first, so the baseline's two busy
    // pollers have the cores as they would without rsm loaded. A baseline round right
    // after an rsm round ran at 36-41 µs per 8-byte shm put instead of 1.0 µs.
    std::thread::sleep(rsm::test_util::longest_idle_window() * 2);
    // The peer busy-polls its queue from here until the next command.
    peer.expect_ok(&Command::Progress)?;
    progress.phase("baseline", "warm-up");
    let (warmup, n) = (spec.warmup(), spec.timed());
    let summary = match spec.mode {
        Mode::Latency => {
            let mut samples = b.latency(op, size, warmup, n, &mut |done| {
                progress.tick("baseline", done, n)
            })?;
            Summary::from_latency(&mut samples, size)
        }
        Mode::Bandwidth => {
            let mut batches = stats::Batches::new(n);
            let t = b.bandwidth(op, size, spec.window, warmup, n, &mut |done| {
                batches.note(done);
                progress.tick("baseline", done, n)
            })?;
            batches.tails(Summary::from_bandwidth(t, n as u64, size))
        }
    };
    progress.phase("baseline", "verifying");
    if corrupt {
        match op {
            Op::Put | Op::Putv => peer.expect_ok(&Command::Corrupt {
                offset: size / 2,
                target: Target::Raw,
            })?,
            Op::Get | Op::Getv => b.corrupt_local(size / 2)?,
            Op::Signal | Op::FetchAdd | Op::Cswap | Op::Add | Op::Round => {}
        }
    }
    // This command also ends the peer's polling.
    let remote_sum = peer.sum(&Command::Sum {
        len: size,
        target: Target::Raw,
    })?;
    let want = pattern::fnv1a64(&pattern::pattern(seed, size));
    let ok = match op {
        Op::Put | Op::Putv | Op::Signal | Op::FetchAdd | Op::Cswap | Op::Add | Op::Round => {
            remote_sum == want
        }
        // The peer's memory must still hold its pattern, and every slot must have got it.
        Op::Get | Op::Getv => remote_sum == want && b.check_local(seed, size, slots)?.is_none(),
    };
    Ok((summary, ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: Mode, size: usize, window: usize, iters: usize) -> RowSpec {
        RowSpec {
            op: Op::Put,
            mode,
            size,
            window,
            iters,
            rounds: 1,
        }
    }

    #[test]
    fn sample_counts() {
        // Latency: at least 1000 samples.
        assert_eq!(spec(Mode::Latency, 8, 1, 200).timed(), 1000);
        assert_eq!(spec(Mode::Latency, 8, 1, 5000).timed(), 5000);
        assert!(spec(Mode::Latency, 8, 1, 200).warmup() >= 16);
        // Bandwidth: more operations for small sizes, at least the window.
        assert_eq!(spec(Mode::Bandwidth, 8, 16, 1000).timed(), 20_000);
        assert_eq!(spec(Mode::Bandwidth, 4096, 16, 1000).timed(), 4096);
        assert_eq!(spec(Mode::Bandwidth, 1 << 20, 16, 1000).timed(), 1000);
        assert_eq!(spec(Mode::Bandwidth, 1 << 20, 64, 10).timed(), 64);
        assert!(spec(Mode::Bandwidth, 1 << 20, 64, 10).warmup() >= 128);
        // Rounds split the row's samples, rounded up, within a floor per round.
        let rounds = |mut s: RowSpec, n| {
            s.rounds = n;
            s.timed()
        };
        assert_eq!(rounds(spec(Mode::Latency, 8, 1, 200), 3), 334);
        assert_eq!(rounds(spec(Mode::Latency, 8, 1, 5000), 5), 1000);
        assert_eq!(rounds(spec(Mode::Latency, 8, 1, 200), 50), 100);
        assert_eq!(rounds(spec(Mode::Bandwidth, 8, 16, 1000), 3), 6667);
        assert_eq!(rounds(spec(Mode::Bandwidth, 1 << 20, 16, 1000), 4), 250);
        assert_eq!(rounds(spec(Mode::Bandwidth, 1 << 20, 64, 10), 3), 64);
    }

    #[test]
    fn rounds_alternate_which_side_goes_first() {
        let firsts: Vec<Side> = (0..5).map(|r| side_order(r)[0]).collect();
        assert_eq!(
            firsts,
            [
                Side::Rsm,
                Side::Baseline,
                Side::Rsm,
                Side::Baseline,
                Side::Rsm
            ]
        );
        for r in 0..5 {
            let [a, b] = side_order(r);
            assert_ne!(a, b, "round {r} measures both sides");
        }
    }

    #[test]
    fn seeds_differ_per_row_side_and_direction() {
        let all = [
            seed_for(0, 1),
            seed_for(0, 2),
            seed_for(1, 1),
            seed_for(1, 2),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // Rounds move other bytes; round 0 keeps the row's seed.
        assert_eq!(round_salt(0), 0);
        for (i, a) in all.iter().enumerate() {
            for b in &all[i..] {
                assert_ne!(a ^ round_salt(1), *b);
                assert_ne!(a ^ round_salt(2), b ^ round_salt(1));
            }
        }
        let (l, r) = seeds(Op::Put, 5);
        assert_eq!((l, r), (5, !5));
        let (l, r) = seeds(Op::Get, 5);
        assert_eq!((l, r), (!5, 5));
    }
}
