//! One way for every suite to skip a test whose real part is missing here, and to refuse to
//! skip where everything was installed.
//!
//! A skip prints one line starting `SKIPPED: ` (the CI summary counts them, case-insensitively,
//! with the test's name). Under `FERROLB_REQUIRE_BINARIES=1`, which `scripts/test` sets after
//! installing every tool, the same call fails the test instead: a skip there would look like a
//! pass.

use std::fmt::Display;

/// The variable that turns every skip into a failure.
pub const REQUIRE_ENV: &str = "FERROLB_REQUIRE_BINARIES";

/// Whether a missing part must fail the test rather than skip it.
pub fn required() -> bool {
    required_by(REQUIRE_ENV)
}

/// Whether `variable` is set to `1`.
pub fn required_by(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|v| v == "1")
}

/// Says why the running test is skipped and returns `None`; fails it with `why` instead under
/// `FERROLB_REQUIRE_BINARIES=1`.
pub fn skip<T>(why: impl Display) -> Option<T> {
    skip_unless(REQUIRE_ENV, why)
}

/// [`skip`], failing instead when `variable` (or `FERROLB_REQUIRE_BINARIES`) is `1`.
pub fn skip_unless<T>(variable: &str, why: impl Display) -> Option<T> {
    assert!(
        !required_by(variable) && !required(),
        "{why} ({variable}=1: a missing part fails the test)"
    );
    eprintln!("SKIPPED: {}: {why}", test_name());
    None
}

/// Says that the running test skips one part of itself that only the in-repo test API server
/// has (fault injection, replays), on a real cluster. Not a failure under
/// `FERROLB_REQUIRE_BINARIES=1`: the rest of the test ran.
pub fn skip_double_only_part(what: impl Display) {
    eprintln!("skipping a double-only part: {}: {what}", test_name());
}

/// The running test's name (libtest names each test's thread after it).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("(unnamed test)")
        .to_owned()
}
