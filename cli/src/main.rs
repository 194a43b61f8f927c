//! The `rsm` command: `info` lists the controllers, `topology` prints the topology, `segments`
//! lists what a node publishes to this one, `bench`
//! measures put and get against a peer process it starts, `demo` walks through export, import
//! and access control with a second process.

mod bench;
mod demo;
mod keyfile;
mod sys;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};
use rsm::controller::ControllerInfo;
use std::io::IsTerminal;
use std::process::ExitCode;

/// The exit statuses and variables, after the options in `rsm --help`.
const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  an error (the message names the RSMAPI error, e.g. [RSMERR_BAD_CONF]); bench: a byte
     was wrong; demo: a step did not behave as expected; info with --provider or
     --controller: no controller matches
  2  the command line is wrong; bench, bench-scale and demo: the run could not go on

Environment:
  RSM_LOG             log filter, tracing's EnvFilter syntax (\"rsm=debug,warn\"); overrides
                      -q and -v; the default is \"warn\"
  RSM_CONFIG          the node's TOML configuration file (default /etc/rsm/rsm.toml, if
                      present; --config FILE instead)
  RSM_NODE_ID         the node id (over the file's node_id)
  RSM_LISTEN          the side channel's listen address, ip:port
  RSM_PEERS           the peer table, id=ip:port,id=ip:port,...
  RSM_KEY_FILE        this node's key file (rsm keygen writes it, or --out FILE)
  RSM_TRUST_FILE      the trusted nodes' public keys, one \"id key\" line each
  RSM_SPIN_BUDGET_US  how long an awaiting task busy-polls in one poll, in microseconds
  RSM_SEGMENTID_FILE  the segment-id ranges file (default /etc/rsm/rsm.segmentid)
The fabric providers read their own FI_* variables (FI_TCP_IFACE, FI_LOG_LEVEL, ...).";

#[derive(Parser)]
#[command(
    name = "rsm",
    version,
    about = "Remote shared memory over libfabric: inspect and exercise a node",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Log errors only (unless RSM_LOG is set).
    #[arg(long, short, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Log more: -v info, -vv debug, -vvv trace (unless RSM_LOG is set).
    #[arg(long, short, global = true, action = ArgAction::Count)]
    verbose: u8,
    /// Show the progress line even when standard error is not a terminal.
    #[arg(long, global = true)]
    progress: bool,
    /// The node's TOML configuration file, as the library reads it (instead of RSM_CONFIG
    /// or /etc/rsm/rsm.toml); the RSM_* variables still apply over it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The tracing filter -q and -v ask for (RSM_LOG, when set, wins over it).
    fn log_filter(&self) -> &'static str {
        match (self.quiet, self.verbose) {
            (true, _) => "error",
            (false, 0) => "warn",
            (false, 1) => "info",
            (false, 2) => "debug",
            (false, _) => "trace",
        }
    }

    /// Whether the progress line is shown: on a terminal unless --quiet, or with --progress.
    fn show_progress(&self) -> bool {
        self.progress || (!self.quiet && std::io::stderr().is_terminal())
    }
}

/// The log filter: `RSM_LOG` when set (an empty one counts as unset), else what -q and -v
/// ask for. A `RSM_LOG` that does not parse is said so, and the default used.
fn log_filter(cli: &Cli) -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::EnvFilter;
    match std::env::var("RSM_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).unwrap_or_else(|e| {
            eprintln!("rsm: RSM_LOG={v:?} is not a log filter ({e}); using the default");
            EnvFilter::new(cli.log_filter())
        }),
        _ => EnvFilter::new(cli.log_filter()),
    }
}

/// `rsm --version`: this command's version, and libfabric's, as loaded and as built against.
fn long_version() -> String {
    format!(
        "{} (libfabric {}, built against {})",
        env!("CARGO_PKG_VERSION"),
        rsm_fabric::library_version(),
        rsm_fabric::header_version()
    )
}

#[derive(Subcommand)]
enum Command {
    /// List every controller with its provider, fabric, domain and attributes.
    Info {
        /// One JSON array of objects instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the controllers of this libfabric provider (`tcp` matches `tcp` and
        /// `tcp;ofi_rxm`), as `fi_info -p` filters; `loopback` is the loopback controller.
        #[arg(long, short, value_name = "NAME")]
        provider: Option<String>,
        /// Only the controller of this name (`tcp0`, `shm0`, `loopback`; any case).
        #[arg(long, short, value_name = "NAME")]
        controller: Option<String>,
    },
    /// Make a node key: write the key file (mode 0600, never over an existing one without
    /// --force) and print its public key, the line the other nodes' trust files list for
    /// this node. Without --out it writes the configured key file (RSM_KEY_FILE, or key_file
    /// in the configuration file), else /etc/rsm/node.key, and says where on standard error.
    Keygen {
        /// The key file to write [default: the configured key_file, else /etc/rsm/node.key].
        #[arg(long, short, conflicts_with = "show", value_name = "FILE")]
        out: Option<std::path::PathBuf>,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
        /// Print the public key of an existing key file instead.
        #[arg(long, value_name = "FILE")]
        show: Option<std::path::PathBuf>,
        /// The node id to print before the public key, as a trust file lists it.
        #[arg(long)]
        node: Option<u32>,
    },
    /// Print the local node, its controllers and the remote nodes each reaches. It joins
    /// as an observer, beside the host's running node: another node id (--id), an
    /// ephemeral port on the configured address, the configured key.
    Topology {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The observer's node id (default: the configured id + 2^31); with keys, the
        /// peers' trust files list the host's public key under it too.
        #[arg(long, value_name = "ID")]
        id: Option<u32>,
    },
    /// List the segments a node publishes to this one: one line each with its id (hex), size,
    /// the access this node would get, the controller and the name. It asks as an observer,
    /// as topology does: the listing is what the node publishes to the observer's id (--id)
    /// and this user, on one host as the kernel says.
    Segments {
        /// The node to ask.
        #[arg(value_name = "NODE")]
        node: u32,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The observer's node id (default: the configured id + 2^31); give the configured
        /// id when the host's node is not running, to see what is published to it.
        #[arg(long, value_name = "ID")]
        id: Option<u32>,
    },
    /// Measure put or get latency or bandwidth against a peer process this command starts,
    /// verifying every byte; --baseline compares with plain libfabric calls.
    Bench(bench::BenchArgs),
    /// The peer process of `rsm bench` (started by it).
    #[command(hide = true)]
    BenchPeer(bench::PeerArgs),
    /// What an exporting node keeps resident for many published segments and importers.
    #[command(hide = true)]
    BenchMemory(bench::MemoryArgs),
    /// An importer process of `rsm bench-memory` (started by it).
    #[command(hide = true)]
    BenchMemoryImporter(bench::MemoryImporterArgs),
    /// A cluster's worth of nodes on this machine: the connect storm, idle CPU and memory.
    BenchScale(bench::ScaleArgs),
    /// A node process of `rsm bench-scale` (started by it).
    #[command(hide = true)]
    BenchScaleNode(bench::ScaleNodeArgs),
    /// Walk through export, publish with an access list, connect, put, get and the refusals,
    /// with a second process as the exporting node.
    Demo(demo::DemoArgs),
    /// The exporting node of `rsm demo` (started by it).
    #[command(hide = true)]
    DemoExporter(demo::ExporterArgs),
}

fn main() -> ExitCode {
    // The libfabric version is known only at run time: clap's `version` gets it here.
    let version: &'static str = Box::leak(long_version().into_boxed_str());
    let cli = match Cli::from_arg_matches(&Cli::command().version(version).get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(&cli))
        .with_writer(std::io::stderr)
        .init();
    let progress = cli.show_progress();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rsm: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = cli.config;
    let command = match cli.command {
        Command::Bench(args) => return rt.block_on(bench::run(args, config, progress)),
        Command::BenchPeer(args) => return rt.block_on(bench::run_peer(args)),
        Command::BenchMemory(args) => return rt.block_on(bench::run_memory(args)),
        Command::BenchMemoryImporter(args) => {
            return rt.block_on(bench::run_memory_importer(args));
        }
        Command::BenchScale(args) => return rt.block_on(bench::run_scale(args)),
        Command::BenchScaleNode(args) => return rt.block_on(bench::run_scale_node(args)),
        Command::Demo(args) => return rt.block_on(demo::run(args)),
        Command::DemoExporter(args) => return rt.block_on(demo::run_exporter(args)),
        other => other,
    };
    match rt.block_on(run(command, config.as_deref())) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rsm: {e} [{}]", e.name());
            ExitCode::FAILURE
        }
    }
}

/// A node builder reading the configuration as the library does, from `config` when given.
pub(crate) fn builder(config: Option<&std::path::Path>) -> rsm::NodeBuilder {
    match config {
        Some(path) => rsm::Node::builder().config_file(path),
        None => rsm::Node::builder(),
    }
}

/// The node id `rsm topology` observes as by default: the configured id with the top bit
/// set, which no node should have (README, "Running on several hosts").
fn observer_id(node: u32) -> u32 {
    node ^ 0x8000_0000
}

async fn run(command: Command, config: Option<&std::path::Path>) -> rsm::Result<ExitCode> {
    match command {
        Command::Keygen {
            out,
            force,
            show,
            node,
        } => {
            let public = match (out, show) {
                (_, Some(path)) => keyfile::show(&path)?,
                (Some(path), None) => keyfile::write(&path, force)?,
                (None, None) => {
                    let (path, why) = keyfile::default_path(&builder(config))?;
                    let public = keyfile::write(&path, force)?;
                    // Standard output carries the public line only; where the secret went, here.
                    eprintln!("rsm keygen: wrote {} (mode 0600), {why}", path.display());
                    public
                }
            };
            match node {
                Some(id) => println!("{id} {public}"),
                None => println!("{public}"),
            }
        }
        Command::Info {
            json,
            provider,
            controller,
        } => {
            // Listing needs only the node's interface, not a running node.
            let config = builder(config).resolve()?;
            let mut list = rsm::controller::list_controllers(config.listen.ip())?;
            list.retain(|c| matches_filter(c, provider.as_deref(), controller.as_deref()));
            if list.is_empty() && (provider.is_some() || controller.is_some()) {
                eprintln!("rsm info: no controller matches the filter");
                return Ok(ExitCode::FAILURE);
            }
            if json {
                println!("{}", info_json(&list));
            } else {
                print!("{}", info_table(&list));
            }
        }
        Command::Topology { json, id } => {
            // An observer beside the host's running node: its own id and port, so that it
            // neither takes the node's name nor looks like its restart to the peers.
            let resolved = builder(config).resolve()?;
            let observer = id.unwrap_or_else(|| observer_id(resolved.node_id));
            let node = builder(config)
                .id(observer)
                .listen(std::net::SocketAddr::new(resolved.listen.ip(), 0))
                .start()
                .await?;
            let topo = node.topology().await?;
            if json {
                let mut v = serde_json::to_value(&topo).unwrap_or_default();
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("local_node".into(), resolved.node_id.into());
                    obj.insert("observer".into(), observer.into());
                }
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                println!(
                    "local node {} (observed as node {observer}, side channel {})",
                    resolved.node_id,
                    node.listen_addr()
                );
                for c in &topo.controllers {
                    println!("  {} at {}", c.controller, c.address);
                    if c.remotes.is_empty() {
                        println!(
                            "    no remote node answers (RSM_PEERS or the config file name them)"
                        );
                    }
                    for r in &c.remotes {
                        println!(
                            "    node {} {} at {} ({:?})",
                            r.node, r.controller, r.address, r.state
                        );
                    }
                }
            }
            node.shutdown().await;
        }
        Command::Segments { node, json, id } => {
            let resolved = builder(config).resolve()?;
            let observer = id.unwrap_or_else(|| observer_id(resolved.node_id));
            let me = builder(config)
                .id(observer)
                .listen(std::net::SocketAddr::new(resolved.listen.ip(), 0))
                .start()
                .await?;
            let listed = me.segments(rsm::NodeId(node)).await;
            me.shutdown().await;
            let listed = listed?;
            if json {
                let v = serde_json::json!({
                    "node": node,
                    "observer": observer,
                    "segments": listed,
                });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", segments_table(&listed));
            }
        }
        Command::Bench(_)
        | Command::BenchPeer(_)
        | Command::BenchMemory(_)
        | Command::BenchMemoryImporter(_)
        | Command::BenchScale(_)
        | Command::BenchScaleNode(_)
        | Command::Demo(_)
        | Command::DemoExporter(_) => {
            unreachable!("dispatched in main")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rsm segments`' lines: id in hex, size in bytes, access (`rw`, `r-`, `-w`), controller,
/// name (`-` for none), in columns.
fn segments_table(list: &[rsm::SegmentInfo]) -> String {
    let access = |p: rsm::Perm| {
        let r = if p.allows(rsm::Perm::READ) { 'r' } else { '-' };
        let w = if p.allows(rsm::Perm::WRITE) { 'w' } else { '-' };
        format!("{r}{w}")
    };
    // The strings are the peer's: control characters are shown escaped, never sent to the
    // terminal.
    let shown = |s: &str| -> String {
        if s.chars().any(char::is_control) {
            s.escape_debug().to_string()
        } else {
            s.to_string()
        }
    };
    let width = list.iter().map(|s| s.controller.len()).max().unwrap_or(0);
    list.iter()
        .map(|s| {
            format!(
                "{:<10} {:>12} {} {:<width$} {}\n",
                s.id.to_string(),
                s.size,
                access(s.perm),
                shown(&s.controller),
                s.name.as_deref().map_or("-".into(), shown)
            )
        })
        .collect()
}

/// Whether `c` passes `rsm info`'s filters: the provider named as a whole or as one layer of
/// a stack (`udp` matches `udp;ofi_rxd`), the controller by its name; both case-insensitive.
fn matches_filter(c: &ControllerInfo, provider: Option<&str>, controller: Option<&str>) -> bool {
    let provider_ok = provider.is_none_or(|p| {
        c.provider.eq_ignore_ascii_case(p)
            || c.provider
                .split(';')
                .any(|layer| layer.eq_ignore_ascii_case(p))
    });
    let controller_ok = controller.is_none_or(|n| c.name.eq_ignore_ascii_case(n));
    provider_ok && controller_ok
}

/// One flat object per controller: name, provider, fabric, domain, address, one key per
/// attribute of `rsmapi_controller_attr_t`, then the provider's own attributes.
fn info_json(list: &[ControllerInfo]) -> String {
    let rows: Vec<serde_json::Value> = list
        .iter()
        .map(|c| {
            let mut obj = serde_json::Map::new();
            obj.insert("name".into(), c.name.clone().into());
            obj.insert("provider".into(), c.provider.clone().into());
            obj.insert("fabric".into(), c.fabric.clone().into());
            obj.insert("domain".into(), c.domain.clone().into());
            obj.insert("address".into(), c.address.clone().into());
            for src in [
                serde_json::to_value(&c.attr),
                serde_json::to_value(&c.provider_attr),
            ] {
                if let Ok(serde_json::Value::Object(m)) = src {
                    obj.extend(m);
                }
            }
            obj.insert("atomics".into(), c.atomics.path.into());
            obj.insert("atomics_native".into(), c.atomics.native_count().into());
            obj.insert("atomics_offered".into(), c.atomics.offered_count().into());
            obj.insert("atomics_max_count".into(), c.atomics.max_count().into());
            serde_json::Value::Object(obj)
        })
        .collect();
    serde_json::to_string_pretty(&rows).unwrap_or_default()
}

fn human(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 60, "EiB"),
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
    ];
    if n == u64::MAX {
        return "unlimited".into();
    }
    for (size, unit) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    n.to_string()
}

/// How a controller performs remote atomics, in one line.
fn atomics_row(a: &rsm::controller::AtomicSupport) -> String {
    let (native, offered) = (a.native_count(), a.offered_count());
    match a.path {
        "cpu" => "cpu (shared mapping; the exporter for caller memory)".into(),
        "provider" => format!(
            "provider ({native} of {offered} native, up to {} values a post)",
            a.max_count()
        ),
        "exporter" => format!("exporter (side channel; 0 of {offered} native)"),
        other => format!(
            "{other} ({native} of {offered} native; the exporter performs {})",
            a.not_native().join(" ")
        ),
    }
}

fn info_table(list: &[ControllerInfo]) -> String {
    let mut out = String::new();
    for c in list {
        let a = &c.attr;
        out.push_str(&format!("{}\n", c.name));
        let mut rows: Vec<(&str, String)> = vec![
            ("provider", c.provider.clone()),
            ("fabric", c.fabric.clone()),
            ("domain", c.domain.clone()),
            ("address", c.address.clone()),
            (
                "direct_access_sizes",
                format!("{:#x}", a.direct_access_sizes),
            ),
            ("atomic_sizes", format!("{:#x}", a.atomic_sizes)),
            ("page_size", a.page_size.to_string()),
            ("max_export_segment_size", human(a.max_export_segment_size)),
            ("tot_export_segment_size", human(a.tot_export_segment_size)),
            ("max_export_segments", human(a.max_export_segments)),
            ("max_import_map_size", human(a.max_import_map_size)),
            ("tot_import_map_size", human(a.tot_import_map_size)),
            ("max_import_segments", human(a.max_import_segments)),
            ("atomics", atomics_row(&c.atomics)),
        ];
        if let Some(p) = &c.provider_attr {
            rows.extend([
                (
                    "mr_mode",
                    if p.mr_mode.is_empty() {
                        "none".into()
                    } else {
                        p.mr_mode.join("|")
                    },
                ),
                ("owned buffers", p.owned_buffers.into()),
                ("mr_key_size", p.mr_key_size.to_string()),
                ("max_msg_size", human(p.max_msg_size)),
                ("inject_size", p.inject_size.to_string()),
                ("tx_size", p.tx_size.to_string()),
                (
                    "iov_limit / rma_iov_limit",
                    format!("{} / {}", p.iov_limit, p.rma_iov_limit),
                ),
                ("cq_data_size", p.cq_data_size.to_string()),
                (
                    "progress",
                    if p.auto_progress {
                        "auto".into()
                    } else {
                        "manual".into()
                    },
                ),
                ("wait", p.wait.into()),
            ]);
        }
        for (k, v) in rows {
            out.push_str(&format!("    {k:<26} {v}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_lines_escape_what_a_peer_could_send_to_the_terminal() {
        let seg = |name: Option<&str>| rsm::SegmentInfo {
            id: rsm::SegmentId(0x400001),
            size: 4096,
            perm: rsm::Perm::READ,
            controller: "tcp0".into(),
            name: name.map(str::to_string),
        };
        let out = segments_table(&[seg(Some("a\u{1b}[2Jb")), seg(None)]);
        assert!(!out.contains('\u{1b}'), "{out:?}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["0x400001", "4096", "r-", "tcp0", "a\\u{1b}[2Jb"]
        );
        assert!(lines[1].ends_with(" -"), "{out}");
    }
}
