//! Provides the bindings to the system libfabric and compiles the shim for its `static inline`
//! functions (the whole data path: `fi_write`, `fi_cq_read`, ... are inline in the headers).
//!
//! By default the bindings and the shim's source are the pregenerated ones, `src/pregenerated.rs`
//! and `src/static_fns.c`: bindgen's output for Debian 12's libfabric 1.17 headers (x86_64),
//! whose ABI later libfabric 1.x and 2.x libraries keep. The shim is compiled against the
//! system headers pkg-config finds. With the `bindgen` feature both are generated from the
//! system headers instead (libclang needed): for other targets, and to refresh the
//! pregenerated files after a libfabric upgrade (copy `$OUT_DIR/bindings.rs` and
//! `$OUT_DIR/static_fns.c` over them; the build warns when they differ).
//!
//! On docs.rs (`DOCS_RS` set), where there is no libfabric, it uses `src/pregenerated.rs` and
//! compiles and links nothing. That is enough for rustdoc, never for a program.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=src/pregenerated.rs");
    println!("cargo:rerun-if-changed=src/static_fns.c");
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    if env::var_os("DOCS_RS").is_some() {
        copy_pregenerated(&manifest, &out);
        return;
    }
    let lib = match pkg_config::Config::new()
        .atleast_version("1.17")
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "rsm-libfabric-sys: libfabric 1.17 or newer was not found through pkg-config: {e}\n\
                 install it with: apt-get install -y libfabric-dev pkg-config \
                 (or run `cargo xtask test`, which installs it)"
            );
            std::process::exit(1);
        }
    };
    let shim = bindings(&lib, &manifest, &out);

    let mut build = cc::Build::new();
    build.file(shim).include(&manifest);
    for p in &lib.include_paths {
        build.include(p);
    }
    build.warnings(false).compile("rsm_lfsys_static_fns");
}

fn copy_pregenerated(manifest: &Path, out: &Path) {
    std::fs::copy(
        manifest.join("src/pregenerated.rs"),
        out.join("bindings.rs"),
    )
    .expect("copying src/pregenerated.rs into OUT_DIR");
}

/// Writes `$OUT_DIR/bindings.rs` and returns the shim's C source.
#[cfg(not(feature = "bindgen"))]
fn bindings(_lib: &pkg_config::Library, manifest: &Path, out: &Path) -> PathBuf {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch != "x86_64" || os != "linux" {
        eprintln!(
            "rsm-libfabric-sys: the pregenerated bindings are x86_64 Linux ones, not {arch} {os}:\n\
             enable the `bindgen` feature (of rsm or rsm-libfabric-sys) to generate them from \
             the system headers, with libclang installed (apt-get install -y libclang-dev)"
        );
        std::process::exit(1);
    }
    copy_pregenerated(manifest, out);
    manifest.join("src/static_fns.c")
}

/// Writes `$OUT_DIR/bindings.rs` and returns the shim's C source.
#[cfg(feature = "bindgen")]
fn bindings(lib: &pkg_config::Library, manifest: &Path, out: &Path) -> PathBuf {
    let bindings = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").to_string_lossy())
        .clang_args(
            lib.include_paths
                .iter()
                .map(|p| format!("-I{}", p.display())),
        )
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .blocklist_type("iovec")
        .raw_line("pub use libc::iovec;")
        .derive_default(true)
        .derive_debug(true)
        .wrap_static_fns(true)
        .wrap_static_fns_path(out.join("static_fns"))
        .generate()
        .expect("bindgen could not read the libfabric headers (is libclang-dev installed?)");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
    let shim = out.join("static_fns.c");
    for (generated, pregenerated) in [
        (out.join("bindings.rs"), "src/pregenerated.rs"),
        (shim.clone(), "src/static_fns.c"),
    ] {
        if body(&generated) != body(&manifest.join(pregenerated)) {
            println!(
                "cargo:warning=the bindings generated from the system headers differ from \
                 {pregenerated}: the default build (without `bindgen`) uses the latter"
            );
        }
    }
    shim
}

/// A generated file without its leading comments, blank lines and `#include` line (which
/// names a path).
#[cfg(feature = "bindgen")]
fn body(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .skip_while(|l| l.is_empty() || l.starts_with("//") || l.starts_with("#include"))
        .collect::<Vec<_>>()
        .join("\n")
}
