//! The cargo invocations behind `test` and `demo`, and running them in order.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::command::run_echoed;
use crate::failure::Failure;
use crate::spinners::{BUSY_SPINNERS, Spinners};

/// One cargo invocation.
pub struct Step {
    pub name: &'static str,
    pub cargo_args: &'static [&'static str],
    /// Set on the child only: xtask's own environment stays as it was given.
    pub env: &'static [&'static [(&'static str, &'static str)]],
    /// Runs with [`BUSY_SPINNERS`] CPU-bound spinners beside it (`cargo xtask test --busy`).
    pub busy: bool,
}

/// libfabric's tcp and sockets providers otherwise pick the first non-loopback
/// interface (eth0 in a container), while every endpoint these runs create is
/// on this host.
pub const LOOPBACK_FABRIC: &[(&str, &str)] = &[
    ("FI_TCP_IFACE", "lo"),
    ("FI_SOCKETS_IFACE", "lo"),
    ("FI_NET_IFACE", "lo"),
];

/// A failing test on a CI machine is only debuggable from its log.
const BACKTRACES: &[(&str, &str)] = &[("RUST_BACKTRACE", "1")];

pub const TEST: &[Step] = &[
    Step {
        name: "fmt",
        cargo_args: &["fmt", "--all", "--", "--check"],
        env: &[],
        busy: false,
    },
    Step {
        name: "clippy",
        cargo_args: &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
        busy: false,
    },
    // `cargo test` links the C library's tests against its rlib only: the C programs need
    // librsm_capi.so built beside them, with the features the tests build rsm with.
    Step {
        name: "capi",
        cargo_args: &["build", "-p", "rsm", "-p", "rsm-capi", "--all-features"],
        env: &[],
        busy: false,
    },
    Step {
        name: "test",
        cargo_args: &["test", "--workspace", "--all-features"],
        env: &[LOOPBACK_FABRIC, BACKTRACES],
        busy: false,
    },
    // The data-path suite again with owned buffers registered as a domain demanding
    // `FI_MR_LOCAL` wants them (DESIGN.md §5.1); the binaries are built. Signals are
    // injects, which take no descriptor: their suite is not repeated.
    Step {
        name: "test (forced FI_MR_LOCAL)",
        cargo_args: &[
            "test",
            "-p",
            "rsm",
            "--all-features",
            "--test",
            "data_path",
            "--test",
            "barriers",
            "--test",
            "scatter_gather",
            "--test",
            "typed",
            "--test",
            "ownership",
            "--test",
            "semantics",
        ],
        env: &[LOOPBACK_FABRIC, BACKTRACES, FORCE_MR_LOCAL],
        busy: false,
    },
    // Atomics take descriptors only where the provider performs them (shm0, sockets0).
    Step {
        name: "test (forced FI_MR_LOCAL, atomics)",
        cargo_args: &[
            "test",
            "-p",
            "rsm",
            "--all-features",
            "--test",
            "atomics",
            "--",
            "shm0",
            "sockets0",
        ],
        env: &[LOOPBACK_FABRIC, BACKTRACES, FORCE_MR_LOCAL],
        busy: false,
    },
    Step {
        name: "fuzz",
        cargo_args: &["test", "-p", "rsm", "--all-features", "--lib", "fuzz_"],
        env: &[FUZZ, BACKTRACES],
        busy: false,
    },
];

/// The suites whose waits a busy host stretches (signals, progress, the data path,
/// atomics), as `cargo test` arguments.
const BUSY_SUITES: &[&str] = &[
    "test",
    "-p",
    "rsm",
    "--all-features",
    "--test",
    "signals",
    "--test",
    "progress",
    "--test",
    "data_path",
    "--test",
    "atomics",
];

/// `cargo xtask test --busy` adds these to [`TEST`]: the suites built on a quiet host,
/// then run again with two CPU-bound spinners taking the machine's two cores beside them
/// (DESIGN.md §6: every await is woken by a descriptor or a completion).
pub const BUSY: &[Step] = &[
    Step {
        name: "busy suites (build)",
        cargo_args: &[
            "test",
            "-p",
            "rsm",
            "--all-features",
            "--test",
            "signals",
            "--test",
            "progress",
            "--test",
            "data_path",
            "--test",
            "atomics",
            "--no-run",
        ],
        env: &[],
        busy: false,
    },
    Step {
        name: "busy suites (two spinners)",
        cargo_args: BUSY_SUITES,
        env: &[LOOPBACK_FABRIC, BACKTRACES, BUSY_SCALE],
        busy: true,
    },
];

/// The busy run's long loops at a tenth of their length (`tests/common`, `scaled`): it
/// checks that waits are woken beside the spinners; the quiet run and `cargo xtask bench
/// --busy` cover volume.
const BUSY_SCALE: &[(&str, &str)] = &[("RSM_TEST_SCALE", "0.1")];

/// Makes every controller register owned buffers and pass their descriptors
/// (`src/backend/fabric/owned.rs`).
const FORCE_MR_LOCAL: &[(&str, &str)] = &[("RSM_FORCE_MR_LOCAL", "1")];

/// The fuzz targets of the frame decoder and the handshake (`fuzz_*` property tests), with
/// this many times their usual cases: a bounded run, a few tens of seconds.
const FUZZ: &[(&str, &str)] = &[("RSM_FUZZ_SCALE", "40")];

pub const DEMO: &[Step] = &[
    Step {
        name: "rsm info",
        cargo_args: &[
            "run",
            "--release",
            "-p",
            "rsm-cli",
            "--bin",
            "rsm",
            "--",
            "info",
        ],
        env: &[LOOPBACK_FABRIC],
        busy: false,
    },
    Step {
        name: "rsm demo",
        cargo_args: &[
            "run",
            "--release",
            "-p",
            "rsm-cli",
            "--bin",
            "rsm",
            "--",
            "demo",
        ],
        env: &[LOOPBACK_FABRIC],
        busy: false,
    },
];

/// Runs `steps` in order from the workspace root, stopping at the first that
/// fails, then prints how long each one took.
pub fn run_all(steps: &[Step]) -> Result<(), Failure> {
    run_lists(&[steps])
}

/// [`run_all`] over several lists one after the other, with one timing report.
pub fn run_lists(lists: &[&[Step]]) -> Result<(), Failure> {
    // Under `cargo xtask`, CARGO is the cargo that is running us: using it
    // keeps the toolchain (rustup override, +nightly) the same for the steps.
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let root = workspace_root();

    let mut timings = Vec::new();
    let mut outcome = Ok(());
    for step in lists.iter().copied().flatten() {
        eprintln!("xtask: == {} ==", step.name);
        let mut cmd = Command::new(&cargo);
        cmd.args(step.cargo_args).current_dir(&root);
        for (key, value) in step.env.iter().copied().flatten() {
            cmd.env(key, value);
        }
        let started = Instant::now();
        // Dropped (the spinners killed) as soon as the step ends, however it ends.
        let spinners = if step.busy {
            match Spinners::start(BUSY_SPINNERS) {
                Ok(spinners) => Some(spinners),
                Err(failure) => {
                    outcome = Err(failure);
                    break;
                }
            }
        } else {
            None
        };
        let result = run_echoed(&mut cmd, &format!("step `{}`", step.name));
        drop(spinners);
        timings.push((step.name, started.elapsed(), result.is_ok()));
        if let Err(failure) = result {
            outcome = Err(failure);
            break;
        }
    }
    report(&timings);
    outcome
}

/// The directory holding the workspace Cargo.toml, so the steps behave the
/// same whichever subdirectory `cargo xtask` was typed in.
pub fn workspace_root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR at run time too; preferring it over
    // the path compiled in keeps working if the checkout was moved.
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    match manifest_dir.parent() {
        Some(root) => root.to_path_buf(),
        None => manifest_dir,
    }
}

fn report(timings: &[(&str, Duration, bool)]) {
    let width = timings
        .iter()
        .map(|(name, ..)| name.len())
        .max()
        .unwrap_or(0);
    eprintln!("xtask: == elapsed ==");
    for (name, elapsed, ok) in timings {
        let verdict = if *ok { "" } else { "  (failed)" };
        eprintln!(
            "xtask: {name:<width$} {:>8.1} s{verdict}",
            elapsed.as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(step: &Step) -> Vec<(&str, &str)> {
        step.env.iter().copied().flatten().copied().collect()
    }

    #[test]
    fn test_step_keeps_libfabric_on_loopback_and_shows_backtraces() {
        let test = TEST.iter().find(|step| step.name == "test");
        let env = test.map(env_of).unwrap_or_default();
        for var in ["FI_TCP_IFACE", "FI_SOCKETS_IFACE", "FI_NET_IFACE"] {
            assert!(env.contains(&(var, "lo")), "{var} not set to lo");
        }
        assert!(env.contains(&("RUST_BACKTRACE", "1")));
    }

    #[test]
    fn demo_steps_keep_libfabric_on_loopback() {
        for step in DEMO {
            assert_eq!(env_of(step), LOOPBACK_FABRIC, "{}", step.name);
        }
    }

    #[test]
    fn demo_lists_the_controllers_then_walks_through() {
        let names: Vec<_> = DEMO.iter().map(|step| step.name).collect();
        assert_eq!(names, ["rsm info", "rsm demo"]);
    }

    #[test]
    fn test_steps_run_cheapest_first() {
        let names: Vec<_> = TEST.iter().map(|step| step.name).collect();
        assert_eq!(
            names,
            [
                "fmt",
                "clippy",
                "capi",
                "test",
                "test (forced FI_MR_LOCAL)",
                "test (forced FI_MR_LOCAL, atomics)",
                "fuzz"
            ]
        );
    }

    #[test]
    fn the_busy_run_builds_quietly_then_runs_its_suites_beside_spinners() {
        let busy: Vec<_> = BUSY.iter().map(|step| step.busy).collect();
        assert_eq!(busy, [false, true]);
        assert!(TEST.iter().all(|step| !step.busy));
        for suite in ["signals", "progress", "data_path", "atomics"] {
            for step in BUSY {
                assert!(step.cargo_args.contains(&suite), "{suite} in {}", step.name);
            }
        }
        let env = env_of(&BUSY[1]);
        assert!(env.contains(&("FI_TCP_IFACE", "lo")));
        assert!(env.contains(&("RSM_TEST_SCALE", "0.1")));
    }

    #[test]
    fn the_forced_run_registers_owned_buffers_on_loopback() {
        let forced = TEST.iter().find(|s| s.name == "test (forced FI_MR_LOCAL)");
        let env = forced.map(env_of).unwrap_or_default();
        assert!(env.contains(&("RSM_FORCE_MR_LOCAL", "1")));
        assert!(env.contains(&("FI_TCP_IFACE", "lo")));
    }
}
