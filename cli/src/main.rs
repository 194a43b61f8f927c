//! The `rsm` command: `info` lists the controllers, `topology` prints the topology, `bench`
//! measures put and get against a peer process it starts, `demo` walks through export, import
//! and access control with a second process.

mod bench;
mod demo;
mod keyfile;
mod sys;

use clap::{Parser, Subcommand};
use rsm::controller::ControllerInfo;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rsm",
    version,
    about = "Remote shared memory over libfabric: inspect and exercise a node"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every controller with its provider, fabric, domain and attributes.
    Info {
        /// One JSON array of objects instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make a node key: write the key file (mode 0600) and print its public key, the line
    /// the other nodes' trust files list for this node.
    Keygen {
        /// The key file to write (the configuration's `key_file`).
        #[arg(long, short, required_unless_present = "show", conflicts_with = "show")]
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
    /// Print the local node, its controllers and the remote nodes each reaches.
    Topology {
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
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
    /// Walk through export, publish with an access list, connect, put, get and the refusals,
    /// with a second process as the exporting node.
    Demo(demo::DemoArgs),
    /// The exporting node of `rsm demo` (started by it).
    #[command(hide = true)]
    DemoExporter(demo::ExporterArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RSM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
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
    let command = match cli.command {
        Command::Bench(args) => return rt.block_on(bench::run(args)),
        Command::BenchPeer(args) => return rt.block_on(bench::run_peer(args)),
        Command::BenchMemory(args) => return rt.block_on(bench::run_memory(args)),
        Command::BenchMemoryImporter(args) => {
            return rt.block_on(bench::run_memory_importer(args));
        }
        Command::Demo(args) => return rt.block_on(demo::run(args)),
        Command::DemoExporter(args) => return rt.block_on(demo::run_exporter(args)),
        other => other,
    };
    match rt.block_on(run(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsm: {e} [{}]", e.name());
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> rsm::Result<()> {
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
                    return Err(
                        rsm::Error::bad_conf().detail("keygen: give --out FILE or --show FILE")
                    );
                }
            };
            match node {
                Some(id) => println!("{id} {public}"),
                None => println!("{public}"),
            }
        }
        Command::Info { json } => {
            // Listing needs only the node's interface, not a running node.
            let config = rsm::Node::builder().resolve()?;
            let list = rsm::controller::list_controllers(config.listen.ip())?;
            if json {
                println!("{}", info_json(&list));
            } else {
                print!("{}", info_table(&list));
            }
        }
        Command::Topology { json } => {
            let node = rsm::Node::builder().start().await?;
            let topo = node.topology().await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&topo).unwrap_or_default()
                );
            } else {
                println!(
                    "local node {} (side channel {})",
                    topo.local_node,
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
        Command::Bench(_)
        | Command::BenchPeer(_)
        | Command::BenchMemory(_)
        | Command::BenchMemoryImporter(_)
        | Command::Demo(_)
        | Command::DemoExporter(_) => {
            unreachable!("dispatched in main")
        }
    }
    Ok(())
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
