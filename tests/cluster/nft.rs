//! Network faults at the cluster's switch with nftables (`nft`, Debian's `nftables`): the
//! kernel here has no netem. The rules live in the switch namespace's bridge table, so they
//! drop frames on the wire between hosts, silently and both ways: the hosts' own stacks see
//! no local error (an `inet` output rule would fail their sends with `EPERM`), only loss.

use std::process::{Command, Stdio};

use crate::netns::{Cluster, Host};

/// The table the faults' rules live in.
const TABLE: &str = "rsmt";

/// Why `nft` cannot be used here, if it cannot.
pub fn missing() -> Option<String> {
    match Command::new("nft").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`nft --version` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no `nft` command (Debian: nftables): {e}")),
    }
}

/// Runs `args` (or, with `script`, `nft -f -` reading it) in `ns`; its standard output.
fn nft(ns: &str, args: &[&str], script: Option<&str>) -> String {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "nft"]).args(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run nft");
    if let Some(script) = script {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("nft's input");
        stdin
            .write_all(script.as_bytes())
            .expect("write nft's rules");
    }
    let out = child.wait_with_output().expect("nft ends");
    assert!(
        out.status.success(),
        "nft {args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Replaces the switch's fault rules with `rules` (one per line, counted).
fn install(cluster: &Cluster, rules: &[String]) {
    heal(cluster);
    let body: String = rules
        .iter()
        .map(|r| format!("    {r} counter drop\n"))
        .collect();
    let script = format!(
        "table bridge {TABLE} {{\n  chain faults {{\n    type filter hook forward priority 0; \
         policy accept;\n{body}  }}\n}}\n"
    );
    nft(&cluster.switch(), &["-f", "-"], Some(&script));
}

/// Drops `pct` % of the frames the switch forwards, either way, at random.
pub fn loss(cluster: &Cluster, pct: u32) {
    install(cluster, &[format!("numgen random mod 100 < {pct}")]);
}

/// Drops every frame to and from `host`: it stays up and alive, and says nothing.
pub fn isolate(cluster: &Cluster, host: &Host) {
    let p = &host.port;
    install(
        cluster,
        &[format!("iifname \"{p}\""), format!("oifname \"{p}\"")],
    );
}

/// Removes the fault rules, and returns how many frames they dropped.
pub fn heal(cluster: &Cluster) -> u64 {
    let sw = cluster.switch();
    let tables = nft(&sw, &["list", "tables"], None);
    if !tables.contains(&format!("bridge {TABLE}")) {
        return 0;
    }
    let listing = nft(&sw, &["list", "table", "bridge", TABLE], None);
    nft(&sw, &["delete", "table", "bridge", TABLE], None);
    // `counter packets N bytes M` per rule.
    listing
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "packets")
        .filter_map(|w| w[1].parse::<u64>().ok())
        .sum()
}
