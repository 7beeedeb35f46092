//! The collector's integration tests, one test binary (`cargo test -p
//! higgsmeter-collector --test it`): each module is one former test binary, its own
//! `//!` says what it checks. `tests/footprint.rs` stays a binary of its own: it sets a
//! counting `#[global_allocator]`.

mod support;

#[cfg(target_os = "linux")]
mod allocator;
mod bad_input;
mod cluster_page;
mod config_snippets;
mod connections;
mod dependencies;
mod durability;
mod exporters;
mod exposition;
mod fuzz;
mod jobs;
mod layering;
mod negotiation;
mod python_workers;
mod remote_write;
mod renamed_metric;
mod sdk_workers;
mod tiers;
mod tls;
mod tls_reload;
