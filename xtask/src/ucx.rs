//! UCX's figures for the small rows: `ucx_perftest` server and client on this host, the
//! client's `Final:` line read.
//!
//! Which test stands for which row is [`mapping`]; shared memory rows (loopback, shm0) run
//! with `UCX_TLS=sm,self`, tcp0 rows with `UCX_TLS=tcp UCX_NET_DEVICES=lo`.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::child::{run_child, wait_or_kill};
use crate::command::on_path;
use crate::failure::Failure;
use crate::row::Reading;

/// The program, from Debian's `ucx-utils`.
pub const PERFTEST: &str = "ucx_perftest";
const PACKAGE: &str = "ucx-utils";

/// The most one client may take; the server gets a little longer to notice it left.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);
const SERVER_GRACE: Duration = Duration::from_secs(5);
/// How long the server may take to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// UCX's transports for a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    SharedMemory,
    Tcp,
}

impl Tls {
    fn of(controller: &str) -> Option<Tls> {
        match controller {
            "loopback" | "shm0" => Some(Tls::SharedMemory),
            "tcp0" => Some(Tls::Tcp),
            _ => None,
        }
    }

    pub fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Tls::SharedMemory => &[("UCX_TLS", "sm,self")],
            Tls::Tcp => &[("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "lo")],
        }
    }
}

/// One `ucx_perftest` measurement: transport, test, outstanding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UcxRun {
    pub tls: Tls,
    pub test: &'static str,
    /// `-O`, for the bandwidth tests.
    pub window: Option<usize>,
}

impl UcxRun {
    /// How the report names it: `ucp_put_bw -O 64, UCX_TLS=sm,self`.
    pub fn label(&self) -> String {
        let window = self.window.map_or(String::new(), |w| format!(" -O {w}"));
        let env: Vec<String> = self
            .tls
            .env()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{}{window}, {}", self.test, env.join(" "))
    }

    /// Iterations: enough for a few hundred milliseconds on this host.
    fn iters(&self) -> usize {
        match (self.tls, self.test) {
            (Tls::SharedMemory, "ucp_put_bw") => 1_000_000,
            (Tls::SharedMemory, _) | (Tls::Tcp, "ucp_put_bw") => 100_000,
            (Tls::Tcp, "ucp_get") => 2_000,
            (Tls::Tcp, _) => 10_000,
        }
    }

    /// The server's (`client` false) or the client's command line on `port`.
    pub fn command(&self, port: u16, client: bool) -> Command {
        let mut cmd = Command::new(PERFTEST);
        if client {
            cmd.arg("127.0.0.1");
        }
        let iters = self.iters();
        cmd.args(["-t", self.test, "-s", "8"])
            .args(["-n", &iters.to_string(), "-w", &(iters / 10).to_string()])
            .args(["-p", &port.to_string()])
            .envs(self.tls.env().iter().copied());
        if let Some(w) = self.window {
            cmd.args(["-O", &w.to_string()]);
        }
        cmd
    }
}

/// The UCX test standing for an 8-byte row, and which of its figures the row reads.
/// `ucp_put_lat` is a ping-pong of puts whose latency UCX reports as half the round trip.
pub fn mapping(
    controller: &str,
    op: &str,
    mode: &str,
    size: usize,
    window: Option<usize>,
) -> Option<(UcxRun, Reading)> {
    let tls = Tls::of(controller)?;
    if size != 8 {
        return None;
    }
    let (test, window, reading) = match (op, mode) {
        ("put", "latency") => ("ucp_put_lat", None, Reading::HalfRoundTrip),
        ("signal", "latency") => ("ucp_put_lat", None, Reading::RoundTrip),
        ("get", "latency") => ("ucp_get", None, Reading::Latency),
        ("put", "bandwidth") => ("ucp_put_bw", Some(window.unwrap_or(16)), Reading::Rate),
        _ => return None,
    };
    Some((UcxRun { tls, test, window }, reading))
}

/// The client's `Final:` line: iterations; latency (or overhead) 50th percentile, average
/// and overall in µs; bandwidth average and overall in MiB/s; message rate average and
/// overall in messages/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Final {
    pub iters: f64,
    pub median_us: f64,
    pub average_us: f64,
    pub overall_us: f64,
    pub mib_per_s: f64,
    pub mib_per_s_overall: f64,
    pub rate: f64,
    pub rate_overall: f64,
}

impl Final {
    /// The figure `reading` takes: µs for the latencies, messages/s for a rate.
    pub fn value(&self, reading: Reading) -> f64 {
        match reading {
            Reading::HalfRoundTrip | Reading::Latency => self.median_us,
            Reading::RoundTrip => 2.0 * self.median_us,
            Reading::Rate => self.rate_overall,
        }
    }
}

/// The `Final:` line among the client's output lines.
pub fn parse_final(lines: &[String]) -> Option<Final> {
    let line = lines
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    let n: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.replace(',', "").parse().ok())
        .collect::<Option<_>>()?;
    let [
        iters,
        median_us,
        average_us,
        overall_us,
        mib,
        mib_overall,
        rate,
        rate_overall,
    ] = n[..]
    else {
        return None;
    };
    Some(Final {
        iters,
        median_us,
        average_us,
        overall_us,
        mib_per_s: mib,
        mib_per_s_overall: mib_overall,
        rate,
        rate_overall,
    })
}

/// Whether `ucx_perftest` is here; as root, installs `ucx-utils` with apt-get when not.
pub fn ensure() -> Result<(), Failure> {
    if on_path(PERFTEST) {
        return Ok(());
    }
    crate::deps::install(&[PACKAGE])?;
    if on_path(PERFTEST) {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "{PERFTEST} is still missing after apt-get install {PACKAGE}"
        )))
    }
}

/// A TCP port nothing listens on just now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Whether /proc/net/tcp (`table`) has a listening socket on `port`.
pub fn listening_in(table: &str, port: u16) -> bool {
    let want = format!("{port:04X}");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[3] == "0A" && f[1].rsplit(':').next() == Some(want.as_str())
    })
}

fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .any(|p| std::fs::read_to_string(p).is_ok_and(|t| listening_in(&t, port)))
}

/// One measurement: a server on a free port, the client against it; both children are
/// killed and reaped whatever happens.
pub fn measure(run: &UcxRun) -> Result<Final, String> {
    let port = free_port()?;
    let mut server = run
        .command(port, false)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {PERFTEST}: {e}"))?;
    let t0 = Instant::now();
    while !listening(port) {
        let exited = matches!(server.try_wait(), Ok(Some(_)));
        if exited || t0.elapsed() > LISTEN_TIMEOUT {
            wait_or_kill(&mut server, Instant::now());
            return Err(format!("the {PERFTEST} server did not listen on {port}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run_child(&mut run.command(port, true), CLIENT_TIMEOUT);
    wait_or_kill(&mut server, Instant::now() + SERVER_GRACE);
    parse_final(&out.stdout).ok_or_else(|| {
        format!(
            "{}: no Final line (exit {:?}): {}",
            run.label(),
            out.code,
            out.last_err
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_line_gives_every_column() {
        let out: Vec<String> = [
            "+--------------+",
            "[thread 0]      836   6078.907  5951.843  5925.742   0.00   0.00   168   169",
            "Final:                 10000      0.132     2.825   647.110        2.70       0.01      353934        1545",
        ]
        .map(String::from)
        .into();
        let f = parse_final(&out).unwrap();
        assert_eq!(
            (f.iters, f.median_us, f.average_us, f.overall_us),
            (10000.0, 0.132, 2.825, 647.110)
        );
        assert_eq!(
            (f.mib_per_s, f.mib_per_s_overall, f.rate, f.rate_overall),
            (2.70, 0.01, 353934.0, 1545.0)
        );
        assert_eq!(f.value(Reading::HalfRoundTrip), 0.132);
        assert_eq!(f.value(Reading::RoundTrip), 0.264);
        assert_eq!(f.value(Reading::Rate), 1545.0);
        // Thousands separators (-N), a short line, none at all.
        let sep = ["Final: 1,000 0.1 0.2 0.3 1.0 2.0 3,000 4,000".to_string()];
        assert_eq!(parse_final(&sep).unwrap().rate_overall, 4000.0);
        assert_eq!(parse_final(&["Final: 1 2 3".to_string()]), None);
        assert_eq!(parse_final(&["Final: a b c d e f g h".to_string()]), None);
        assert_eq!(parse_final(&[]), None);
    }

    #[test]
    fn rows_map_to_ucx_tests() {
        let (run, reading) = mapping("shm0", "put", "latency", 8, None).unwrap();
        assert_eq!(
            (run.test, run.tls, reading),
            ("ucp_put_lat", Tls::SharedMemory, Reading::HalfRoundTrip)
        );
        let (run, reading) = mapping("loopback", "signal", "latency", 8, None).unwrap();
        assert_eq!((run.test, reading), ("ucp_put_lat", Reading::RoundTrip));
        let (run, reading) = mapping("tcp0", "get", "latency", 8, None).unwrap();
        assert_eq!(
            (run.test, run.tls, reading),
            ("ucp_get", Tls::Tcp, Reading::Latency)
        );
        let (run, _) = mapping("loopback", "put", "bandwidth", 8, Some(64)).unwrap();
        assert_eq!((run.test, run.window), ("ucp_put_bw", Some(64)));
        assert_eq!(
            mapping("tcp0", "put", "bandwidth", 8, None)
                .unwrap()
                .0
                .window,
            Some(16)
        );
        assert_eq!(mapping("sockets0", "put", "latency", 8, None), None);
        assert_eq!(mapping("shm0", "put", "latency", 4096, None), None);
        assert_eq!(mapping("shm0", "fetch-add", "latency", 8, None), None);
        assert_eq!(run.label(), "ucp_put_bw -O 64, UCX_TLS=sm,self");
        let args: Vec<String> = mapping("tcp0", "put", "latency", 8, None)
            .unwrap()
            .0
            .command(4242, true)
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[..3], ["127.0.0.1", "-t", "ucp_put_lat"]);
        assert!(args.windows(2).any(|w| w == ["-p", "4242"]));
    }

    #[test]
    fn a_listening_port_is_found_in_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
                     0: 00000000:5BA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   \
                     1: 0100007F:5BA1 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listening_in(table, 0x5BA0));
        assert!(!listening_in(table, 0x5BA1), "established, not listening");
        assert!(!listening_in(table, 1234));
    }
}
