//! The system packages rsm needs to build and run, and installing the missing
//! ones.

use std::process::Command;

use crate::command::{on_path, run_echoed, stdout_of};
use crate::failure::Failure;
use crate::{dpkg, uid, version};

/// A Debian package, and how to recognise an equivalent that did not come
/// from dpkg (built from source, another distribution), so that such a
/// machine is not asked to install a second copy.
struct Requirement {
    package: &'static str,
    otherwise: Probe,
}

enum Probe {
    Command(&'static str),
    PkgConfigModule(&'static str),
    /// Set by whoever points bindgen at a libclang of their own.
    EnvVar(&'static str),
}

const REQUIREMENTS: &[Requirement] = &[
    // The linker driver for rustc, and the C compiler of libfabric-sys' shim.
    Requirement {
        package: "gcc",
        otherwise: Probe::Command("gcc"),
    },
    // The C library's header check compiles <rsmapi.h> as C++ too (capi/tests).
    Requirement {
        package: "g++",
        otherwise: Probe::Command("c++"),
    },
    // libfabric-sys' build script finds libfabric through it.
    Requirement {
        package: "pkg-config",
        otherwise: Probe::Command("pkg-config"),
    },
    // Headers for the shim (and bindgen), libfabric.so to link against.
    Requirement {
        package: "libfabric-dev",
        otherwise: Probe::PkgConfigModule("libfabric"),
    },
    // fi_info: the first thing to run when a provider misbehaves.
    Requirement {
        package: "libfabric-bin",
        otherwise: Probe::Command("fi_info"),
    },
    // `ip netns`, veth and bridges: the cluster tests' hosts (tests/cluster/netns.rs).
    Requirement {
        package: "iproute2",
        otherwise: Probe::Command("ip"),
    },
    // `nft`: packet loss and silent peers at the cluster tests' switch (tests/cluster/nft.rs).
    Requirement {
        package: "nftables",
        otherwise: Probe::Command("nft"),
    },
    // The `bindgen` feature, which the test builds' `--all-features` turn on, parses the
    // libfabric headers with libclang.
    Requirement {
        package: "libclang-dev",
        otherwise: Probe::EnvVar("LIBCLANG_PATH"),
    },
];

/// What libfabric-sys' build script asks pkg-config for; Debian 12 ships
/// 1.17.0, older releases lack parts of the API the bindings use.
const LIBFABRIC_MINIMUM: &[u64] = &[1, 17];

/// Makes sure every requirement is there, installing what is missing when
/// running as root, and prints one line saying what was found.
pub fn ensure() -> Result<(), Failure> {
    let missing = missing();
    if !missing.is_empty() {
        install(&missing)?;
        let still_missing = self::missing();
        if !still_missing.is_empty() {
            return Err(Failure::new(format!(
                "still missing after apt-get install: {}",
                still_missing.join(" ")
            )));
        }
    }
    let libfabric = libfabric_version()?;

    let found: Vec<String> = REQUIREMENTS
        .iter()
        .map(|requirement| match requirement.package {
            "libfabric-dev" => format!("libfabric-dev {libfabric}"),
            package => package.to_owned(),
        })
        .collect();
    let installed_now = if missing.is_empty() {
        String::new()
    } else {
        format!(" (installed now: {})", missing.join(" "))
    };
    eprintln!("xtask: found {}{installed_now}", found.join(", "));
    Ok(())
}

fn missing() -> Vec<&'static str> {
    REQUIREMENTS
        .iter()
        .filter(|requirement| !present(requirement))
        .map(|requirement| requirement.package)
        .collect()
}

fn present(requirement: &Requirement) -> bool {
    if dpkg::installed(requirement.package) == Some(true) {
        return true;
    }
    match requirement.otherwise {
        Probe::Command(name) => on_path(name),
        Probe::PkgConfigModule(module) => stdout_of("pkg-config", &["--exists", module]).is_some(),
        Probe::EnvVar(name) => std::env::var_os(name).is_some_and(|value| !value.is_empty()),
    }
}

/// Installs `packages` with apt-get (as root; otherwise says how to).
pub(crate) fn install(packages: &[&str]) -> Result<(), Failure> {
    let list = packages.join(" ");
    if !on_path("apt-get") {
        return Err(Failure::new(format!(
            "missing {list}, and there is no apt-get to install them with; \
             install the equivalent packages with this system's package manager"
        )));
    }
    if !uid::is_root() {
        return Err(Failure::new(format!(
            "missing {list}; install them with:\n    \
             sudo apt-get update && sudo apt-get install -y {list}"
        )));
    }

    eprintln!("xtask: missing {list}; installing with apt-get");
    // A fresh machine (or container image) has no package lists, so install
    // alone would fail to find anything.
    run_echoed(Command::new("apt-get").arg("update"), "apt-get update")?;
    run_echoed(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y"])
            .args(packages),
        "apt-get install",
    )
}

/// The installed libfabric version, if it is new enough. pkg-config is asked
/// first because it is what the build uses, and it also sees a libfabric
/// built from source.
fn libfabric_version() -> Result<String, Failure> {
    let minimum = dotted(LIBFABRIC_MINIMUM);
    let Some(found) = stdout_of("pkg-config", &["--modversion", "libfabric"])
        .or_else(|| dpkg::version("libfabric-dev"))
    else {
        return Err(Failure::new(
            "cannot tell which libfabric is installed: neither \
             `pkg-config --modversion libfabric` nor `dpkg-query -W libfabric-dev` answered",
        ));
    };
    match version::at_least(&found, LIBFABRIC_MINIMUM) {
        Some(true) => Ok(found),
        Some(false) => Err(Failure::new(format!(
            "libfabric {found} is installed, but rsm needs {minimum} or later \
             (Debian 12 ships 1.17.0); install a newer libfabric-dev or build libfabric from source"
        ))),
        None => Err(Failure::new(format!(
            "cannot read the libfabric version {found:?}; rsm needs {minimum} or later"
        ))),
    }
}

fn dotted(numbers: &[u64]) -> String {
    numbers
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_prints_as_a_version() {
        assert_eq!(dotted(LIBFABRIC_MINIMUM), "1.17");
    }
}
