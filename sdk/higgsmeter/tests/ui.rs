//! Compile-time behaviour of `#[track_state]`: what compiles, and misuse as clear errors.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
