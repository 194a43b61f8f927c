//! The arguments of `rsm bench` and of the hidden `rsm bench-peer`, as clap derives that the
//! `rsm` binary embeds.

use clap::{Args, ValueEnum};
use std::fmt;
use std::str::FromStr;

/// The remote operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Op {
    /// Write local bytes into the peer's memory (delivery-complete: visible at the target).
    Put,
    /// Read the peer's memory into a local buffer.
    Get,
    /// A gathering put of 16 entries of `size / 16` bytes (scatter/gather, docs/rsmapi.md §4.5).
    Putv,
    /// A scattering get of 16 entries of `size / 16` bytes.
    Getv,
    /// Signal round trip: post to the peer's segment, which answers with a signal; the
    /// baseline is a plain `fi_inject_writedata` answered the same way (on loopback: a word
    /// in a page shared with the peer), both sides busy-polling. Sizes are ignored (one row,
    /// 8 B: the doorbell write).
    Signal,
    /// A fetch-and-add of 1 on a u64 (`ImportSegment::fetch_add`); the baseline is
    /// `fi_fetch_atomic` busy-polled (on loopback a CPU `fetch_add` on a shared page). Each
    /// slot of the window has its own word. Sizes are ignored (8 B).
    FetchAdd,
    /// A compare-and-swap of a u64 from its last value to the next (every one succeeds):
    /// `ImportSegment::compare_swap` against `fi_compare_atomic` (on loopback a CPU
    /// `compare_exchange`).
    Cswap,
    /// An add of 1 without a result, resolved once performed (`ImportSegment::atomic` with
    /// `AtomicOp::Sum`) against `fi_atomicmsg` with `FI_DELIVERY_COMPLETE` (on loopback a
    /// CPU `fetch_add` whose result is dropped).
    Add,
    /// The service round of `examples/signal_service.rs`: put an 8-byte record (a counter)
    /// into the peer's segment and signal it in one `put_signal` (two operations with
    /// `--round-two-ops`), await the answer of the peer's task, which reads and checks the
    /// record first. The baseline is not libfabric but the round's parts,
    /// measured by rsm in the same run: an 8 B put's median plus a signal round trip's.
    /// Sizes are ignored (one row, 8 B).
    Round,
}

impl Op {
    /// The name used in output: `put`, `get`, `signal`, `round`, ...
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Putv => "putv",
            Op::Getv => "getv",
            Op::Signal => "signal",
            Op::FetchAdd => "fetch-add",
            Op::Cswap => "cswap",
            Op::Add => "add",
            Op::Round => "round",
        }
    }

    /// Whether the operation is a remote atomic on one 8-byte word per slot.
    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, Op::FetchAdd | Op::Cswap | Op::Add)
    }

    /// Whether the operation writes the peer's memory.
    pub(crate) fn writes(self) -> bool {
        matches!(self, Op::Put | Op::Putv)
    }

    /// Whether the operation is a scatter/gather vector.
    pub(crate) fn is_vector(self) -> bool {
        matches!(self, Op::Putv | Op::Getv)
    }
}

/// How rsm's puts are completed in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BarrierArg {
    /// Each put resolves when its data is visible (the default barrier mode).
    Implicit,
    /// Explicit barrier mode: each latency sample is open, put, close; in bandwidth mode a
    /// window of puts is posted and closed by one barrier.
    Explicit,
}

/// The wait object of the baseline's completion queues.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BaselineWait {
    /// None: the queues are busy-polled, as fabtests' are (the default).
    #[default]
    None,
    /// An fd wait object (`FI_WAIT_FD`), as rsm's queues have on sockets so that their
    /// engines can sleep while idle; still busy-polled. Measures what the wait object alone
    /// costs the provider (on tcp;ofi_rxm its sockets join an epoll set, which is why rsm's
    /// tcp queues have none).
    Fd,
}

impl BaselineWait {
    /// The name used in output: `none` or `fd`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BaselineWait::None => "none",
            BaselineWait::Fd => "fd",
        }
    }

    /// Whether the queues ask for an fd wait object.
    pub(crate) fn wants_fd(self) -> bool {
        self == BaselineWait::Fd
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// One awaited operation in flight: median and p99 of each operation's time.
    Latency,
    /// A window of operations in flight: MB/s and operations per second.
    Bandwidth,
}

impl Mode {
    /// The name used in output: `latency` or `bandwidth`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Latency => "latency",
            Mode::Bandwidth => "bandwidth",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A comma-separated list of transfer sizes: `8,4096,65536` or `8,4K,64K,1M` (binary units:
/// `K`/`KiB` = 1024, `M`/`MiB`, `G`/`GiB`; an optional trailing `B`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SizeList(pub Vec<usize>);

/// The largest transfer size accepted (1 GiB).
pub(crate) const MAX_SIZE: usize = 1 << 30;

/// Parses one size such as `8`, `4K`, `64KiB`, `1M` or `1MB` (binary units).
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!("{s:?} is not a size (such as 8, 4K, 64K or 1M)"));
    }
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?}: the number is too large"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("{s:?}: unknown unit {other:?} (use K, M or G)")),
    };
    let size = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: the size is too large"))?;
    if size == 0 {
        return Err(format!("{s:?}: sizes start at 1 byte"));
    }
    if size > MAX_SIZE {
        return Err(format!("{s:?}: sizes are at most 1 GiB"));
    }
    Ok(size)
}

impl FromStr for SizeList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let sizes = s
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(parse_size)
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.is_empty() {
            return Err("give at least one size, such as 8,4K,64K,1M".into());
        }
        Ok(SizeList(sizes))
    }
}

impl fmt::Display for SizeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(usize::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// `rsm bench`: measures put or get between this process and a peer process it starts.
#[derive(Debug, Clone, Args)]
pub(crate) struct BenchArgs {
    /// The controller to measure, such as tcp0 or shm0 (see `rsm info`).
    #[arg(long)]
    pub(crate) controller: String,
    /// The operation: put (delivery-complete write), get (read), putv, getv, signal, a
    /// remote atomic on a u64 (fetch-add, cswap, add), or round (put, signal, answer).
    #[arg(long, value_enum, required_unless_present = "serve")]
    pub(crate) op: Option<Op>,
    /// Transfer sizes, comma-separated; K, M and G are binary units (8,4K,64K,1M).
    #[arg(long, default_value = "8,4096,65536,1048576")]
    pub(crate) sizes: SizeList,
    /// latency: one awaited operation in flight; bandwidth: a window of them.
    #[arg(long, value_enum, default_value_t = Mode::Latency)]
    pub(crate) mode: Mode,
    /// The barrier mode of rsm's puts (the baseline is unchanged).
    #[arg(long, value_enum, default_value_t = BarrierArg::Implicit)]
    pub(crate) barrier: BarrierArg,
    /// Operations in flight in bandwidth mode.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) window: u32,
    /// Bandwidth mode, put and get: rsm's operations come from this many tokio tasks, each
    /// awaiting its own puts or gets one after the other (own buffer, own offset), instead
    /// of one task keeping --window in flight; the baseline keeps its --window.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) tasks: Option<u32>,
    /// Timed operations per row, at least (latency rows take at least 1000 samples,
    /// bandwidth rows at least the window and more for small sizes).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub(crate) iters: u64,
    /// Also measure the same operations with plain libfabric calls (busy polling, as
    /// fabtests does) and report the ratio: above 1 means rsm is better.
    #[arg(long)]
    pub(crate) baseline: bool,
    /// The wait object of the baseline's completion queues, on both sides (the peer started
    /// with `--peer` must be started with the same value).
    #[arg(long, value_enum, default_value_t = BaselineWait::None)]
    pub(crate) baseline_wait: BaselineWait,
    /// Measure each row this many times, rsm and baseline alternating, each going first in
    /// every other round (rsm, baseline, baseline, rsm, ...), the row's samples split over the
    /// rounds; figures and ratio are the medians over the rounds, so one disturbed round does
    /// not flip the ratio.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) rounds: u32,
    /// With --op round: the round's record and signal as two operations (a put, then a
    /// signal) instead of one `put_signal`.
    #[arg(long)]
    pub(crate) round_two_ops: bool,
    /// Measure only the plain libfabric baseline (no rsm node): a harness self-test.
    #[arg(long, hide = true)]
    pub(crate) baseline_only: bool,
    /// Test hook: corrupt one byte after each run, so that verification must fail.
    #[arg(long, hide = true)]
    pub(crate) corrupt_for_test: bool,
    /// One JSON object per line and row instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// The spin budget of the measuring node, in microseconds (`NodeBuilder::spin_budget`;
    /// 0: the engine does all the progress). Default: the provider's tuned figures.
    #[arg(long, value_name = "US")]
    pub(crate) spin_budget_us: Option<u64>,
    /// Run against a peer serving on HOST (`rsm bench --serve` there, on this or another
    /// host; port 7470 unless given) instead of starting one; its controller and size must
    /// cover the run. This side listens and sends from its address toward HOST.
    #[arg(long, value_name = "HOST[:PORT]", value_parser = parse_endpoint, conflicts_with = "serve")]
    pub(crate) peer: Option<std::net::SocketAddr>,
    /// Serve `rsm bench --peer` runs on ADDR (port 7470 unless given) until a `quit` line on
    /// standard input or the end of the process: the peer of runs from other hosts. Its
    /// rsm node and baseline endpoint use ADDR's interface (the configuration's listen
    /// address when ADDR is 0.0.0.0); --controller and the largest of --sizes (or
    /// --max-size) say what it registers.
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_endpoint)]
    pub(crate) serve: Option<std::net::SocketAddr>,
    /// With --serve: the bytes to register and export (default: the largest of --sizes).
    #[arg(long, value_parser = parse_size, requires = "serve")]
    pub(crate) max_size: Option<usize>,
}

/// The port `rsm bench --serve` listens on and `--peer` dials when none is given.
pub(crate) const BENCH_PORT: u16 = 7470;

/// `ip`, `ip:port`, `[v6]:port` or a host name (resolved), with [`BENCH_PORT`] when no port.
pub(crate) fn parse_endpoint(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(a) = s.parse::<std::net::SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, BENCH_PORT));
    }
    let with_port = if s.contains(':') {
        s.to_string()
    } else {
        format!("{s}:{BENCH_PORT}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("{s:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

impl BenchArgs {
    /// The operation measured (`--serve` measures nothing; put then).
    pub(crate) fn op(&self) -> Op {
        self.op.unwrap_or(Op::Put)
    }
}

/// `rsm bench-peer` (hidden): the target process `rsm bench` starts and talks to over its
/// standard input and output.
#[derive(Debug, Clone, Args)]
pub(crate) struct PeerArgs {
    /// The controller, as given to `rsm bench`.
    #[arg(long)]
    pub(crate) controller: String,
    /// Bytes to register (raw baseline) and export (rsm); K, M and G accepted.
    #[arg(long, value_parser = parse_size)]
    pub(crate) max_size: usize,
    /// Do not start an rsm node (baseline-only runs).
    #[arg(long)]
    pub(crate) no_rsm: bool,
    /// The wait object of the baseline's completion queue (see `rsm bench --baseline-wait`).
    #[arg(long, value_enum, default_value_t = BaselineWait::None)]
    pub(crate) baseline_wait: BaselineWait,
    /// Serve `rsm bench --peer` runs on this TCP address (one at a time) instead of
    /// standard input and output; prints the bound address on standard output.
    #[arg(long, value_name = "ADDR")]
    pub(crate) serve: Option<std::net::SocketAddr>,
    /// The side-channel address of this peer's rsm node (a routable one for runs from
    /// another host; default: loopback).
    #[arg(long, value_name = "ADDR")]
    pub(crate) node_listen: Option<std::net::SocketAddr>,
    /// Open the baseline's endpoint with remote atomics (`--op fetch-add|cswap|add`): on
    /// tcp that is `tcp;ofi_rxm`, whose atomics libfabric emulates over messages.
    #[arg(long)]
    pub(crate) atomics: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn sizes_accept_plain_numbers_and_binary_units() {
        assert_eq!(
            "8,4096,65536,1048576".parse::<SizeList>().unwrap().0,
            vec![8, 4096, 65536, 1 << 20]
        );
        assert_eq!(
            "8,4K,64K,1M".parse::<SizeList>().unwrap().0,
            vec![8, 4096, 65536, 1 << 20]
        );
        assert_eq!(
            " 1k , 2KiB,3MB,1G ,".parse::<SizeList>().unwrap().0,
            vec![1024, 2048, 3 << 20, 1 << 30]
        );
        assert_eq!(parse_size("16B").unwrap(), 16);
        for bad in [
            "",
            "0",
            "K",
            "4X",
            "-1",
            "2G",
            "99999999999999999999999",
            "1.5M",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!("".parse::<SizeList>().is_err());
        assert!(",,".parse::<SizeList>().is_err());
        assert!("8,0".parse::<SizeList>().is_err());
    }

    #[test]
    fn bench_arguments_and_defaults() {
        let cli = Cli::try_parse_from(["x", "--controller", "tcp0", "--op", "put"]).unwrap();
        let b = cli.bench;
        assert_eq!(b.controller, "tcp0");
        assert_eq!(b.op, Some(Op::Put));
        assert_eq!(b.mode, Mode::Latency);
        assert_eq!(b.sizes.0, vec![8, 4096, 65536, 1 << 20]);
        assert_eq!((b.window, b.iters, b.rounds), (16, 1000, 1));
        assert!(!b.baseline && !b.baseline_only && !b.json);

        let cli = Cli::try_parse_from([
            "x",
            "--controller",
            "shm0",
            "--op",
            "get",
            "--sizes",
            "8,4K,64K,1M",
            "--mode",
            "bandwidth",
            "--window",
            "4",
            "--iters",
            "50",
            "--baseline",
            "--json",
            "--rounds",
            "5",
        ])
        .unwrap();
        let b = cli.bench;
        assert_eq!(
            (b.op(), b.mode, b.window, b.iters, b.rounds),
            (Op::Get, Mode::Bandwidth, 4, 50, 5)
        );
        assert_eq!(b.sizes.to_string(), "8,4096,65536,1048576");
        assert!(b.baseline && b.json);
        assert_eq!(b.peer, None);
        let cli = Cli::try_parse_from([
            "x",
            "--controller",
            "tcp0",
            "--op",
            "put",
            "--peer",
            "127.0.0.1:7500",
        ])
        .unwrap();
        assert_eq!(cli.bench.peer, Some("127.0.0.1:7500".parse().unwrap()));
        assert_eq!(cli.bench.tasks, None);
        let cli = Cli::try_parse_from([
            "x",
            "--controller",
            "shm0",
            "--op",
            "put",
            "--mode",
            "bandwidth",
            "--tasks",
            "64",
        ])
        .unwrap();
        assert_eq!(cli.bench.tasks, Some(64));
        let cli = Cli::try_parse_from(["x", "--controller", "shm0", "--op", "round"]).unwrap();
        assert_eq!(cli.bench.op(), Op::Round);
        assert_eq!(Op::Round.to_string(), "round");
        // A host alone gets the default port; --serve needs no --op.
        let cli = Cli::try_parse_from([
            "x",
            "--controller",
            "tcp0",
            "--op",
            "get",
            "--peer",
            "10.1.2.3",
        ])
        .unwrap();
        assert_eq!(cli.bench.peer, Some("10.1.2.3:7470".parse().unwrap()));
        let cli = Cli::try_parse_from(["x", "--controller", "tcp0", "--serve", "0.0.0.0"]).unwrap();
        assert_eq!(cli.bench.serve, Some("0.0.0.0:7470".parse().unwrap()));
        assert!(Cli::try_parse_from(["x", "--controller", "tcp0"]).is_err());
        assert!(
            Cli::try_parse_from([
                "x",
                "--controller",
                "tcp0",
                "--op",
                "put",
                "--max-size",
                "1M"
            ])
            .is_err()
        );

        for bad in [
            &["x", "--controller", "tcp0"][..],
            &["x", "--controller", "tcp0", "--op", "swap"],
            &["x", "--controller", "tcp0", "--op", "put", "--window", "0"],
            &[
                "x",
                "--controller",
                "tcp0",
                "--op",
                "put",
                "--sizes",
                "8,banana",
            ],
            &["x", "--controller", "tcp0", "--op", "put", "--mode", "fast"],
            &["x", "--controller", "tcp0", "--op", "put", "--rounds", "0"],
            &["x", "--controller", "tcp0", "--op", "put", "--tasks", "0"],
            &[
                "x",
                "--controller",
                "tcp0",
                "--op",
                "put",
                "--tasks",
                "4097",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} accepted");
        }
    }
}
