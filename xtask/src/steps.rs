//! The cargo invocations behind `test` and `demo`, and running them in order.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::command::run_echoed;
use crate::failure::Failure;
use crate::lanes::{self, Job};
use crate::spinners::{BUSY_SPINNERS, Spinners};

/// One cargo invocation.
pub struct Step {
    pub name: &'static str,
    pub cargo_args: &'static [&'static str],
    /// Set on the child only: xtask's own environment stays as it was given.
    pub env: &'static [&'static [(&'static str, &'static str)]],
    /// Runs with [`BUSY_SPINNERS`] CPU-bound spinners beside it (`cargo xtask test --busy`).
    pub busy: bool,
    /// When not empty, `cargo_args` only builds (`--no-run`) and these run side by side.
    pub suites: &'static [Suite],
    /// Cargo invocations (their arguments) run one after another beside the suites from the
    /// build's end, after the doc tests, at idle priority (`nice -n 19`), in the build's
    /// target dir: they take the CPU the suites' waits leave. The step fails if one fails.
    pub beside: &'static [&'static [&'static str]],
}

/// Test binaries to run with the same arguments and environment.
pub struct Suite {
    pub binaries: Binaries,
    /// Passed to every binary: test-name filters, say.
    pub args: &'static [&'static str],
    pub env: &'static [&'static [(&'static str, &'static str)]],
    /// Tells this run of a binary from its others in the log.
    pub label: &'static str,
}

/// Which binaries a [`Suite`] runs.
pub enum Binaries {
    /// Every test binary the build made.
    All,
    /// The rsm package's targets of these names (its unit tests are target `rsm`).
    Rsm(&'static [&'static str]),
    /// The workspace's doc tests, which only cargo runs (`cargo test --doc`): first in the
    /// lane of the cargo invocations beside the suites, which share its target dir's lock.
    Doc,
}

/// The suites that take minutes, slowest first: they start first, so that no lane is left
/// alone with one of them at the end.
const SLOWEST: &[&str] = &[
    "faults",
    "signals",
    "cluster",
    "atomics",
    "data_path",
    "bench",
    "peer_death",
    "bench_peer_memory",
];

/// The workspace's `[profile.dev]` (Cargo.toml), given to `cargo package`: a verification
/// build whose root is not `rsm` would otherwise build every dependency with cargo's default
/// dev profile (full debug info, the cryptography unoptimised), again for each such crate.
const PACKAGE_PROFILE: &str = "xtask/package-profile.toml";

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
        suites: &[],
        beside: &[],
    },
    // `cargo test` links the C library's tests against its rlib only: the C programs need
    // librsm_capi.so built beside them, with the features the tests build rsm with.
    Step {
        name: "capi",
        cargo_args: &["build", "-p", "rsm", "-p", "rsm-capi", "--all-features"],
        env: &[],
        busy: false,
        suites: &[],
        beside: &[],
    },
    // The suites below run side by side (lanes.rs) once this one cargo invocation built them.
    Step {
        name: "test",
        cargo_args: &["test", "--workspace", "--all-features"],
        env: &[],
        busy: false,
        suites: &[
            Suite {
                binaries: Binaries::All,
                args: &[],
                env: &[LOOPBACK_FABRIC, BACKTRACES],
                label: "",
            },
            Suite {
                binaries: Binaries::Doc,
                args: &[],
                env: &[LOOPBACK_FABRIC, BACKTRACES],
                label: "",
            },
            // The data-path suite again with owned buffers registered as a domain demanding
            // `FI_MR_LOCAL` wants them (DESIGN.md §5.1). Signals are injects, which take no
            // descriptor: their suite is not repeated.
            Suite {
                binaries: Binaries::Rsm(&[
                    "data_path",
                    "conformance",
                    "barriers",
                    "scatter_gather",
                    "typed",
                    "ownership",
                    "semantics",
                ]),
                // The loopback controller's puts are copies that register nothing: its tests
                // (`loopback_*`, `loopback::*`) take the same path forced or not.
                args: &["--skip", "loopback_", "--skip", "loopback::"],
                env: &[LOOPBACK_FABRIC, BACKTRACES, FORCE_MR_LOCAL],
                label: "forced FI_MR_LOCAL",
            },
            // Atomics take descriptors only where the provider performs them (shm0, sockets0);
            // the counting contests add volume, not paths, and are not repeated.
            Suite {
                binaries: Binaries::Rsm(&["atomics"]),
                args: &[
                    "shm0",
                    "sockets0",
                    "--skip",
                    "counter::",
                    "--skip",
                    "cas_lock::",
                ],
                env: &[LOOPBACK_FABRIC, BACKTRACES, FORCE_MR_LOCAL],
                label: "forced FI_MR_LOCAL",
            },
            Suite {
                binaries: Binaries::Rsm(&["rsm"]),
                args: &["fuzz_"],
                env: &[FUZZ, BACKTRACES],
                label: "fuzz",
            },
        ],
        beside: &[CLIPPY, PACKAGE],
    },
];

/// Lints, beside the quiet suites: a step of its own before them, it held the suites back by
/// its whole time on 2 cores.
const CLIPPY: &[&str] = &[
    "clippy",
    "--workspace",
    "--all-targets",
    "--all-features",
    "--",
    "-D",
    "warnings",
];

/// Every crate meant for crates.io (all but xtask, `publish = false`) packaged as it would be
/// uploaded, and each built alone from its `.crate` with default features (`cargo package`
/// verifies): a file left out, a path dependency without a version, a build script reaching
/// outside its crate fail here, and the default build (pregenerated bindings) is built once.
/// Beside the quiet suites, which mostly wait, it costs CI little of its wall time.
const PACKAGE: &[&str] = &[
    "package",
    "--workspace",
    "--exclude",
    "xtask",
    "--allow-dirty",
    "--config",
    PACKAGE_PROFILE,
];

/// `cargo xtask test --busy` adds this to [`TEST`]: the suites whose waits a busy host
/// stretches (signals, progress, the data path, atomics), built on a quiet host, then run
/// again with two CPU-bound spinners taking the machine's two cores beside them (DESIGN.md
/// §6: every await is woken by a descriptor or a completion).
pub const BUSY: &[Step] = &[Step {
    name: "busy suites (two spinners)",
    cargo_args: &["test", "--workspace", "--all-features"],
    env: &[],
    busy: true,
    suites: &[
        Suite {
            binaries: Binaries::Rsm(&["signals", "progress", "data_path"]),
            args: &[],
            env: &[LOOPBACK_FABRIC, BACKTRACES, BUSY_SCALE],
            label: "two spinners",
        },
        // Every operation and type against the model is arithmetic, checked on the quiet
        // host: beside the spinners it only repeats awaits the other atomics tests make.
        Suite {
            binaries: Binaries::Rsm(&["atomics"]),
            args: &["--skip", "model::", "--skip", "vectors::"],
            env: &[LOOPBACK_FABRIC, BACKTRACES, BUSY_SCALE],
            label: "two spinners",
        },
    ],
    beside: &[],
}];

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
        suites: &[],
        beside: &[],
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
        suites: &[],
        beside: &[],
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
        let result = if step.suites.is_empty() {
            // Dropped (the spinners killed) as soon as the step ends, however it ends.
            match spinners_for(step) {
                Ok(_spinners) => run_echoed(&mut cmd, &format!("step `{}`", step.name)),
                Err(failure) => Err(failure),
            }
        } else {
            run_suites(step, &cargo, &root)
        };
        timings.push((step.name, started.elapsed(), result.is_ok()));
        if let Err(failure) = result {
            outcome = Err(failure);
            break;
        }
    }
    report(&timings);
    outcome
}

/// Builds `step`'s test binaries, then runs its suites in lanes (`lanes.rs`).
fn run_suites(step: &Step, cargo: &OsString, root: &Path) -> Result<(), Failure> {
    let binaries = lanes::build(cargo, root, step.cargo_args)?;
    if binaries.is_empty() {
        return Err(Failure::new("the build listed no test binaries"));
    }
    // Started once the build is done, killed when the runs end, however they end.
    let _spinners = spinners_for(step)?;
    let mut jobs = Vec::new();
    // Cargo's own runs, one after another in a lane of their own: each holds the target
    // dir's lock.
    let mut cargo_jobs = Vec::new();
    for suite in step.suites {
        let env: Vec<(String, String)> = suite
            .env
            .iter()
            .copied()
            .flatten()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let label = |name: String| {
            if suite.label.is_empty() {
                name
            } else {
                format!("{name} ({})", suite.label)
            }
        };
        let args: Vec<String> = suite.args.iter().map(|a| (*a).to_string()).collect();
        if let Binaries::Doc = suite.binaries {
            let mut cmd_args: Vec<String> =
                step.cargo_args.iter().map(|a| (*a).to_string()).collect();
            cmd_args.push("--doc".into());
            cmd_args.extend(args);
            cargo_jobs.push(Job {
                label: label("doc tests".into()),
                program: cargo.into(),
                args: cmd_args,
                env,
                dir: root.to_path_buf(),
                weight: 0,
            });
            continue;
        }
        if let Binaries::Rsm(names) = suite.binaries {
            let built = |name: &&str| {
                binaries
                    .iter()
                    .any(|b| b.package == "rsm" && b.target == **name)
            };
            if let Some(missing) = names.iter().find(|name| !built(name)) {
                return Err(Failure::new(format!(
                    "the build made no test binary `{missing}` of package rsm"
                )));
            }
        }
        for binary in &binaries {
            let chosen = match suite.binaries {
                Binaries::All => true,
                Binaries::Rsm(names) => {
                    binary.package == "rsm" && names.contains(&binary.target.as_str())
                }
                Binaries::Doc => false,
            };
            if !chosen {
                continue;
            }
            // What cargo sets when it runs a test binary.
            let mut env = env.clone();
            env.push((
                "CARGO_MANIFEST_DIR".into(),
                binary.dir.display().to_string(),
            ));
            env.push(("CARGO_PKG_NAME".into(), binary.package.clone()));
            jobs.push(Job {
                label: label(format!("{} {}", binary.package, binary.src)),
                program: binary.exe.clone(),
                args: args.clone(),
                env,
                dir: binary.dir.clone(),
                weight: weight(&binary.target),
            });
        }
    }
    let target = env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let logs = target.join("xtask-lanes");
    cargo_jobs.extend(beside_jobs(step, cargo, root));
    if step.beside.contains(&PACKAGE) {
        forget_packaged_sources();
    }
    let beside = (!cargo_jobs.is_empty()).then(|| {
        let logs = logs.join("beside");
        std::thread::spawn(move || lanes::run(cargo_jobs, 1, &logs))
    });
    let suites = lanes::run(jobs, lanes::lanes(), &logs);
    let beside = beside.map_or(Ok(()), |run| {
        run.join()
            .unwrap_or_else(|_| Err(Failure::new("the run beside the suites panicked")))
    });
    suites.and(beside)
}

/// Removes the sources `cargo package` extracted from its local registries in earlier runs
/// (`$CARGO_HOME/registry/src/-<hash>/rsm*`): cargo extracts a package once per name and
/// version, so a later run's verification built this workspace's crates from a past run's
/// sources (a method added to rsm-fabric since was "not found" in rsm's build).
fn forget_packaged_sources() {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return;
    };
    // Local registries have no name, only a hash: crates.io's sources stay.
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(packages) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for package in packages.flatten() {
            if package.file_name().to_string_lossy().starts_with("rsm") {
                let _ = std::fs::remove_dir_all(package.path());
            }
        }
    }
}

/// `step.beside` as jobs, in their order: at idle priority, so the suites' processes get the
/// CPU whenever they want it. In the build's target dir: its build scripts and proc macros
/// serve the lints, and the dependencies the packaged crates share with it their
/// verification, where a target dir of their own built all of it again on CI's 2 cores.
fn beside_jobs(step: &Step, cargo: &OsString, root: &Path) -> Vec<Job> {
    step.beside
        .iter()
        .map(|invocation| {
            let mut args: Vec<String> = ["-n", "19"].map(String::from).into();
            args.push(cargo.to_string_lossy().into_owned());
            args.extend(invocation.iter().map(|a| (*a).to_string()));
            Job {
                label: format!("cargo {}", invocation.join(" ")),
                program: "nice".into(),
                args,
                env: Vec::new(),
                dir: root.to_path_buf(),
                weight: 0,
            }
        })
        .collect()
}

/// [`BUSY_SPINNERS`] spinners when `step` runs beside them.
fn spinners_for(step: &Step) -> Result<Option<Spinners>, Failure> {
    if step.busy {
        Spinners::start(BUSY_SPINNERS).map(Some)
    } else {
        Ok(None)
    }
}

/// Where a target stands in [`SLOWEST`]: the slowest weighs most.
fn weight(target: &str) -> u32 {
    SLOWEST
        .iter()
        .position(|s| *s == target)
        .map_or(0, |i| (SLOWEST.len() - i) as u32)
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
        let test = TEST
            .iter()
            .find(|step| step.name == "test")
            .expect("a test step");
        assert!(!test.suites.is_empty());
        for suite in test.suites {
            let env: Vec<_> = suite.env.iter().copied().flatten().copied().collect();
            assert!(env.contains(&("RUST_BACKTRACE", "1")), "{}", suite.label);
            // The fuzz targets open no fabric.
            if suite.label == "fuzz" {
                continue;
            }
            for var in ["FI_TCP_IFACE", "FI_SOCKETS_IFACE", "FI_NET_IFACE"] {
                assert!(env.contains(&(var, "lo")), "{var} not set to lo");
            }
        }
    }

    #[test]
    fn the_forced_registration_run_skips_the_loopback_controller_only() {
        let test = TEST.iter().find(|s| s.name == "test").expect("a test step");
        let forced = test
            .suites
            .iter()
            .find(|s| {
                s.label == "forced FI_MR_LOCAL"
                    && matches!(s.binaries, Binaries::Rsm(b) if b.contains(&"data_path"))
            })
            .expect("a forced run of data_path");
        let skipped: Vec<&str> = forced
            .args
            .windows(2)
            .filter(|w| w[0] == "--skip")
            .map(|w| w[1])
            .collect();
        assert_eq!(skipped, ["loopback_", "loopback::"]);
        // A tcp test over the IPv6 loopback interface stays: only the controller is skipped.
        assert!(
            !skipped
                .iter()
                .any(|s| "tcp_connects_over_ipv6_loopback".contains(s))
        );
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
        assert_eq!(names, ["fmt", "capi", "test"]);
    }

    /// The `[profile.dev...]` headers and settings of a TOML text, comments left out.
    fn dev_profile(text: &str) -> Vec<&str> {
        let mut in_dev = false;
        let mut lines = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_dev = line.starts_with("[profile.dev]") || line.starts_with("[profile.dev.");
            }
            if in_dev && !line.is_empty() && !line.starts_with('#') {
                lines.push(line);
            }
        }
        lines
    }

    #[test]
    fn the_package_profile_is_the_workspace_dev_profile() {
        let root = workspace_root();
        let read = |path: &str| std::fs::read_to_string(root.join(path)).expect(path);
        let manifest = read("Cargo.toml");
        let given = read(PACKAGE_PROFILE);
        assert!(!dev_profile(&manifest).is_empty());
        assert_eq!(dev_profile(&given), dev_profile(&manifest));
    }

    #[test]
    fn the_package_step_packages_every_crate_meant_for_crates_io() {
        let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
        let out = Command::new(cargo)
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .current_dir(workspace_root())
            .output()
            .expect("cargo metadata");
        assert!(out.status.success());
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        // `publish = false` reads as an empty list of registries.
        let mut unpublished: Vec<&str> = meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .filter(|p| p["publish"].as_array().is_some_and(Vec::is_empty))
            .filter_map(|p| p["name"].as_str())
            .collect();
        unpublished.sort_unstable();
        let step = TEST
            .iter()
            .find(|step| step.name == "test")
            .expect("a test step");
        let args = step
            .beside
            .iter()
            .find(|args| args[0] == "package")
            .expect("packaging beside the suites");
        assert_eq!(args[..2], ["package", "--workspace"]);
        let mut excluded: Vec<&str> = args
            .windows(2)
            .filter(|pair| pair[0] == "--exclude")
            .map(|pair| pair[1])
            .collect();
        excluded.sort_unstable();
        assert_eq!(excluded, unpublished);
        assert!(!args.contains(&"--no-verify"));
    }

    #[test]
    fn lints_then_packaging_run_beside_the_quiet_suites_at_idle_priority_in_the_build_target_dir() {
        let test = TEST.iter().find(|s| s.name == "test").expect("a test step");
        let jobs = beside_jobs(test, &OsString::from("cargo"), Path::new("/w"));
        let [clippy, package] = &jobs[..] else {
            panic!("two jobs beside the suites")
        };
        for job in [clippy, package] {
            assert_eq!(job.program, PathBuf::from("nice"));
            assert_eq!(job.args[..3], ["-n", "19", "cargo"]);
            assert_eq!(job.dir, PathBuf::from("/w"));
            assert!(
                !job.args.iter().any(|a| a == "--target-dir"),
                "{:?}",
                job.args
            );
        }
        assert_eq!(clippy.args[3..], *CLIPPY);
        assert_eq!(package.args[3..], *PACKAGE);
        // The doc tests hold the same target dir's lock: they run in that lane, not in the
        // suites' lanes.
        assert!(!SLOWEST.contains(&"doc"));
        let others = TEST.iter().chain(BUSY).filter(|s| s.name != "test");
        for step in others {
            assert!(beside_jobs(step, &OsString::new(), Path::new("/w")).is_empty());
        }
    }

    #[test]
    fn the_busy_run_builds_quietly_then_runs_its_suites_beside_spinners() {
        assert!(TEST.iter().all(|step| !step.busy));
        let [busy] = BUSY else {
            panic!("one busy step")
        };
        assert!(busy.busy);
        let mut names = Vec::new();
        for suite in busy.suites {
            let Binaries::Rsm(these) = suite.binaries else {
                panic!("a busy suite names its binaries")
            };
            names.extend_from_slice(these);
            let env: Vec<_> = suite.env.iter().copied().flatten().copied().collect();
            assert!(env.contains(&("FI_TCP_IFACE", "lo")));
            assert!(env.contains(&("RSM_TEST_SCALE", "0.1")));
        }
        assert_eq!(names, ["signals", "progress", "data_path", "atomics"]);
    }

    #[test]
    fn the_forced_run_registers_owned_buffers_on_loopback() {
        let test = TEST
            .iter()
            .find(|step| step.name == "test")
            .expect("a test step");
        let forced: Vec<_> = test
            .suites
            .iter()
            .filter(|suite| suite.label == "forced FI_MR_LOCAL")
            .collect();
        assert_eq!(forced.len(), 2);
        for suite in forced {
            let env: Vec<_> = suite.env.iter().copied().flatten().copied().collect();
            assert!(env.contains(&("RSM_FORCE_MR_LOCAL", "1")));
            assert!(env.contains(&("FI_TCP_IFACE", "lo")));
        }
    }
}
