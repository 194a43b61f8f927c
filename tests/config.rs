//! Node configuration through the public API: a real file, the `RSM_*` variables (in a child
//! process, since a test must never change its own environment), the loopback rule and the
//! bound listener.

use rsm::NodeId;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use rsm::Node;

/// Tests that start nodes run one at a time: most use small or default node ids, and two
/// live nodes with one id cannot share a host (their local side-channel name is per id).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Set on the child only: the test body that finds it runs the child's half.
const CHILD_MARKER: &str = "RSM_TEST_CONFIG_CHILD";

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(text.as_bytes()).expect("write config");
    file.flush().expect("flush config");
    file
}

fn detail(err: &rsm::Error) -> String {
    err.context().detail.clone().unwrap_or_default()
}

fn is_child() -> bool {
    std::env::var_os(CHILD_MARKER).is_some()
}

/// Runs the test `name` of this binary again in a child whose only `RSM_*` variables are
/// `vars`, and asserts that it ran and passed.
fn run_in_child(name: &str, vars: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RSM_") {
            cmd.env_remove(key);
        }
    }
    cmd.env(CHILD_MARKER, "1").envs(vars.iter().copied());
    let out = cmd.output().expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {name} failed:\n{stdout}\n{stderr}"
    );
    // A misspelt name would run nothing and still succeed.
    assert!(
        stdout.contains("1 passed"),
        "child {name} ran no test:\n{stdout}\n{stderr}"
    );
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

#[tokio::test]
async fn a_config_file_configures_the_node() {
    let _serial = SERIAL.lock().await;
    let file = config_file(
        "node_id = 3\nlisten = \"127.0.0.1:0\"\n\n[peers]\n1 = \"127.0.0.1:7401\"\n2 = \"[::1]:7402\"\n",
    );
    let node = Node::builder()
        .config_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect("start from the file");
    assert_eq!(node.id(), NodeId(3));
    assert_eq!(node.peers().len(), 2);
    assert_eq!(node.peers()[&NodeId(2)], addr("[::1]:7402"));
    assert_ne!(node.listen_addr().port(), 0);
    node.shutdown().await;
}

#[tokio::test]
async fn the_builder_overrides_the_file() {
    let _serial = SERIAL.lock().await;
    let file =
        config_file("node_id = 3\n[peers]\n1 = \"127.0.0.1:7401\"\n2 = \"127.0.0.1:7402\"\n");
    let node = Node::builder()
        .config_file(file.path())
        .id(4)
        .peer(2, addr("127.0.0.1:9002"))
        .peer(5, addr("127.0.0.1:7405"))
        .ignore_environment()
        .start()
        .await
        .expect("start");
    assert_eq!(node.id(), NodeId(4));
    let peers = node.peers();
    assert_eq!(peers.len(), 3);
    assert_eq!(peers[&NodeId(1)], addr("127.0.0.1:7401"));
    assert_eq!(peers[&NodeId(2)], addr("127.0.0.1:9002"));
    assert_eq!(peers[&NodeId(5)], addr("127.0.0.1:7405"));
}

#[tokio::test]
async fn a_bad_file_is_bad_conf_naming_file_and_field() {
    let _serial = SERIAL.lock().await;
    let file = config_file("node_id = \"three\"\n");
    let err = Node::builder()
        .config_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("bad node_id");
    assert_eq!(err.code(), 44);
    let expected = format!("{}: node_id: invalid type", path_str(file.path()));
    assert!(detail(&err).contains(&expected), "{err}");

    let file = config_file("node_id = 3\ncolour = \"blue\"\n");
    let err = Node::builder()
        .config_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("unknown key");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains("unknown field `colour`"), "{err}");
}

#[tokio::test]
async fn a_missing_named_file_is_bad_conf() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("rsm.toml");
    let err = Node::builder()
        .config_file(&missing)
        .ignore_environment()
        .start()
        .await
        .expect_err("missing");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains(path_str(&missing)), "{err}");
}

#[tokio::test]
async fn an_oversized_file_is_bad_conf() {
    let _serial = SERIAL.lock().await;
    let file = config_file(&format!("# {}\n", "x".repeat(1 << 20)));
    let err = Node::builder()
        .config_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("too big");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains(path_str(file.path())), "{err}");
}

#[tokio::test]
async fn a_non_loopback_listen_address_is_refused() {
    let _serial = SERIAL.lock().await;
    let err = Node::builder()
        .listen(addr("192.0.2.2:0"))
        .ignore_environment()
        .start()
        .await
        .expect_err("non-loopback");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains("builder: listen"), "{err}");

    let file = config_file("listen = \"0.0.0.0:0\"\n");
    let err = Node::builder()
        .config_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("from a file");
    assert_eq!(err.code(), 44);
    assert!(
        detail(&err).contains(&format!("{}: listen", path_str(file.path()))),
        "{err}"
    );
}

#[tokio::test]
async fn a_key_lets_a_non_loopback_address_through_to_bind() {
    let _serial = SERIAL.lock().await;
    // 198.51.100.0/24 is TEST-NET-2, on no interface here: configuration passes, bind fails.
    let err = Node::builder()
        .id(7_000_001)
        .listen(addr("198.51.100.7:0"))
        .key(rsm::NodeKey::generate())
        .ignore_environment()
        .start()
        .await
        .expect_err("no interface has that address");
    assert_eq!(err.code(), 31, "{err}");
    assert!(detail(&err).contains("198.51.100.7:0"), "{err}");
}

/// A key file with `mode`, holding a fresh key; and that key.
fn key_file(mode: u32) -> (tempfile::NamedTempFile, rsm::NodeKey) {
    use std::os::unix::fs::PermissionsExt;
    let key = rsm::NodeKey::generate();
    let file = config_file(&key.to_text());
    std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(mode)).expect("chmod");
    (file, key)
}

#[tokio::test]
async fn a_key_file_others_may_read_is_refused() {
    let _serial = SERIAL.lock().await;
    let (file, _) = key_file(0o644);
    let err = Node::builder()
        .id(7_000_002)
        .key_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("mode 0644");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains("mode 0644"), "{err}");
    assert!(detail(&err).contains("chmod 600"), "{err}");

    let (file, key) = key_file(0o600);
    let node = Node::builder()
        .id(7_000_002)
        .key_file(file.path())
        .ignore_environment()
        .start()
        .await
        .expect("a private key file");
    assert_eq!(node.public_key(), Some(key.public()));
}

#[tokio::test]
async fn trust_files_are_checked() {
    let _serial = SERIAL.lock().await;
    let (file, key) = key_file(0o600);
    // A trust file that names another key for this node.
    let other = rsm::NodeKey::generate().public();
    let trust = config_file(&format!("# cluster\n7000003 {other}\n2 {}\n", key.public()));
    let err = Node::builder()
        .id(7_000_003)
        .key_file(file.path())
        .trust_file(trust.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("another key for this node");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains("names key"), "{err}");
    // A malformed line, named.
    let trust = config_file("2 not-a-key\n");
    let err = Node::builder()
        .id(7_000_003)
        .key_file(file.path())
        .trust_file(trust.path())
        .ignore_environment()
        .start()
        .await
        .expect_err("malformed");
    assert!(detail(&err).contains("line 1"), "{err}");
    // Peers' keys without a key of its own.
    let err = Node::builder()
        .id(7_000_003)
        .peer_key(2, other)
        .ignore_environment()
        .start()
        .await
        .expect_err("no key of its own");
    assert_eq!(err.code(), 44);
}

#[tokio::test]
async fn other_loopback_addresses_are_accepted() {
    let _serial = SERIAL.lock().await;
    let node = Node::builder()
        .listen(addr("127.0.0.5:0"))
        .ignore_environment()
        .start()
        .await
        .expect("127.0.0.5");
    assert_eq!(node.listen_addr().ip(), addr("127.0.0.5:0").ip());
    // ::1 may be missing where IPv6 is off: then only bind may fail, never the config check.
    match Node::builder()
        .listen(addr("[::1]:0"))
        .ignore_environment()
        .start()
        .await
    {
        Ok(node) => assert!(node.listen_addr().is_ipv6()),
        Err(err) => assert_eq!(err.code(), 31, "{err}"),
    }
}

#[tokio::test]
async fn a_peer_with_the_own_id_is_refused() {
    let _serial = SERIAL.lock().await;
    let err = Node::builder()
        .id(2)
        .peer(2, addr("127.0.0.1:7402"))
        .ignore_environment()
        .start()
        .await
        .expect_err("own id");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains("builder: peer 2"), "{err}");
}

#[tokio::test]
async fn port_zero_becomes_a_real_port_and_two_nodes_get_two() {
    let _serial = SERIAL.lock().await;
    let a = Node::builder()
        .id(1)
        .ignore_environment()
        .start()
        .await
        .expect("node a");
    let b = Node::builder()
        .id(2)
        .ignore_environment()
        .start()
        .await
        .expect("node b");
    assert_eq!(a.config().listen.port(), 0);
    assert_ne!(a.listen_addr().port(), 0);
    assert_ne!(b.listen_addr().port(), 0);
    assert_ne!(a.listen_addr().port(), b.listen_addr().port());
    assert_ne!(a.incarnation(), 0);
    assert_ne!(a.incarnation(), b.incarnation());
    // The listener is real: a connection reaches it.
    std::net::TcpStream::connect(a.listen_addr()).expect("connect to the listener");
}

#[tokio::test]
async fn a_taken_port_is_insufficient_resources() {
    let _serial = SERIAL.lock().await;
    let a = Node::builder()
        .ignore_environment()
        .start()
        .await
        .expect("node a");
    let err = Node::builder()
        .id(2)
        .listen(a.listen_addr())
        .ignore_environment()
        .start()
        .await
        .expect_err("the port is taken");
    assert_eq!(err.code(), 31);
    assert!(detail(&err).contains(&a.listen_addr().to_string()), "{err}");
    // After shutdown the port is free again.
    a.shutdown().await;
    a.shutdown().await;
    let c = Node::builder()
        .id(2)
        .listen(a.listen_addr())
        .ignore_environment()
        .start()
        .await
        .expect("port freed");
    assert_eq!(c.listen_addr(), a.listen_addr());
}

// --- the environment, in children ---

#[tokio::test]
async fn variables_override_the_file_and_the_builder_overrides_them() {
    let _serial = SERIAL.lock().await;
    if !is_child() {
        let file = config_file(
            "node_id = 3\nlisten = \"127.0.0.1:0\"\n[peers]\n1 = \"127.0.0.1:7401\"\n2 = \"127.0.0.1:7402\"\n",
        );
        run_in_child(
            "variables_override_the_file_and_the_builder_overrides_them",
            &[
                ("RSM_CONFIG", path_str(file.path())),
                ("RSM_NODE_ID", "4"),
                ("RSM_LISTEN", "127.0.0.6:0"),
                ("RSM_PEERS", " 2=127.0.0.1:9002 , 6=[::1]:7406 "),
            ],
        );
        return;
    }
    let node = Node::builder()
        .peer(6, addr("127.0.0.1:9006"))
        .start()
        .await
        .expect("start from file and variables");
    assert_eq!(node.id(), NodeId(4), "RSM_NODE_ID overrides the file");
    assert_eq!(
        node.listen_addr().ip(),
        addr("127.0.0.6:0").ip(),
        "RSM_LISTEN overrides the file"
    );
    let peers = node.peers();
    assert_eq!(peers.len(), 3);
    assert_eq!(peers[&NodeId(1)], addr("127.0.0.1:7401"), "from the file");
    assert_eq!(
        peers[&NodeId(2)],
        addr("127.0.0.1:9002"),
        "RSM_PEERS overrides the file"
    );
    assert_eq!(
        peers[&NodeId(6)],
        addr("127.0.0.1:9006"),
        "the builder overrides RSM_PEERS"
    );

    let with_id = Node::builder().id(9).start().await.expect("builder id");
    assert_eq!(with_id.id(), NodeId(9), "the builder overrides RSM_NODE_ID");

    let ignoring = Node::builder()
        .ignore_environment()
        .start()
        .await
        .expect("ignore");
    assert_eq!(ignoring.id(), NodeId(1));
    assert!(ignoring.peers().is_empty());
}

#[tokio::test]
async fn config_file_overrides_rsm_config() {
    let _serial = SERIAL.lock().await;
    if !is_child() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("absent.toml");
        run_in_child(
            "config_file_overrides_rsm_config",
            &[("RSM_CONFIG", path_str(&missing))],
        );
        return;
    }
    let file = config_file("node_id = 8\n");
    let node = Node::builder()
        .config_file(file.path())
        .start()
        .await
        .expect("builder file");
    assert_eq!(node.id(), NodeId(8));
}

#[tokio::test]
async fn a_missing_file_named_by_rsm_config_is_bad_conf() {
    let _serial = SERIAL.lock().await;
    if !is_child() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("absent.toml");
        run_in_child(
            "a_missing_file_named_by_rsm_config_is_bad_conf",
            &[("RSM_CONFIG", path_str(&missing))],
        );
        return;
    }
    let named = std::env::var("RSM_CONFIG").expect("set by the parent");
    let err = Node::builder()
        .start()
        .await
        .expect_err("missing named file");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains(&named), "{err}");
    assert!(detail(&err).contains("RSM_CONFIG"), "{err}");
}

#[tokio::test]
async fn bad_variables_are_bad_conf_naming_them() {
    let _serial = SERIAL.lock().await;
    if !is_child() {
        run_in_child(
            "bad_variables_are_bad_conf_naming_them",
            &[("RSM_PEERS", "2=foo"), ("RSM_CONFIG", "")],
        );
        return;
    }
    let err = Node::builder().start().await.expect_err("bad RSM_PEERS");
    assert_eq!(err.code(), 44);
    assert!(
        detail(&err).contains(r#"RSM_PEERS: entry "2=foo": invalid address "foo""#),
        "{err}"
    );
    // The builder cannot paper over a variable that does not parse, but ignoring them can.
    Node::builder()
        .ignore_environment()
        .start()
        .await
        .expect("ignored");
}

#[tokio::test]
async fn a_non_loopback_rsm_listen_is_refused() {
    let _serial = SERIAL.lock().await;
    if !is_child() {
        run_in_child(
            "a_non_loopback_rsm_listen_is_refused",
            &[("RSM_LISTEN", "192.0.2.2:7401")],
        );
        return;
    }
    if Path::new("/etc/rsm/rsm.toml").exists() {
        return; // the machine's own file could set anything
    }
    let err = Node::builder().start().await.expect_err("non-loopback");
    assert_eq!(err.code(), 44);
    assert!(detail(&err).contains("RSM_LISTEN: 192.0.2.2"), "{err}");
    // The builder's explicit listen address wins over the variable.
    let node = Node::builder()
        .listen(addr("127.0.0.1:0"))
        .start()
        .await
        .expect("builder listen");
    assert!(node.listen_addr().ip().is_loopback());
}

#[tokio::test]
async fn without_rsm_config_a_missing_default_file_is_fine() {
    let _serial = SERIAL.lock().await;
    if Path::new("/etc/rsm/rsm.toml").exists() {
        return; // the machine has a default file: nothing to test here
    }
    if !is_child() {
        run_in_child("without_rsm_config_a_missing_default_file_is_fine", &[]);
        return;
    }
    let node = Node::builder().start().await.expect("defaults");
    assert_eq!(node.id(), NodeId(1));
    assert!(node.listen_addr().ip().is_loopback());
}

#[tokio::test]
async fn a_dropped_node_id_can_start_again_at_once() {
    let _serial = SERIAL.lock().await;
    // A dropped node releases its names on its own threads, a moment later; a node started
    // with its id straight away waits for that instead of failing.
    for round in 0..50 {
        let node = Node::builder()
            .id(9171)
            .ignore_environment()
            .start()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        drop(node);
    }
    // The same for a fixed TCP address, under another id each time.
    let fixed = {
        let node = Node::builder()
            .id(9172)
            .ignore_environment()
            .start()
            .await
            .expect("first node on the address");
        node.listen_addr()
    };
    for round in 0..50 {
        let node = Node::builder()
            .id(9173 + round)
            .listen(fixed)
            .ignore_environment()
            .start()
            .await
            .unwrap_or_else(|e| panic!("round {round} on {fixed}: {e}"));
        assert_eq!(node.listen_addr(), fixed);
        drop(node);
    }
    // A live node's id stays taken, and says so at once.
    let live = Node::builder()
        .id(9171)
        .ignore_environment()
        .start()
        .await
        .expect("live node");
    let started = std::time::Instant::now();
    let err = Node::builder()
        .id(9171)
        .ignore_environment()
        .start()
        .await
        .expect_err("the id is taken");
    assert_eq!(err.code(), 31, "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    drop(live);
}
