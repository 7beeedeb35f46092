//! The end-to-end tests, one test binary (`cargo test -p higgsmeter-e2e --test it`):
//! each module is one former test binary, its own `//!` says what it checks.

mod support;

mod architecture;
mod config_lint;
mod goodput_e2e;
mod prometheus_e2e;
mod restart_e2e;
mod rules;
mod rules_remote_write;
mod traces_e2e;
