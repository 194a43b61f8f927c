//! `cargo xtask capi [--prefix DIR]`: builds the C library (package rsm-capi) in release
//! mode and lays it out as C programs expect (DESIGN.md §12): `include/rsmapi.h` with
//! `include/sys/rsm/`, `lib/librsm.so.2`, `lib/librsm.so` (a link to it), `lib/librsm.a` and
//! `lib/pkgconfig/rsm.pc`, under `target/capi/` or `DIR`.

use crate::command::run_echoed;
use crate::failure::Failure;
use crate::steps::workspace_root;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The libraries a static link needs besides librsm.a (the Rust standard library's and
/// libfabric).
const PRIVATE_LIBS: &str = "-lfabric -lpthread -ldl -lm -lrt -lutil -lgcc_s";

/// Runs the command with its arguments (`--prefix DIR` or nothing).
pub fn run(args: &[OsString]) -> Result<(), Failure> {
    let root = workspace_root();
    let prefix = match args {
        [] => root.join("target").join("capi"),
        [flag, dir] if flag == "--prefix" => absolute(Path::new(dir))?,
        _ => {
            return Err(Failure::with_code(
                "usage: cargo xtask capi [--prefix DIR]",
                2,
            ));
        }
    };
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "-p", "rsm-capi"])
        .current_dir(&root);
    run_echoed(&mut cmd, "building rsm-capi")?;
    let built = target_dir(&root).join("release");
    install(&root.join("capi").join("include"), &built, &prefix)?;
    eprintln!("xtask: the C library is in {}", prefix.display());
    eprintln!(
        "xtask: build with: PKG_CONFIG_PATH={}/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs rsm)",
        prefix.display()
    );
    Ok(())
}

fn absolute(dir: &Path) -> Result<PathBuf, Failure> {
    if dir.is_absolute() {
        return Ok(dir.to_path_buf());
    }
    let cwd = env::current_dir().map_err(|e| Failure::new(format!("current directory: {e}")))?;
    Ok(cwd.join(dir))
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else the workspace's `target`.
fn target_dir(root: &Path) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

fn io(what: &Path) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::new(format!("{}: {e}", what.display()))
}

/// Copies the headers and libraries from `built` into `prefix` and writes `rsm.pc`.
fn install(headers: &Path, built: &Path, prefix: &Path) -> Result<(), Failure> {
    let include = prefix.join("include");
    let lib = prefix.join("lib");
    let pkgconfig = lib.join("pkgconfig");
    for dir in [&include.join("sys").join("rsm"), &pkgconfig] {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    for rel in [
        "rsmapi.h",
        "sys/rsm/rsm_common.h",
        "sys/rsm/rsmapi_common.h",
    ] {
        let (from, to) = (headers.join(rel), include.join(rel));
        fs::copy(&from, &to).map_err(io(&from))?;
    }
    let so = lib.join("librsm.so.2");
    let from = built.join("librsm_capi.so");
    fs::copy(&from, &so).map_err(io(&from))?;
    let from = built.join("librsm_capi.a");
    fs::copy(&from, lib.join("librsm.a")).map_err(io(&from))?;
    let link = lib.join("librsm.so");
    if fs::symlink_metadata(&link).is_ok() {
        fs::remove_file(&link).map_err(io(&link))?;
    }
    std::os::unix::fs::symlink("librsm.so.2", &link).map_err(io(&link))?;
    let pc = pkgconfig.join("rsm.pc");
    fs::write(&pc, pc_file(prefix, &version(headers)?)).map_err(io(&pc))?;
    Ok(())
}

/// The version of package rsm-capi (from `capi/Cargo.toml`, beside `capi/include`).
fn version(headers: &Path) -> Result<String, Failure> {
    let manifest = headers.with_file_name("Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(io(&manifest))?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_string)
        .ok_or_else(|| Failure::new(format!("{}: no version", manifest.display())))
}

/// The pkg-config file for a tree installed at `prefix`.
fn pc_file(prefix: &Path, version: &str) -> String {
    format!(
        "prefix={}\n\
         includedir=${{prefix}}/include\n\
         libdir=${{prefix}}/lib\n\
         \n\
         Name: rsm\n\
         Description: RSMAPI (remote shared memory) over libfabric\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lrsm\n\
         Libs.private: {PRIVATE_LIBS}\n",
        prefix.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pc_file_names_the_prefix_and_the_library() {
        let pc = pc_file(Path::new("/opt/rsm"), "0.1.0");
        assert!(pc.starts_with("prefix=/opt/rsm\n"));
        assert!(pc.contains("Cflags: -I${includedir}\n"));
        assert!(pc.contains("-lrsm\n"));
        assert!(pc.contains("Version: 0.1.0\n"));
    }
}
