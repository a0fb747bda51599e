//! A test that cannot run on this machine says so in the runner's output
//! and, where the runner demands every test, fails instead of passing
//! silently. Included with `#[path]` by the suites that need it, so the
//! suites that do not are not warned about an unused helper.

/// Reports that `test` did not run because of `reason`: a `SKIPPED:` line
/// on stderr (scripts count them), and a panic when the environment sets
/// `ULFS_REQUIRE_ALL_TESTS=1` (set where the tools are known to exist).
pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIPPED: {test}: {reason}");
    if std::env::var("ULFS_REQUIRE_ALL_TESTS").is_ok_and(|v| v == "1") {
        panic!("{test} could not run ({reason}) and ULFS_REQUIRE_ALL_TESTS=1 forbids skipping");
    }
}
