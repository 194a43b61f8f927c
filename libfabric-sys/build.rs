//! Generates bindings to the system libfabric and compiles the shim for its `static inline`
//! functions (the whole data path: `fi_write`, `fi_cq_read`, ... are inline in the headers).
//!
//! On docs.rs (`DOCS_RS` set), where there is no libfabric, it uses `src/pregenerated.rs`
//! instead: the bindings generated from Debian 12's libfabric 1.17 headers, declarations of
//! the shim's functions included, and compiles and links nothing. That is enough for
//! rustdoc, never for a program. To refresh it after a libfabric upgrade, build normally and
//! copy `$OUT_DIR/bindings.rs` over it.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    if env::var_os("DOCS_RS").is_some() {
        let pregenerated = manifest.join("src/pregenerated.rs");
        println!("cargo:rerun-if-changed=src/pregenerated.rs");
        std::fs::copy(&pregenerated, out.join("bindings.rs"))
            .expect("copying src/pregenerated.rs into OUT_DIR");
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

    let mut build = cc::Build::new();
    build.file(out.join("static_fns.c")).include(&manifest);
    for p in &lib.include_paths {
        build.include(p);
    }
    build.warnings(false).compile("rsm_lfsys_static_fns");
}
