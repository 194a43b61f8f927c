//! Several "hosts" on one machine (DESIGN.md §10, "Several hosts"): network namespaces joined
//! by a bridge, with a key, a trust file and a configuration file per host, and everything
//! torn down by a guard. The library's cluster tests and the command's (`cli/tests/
//! cluster.rs`) share this file; each runs its node processes with [`Host::command`].
//!
//! Layout of a cluster of `n` hosts, tagged `rsmt-<pid>-<seq>`:
//!
//! - the namespace `<tag>-sw` holds the bridge `br0` and one veth end `v<i>` per host;
//! - the namespace `<tag>-h<i>` holds the other end, `eth0`, with `10.77.0.<i+1>/24`, and
//!   `lo`; no route leaves these namespaces, and the root namespace gets no interface;
//! - `<dir>/h<i>.toml` is host i's configuration, as README.md ("Running on several hosts")
//!   shows it: node id i + 1 (abstract Unix names are per namespace, so ids never meet
//!   another test's), listen address on `eth0`, the other hosts as peers, `key_file` (mode
//!   0600) and the shared `trust_file`, which lists each host's key under its node id and
//!   under its observer id (the id + 2^31, `rsm topology`).
//!
//! Without root or without `ip netns`, [`Cluster::new`] writes `SKIPPED <test>: <why>` to
//! standard error (not captured by the test harness) and returns `None`: the test returns
//! then, and says so. A run that was killed leaves its namespaces and node processes: the
//! next run ends those processes and deletes the namespaces whose creator is gone.

#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every namespace these tests create.
const PREFIX: &str = "rsmt-";

/// The side-channel port every node listens on (each namespace has its own ports).
pub const PORT: u16 = 7400;

/// The interface each host reaches the others on.
pub const IFACE: &str = "eth0";

/// One host: its namespace, address, node and files.
pub struct Host {
    pub ns: String,
    pub ip: Ipv4Addr,
    pub node_id: u32,
    pub config: PathBuf,
    pub key_file: PathBuf,
    /// Its port on the bridge, in the switch namespace (`v<i>`).
    pub port: String,
}

impl Host {
    /// `ip:port` of this host's side channel.
    pub fn listen(&self) -> String {
        format!("{}:{PORT}", self.ip)
    }

    /// Runs `args` inside this host's namespace and says whether it succeeded.
    pub fn run(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Takes this host's link down (`up`: false) or brings it back.
    pub fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        assert!(
            ip(&["-n", &self.ns, "link", "set", IFACE, state]),
            "ip link set {IFACE} {state} in {}",
            self.ns
        );
    }

    /// `program` to run inside this host's namespace (`ip netns exec`, which execs it: the
    /// child's pid is the program's), the providers pinned to `eth0` and no `RSM_*`
    /// variable of the caller's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]).arg(program);
        for (k, _) in std::env::vars() {
            if k.starts_with("RSM_") {
                cmd.env_remove(k);
            }
        }
        for var in ["FI_TCP_IFACE", "FI_SOCKETS_IFACE", "FI_UDP_IFACE"] {
            cmd.env(var, IFACE);
        }
        cmd
    }

    /// The environment a node process of this host gets: its configuration file.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("RSM_CONFIG", self.config.display().to_string())];
        for var in ["FI_TCP_IFACE", "FI_SOCKETS_IFACE", "FI_UDP_IFACE"] {
            env.push((var, IFACE.into()));
        }
        env
    }
}

/// Two or three hosts; dropping it ends what still runs inside them and deletes the
/// namespaces (the callers' guards end their processes first: declare the cluster before
/// them).
pub struct Cluster {
    pub tag: String,
    pub hosts: Vec<Host>,
    pub dir: PathBuf,
}

/// Runs `ip` with `args`; whether it succeeded (its errors go to the test's output).
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Writes `SKIPPED <test>: <why>` past the harness's capture, so that a skip shows in every
/// run's output.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Why this process cannot build namespaces, if it cannot.
fn cannot() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root for network namespaces (ip netns); CI runs as root".into());
    }
    let probe = Command::new("ip").args(["netns", "list"]).output();
    match probe {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no `ip` command (Debian: iproute2): {e}")),
    }
}

/// Ends, by pid, the processes still inside namespace `ns` (which only this file's tests
/// create, so they are a test's own node processes), then deletes it.
fn delete(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
    ip(&["netns", "del", ns]);
}

/// Deletes this prefix's namespaces whose creating process is gone (an interrupted run's).
fn delete_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        // A zombie (state Z, after the `)` that ends its name) is gone too.
        let alive = pid.parse::<u32>().is_ok_and(|p| {
            p == std::process::id()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|st| st.rsplit(") ").next().is_some_and(|r| !r.starts_with('Z')))
        });
        if !alive {
            delete(name);
            // Its directory of keys and configurations: `rsmt-<pid>-<seq>`.
            if let Some((tag, _)) = name.rsplit_once('-') {
                let _ = std::fs::remove_dir_all(std::env::temp_dir().join(tag));
            }
        }
    }
}

impl Cluster {
    /// `n` hosts (2 or 3) for `test`, or `None` after saying why the test is skipped.
    pub fn new(test: &str, n: usize) -> Option<Cluster> {
        if let Some(why) = cannot() {
            skip(test, &why);
            return None;
        }
        delete_stale();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(&tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the cluster's directory");
        let mut cluster = Cluster {
            tag: tag.clone(),
            hosts: Vec::new(),
            dir,
        };
        let sw = cluster.switch();
        // A namespace of the same name from an interrupted run goes first.
        delete(&sw);
        assert!(ip(&["netns", "add", &sw]), "ip netns add {sw}");
        assert!(ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]));
        assert!(ip(&["-n", &sw, "link", "set", "br0", "up"]));
        for i in 0..n {
            let ns = format!("{tag}-h{i}");
            delete(&ns);
            assert!(ip(&["netns", "add", &ns]), "ip netns add {ns}");
            let v = format!("v{i}");
            assert!(ip(&[
                "-n", &sw, "link", "add", &v, "type", "veth", "peer", "name", IFACE, "netns", &ns,
            ]));
            assert!(ip(&["-n", &sw, "link", "set", &v, "master", "br0", "up"]));
            let addr = Ipv4Addr::new(10, 77, 0, i as u8 + 1);
            assert!(ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                IFACE
            ]));
            assert!(ip(&["-n", &ns, "link", "set", IFACE, "up"]));
            assert!(ip(&["-n", &ns, "link", "set", "lo", "up"]));
            let key_file = cluster.dir.join(format!("h{i}.key"));
            cluster.hosts.push(Host {
                ns,
                ip: addr,
                node_id: i as u32 + 1,
                config: cluster.dir.join(format!("h{i}.toml")),
                key_file,
                port: v,
            });
        }
        cluster.write_files();
        Some(cluster)
    }

    /// The namespace holding the bridge that joins the hosts.
    pub fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    /// The trust file, a key file per host (mode 0600) and a configuration file per host.
    fn write_files(&self) {
        let trust = self.dir.join("trust");
        let mut lines = String::new();
        for h in &self.hosts {
            let key = rsm::NodeKey::generate();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&h.key_file)
                .expect("the key file");
            f.write_all(key.to_text().as_bytes())
                .expect("write the key");
            lines.push_str(&format!("{} {}\n", h.node_id, key.public()));
            lines.push_str(&format!("{} {}\n", h.node_id ^ 0x8000_0000, key.public()));
        }
        std::fs::write(&trust, lines).expect("the trust file");
        for h in &self.hosts {
            let mut toml = format!(
                "node_id = {}\nlisten = \"{}\"\nkey_file = \"{}\"\ntrust_file = \"{}\"\n\n[peers]\n",
                h.node_id,
                h.listen(),
                h.key_file.display(),
                trust.display()
            );
            for o in self.hosts.iter().filter(|o| o.node_id != h.node_id) {
                toml.push_str(&format!("{} = \"{}\"\n", o.node_id, o.listen()));
            }
            std::fs::write(&h.config, toml).expect("the configuration file");
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for h in &self.hosts {
            delete(&h.ns);
        }
        delete(&self.switch());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
