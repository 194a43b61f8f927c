//! Gives the shared library the soname C programs link against: `librsm.so.2`, as Solaris
//! shipped it (docs/rsmapi.md §1).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librsm.so.2");
    println!("cargo:rerun-if-changed=build.rs");
}
