//! The crate docs carry a table with a row for each of the 42 functions `librsm` exports
//! (docs/rsmapi.md §1, §4): this test reads the crate-level docs (the `//!` lines of `src/lib.rs` and
//! every file a `#![doc = include_str!(...)]` there includes) and checks the rows.

use std::collections::BTreeSet;
use std::path::Path;

/// The functions `librsm` exports, in the order of docs/rsmapi.md §4.
const RSMAPI: &[&str] = &[
    // §4.1 controllers
    "rsm_get_controller",
    "rsm_get_controller_attr",
    "rsm_release_controller",
    // §4.2 export
    "rsm_memseg_export_create",
    "rsm_memseg_export_destroy",
    "rsm_memseg_export_rebind",
    "rsm_memseg_export_publish",
    "rsm_memseg_export_unpublish",
    "rsm_memseg_export_republish",
    // §4.3 connect
    "rsm_memseg_import_connect",
    "rsm_memseg_import_disconnect",
    // §4.4 get and put
    "rsm_memseg_import_get",
    "rsm_memseg_import_get8",
    "rsm_memseg_import_get16",
    "rsm_memseg_import_get32",
    "rsm_memseg_import_get64",
    "rsm_memseg_import_put",
    "rsm_memseg_import_put8",
    "rsm_memseg_import_put16",
    "rsm_memseg_import_put32",
    "rsm_memseg_import_put64",
    // §4.5 scatter/gather
    "rsm_memseg_import_putv",
    "rsm_memseg_import_getv",
    // §4.6 barriers
    "rsm_memseg_import_init_barrier",
    "rsm_memseg_import_open_barrier",
    "rsm_memseg_import_order_barrier",
    "rsm_memseg_import_close_barrier",
    "rsm_memseg_import_destroy_barrier",
    "rsm_memseg_import_get_mode",
    "rsm_memseg_import_set_mode",
    // §4.7 signals and poll
    "rsm_intr_signal_post",
    "rsm_intr_signal_wait",
    "rsm_memseg_get_pollfd",
    "rsm_memseg_release_pollfd",
    "rsm_intr_signal_wait_pollfd",
    // §4.8 local memory handles
    "rsm_create_localmemory_handle",
    "rsm_free_localmemory_handle",
    // §4.9 topology and segment ids
    "rsm_get_interconnect_topology",
    "rsm_free_interconnect_topology",
    "rsm_get_segmentid_range",
    // §4.10 mapping
    "rsm_memseg_import_map",
    "rsm_memseg_import_unmap",
];

/// The crate-level documentation: the `//!` lines of `src/lib.rs` and the files included by
/// `#![doc = include_str!("...")]`, in order.
fn crate_docs() -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read src/lib.rs");
    let mut docs = String::new();
    for line in lib.lines() {
        let line = line.trim();
        if let Some(text) = line.strip_prefix("//!") {
            docs.push_str(text);
            docs.push('\n');
        } else if let Some(rest) = line.strip_prefix("#![doc") {
            if let Some(path) = rest
                .split_once("include_str!(\"")
                .and_then(|(_, tail)| tail.split_once('"'))
                .map(|(path, _)| path)
            {
                let text = std::fs::read_to_string(src.join(path))
                    .unwrap_or_else(|e| panic!("read the included doc file src/{path}: {e}"));
                docs.push_str(&text);
                docs.push('\n');
            }
        }
    }
    docs
}

/// The RSMAPI names in the first column of the table's rows, in order.
fn table_rows(docs: &str) -> Vec<String> {
    docs.lines()
        .filter_map(|line| {
            let first = line.trim().strip_prefix('|')?.split('|').next()?.trim();
            let name = first.strip_prefix('`')?.strip_suffix('`')?;
            name.starts_with("rsm_").then(|| name.to_string())
        })
        .collect()
}

#[test]
fn the_list_holds_exactly_42_distinct_functions() {
    let distinct: BTreeSet<&str> = RSMAPI.iter().copied().collect();
    assert_eq!(RSMAPI.len(), 42, "the list has {} entries", RSMAPI.len());
    assert_eq!(distinct.len(), 42, "the list repeats a name");
}

#[test]
fn the_crate_docs_have_one_row_per_rsmapi_function() {
    let rows = table_rows(&crate_docs());
    let missing: Vec<&str> = RSMAPI
        .iter()
        .copied()
        .filter(|f| !rows.iter().any(|r| r == f))
        .collect();
    assert!(
        missing.is_empty(),
        "no row in the RSMAPI table: {missing:?}"
    );
    let unknown: Vec<&String> = rows
        .iter()
        .filter(|r| !RSMAPI.contains(&r.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "rows for functions RSMAPI does not have: {unknown:?}"
    );
    let distinct: BTreeSet<&String> = rows.iter().collect();
    assert_eq!(distinct.len(), rows.len(), "a function has two rows");
    assert_eq!(rows.len(), 42);
}

#[test]
fn each_row_says_what_stands_in_for_the_function() {
    let docs = crate_docs();
    for line in docs.lines().map(str::trim) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "| `rsm_x` | equivalent | note |" splits into ["", name, equivalent, note, ""].
        let Some(name) = cells.get(1).filter(|c| c.starts_with("`rsm_")) else {
            continue;
        };
        let equivalent = cells.get(2).copied().unwrap_or("");
        assert!(
            equivalent.contains("[`")
                || equivalent.starts_with("later (")
                || equivalent.starts_with("coming: "),
            "{name}: the second column is neither an intra-doc link nor \"later (...)\" \
             nor \"coming: ...\": {equivalent:?}"
        );
    }
}

/// The C library provides every function: the table's last column says so, and
/// `<rsmapi.h>` declares it (the capi crate's tests check the library exports it).
#[test]
fn the_c_library_provides_every_function() {
    let header = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("capi/include/rsmapi.h"),
    )
    .expect("read capi/include/rsmapi.h");
    let docs = crate_docs();
    let mut provided = 0;
    for line in docs.lines().map(str::trim) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(name) = cells.get(1).filter(|c| c.starts_with("`rsm_")) else {
            continue;
        };
        assert_eq!(cells.get(4).copied(), Some("yes"), "{name}: the C column");
        let bare = name.trim_matches('`');
        assert!(
            header.contains(&format!(" {bare}(")),
            "{bare} is not declared in rsmapi.h"
        );
        provided += 1;
    }
    assert_eq!(provided, 42);
}
