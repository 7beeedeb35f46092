//! The one test kit of the higgsmeter workspace: what the tests of every crate share,
//! so each helper exists once.
//!
//! | module | what |
//! |---|---|
//! | [`process`] | [`ChildGuard`](process::ChildGuard) (a child killed and reaped on drop), line readers, waiting for a line, free ports, a server started until it answers |
//! | [`wait`] | [`wait_for`], the one bounded poll, and its forms ([`wait_for_or`], [`eventually`], [`wait_until`]) |
//! | [`exposition`] | the one Prometheus text parser: [`Sample`](exposition::Sample), [`parse`](exposition::parse), [`sum`](exposition::sum), [`families`](exposition::families) |
//! | [`http`] | a minimal HTTP/1.1 client on `std` (`GET`, `POST`), URL encoding |
//! | [`bins`] | the workspace's built binaries: the collector, the examples' `demo` |
//! | [`collector`] | the collector binary as a process, its addresses read from its startup line; with the `in-process` feature, `collector::InProcess`, the collector as a library in the test's process |
//! | [`prometheus`] | a real Prometheus server and its query API |
//! | [`victoria`] | VictoriaMetrics single node and vmalert |
//! | [`tools`] | the test venv's Python, `promtool check metrics` |
//! | [`nvml`] | the fake `libnvidia-ml.so.1`, built with gcc |
//! | `pki` (feature `pki`) | a throw-away CA and certificates, written to a directory |
//! | [`dirs`] | the repository root and temporary directories |
//!
//! # How to use
//!
//! Add it as a dev-dependency (with the features you need) and use its modules from
//! the integration tests; a crate's own helpers, used by that crate alone, stay in its
//! `tests/it/support`:
//!
//! ```toml
//! [dev-dependencies]
//! higgsmeter-testkit = { workspace = true, features = ["pki"] }
//! ```
//!
//! ```no_run
//! use std::time::Duration;
//! use higgsmeter_testkit::collector::CollectorProcess;
//! use higgsmeter_testkit::{exposition, wait_for};
//!
//! let collector = CollectorProcess::start(None, &[]);
//! let total = wait_for(Duration::from_secs(10), "a sample", || {
//!     let fleet = collector.fleet();
//!     let v = exposition::sum(&fleet, "worker_activity_time_seconds_total", &[("state", "gpu")]);
//!     (v > 0.0).then_some(v)
//! });
//! # let _ = total;
//! ```
//!
//! # Binaries are built by cargo, never by a test
//!
//! [`bins`] finds a workspace binary next to the running test executable
//! (`target/<profile>/<name>`) and never runs `cargo build`: `cargo test --workspace`
//! builds every package's binaries before any test runs. A test that starts another
//! package's binary (the e2e tests start the collector, the collector's tests start the
//! examples' `demo`) therefore needs the workspace built: run it with `cargo test
//! --workspace` (filtered as you like), or `cargo build --workspace --bins` first. A
//! missing binary fails the test with the command that builds it;
//! `HIGGSMETER_COLLECTOR_BIN` and `HIGGSMETER_DEMO_BIN` point at binaries built
//! elsewhere.
//!
//! Everything the kit starts is stopped by its guard when dropped (panics included);
//! every wait is bounded. The kit is test code: it panics, with a message that says
//! what failed, instead of returning errors, except where a test retries (the query
//! clients, [`http`]).

pub mod bins;
pub mod collector;
pub mod dirs;
pub mod exposition;
pub mod http;
pub mod nvml;
#[cfg(feature = "pki")]
pub mod pki;
pub mod process;
pub mod prometheus;
pub mod tools;
pub mod victoria;
pub mod wait;

pub use dirs::{TempDir, repo_root, temp_dir};
pub use wait::{eventually, wait_for, wait_for_or, wait_until};
