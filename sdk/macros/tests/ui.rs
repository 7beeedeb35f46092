//! Compile-time behaviour of `#[track_state]` (through `higgsmeter`, no default
//! features): what compiles, and misuse as clear errors.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
