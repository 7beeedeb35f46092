//! Helpers shared by the end-to-end tests: PromQL pieces, the Prometheus configs, the
//! e2e workers, comparisons. Processes, waits, the collector and Prometheus are the
//! workspace's test kit (`higgsmeter-testkit`), re-exported here where these modules
//! use them by name.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use higgsmeter_e2e::GroundTruth;
pub use higgsmeter_testkit::collector::CollectorProcess;
pub use higgsmeter_testkit::process::{ChildGuard, line_reader};
pub use higgsmeter_testkit::prometheus::{PromClient, Prometheus};
pub use higgsmeter_testkit::{TempDir, eventually, repo_root};

pub const W: &str = "worker_activity_time_seconds_total";
pub const FLEET: &str = r#"job="higgsmeter""#;
/// [`FLEET`] as the first matcher of a longer list.
pub const FLEET_MATCHER: &str = r#"job="higgsmeter","#;
pub const SOURCES: &str = r#"job="higgsmeter_sources""#;
pub const WORKING: &str = r#"state!~"startup|warmup|shutdown""#;
/// Shares (0..1) are checked within this much.
pub const SHARE_TOLERANCE: f64 = 0.005;

/// The shipped otel-config/prometheus.yml, pointed at this collector, with 1 s scrape
/// and rule intervals and absolute rule-file paths.
pub fn prometheus_config(target: SocketAddr) -> String {
    let shipped = std::fs::read_to_string(repo_root().join("otel-config/prometheus.yml")).unwrap();
    let rules = repo_root().join("otel-config/rules");
    let mut config = shipped;
    for (from, to, count) in [
        ("scrape_interval: 5s", "scrape_interval: 1s".to_owned(), 1),
        (
            "evaluation_interval: 5s",
            "evaluation_interval: 1s".to_owned(),
            1,
        ),
        (
            r#"targets: ["127.0.0.1:9464"]"#,
            format!(r#"targets: ["{target}"]"#),
            2,
        ),
        ("  - rules/", format!("  - {}/", rules.display()), 2),
    ] {
        assert_eq!(
            config.matches(from).count(),
            count,
            "otel-config/prometheus.yml changed shape: {from:?}"
        );
        config = config.replace(from, &to);
    }
    config
}

/// A Prometheus config with a single job scraping the collector's fleet view.
pub fn fleet_only_config(target: SocketAddr) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: workers\n    metrics_path: /metrics\n\
         \x20   static_configs:\n      - targets: [\"{target}\"]\n"
    )
}

pub struct Worker {
    /// The process (killed on drop).
    pub process: ChildGuard,
    /// Its stdout lines.
    pub lines: mpsc::Receiver<String>,
    /// Where it writes its ground truth at exit.
    pub truth_path: PathBuf,
}

pub fn spawn_worker(rank: usize, endpoint: &str, dir: &Path, extra: &[&str]) -> Worker {
    let truth_path = dir.join(format!("truth-{rank}.json"));
    let mut process = ChildGuard::spawn(
        format!("e2e-worker rank {rank}"),
        Command::new(env!("CARGO_BIN_EXE_e2e-worker"))
            .args(["--rank", &rank.to_string(), "--endpoint", endpoint])
            .args(extra)
            .arg("--ground-truth")
            .arg(&truth_path)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let lines = line_reader(process.child().stdout.take().unwrap());
    Worker {
        process,
        lines,
        truth_path,
    }
}

pub fn close(what: &str, got: f64, want: f64, tolerance: f64) {
    if std::env::var_os("E2E_VERBOSE").is_some() {
        eprintln!("MARGIN {:.4} of {tolerance}: {what}", (got - want).abs());
    }
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: Prometheus says {got}, the workers recorded {want} (tolerance {tolerance})"
    );
}

pub fn code(state: &str) -> f64 {
    f64::from(higgsmeter::AppState::parse(state).unwrap().code())
}

/// Fleet totals over all workers: (state, operation) → seconds.
pub fn fleet_totals(truth: &[GroundTruth]) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for t in truth {
        for e in &t.entries {
            *out.entry((e.state.clone(), e.operation.clone()))
                .or_insert(0.0) += e.seconds;
        }
    }
    out
}

pub fn key(s: &higgsmeter_testkit::prometheus::Sample) -> (String, String) {
    (s.label("state").to_owned(), s.label("operation").to_owned())
}

/// A collector and a real Prometheus (the shipped config and rules, 1 s intervals)
/// scraping both of its views, once Prometheus has scraped each view at least once (its
/// discovery settles only after about 5 s).
pub fn start_stack(tmp: &TempDir) -> (CollectorProcess, Prometheus) {
    let collector = CollectorProcess::start(None, &["--storage", "none"]);
    let prometheus = Prometheus::start(
        &tmp.join("prometheus"),
        &prometheus_config(collector.prometheus),
    );
    wait_scraped(&prometheus.client(), 2);
    (collector, prometheus)
}

/// Waits until `jobs` scrape jobs report `up` 1.
pub fn wait_scraped(prom: &PromClient, jobs: usize) {
    eventually(120, || {
        let up = prom.by_label("up", "job").map_err(|e| e.to_string())?;
        (up.len() == jobs && up.values().all(|&v| v == 1.0))
            .then_some(())
            .ok_or(format!("up: {up:?}"))
    });
}

/// Releases every held worker, waits for each to exit cleanly and returns the ground
/// truth each wrote, by rank.
pub fn release_and_collect(workers: &mut [Worker]) -> Vec<GroundTruth> {
    for w in workers.iter_mut() {
        let stdin = w.process.child().stdin.as_mut().unwrap();
        stdin.write_all(b"release\n").unwrap();
        stdin.flush().unwrap();
    }
    let mut truth = Vec::new();
    for w in workers.iter_mut() {
        let status = w.process.wait_exit(Duration::from_secs(30));
        assert!(
            status.success(),
            "{} exited with {status}",
            w.process.name()
        );
        let text = std::fs::read_to_string(&w.truth_path).unwrap();
        truth.push(serde_json::from_str::<GroundTruth>(&text).unwrap());
    }
    truth.sort_by_key(|t| t.rank);
    truth
}
