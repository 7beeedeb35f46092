//! OTLP load generator (work in progress).
fn main() {}
