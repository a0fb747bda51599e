//! Builds `src/variadic.c`: the bodies of the variadic libc calls the
//! library serves (stable Rust cannot define C-variadic functions; see
//! `src/variadic.rs`). The `cc` crate finds the system's C compiler.

fn main() {
    println!("cargo::rerun-if-changed=src/variadic.c");
    cc::Build::new()
        .file("src/variadic.c")
        .flag_if_supported("-fvisibility=hidden")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("ulfs_variadic");
}
