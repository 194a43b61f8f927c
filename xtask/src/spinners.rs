//! CPU-bound spinner processes: a busy host made on purpose, for `cargo xtask test --busy`
//! and `cargo xtask bench --busy`.
//!
//! Each spinner is this xtask binary re-executed as `xtask __spin`: a loop that does nothing
//! but burn its core, pinned to no CPU, so the scheduler shares the host's cores between it
//! and the tests the way a neighbour's build would. [`Spinners`] kills and reaps them when
//! dropped, on every path out of xtask; a spinner whose xtask died anyway (SIGKILL) sees its
//! parent change and exits by itself within a tenth of a second.

use std::env;
use std::hint::black_box;
use std::os::unix::process::parent_id;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::failure::Failure;

/// The hidden xtask command that runs one spinner.
pub const SPIN_COMMAND: &str = "__spin";

/// How many spinners a busy run starts: as many as this machine's 2 cores.
pub const BUSY_SPINNERS: usize = 2;

/// How often a spinner checks that the xtask that started it is still there.
const PARENT_CHECK: Duration = Duration::from_millis(100);

/// Running spinner processes, killed and reaped on drop.
pub struct Spinners {
    children: Vec<Child>,
}

impl Spinners {
    /// Starts `n` spinners.
    pub fn start(n: usize) -> Result<Spinners, Failure> {
        let exe = env::current_exe()
            .map_err(|e| Failure::new(format!("cannot find xtask's own binary: {e}")))?;
        let mut spinners = Spinners {
            children: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let child = Command::new(&exe)
                .arg(SPIN_COMMAND)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| Failure::new(format!("cannot start a spinner: {e}")))?;
            spinners.children.push(child);
        }
        eprintln!(
            "xtask: {n} spinners running (pids {})",
            spinners
                .children
                .iter()
                .map(|c| c.id().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(spinners)
    }

    /// The spinners' process ids.
    #[cfg(test)]
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// The spinner's body: burns a core until its parent is gone.
pub fn spin() {
    let parent = parent_id();
    let mut x: u64 = 1;
    loop {
        let until = Instant::now() + PARENT_CHECK;
        while Instant::now() < until {
            for _ in 0..10_000 {
                x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
        }
        if parent_id() != parent {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn alive(pid: u32) -> bool {
        // A reaped child has no /proc entry.
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn spinners_are_ended_when_dropped() {
        // The test binary is not xtask, so re-executing it as a spinner would run its tests:
        // start `sleep` children in their place and check the guard ends them.
        let mut spinners = Spinners {
            children: Vec::new(),
        };
        for _ in 0..2 {
            let child = Command::new("sleep").arg("60").spawn();
            let Ok(child) = child else { return };
            spinners.children.push(child);
        }
        let pids = spinners.pids();
        assert!(pids.iter().all(|&p| alive(p)));
        drop(spinners);
        assert!(pids.iter().all(|&p| !alive(p)), "{pids:?} still there");
    }
}
