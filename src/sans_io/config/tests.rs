//! Unit tests of `config.rs`.

use std::collections::BTreeMap;
use std::fmt;

use super::*;
use proptest::prelude::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

fn env(vars: &[(&str, &str)]) -> Result<PartialConfig> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    from_env(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

fn builder() -> PartialConfig {
    PartialConfig::new(Origin::Builder)
}

/// Asserts BAD_CONF (44) whose detail contains `needle`.
fn assert_bad_conf<T: fmt::Debug>(result: Result<T>, needle: &str) {
    let err = result.expect_err("expected BAD_CONF");
    assert_eq!(err.code(), 44, "{err}");
    let detail = err.context().detail.clone().unwrap_or_default();
    assert!(
        detail.contains(needle),
        "detail {detail:?} lacks {needle:?}"
    );
}

// --- defaults ---

#[test]
fn nothing_configured_gives_the_defaults() {
    assert_eq!(resolve(&[]).expect("defaults"), NodeConfig::default());
    let empty = [
        from_toml("", "f").expect("empty file"),
        env(&[]).expect("empty env"),
    ];
    assert_eq!(resolve(&empty).expect("defaults"), NodeConfig::default());
    let d = NodeConfig::default();
    assert_eq!(
        (d.node_id, d.listen, d.key.is_none(), d.trust_file.is_none()),
        (1, addr("127.0.0.1:0"), true, true)
    );
}

// --- the file ---

#[test]
fn toml_reads_every_key() {
    let text = "node_id = 4\nlisten = \"[::1]:7404\"\n\n[peers]\n2 = \"127.0.0.1:7402\"\n\"3\" = \"[::1]:7403\"\n";
    let layer = from_toml(text, "/etc/rsm/rsm.toml").expect("valid file");
    assert_eq!(layer.origin(), &Origin::File("/etc/rsm/rsm.toml".into()));
    assert_eq!(layer.node_id(), Some(4));
    assert_eq!(layer.listen(), Some(addr("[::1]:7404")));
    let peers = layer.peers();
    assert_eq!(peers.len(), 2);
    assert_eq!(peers[&2], addr("127.0.0.1:7402"));
    assert_eq!(peers[&3], addr("[::1]:7403"));
    assert_eq!(layer.key(), None);
}

#[test]
fn toml_reads_the_keys() {
    let key = "ab".repeat(32);
    let text = format!(
        "key_file = \"/etc/rsm/node.key\"\ntrust_file = \"/etc/rsm/cluster.keys\"\n[keys]\n2 = \"{key}\"\n"
    );
    let c = resolve(&[from_toml(&text, "f").expect("valid")]).expect("resolves");
    assert_eq!(c.key, Some(KeySource::File("/etc/rsm/node.key".into())));
    assert_eq!(c.trust_file, Some("/etc/rsm/cluster.keys".into()));
    assert_eq!(c.peer_keys[&2].to_string(), key);
    assert_bad_conf(
        from_toml("[keys]\n2 = \"abc\"", "f"),
        "f: keys.2: the public key is not 64 hex digits",
    );
    assert_bad_conf(from_toml("key_file = 3", "f"), "f: key_file: invalid type");
    assert_bad_conf(from_toml("keys = 3", "f"), "f: keys: expected a table");
}

#[test]
fn peers_keys_without_a_key_of_its_own_are_refused() {
    let text = format!("[keys]\n2 = \"{}\"\n", "ab".repeat(32));
    assert_bad_conf(
        resolve(&[from_toml(&text, "f").expect("valid")]),
        "f: keys: peers' keys are set but this node has no key",
    );
    assert_bad_conf(
        resolve(&[env(&[("RSM_TRUST_FILE", "/etc/rsm/cluster.keys")]).expect("env")]),
        "RSM_TRUST_FILE: peers' keys are set",
    );
    let with_key = env(&[
        ("RSM_TRUST_FILE", "/etc/rsm/cluster.keys"),
        ("RSM_KEY_FILE", "/etc/rsm/node.key"),
    ])
    .expect("env");
    assert!(resolve(&[with_key]).is_ok());
}

#[test]
fn toml_inline_peers_table_is_accepted() {
    let layer = from_toml("peers = { 2 = \"127.0.0.1:7402\" }", "f").expect("inline");
    assert_eq!(layer.peers()[&2].port(), 7402);
}

#[test]
fn toml_errors_name_the_file_and_field() {
    let f = "/etc/rsm/rsm.toml";
    assert_bad_conf(
        from_toml("node_id = \"one\"", f),
        "/etc/rsm/rsm.toml: node_id: invalid type",
    );
    assert_bad_conf(
        from_toml("node_id = -1", f),
        "/etc/rsm/rsm.toml: node_id: invalid value",
    );
    assert_bad_conf(from_toml("node_id = 4294967296", f), "rsm.toml: node_id:");
    assert_bad_conf(
        from_toml("listen = 7401", f),
        "rsm.toml: listen: invalid type: integer",
    );
    assert_bad_conf(
        from_toml("listen = \"localhost:1\"", f),
        "rsm.toml: listen: invalid address \"localhost:1\"",
    );
    assert_bad_conf(
        from_toml("listen = \"127.0.0.1\"", f),
        "rsm.toml: listen: invalid address",
    );
    assert_bad_conf(
        from_toml("peers = 3", f),
        "rsm.toml: peers: invalid type: integer",
    );
    assert_bad_conf(
        from_toml("[peers]\nx = \"127.0.0.1:1\"", f),
        "rsm.toml: peers.x: invalid node id \"x\"",
    );
    assert_bad_conf(
        from_toml("[peers]\n2 = 5", f),
        "rsm.toml: peers.2: invalid type: integer",
    );
    assert_bad_conf(
        from_toml("[peers]\n2 = \"foo\"", f),
        "rsm.toml: peers.2: invalid address \"foo\"",
    );
    assert_bad_conf(
        from_toml("[peers]\n2 = \"127.0.0.1:1\"\n02 = \"127.0.0.1:2\"", f),
        "rsm.toml: peers.",
    );
}

#[test]
fn toml_unknown_keys_are_refused() {
    assert_bad_conf(
        from_toml("nodeid = 2", "rsm.toml"),
        "rsm.toml: line 1, column 1: unknown field `nodeid`",
    );
    assert_bad_conf(
        from_toml("allow_non_loopback = true", "rsm.toml"),
        "unknown field `allow_non_loopback`",
    );
}

#[test]
fn toml_syntax_errors_give_the_position() {
    assert_bad_conf(
        from_toml("node_id = 1\nlisten = ", "rsm.toml"),
        "rsm.toml: line 2, column",
    );
}

#[test]
fn toml_over_one_mebibyte_is_refused() {
    let text = format!("# {}\n", "x".repeat(MAX_FILE_BYTES));
    assert_bad_conf(from_toml(&text, "big.toml"), "big.toml: the file has");
    let fits = format!("#{}", "x".repeat(MAX_FILE_BYTES - 1));
    assert!(from_toml(&fits, "f").is_ok());
}

#[test]
fn toml_more_than_max_peers_is_refused() {
    let mut text = String::from("[peers]\n");
    for id in 0..=MAX_PEERS {
        text.push_str(&format!("{} = \"127.0.0.1:{}\"\n", id + 10, id % 60000 + 1));
    }
    assert_bad_conf(
        from_toml(&text, "rsm.toml"),
        "rsm.toml: peers: 4097 peers, at most 4096",
    );
}

// --- the environment ---

#[test]
fn env_reads_every_variable() {
    let layer = env(&[
        ("RSM_NODE_ID", " 5 "),
        ("RSM_LISTEN", "127.0.0.9:7405"),
        ("RSM_PEERS", " 2=127.0.0.1:7402 ,3 = [::1]:7403,"),
    ])
    .expect("valid variables");
    assert_eq!(layer.origin(), &Origin::Environment);
    assert_eq!(layer.node_id(), Some(5));
    assert_eq!(layer.listen(), Some(addr("127.0.0.9:7405")));
    assert_eq!(
        layer.peers(),
        BTreeMap::from([(2, addr("127.0.0.1:7402")), (3, addr("[::1]:7403"))])
    );
}

#[test]
fn env_empty_means_unset() {
    let layer =
        env(&[("RSM_NODE_ID", ""), ("RSM_LISTEN", "  "), ("RSM_PEERS", "")]).expect("empty");
    assert!(layer.is_empty());
}

#[test]
fn env_errors_name_the_variable() {
    assert_bad_conf(
        env(&[("RSM_NODE_ID", "x")]),
        "RSM_NODE_ID: invalid node id \"x\"",
    );
    assert_bad_conf(
        env(&[("RSM_NODE_ID", "-1")]),
        "RSM_NODE_ID: invalid node id",
    );
    assert_bad_conf(
        env(&[("RSM_LISTEN", "foo")]),
        "RSM_LISTEN: invalid address \"foo\"",
    );
    assert_bad_conf(
        env(&[("RSM_PEERS", "2=foo")]),
        "RSM_PEERS: entry \"2=foo\": invalid address \"foo\"",
    );
    assert_bad_conf(
        env(&[("RSM_PEERS", "2")]),
        "RSM_PEERS: entry \"2\": expected id=ip:port",
    );
    assert_bad_conf(
        env(&[("RSM_PEERS", "a=127.0.0.1:1")]),
        "RSM_PEERS: entry \"a=127.0.0.1:1\": invalid node id \"a\"",
    );
    assert_bad_conf(
        env(&[("RSM_PEERS", "2=127.0.0.1:1,2=127.0.0.1:2")]),
        "RSM_PEERS: entry \"2=127.0.0.1:2\": node 2 is listed twice",
    );
}

#[test]
fn env_more_than_max_peers_is_refused() {
    let text: Vec<String> = (0..=MAX_PEERS as u32)
        .map(|id| format!("{}=127.0.0.1:1", id + 10))
        .collect();
    assert_bad_conf(
        env(&[("RSM_PEERS", &text.join(","))]),
        "RSM_PEERS: 4097 peers, at most 4096",
    );
    let fits: Vec<String> = (0..MAX_PEERS as u32)
        .map(|id| format!("{}=127.0.0.1:1", id + 10))
        .collect();
    assert_eq!(
        env(&[("RSM_PEERS", &fits.join(","))])
            .expect("4096 peers")
            .peers()
            .len(),
        MAX_PEERS
    );
}

#[test]
fn long_values_are_cut_short_in_errors() {
    let long = "y".repeat(10_000);
    let err = env(&[("RSM_LISTEN", &long)]).expect_err("bad address");
    let detail = err.context().detail.clone().unwrap_or_default();
    assert!(detail.len() < 400, "{detail}");
    assert!(detail.contains("..."), "{detail}");
}

// --- precedence and merge ---

#[test]
fn later_sources_override_earlier_ones() {
    let file = from_toml("node_id = 2\nlisten = \"127.0.0.1:7402\"", "f").expect("file");
    let env_layer = env(&[("RSM_NODE_ID", "3"), ("RSM_LISTEN", "127.0.0.1:7403")]).expect("env");
    let mut b = builder();
    b.set_node_id(4);

    let c = resolve(std::slice::from_ref(&file)).expect("file only");
    assert_eq!((c.node_id, c.listen.port()), (2, 7402));
    let c = resolve(&[file.clone(), env_layer.clone()]).expect("file < env");
    assert_eq!((c.node_id, c.listen.port()), (3, 7403));
    let c = resolve(&[file, env_layer, b]).expect("env < builder");
    assert_eq!((c.node_id, c.listen.port()), (4, 7403));
}

#[test]
fn peers_merge_entry_by_entry() {
    let file = from_toml(
        "[peers]\n2 = \"127.0.0.1:7402\"\n3 = \"127.0.0.1:7403\"",
        "f",
    )
    .expect("file");
    let env_layer = env(&[("RSM_PEERS", "3=127.0.0.1:9003,4=127.0.0.1:7404")]).expect("env");
    let mut b = builder();
    b.insert_peer(4, addr("127.0.0.1:9004"))
        .insert_peer(5, addr("127.0.0.1:7405"));
    let c = resolve(&[file, env_layer, b]).expect("merge");
    let expected = BTreeMap::from([
        (2, addr("127.0.0.1:7402")),
        (3, addr("127.0.0.1:9003")),
        (4, addr("127.0.0.1:9004")),
        (5, addr("127.0.0.1:7405")),
    ]);
    assert_eq!(c.peers, expected);
}

#[test]
fn merge_keeps_each_settings_origin() {
    let mut merged = from_toml("listen = \"192.0.2.2:1\"", "a.toml").expect("file");
    merged.merge(&env(&[("RSM_NODE_ID", "3")]).expect("env"));
    // The listen address came from the file, so the error names the file.
    assert_bad_conf(
        resolve(&[merged]),
        "a.toml: listen: 192.0.2.2 is not a loopback address",
    );
}

// --- validation ---

#[test]
fn loopback_listen_addresses_are_accepted() {
    for a in ["127.0.0.5:7401", "127.255.255.254:0", "[::1]:7401"] {
        let mut b = builder();
        b.set_listen(addr(a));
        assert_eq!(resolve(&[b]).expect(a).listen, addr(a));
    }
}

#[test]
fn non_loopback_listen_is_refused_without_the_opt_in() {
    for a in [
        "192.0.2.2:7401",
        "0.0.0.0:0",
        "[::]:0",
        "[::ffff:127.0.0.1]:1",
        "[2001:db8::1]:1",
    ] {
        let mut b = builder();
        b.set_listen(addr(a));
        assert_bad_conf(resolve(&[b]), "builder: listen:");
    }
    assert_bad_conf(
        resolve(&[env(&[("RSM_LISTEN", "192.0.2.2:1")]).expect("env")]),
        "RSM_LISTEN: 192.0.2.2 is not a loopback address",
    );
    assert_bad_conf(
        resolve(&[from_toml("listen = \"192.0.2.2:1\"", "/etc/rsm/rsm.toml").expect("file")]),
        "/etc/rsm/rsm.toml: listen: 192.0.2.2",
    );
}

#[test]
fn a_key_lets_a_non_loopback_address_through() {
    let env_layer = env(&[
        ("RSM_LISTEN", "192.0.2.2:7401"),
        ("RSM_KEY_FILE", "/etc/rsm/node.key"),
    ])
    .expect("env");
    let c = resolve(&[env_layer]).expect("keyed");
    assert_eq!(c.listen, addr("192.0.2.2:7401"));

    let mut b = builder();
    b.set_key(KeySource::Inline(crate::NodeKey::generate()))
        .set_listen(addr("192.0.2.2:1"));
    assert!(resolve(&[b]).is_ok());
    let mut off = builder();
    off.set_listen(addr("192.0.2.2:1"));
    assert_bad_conf(resolve(&[off]), "builder: listen:");
}

#[test]
fn the_own_entry_of_a_shared_peer_list_is_ignored() {
    // The default id 1, in RSM_PEERS: no peer, and the listen address stays the default.
    let c = resolve(&[env(&[("RSM_PEERS", "1=127.0.0.1:7401,2=127.0.0.1:7402")]).expect("env")])
        .expect("own entry ignored");
    assert_eq!(c.peers, BTreeMap::from([(2, addr("127.0.0.1:7402"))]));
    assert_eq!(c.listen, NodeConfig::default().listen);
    // Only the own entry: no peers at all.
    let c =
        resolve(&[env(&[("RSM_NODE_ID", "3"), ("RSM_PEERS", "3=127.0.0.1:7403")]).expect("env")])
            .expect("own entry ignored");
    assert!(c.peers.is_empty());
    // A listen address that differs from the own entry's is kept.
    let layer = env(&[
        ("RSM_NODE_ID", "2"),
        ("RSM_LISTEN", "127.0.0.1:9002"),
        ("RSM_PEERS", "1=127.0.0.1:7401,2=127.0.0.1:7402"),
    ])
    .expect("env");
    let c = resolve(&[layer]).expect("own entry ignored");
    assert_eq!(c.listen, addr("127.0.0.1:9002"));
    assert_eq!(c.peers.keys().copied().collect::<Vec<_>>(), [1]);
    // An id from the builder, the entry from the file.
    let file = from_toml(
        "[peers]\n7 = \"127.0.0.1:7407\"\n8 = \"127.0.0.1:7408\"",
        "rsm.toml",
    )
    .expect("file");
    let mut b = builder();
    b.set_node_id(7);
    let c = resolve(&[file, b]).expect("own entry ignored");
    assert_eq!(c.peers.keys().copied().collect::<Vec<_>>(), [8]);
}

#[test]
fn the_own_entry_does_not_count_toward_max_peers() {
    let mut b = builder();
    for id in 2..=MAX_PEERS as u32 + 1 {
        b.insert_peer(id, addr("127.0.0.1:1"));
    }
    let own = env(&[("RSM_PEERS", "1=127.0.0.1:7401")]).expect("env");
    let c = resolve(&[own, b]).expect("own entry aside");
    assert_eq!(c.peers.len(), MAX_PEERS);
}

#[test]
fn a_builder_peer_with_the_own_id_is_refused() {
    let mut b = builder();
    b.set_node_id(3).insert_peer(3, addr("127.0.0.1:1"));
    let err = resolve(&[b]).expect_err("own id");
    assert_eq!(err.context().node, Some(3));
    assert!(
        err.to_string()
            .contains("builder: peer 3: this is the node's own id"),
        "{err}"
    );
    // The builder's entry overrides a shared list's, and is refused as the builder's.
    let shared = env(&[("RSM_PEERS", "1=127.0.0.1:7401")]).expect("env");
    let mut b = builder();
    b.insert_peer(1, addr("127.0.0.1:1"));
    assert_bad_conf(resolve(&[shared, b]), "builder: peer 1");
}

#[test]
fn more_than_max_peers_in_all_is_refused() {
    let mut b = builder();
    for id in 0..=MAX_PEERS as u32 {
        b.insert_peer(id + 10, addr("127.0.0.1:1"));
    }
    assert_bad_conf(resolve(&[b]), "4097 peers, at most 4096");
}

// --- properties ---

fn arb_socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u16; 8]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

proptest! {
    #[test]
    fn from_env_never_panics(node in ".*", listen in ".*", peers in ".*") {
        let _ = env(&[("RSM_NODE_ID", &node), ("RSM_LISTEN", &listen), ("RSM_PEERS", &peers)]);
    }

    #[test]
    fn from_env_never_panics_on_near_miss_peers(peers in "[0-9=,: \\[\\]a-f.%]{0,80}") {
        if let Ok(layer) = env(&[("RSM_PEERS", &peers)]) {
            let _ = resolve(&[layer]);
        }
    }

    #[test]
    fn from_toml_never_panics(text in ".*") {
        if let Ok(layer) = from_toml(&text, "fuzz.toml") {
            let _ = resolve(&[layer]);
        }
    }

    #[test]
    fn from_toml_never_panics_on_near_miss_files(
        text in "(node_id|listen|peers|\\[peers\\]|[0-9]+|\"[0-9.:\\[\\]]*\"| |=|\n|\\{|\\}|,|-){0,40}"
    ) {
        let _ = from_toml(&text, "fuzz.toml");
    }

    #[test]
    fn generated_peers_round_trip(
        peers in proptest::collection::btree_map(any::<u32>(), arb_socket_addr(), 0..32),
        pad in "[ \t]{0,2}",
        trailing_comma in any::<bool>(),
    ) {
        let mut text = peers
            .iter()
            .map(|(id, a)| format!("{pad}{id}={a}{pad}"))
            .collect::<Vec<_>>()
            .join(",");
        if trailing_comma {
            text.push(',');
        }
        let layer = env(&[("RSM_PEERS", &text)]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(layer.peers(), peers);
    }
}
