//! Gives `libulfs_c.so` a soname, `libulfs_c.so.<major>` (the workspace
//! version's major number: `libulfs_c.so.0` for 0.1.0), as a system library
//! has: a program linked against it records that name and finds the
//! library under it at run time, so `scripts/install.sh` installs
//! `libulfs_c.so.<version>` with the `libulfs_c.so.<major>` and
//! `libulfs_c.so` links beside it. Only the cdylib is affected; the rlib and
//! `libulfs_c.a` are not linked here.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let major =
        std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    // ulfs is Linux-only; GNU ld, gold, lld and mold all take -soname.
    if std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux") {
        println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libulfs_c.so.{major}");
    }
}
