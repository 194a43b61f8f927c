//! `cargo xtask soak --minutes N`: the fault suite's soak (docs/reliability.md). It runs
//! the ignored `soak` test of `tests/faults` (an exporter and an importer child on every
//! controller at once, random operations, kills and restarts, every record checked) for N
//! minutes, echoes its output, and sums up its `SOAK` lines: runs, faults injected, hangs,
//! crashes and data errors. It fails when any of the last three is not zero, or the soak
//! did not report.

use std::env;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::command::display;
use crate::failure::Failure;
use crate::steps::{LOOPBACK_FABRIC, workspace_root};

/// The counters a `SOAK` line carries, in the order printed.
const FIELDS: [&str; 7] = [
    "runs",
    "faults",
    "hangs",
    "crashes",
    "data_errors",
    "unexpected",
    "retried",
];

/// The minutes `--minutes N` (or `--minutes=N`) asks for.
fn minutes(args: &[OsString]) -> Result<f64, Failure> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let value = match args.as_slice() {
        [flag, n] if flag == "--minutes" => n.clone(),
        [one] if one.starts_with("--minutes=") => one["--minutes=".len()..].to_string(),
        _ => return Err(Failure::with_code("usage: cargo xtask soak --minutes N", 2)),
    };
    match value.parse::<f64>() {
        Ok(m) if m > 0.0 && m.is_finite() => Ok(m),
        _ => Err(Failure::with_code(
            format!("--minutes wants a positive number, not `{value}`"),
            2,
        )),
    }
}

/// A `SOAK <what> key=value ...` line: what it is about and its counters.
fn parse(line: &str) -> Option<(String, Vec<(String, u64)>)> {
    let mut words = line.strip_prefix("SOAK ")?.split_whitespace();
    let what = words.next()?.to_string();
    let counts = words
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect();
    Some((what, counts))
}

fn count(counts: &[(String, u64)], key: &str) -> u64 {
    counts.iter().find(|(k, _)| k == key).map_or(0, |(_, v)| *v)
}

pub fn run(args: &[OsString]) -> Result<(), Failure> {
    let minutes = minutes(args)?;
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args([
        "test",
        "-p",
        "rsm",
        "--all-features",
        "--test",
        "faults",
        "--",
        "--ignored",
        "--exact",
        "soak",
        "--nocapture",
    ])
    .current_dir(workspace_root())
    .env("RSM_SOAK_MINUTES", minutes.to_string())
    .env("RUST_BACKTRACE", "1")
    .stdout(Stdio::piped());
    for (key, value) in LOOPBACK_FABRIC {
        cmd.env(key, value);
    }
    eprintln!("xtask: {}", display(&cmd));
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::new(format!("soak: could not start cargo: {e}")))?;
    let mut lines = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some(parsed) = parse(&line) {
                lines.push(parsed);
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| Failure::new(format!("soak: {e}")))?;
    eprintln!("xtask: == soak, {minutes} min ==");
    eprintln!("xtask: {:<9} {}", "", FIELDS.join(" "));
    for (what, counts) in &lines {
        let row: Vec<String> = FIELDS
            .iter()
            .map(|f| format!("{:>w$}", count(counts, f), w = f.len()))
            .collect();
        eprintln!("xtask: {what:<9} {}", row.join(" "));
    }
    let Some((_, total)) = lines.iter().find(|(what, _)| what == "total") else {
        return Err(Failure::new(format!(
            "soak: the test reported no totals ({status})"
        )));
    };
    let bad: u64 = ["hangs", "crashes", "data_errors"]
        .iter()
        .map(|f| count(total, f))
        .sum();
    if bad > 0 || !status.success() {
        return Err(Failure::new(format!(
            "soak: {} hangs, {} crashes, {} data errors, {} unexpected errors ({status})",
            count(total, "hangs"),
            count(total, "crashes"),
            count(total, "data_errors"),
            count(total, "unexpected")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_positive_numbers() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(minutes(&args(&["--minutes", "10"])).unwrap(), 10.0);
        assert_eq!(minutes(&args(&["--minutes=0.5"])).unwrap(), 0.5);
        assert!(minutes(&args(&["--minutes", "0"])).is_err());
        assert!(minutes(&args(&["--minutes", "x"])).is_err());
        assert!(minutes(&args(&[])).is_err());
    }

    #[test]
    fn soak_lines_parse() {
        let (what, counts) = parse("SOAK tcp0 runs=3 faults=3 hangs=0 crashes=1").unwrap();
        assert_eq!(what, "tcp0");
        assert_eq!((count(&counts, "runs"), count(&counts, "crashes")), (3, 1));
        assert_eq!(count(&counts, "data_errors"), 0);
        assert!(parse("test soak ... ok").is_none());
    }
}
