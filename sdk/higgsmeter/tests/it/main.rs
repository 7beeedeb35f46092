//! The SDK's integration tests, one test binary (`cargo test -p higgsmeter --test it`):
//! each module is one former test binary, its own `//!` says what it checks.
//! `tests/alloc.rs` stays a binary of its own: it sets a counting `#[global_allocator]`.
//!
//! The modules that start `init()` with OTLP and a Prometheus endpoint (and `support`,
//! which builds their telemetry) need the `otlp` and `prometheus` features; without
//! them they are left out, so `cargo test --no-default-features` runs the rest.

#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod support;

#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod accounting;
#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod engine;
#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod export;
#[cfg(unix)]
mod fork;
#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod job;
mod layering;
mod macros;
#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod python_parity;
#[cfg(all(feature = "otlp", feature = "prometheus"))]
mod runtime;
