//! Running child processes: echoed when they change something, quiet when
//! they only probe the system.

use std::env;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use crate::failure::Failure;

/// Runs `cmd` with the terminal's stdin, stdout and stderr, after printing it
/// to stderr so that the log shows exactly what was run and could be re-run by
/// hand. `what` names the command in the error.
pub fn run_echoed(cmd: &mut Command, what: &str) -> Result<(), Failure> {
    eprintln!("xtask: {}", display(cmd));
    let status = cmd.status().map_err(|error| {
        Failure::new(format!(
            "{what}: could not start `{}`: {error}",
            cmd.get_program().to_string_lossy()
        ))
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::with_code(
            format!("{what} failed ({})", describe(status)),
            exit_code(status),
        ))
    }
}

/// The trimmed stdout of a probe, or `None` if it could not run or failed:
/// for a probe, "not there" and "broken" lead to the same remedy.
pub fn stdout_of(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout)
        .ok()
        .map(|text| text.trim().to_owned())
}

/// Whether an executable called `name` is on `PATH`.
pub fn on_path(name: &str) -> bool {
    let Some(path) = env::var_os("PATH") else {
        return false;
    };
    env::split_paths(&path).any(|dir| is_executable(&dir.join(name)))
}

fn is_executable(file: &Path) -> bool {
    file.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The command as a shell line: environment overrides, program, arguments.
pub fn display(cmd: &Command) -> String {
    let envs = cmd.get_envs().filter_map(|(key, value)| {
        value.map(|value| format!("{}={}", key.to_string_lossy(), quote(value)))
    });
    let words = std::iter::once(quote(cmd.get_program())).chain(cmd.get_args().map(quote));
    envs.chain(words).collect::<Vec<_>>().join(" ")
}

/// Single-quotes a word only when a shell would otherwise split or expand it,
/// so the common case stays readable.
fn quote(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("{status}"),
    }
}

/// The status xtask itself should exit with so that callers (CI) see the
/// child's code; a signal maps to 128 + signal as shells do.
fn exit_code(status: ExitStatus) -> u8 {
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    };
    match u8::try_from(code) {
        Ok(0) | Err(_) => 1,
        Ok(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_env_overrides_then_the_command() {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "libfabric-dev"]);
        assert_eq!(
            display(&cmd),
            "DEBIAN_FRONTEND=noninteractive apt-get install -y libfabric-dev"
        );
    }

    #[test]
    fn display_quotes_words_a_shell_would_split() {
        let mut cmd = Command::new("echo");
        cmd.args(["a b", "", "it's"]);
        assert_eq!(display(&cmd), r"echo 'a b' '' 'it'\''s'");
    }

    #[test]
    fn exit_code_passes_the_child_code_through() {
        assert_eq!(exit_code(ExitStatus::from_raw(101 << 8)), 101);
    }

    #[test]
    fn exit_code_maps_a_signal_like_a_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}
