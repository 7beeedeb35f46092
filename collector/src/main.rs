//! The `higgsmeter-collector` binary (work in progress).
fn main() {}
