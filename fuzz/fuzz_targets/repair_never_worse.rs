//! cargo-fuzz target: the harness `ulfs_testkit::harness::repair_never_worse` (its
//! comment says what it checks). Run: see fuzz/README.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ulfs_testkit::harness::repair_never_worse(data);
});
