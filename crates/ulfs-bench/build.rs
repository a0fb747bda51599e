//! Builds `c/workload.c` twice: once over POSIX calls (the host peers, and
//! ulfs-preload, which runs the same code under `ulfs run`) and once over
//! ulfs's C API (`include/ulfs.h`; the in-process peers). One source for
//! every peer is what makes their numbers comparable.

fn build(define: Option<&str>, name: &str) {
    let mut b = cc::Build::new();
    b.file("c/workload.c")
        .include("../../include")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    if let Some(d) = define {
        b.define(d, None);
    }
    b.compile(name);
}

fn main() {
    println!("cargo::rerun-if-changed=c/workload.c");
    println!("cargo::rerun-if-changed=../../include/ulfs.h");
    build(None, "bench_workload_posix");
    build(Some("BENCH_ULFS"), "bench_workload_ulfs");
}
