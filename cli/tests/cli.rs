//! The `rsm` command as a user runs it.

use std::process::Command;

fn rsm(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsm"));
    cmd.args(args);
    // The library must pick the loopback domain by itself, without the providers' variables.
    for var in [
        "RSM_LOG",
        "RSM_CONFIG",
        "RSM_NODE_ID",
        "RSM_LISTEN",
        "RSM_PEERS",
        "RSM_KEY_FILE",
        "RSM_TRUST_FILE",
        "FI_TCP_IFACE",
        "FI_SOCKETS_IFACE",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run rsm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn info_json_lists_every_controller_with_its_attributes() {
    let (ok, out, err) = rsm(&["info", "--json"], &[]);
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("rsm info --json parses");
    let list = list.as_array().expect("an array");
    let names: Vec<&str> = list.iter().filter_map(|c| c["name"].as_str()).collect();
    for want in ["loopback", "tcp0", "shm0", "sockets0"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let keys = [
        "name",
        "provider",
        "domain",
        "direct_access_sizes",
        "atomic_sizes",
        "page_size",
        "max_export_segment_size",
        "tot_export_segment_size",
        "max_export_segments",
        "max_import_map_size",
        "tot_import_map_size",
        "max_import_segments",
    ];
    for c in list {
        for k in keys {
            assert!(c.get(k).is_some(), "{k} missing in {c}");
        }
        assert!(c["page_size"].as_u64().unwrap() >= 4096);
    }
    let tcp = list.iter().find(|c| c["name"] == "tcp0").unwrap();
    assert_eq!(tcp["domain"], "lo");
    assert_eq!(tcp["provider"], "tcp"); // its connected endpoints, not rxm
    assert!(tcp["tx_size"].as_u64().unwrap() > 0);
}

#[test]
fn info_table_names_each_controller() {
    let (ok, out, err) = rsm(&["info"], &[]);
    assert!(ok, "{err}");
    for want in [
        "loopback",
        "tcp0",
        "shm0",
        "sockets0",
        "max_export_segment_size",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
}

#[test]
fn topology_reports_the_peers_that_answer() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let live_id = 3_000_000 + std::process::id() % 100_000;
    let live = rt
        .block_on(
            rsm::Node::builder()
                .ignore_environment()
                .id(live_id)
                .start(),
        )
        .unwrap();
    let peers = format!("{live_id}={},2=127.0.0.1:1", live.listen_addr());
    let (ok, out, err) = rsm(
        &["topology", "--json"],
        &[("RSM_NODE_ID", "4"), ("RSM_PEERS", &peers)],
    );
    assert!(ok, "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).expect("topology --json parses");
    assert_eq!(t["local_node"], 4);
    let ctrls = t["controllers"].as_array().unwrap();
    assert!(!ctrls.is_empty());
    for c in ctrls {
        let nodes: Vec<u64> = c["remotes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["node"].as_u64().unwrap())
            .collect();
        assert_eq!(
            nodes,
            vec![u64::from(live_id)],
            "only the node that answers: {c}"
        );
    }
    rt.block_on(live.shutdown());
}

#[test]
fn segments_lists_what_a_node_publishes_to_the_observer() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let live_id = 3_100_000 + std::process::id() % 100_000;
    // `rsm segments` asks as the observer of node 7.
    let observer = rsm::NodeId(7 | 0x8000_0000);
    let (live, _segs, named, public) = rt.block_on(async {
        let live = rsm::Node::builder()
            .ignore_environment()
            .id(live_id)
            .start()
            .await
            .unwrap();
        let ctrl = live.controller("loopback").await.unwrap();
        let seg = || ctrl.export(1 << 16, rsm::ExportFlags::empty()).unwrap();
        let (a, b, c) = (seg(), seg(), seg());
        let named = a
            .publish_named(None, "features", &[rsm::Access::new(observer, 0o444)])
            .await
            .unwrap();
        b.publish(None, &[rsm::Access::new(rsm::NodeId(5), 0o666)])
            .await
            .unwrap();
        let public = c.publish(None, &[]).await.unwrap();
        (live, (a, b, c), named, public)
    });
    let node = live_id.to_string();
    // Not 4, which the topology test observes as at the same time: one observer id per host.
    let env = [("RSM_NODE_ID", "7")];
    let (ok, out, err) = rsm(&["segments", &node, "--json"], &env);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("segments --json parses");
    assert_eq!(v["observer"], u64::from(observer.get()));
    let segs = v["segments"].as_array().expect("an array");
    let ids: Vec<u64> = segs.iter().map(|s| s["id"].as_u64().unwrap()).collect();
    assert_eq!(
        ids,
        [u64::from(named.get()), u64::from(public.get())],
        "{out}"
    );
    assert_eq!(segs[0]["perm"], "0400");
    assert_eq!(segs[0]["name"], "features");
    assert_eq!(segs[0]["controller"], "loopback");
    assert_eq!(segs[0]["size"], 1 << 16);
    assert!(segs[1]["name"].is_null());

    let (ok, out, err) = rsm(&["segments", &node], &env);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let first: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        first,
        [
            named.to_string().as_str(),
            "65536",
            "r-",
            "loopback",
            "features"
        ]
    );
    assert!(lines[1].ends_with(" -"), "{out}");

    // A node that does not answer fails, naming the error.
    let absent = (live_id + 1).to_string();
    let (ok, _, err) = rsm(&["segments", &absent], &env);
    assert!(
        !ok && err.contains("RSMERR_REMOTE_NODE_UNREACHABLE"),
        "{err}"
    );
    rt.block_on(live.shutdown());
}

#[test]
fn a_bad_configuration_fails_with_its_source_named() {
    let (ok, _, err) = rsm(&["topology"], &[("RSM_NODE_ID", "two")]);
    assert!(!ok);
    assert!(
        err.contains("RSM_NODE_ID") && err.contains("RSMERR_BAD_CONF"),
        "{err}"
    );
}

/// The controllers `rsm info --json` lists with `args` added: (name, provider) pairs.
fn info_names(args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["info", "--json"];
    all.extend_from_slice(args);
    let (ok, out, err) = rsm(&all, &[]);
    assert!(ok, "{args:?}: {err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("rsm info --json parses");
    list.as_array()
        .expect("an array")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["provider"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn info_filters_by_provider_and_by_controller_name() {
    let tcp = info_names(&["--provider", "tcp"]);
    assert!(tcp.iter().any(|(n, _)| n == "tcp0"), "{tcp:?}");
    for (name, provider) in &tcp {
        assert!(
            provider.split(';').any(|p| p == "tcp"),
            "{name} ({provider}) is not a tcp controller"
        );
    }
    // A layer of a stacked provider matches too, as fi_info -p udp lists udp;ofi_rxd.
    let all = info_names(&[]);
    if let Some((name, _)) = all.iter().find(|(_, p)| p == "udp;ofi_rxd") {
        let udp = info_names(&["-p", "udp"]);
        assert!(udp.iter().any(|(n, _)| n == name), "{udp:?}");
    }
    // Controller names in any case, exactly one.
    assert_eq!(
        info_names(&["--controller", "SHM0"]),
        [("shm0".to_string(), "shm".to_string())]
    );
    assert_eq!(
        info_names(&["-c", "loopback", "--provider", "loopback"]),
        [("loopback".to_string(), "loopback".to_string())]
    );
    // The table filters alike.
    let (ok, out, err) = rsm(&["info", "--controller", "sockets0"], &[]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("sockets0\n") && !out.contains("\ntcp0\n"),
        "{out}"
    );
}

#[test]
fn info_with_a_filter_nothing_matches_fails() {
    for args in [
        &["info", "--provider", "nonesuch"][..],
        &[
            "info",
            "--json",
            "--controller",
            "tcp0",
            "--provider",
            "shm",
        ],
    ] {
        let (ok, out, err) = rsm(args, &[]);
        assert!(!ok, "{args:?}: {out}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains("no controller matches"), "{args:?}: {err}");
    }
}

#[test]
fn version_names_libfabric() {
    let (ok, out, err) = rsm(&["--version"], &[]);
    assert!(ok, "{err}");
    let want = format!("rsm {} (libfabric 1.", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&want), "{out}");
    assert!(out.contains(", built against 1."), "{out}");
}

#[test]
fn help_lists_exit_statuses_and_variables() {
    let (ok, out, err) = rsm(&["--help"], &[]);
    assert!(ok, "{err}");
    for want in [
        "Exit status:",
        "RSM_LOG",
        "RSM_CONFIG",
        "RSM_NODE_ID",
        "RSM_LISTEN",
        "RSM_PEERS",
        "RSM_KEY_FILE",
        "RSM_TRUST_FILE",
        "RSM_SPIN_BUDGET_US",
        "--quiet",
        "--verbose",
        "--progress",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    // Subcommands list the global options and the same notes.
    let (ok, out, _) = rsm(&["info", "--help"], &[]);
    assert!(
        ok && out.contains("--provider") && out.contains("--quiet"),
        "{out}"
    );
}

/// The commands `rsm` runs for itself, which `rsm --help` does not list.
const HIDDEN: [&str; 5] = [
    "bench-peer",
    "bench-memory",
    "bench-memory-importer",
    "bench-scale-node",
    "demo-exporter",
];

#[test]
fn help_names_no_hidden_command() {
    let (ok, out, err) = rsm(&["--help"], &[]);
    assert!(ok, "{err}");
    // Whole words, so that the listed bench-scale does not count as bench-scale-node.
    let words: Vec<&str> = out
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .collect();
    for hidden in HIDDEN {
        assert!(!words.contains(&hidden), "{hidden} named:\n{out}");
        // The list above stays true: each still exists.
        let (ok, _, err) = rsm(&[hidden, "--help"], &[]);
        assert!(ok, "{hidden}: {err}");
    }
    for listed in [
        "info",
        "keygen",
        "topology",
        "segments",
        "bench",
        "bench-scale",
        "demo",
    ] {
        assert!(words.contains(&listed), "{listed} missing:\n{out}");
    }
}

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("key file")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn keygen_alone_writes_the_configured_key_file_privately() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("node.key");
    let key_var = key.to_str().expect("utf-8 path");
    let (ok, out, err) = rsm(&["keygen", "--node", "4"], &[("RSM_KEY_FILE", key_var)]);
    assert!(ok, "{err}");
    assert_eq!(mode(&key), 0o600);
    // Standard output is the trust file's line, never the secret; stderr says where it went.
    let secret = std::fs::read_to_string(&key).expect("key file");
    assert!(!out.contains(secret.trim()), "{out}");
    let public = out.trim().strip_prefix("4 ").expect("\"4 <public key>\"");
    assert!(err.contains(key_var) && err.contains("0600"), "{err}");
    let (ok, shown, err) = rsm(&["keygen", "--show", key_var], &[]);
    assert!(ok, "{err}");
    assert_eq!(shown.trim(), public);
    // A second run keeps the key, unless --force.
    let (ok, _, err) = rsm(&["keygen"], &[("RSM_KEY_FILE", key_var)]);
    assert!(!ok && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&key).expect("key file"), secret);
    let (ok, out, err) = rsm(&["keygen", "--force"], &[("RSM_KEY_FILE", key_var)]);
    assert!(ok, "{err}");
    assert_ne!(out.trim(), public);
    assert_eq!(mode(&key), 0o600);
    // The configuration file's key_file, through --config.
    let conf = dir.path().join("rsm.toml");
    let other = dir.path().join("other.key");
    std::fs::write(
        &conf,
        format!("key_file = {:?}\n", other.to_str().expect("utf-8")),
    )
    .expect("config");
    let conf = conf.to_str().expect("utf-8 path");
    let (ok, _, err) = rsm(&["--config", conf, "keygen"], &[]);
    assert!(ok, "{err}");
    assert_eq!(mode(&other), 0o600);
}

#[test]
fn keygen_help_says_where_it_writes() {
    let (ok, out, err) = rsm(&["keygen", "--help"], &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("/etc/rsm/node.key") && out.contains("RSM_KEY_FILE"),
        "{out}"
    );
}

#[test]
fn verbosity_sets_the_log_filter_unless_rsm_log_does() {
    // A node's start logs at info level ("node started") and below: nothing at the default
    // level, more with each -v, nothing with -q, and RSM_LOG wins over both.
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = args.to_vec();
        all.extend(["topology", "--json"]);
        let mut with_env = vec![("RSM_NODE_ID", "5")];
        with_env.extend_from_slice(env);
        let (ok, _, err) = rsm(&all, &with_env);
        assert!(ok, "{args:?} {env:?}: {err}");
        err
    };
    assert_eq!(run(&[], &[]), "");
    let info = run(&["-v"], &[]);
    assert!(
        info.contains("INFO") && info.contains("node started"),
        "{info}"
    );
    assert!(!info.contains("DEBUG"), "{info}");
    let debug = run(&["-vv"], &[]);
    assert!(debug.contains("DEBUG"), "{debug}");
    assert!(!debug.contains("TRACE"), "{debug}");
    assert!(run(&["-vvv"], &[]).contains("DEBUG"));
    assert_eq!(run(&["--quiet"], &[]), "");
    // An empty RSM_LOG counts as unset, as shells make `RSM_LOG= rsm ...` easy.
    assert!(run(&["-vv"], &[("RSM_LOG", "")]).contains("DEBUG"));
    assert_eq!(run(&["-vvv"], &[("RSM_LOG", "off")]), "");
    let (ok, _, err) = rsm(&["-q", "-v", "info"], &[]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}
