//! The `rsm` command as a user runs it.

use std::process::Command;

fn rsm(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rsm"));
    cmd.args(args);
    // The library must pick the loopback domain by itself, without the providers' variables.
    for var in [
        "RSM_CONFIG",
        "RSM_NODE_ID",
        "RSM_LISTEN",
        "RSM_PEERS",
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
fn a_bad_configuration_fails_with_its_source_named() {
    let (ok, _, err) = rsm(&["topology"], &[("RSM_NODE_ID", "two")]);
    assert!(!ok);
    assert!(
        err.contains("RSM_NODE_ID") && err.contains("RSMERR_BAD_CONF"),
        "{err}"
    );
}
