//! Developer tasks for the rsm workspace, run as `cargo xtask <command>`.
//!
//! `setup` makes sure the Debian packages rsm builds against are installed
//! (installing them with apt-get when run as root); `test` and `demo` do the
//! same first, so that a fresh Debian 12 machine with only Rust and gcc needs
//! nothing but `cargo xtask test`.
//!
//! The crate depends on nothing that needs libfabric (std, serde and serde_json only), so
//! that it compiles in seconds and before libfabric exists on the machine.

#![forbid(unsafe_code)]

mod bench;
mod busy_bench;
mod capi;
mod child;
mod command;
mod deps;
mod dpkg;
mod failure;
mod iceoryx2;
mod lanes;
mod pairs;
mod plan;
mod plots;
mod profile;
mod quartiles;
mod report;
mod row;
mod soak;
mod spinners;
mod steps;
mod tails;
mod ucx;
mod uid;
mod version;

use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  setup   check the system packages rsm needs; as root, install missing ones with apt-get
  test [--busy]
          setup, then cargo fmt --check, then every test binary built once and run two
          at a time (RSM_TEST_LANES=1: one), and beside them at idle priority cargo clippy
          -D warnings, then `cargo package` of every crate meant for crates.io; with --busy, then
          the signal, progress, data-path and atomics suites again beside two CPU-bound
          spinner processes (CI runs this)
  demo    setup, then build and run the rsm binary's demo commands
  bench [--quick] [--small] [--pairs N] [--rows A,B] [--publish]
          setup, then build rsm and the iceoryx2 anchor (xtask/anchors/iceoryx2) in
          release mode, run the standard benchmark set (and UCX's ucx_perftest and the
          anchor beside it, installing ucx-utils if missing) and write
          target/bench/report.md, report.json and the plots (*.svg); --quick: 2 pairs of
          the small rows only; --small: the small rows only, every pair; --pairs N: at
          most N pairs a row; --rows: only rows whose `controller op mode [tasks]`
          contains one of the words; --publish: copy the
          plots to docs/bench/
  bench --busy
          setup, then build rsm in release mode and measure the 8-byte signal round trip
          and put on every controller, 100,000 each, quiet and beside two spinners
          (p50/p99/p99.9; a lost or late signal fails it): target/bench/busy.md
  profile [CONTROLLER OP SIZE [MODE]]
          instructions per operation by function, rsm against the baseline, under
          callgrind (installs valgrind if missing): the rows the last bench report
          missed, or the one named; writes target/bench/profile.md
  soak --minutes N
          the fault suite's soak, outside CI: an exporter and an importer on every
          controller doing mixed operations with random kills and restarts for N minutes;
          fails on any hang, crash or data error (docs/reliability.md)
  capi [--prefix DIR]
          build the C library (librsm.so.2, librsm.a, <rsmapi.h>, rsm.pc) into
          target/capi/, or install it under DIR
  help    print this message
";

/// Exit status for a command line xtask does not understand, as clap and most
/// Unix tools use.
const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let command = match args.as_slice() {
        [] => return usage_error("no command given"),
        [command] if command == spinners::SPIN_COMMAND => {
            spinners::spin();
            return ExitCode::SUCCESS;
        }
        [command] => command,
        [command, rest @ ..] if command == "capi" => {
            return finish(deps::ensure().and_then(|()| capi::run(rest)));
        }
        [command, rest @ ..] if command == "soak" => {
            return finish(deps::ensure().and_then(|()| soak::run(rest)));
        }
        [command, flag] if command == "test" && flag == "--busy" => {
            return finish(
                deps::ensure().and_then(|()| steps::run_lists(&[steps::TEST, steps::BUSY])),
            );
        }
        [command, flag] if command == "bench" && flag == "--busy" => {
            return finish(deps::ensure().and_then(|()| busy_bench::run()));
        }
        [command, rest @ ..] if command == "bench" => {
            let rest: Vec<String> = rest
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            return finish(deps::ensure().and_then(|()| bench::run(&rest)));
        }
        [command, rest @ ..] if command == "profile" => {
            return finish(deps::ensure().and_then(|()| profile::run(rest)));
        }
        [_, extra, ..] => {
            return usage_error(&format!(
                "unexpected argument `{}`",
                extra.to_string_lossy()
            ));
        }
    };

    let result = match command.to_str() {
        Some("setup") => deps::ensure(),
        Some("test") => deps::ensure().and_then(|()| steps::run_all(steps::TEST)),
        Some("demo") => deps::ensure().and_then(|()| steps::run_all(steps::DEMO)),
        Some("bench") => deps::ensure().and_then(|()| bench::run(&[])),
        Some("profile") => deps::ensure().and_then(|()| profile::run(&[])),
        Some("capi") => deps::ensure().and_then(|()| capi::run(&[])),
        Some("soak") => deps::ensure().and_then(|()| soak::run(&[])),
        Some("help" | "-h" | "--help") => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            return usage_error(&format!("unknown command `{}`", command.to_string_lossy()));
        }
    };

    finish(result)
}

fn finish(result: Result<(), failure::Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("xtask: error: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn usage_error(problem: &str) -> ExitCode {
    eprintln!("xtask: {problem}\n");
    eprint!("{USAGE}");
    ExitCode::from(USAGE_ERROR)
}
