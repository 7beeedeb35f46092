//! Helpers for the collector's integration tests: real processes, real sockets on
//! 127.0.0.1 (port 0 everywhere), real clients.
#![allow(dead_code)]

pub(crate) mod prom;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The collector binary Cargo built for these tests.
pub(crate) fn collector_bin() -> &'static str {
    env!("CARGO_BIN_EXE_higgsmeter-collector")
}

/// The repository root.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("collector/ has a parent")
        .to_path_buf()
}

/// A fresh temporary directory for one test.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "higgsmeter-collector-test-{}-{}-{}",
        std::process::id(),
        name,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Every listener of the collector on a port the system picks.
pub(crate) const EPHEMERAL_PORTS: [&str; 6] = [
    "--grpc",
    "127.0.0.1:0",
    "--http",
    "127.0.0.1:0",
    "--prometheus",
    "127.0.0.1:0",
];

/// A running `higgsmeter-collector` process; killed on drop.
pub(crate) struct CollectorProcess {
    pub(crate) child: Child,
    pub(crate) grpc: SocketAddr,
    pub(crate) http: SocketAddr,
    pub(crate) prometheus: SocketAddr,
    pub(crate) stdout: Option<BufReader<std::process::ChildStdout>>,
}

impl CollectorProcess {
    /// Starts the collector on ephemeral ports with an optional YAML config and extra flags.
    pub(crate) fn start(config_yaml: Option<&str>, extra: &[&str]) -> CollectorProcess {
        Self::start_with_env(config_yaml, extra, &[])
    }

    /// [`start`](Self::start) with environment variables (e.g. a quieter `RUST_LOG`).
    pub(crate) fn start_with_env(
        config_yaml: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> CollectorProcess {
        let mut cmd = Command::new(collector_bin());
        cmd.envs(env.iter().copied());
        cmd.args(EPHEMERAL_PORTS);
        if let Some(yaml) = config_yaml {
            let path = temp_dir("config").join("collector.yaml");
            std::fs::write(&path, yaml).expect("write config");
            cmd.arg("--config").arg(path);
        }
        // Each collector its own state directory (the default is the working directory's).
        let storage_set =
            extra.contains(&"--storage") || config_yaml.is_some_and(|y| y.contains("storage"));
        if !storage_set {
            cmd.arg("--storage").arg(temp_dir("state"));
        }
        if std::env::var_os("RUST_LOG").is_none() && !env.iter().any(|(k, _)| *k == "RUST_LOG") {
            cmd.env("RUST_LOG", "warn");
        }
        cmd.args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null());
        let mut child = cmd.spawn().expect("start the collector");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read the startup line");
        let addrs =
            parse_listening(&line).unwrap_or_else(|| panic!("unexpected startup line: {line:?}"));
        CollectorProcess {
            child,
            grpc: addrs[0],
            http: addrs[1],
            prometheus: addrs[2],
            stdout: Some(stdout),
        }
    }

    pub(crate) fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub(crate) fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// GET a path of the Prometheus endpoint.
    pub(crate) fn scrape(&self, path: &str) -> String {
        let url = format!("http://{}{}", self.prometheus, path);
        let resp = reqwest::blocking::get(&url).unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
        resp.text().expect("body")
    }

    pub(crate) fn fleet(&self) -> Vec<Sample> {
        parse_exposition(&self.scrape("/metrics"))
    }

    pub(crate) fn sources(&self) -> Vec<Sample> {
        parse_exposition(&self.scrape("/metrics/sources"))
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub(crate) fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the collector did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for CollectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `higgsmeter-collector listening grpc=A http=B prometheus=C`.
pub(crate) fn parse_listening(line: &str) -> Option<[SocketAddr; 3]> {
    let rest = line
        .trim()
        .strip_prefix("higgsmeter-collector listening ")?;
    let mut out = [None, None, None];
    for part in rest.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        let i = match k {
            "grpc" => 0,
            "http" => 1,
            "prometheus" => 2,
            _ => continue,
        };
        out[i] = v.parse().ok();
    }
    Some([out[0]?, out[1]?, out[2]?])
}

/// One sample line of the text exposition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

impl Sample {
    pub(crate) fn label(&self, k: &str) -> Option<&str> {
        self.labels.get(k).map(String::as_str)
    }
}

/// Parses text exposition samples (labels unescaped); comments skipped.
pub(crate) fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name_labels, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match name_labels.split_once('{') {
            None => (name_labels.to_owned(), BTreeMap::new()),
            Some((name, rest)) => (
                name.to_owned(),
                parse_labels(rest.strip_suffix('}').expect("closing brace")),
            ),
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let mut key = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            key.push(c);
        }
        if key.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'));
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_owned(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    out
}

/// Sum of the samples named `name` whose labels include every pair of `with`.
pub(crate) fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && with.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub(crate) fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Like [`wait_for`], with a message built when it times out.
pub(crate) fn wait_for_or<T>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out waiting for {}", what());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The demo binary (`higgsmeter-examples`' `demo`), whose hidden `worker` subcommand is
/// one simulated rank: `$HIGGSMETER_DEMO_BIN` if set, else built with cargo (see
/// [`example_bin`]).
pub(crate) fn demo_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("HIGGSMETER_DEMO_BIN") {
        Some(path) => PathBuf::from(path),
        None => example_bin("demo"),
    })
}

/// A binary of `higgsmeter-examples`, built with cargo (once per test binary and name,
/// same profile as the tests; a no-op when `cargo test --workspace` built it already).
/// Cargo sets `CARGO_BIN_EXE_*` only for this package's own binaries.
pub(crate) fn example_bin(name: &str) -> PathBuf {
    static BINS: std::sync::Mutex<BTreeMap<String, PathBuf>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut bins = BINS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = bins.get(name) {
        return path.clone();
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root()).args([
        "build",
        "--quiet",
        "-p",
        "higgsmeter-examples",
        "--bin",
        name,
        "--message-format=json-render-diagnostics",
    ]);
    let release =
        std::env::current_exe().is_ok_and(|p| p.components().any(|c| c.as_os_str() == "release"));
    if release {
        cmd.arg("--release");
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run cargo build -p higgsmeter-examples --bin {name}: {e}"));
    assert!(
        out.status.success(),
        "cargo build -p higgsmeter-examples --bin {name} failed ({})",
        out.status
    );
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|msg| {
            msg["target"]["name"] == name
                && msg["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|v| v == "bin"))
        })
        .and_then(|msg| msg["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo build reported no executable for {name}"));
    bins.insert(name.to_owned(), path.clone());
    path
}

/// Starts one simulated rank (the demo's hidden `worker` subcommand, `service.name`
/// `demo-worker`) pushing to `endpoint`.
pub(crate) fn spawn_worker(rank: u32, endpoint: &str, http: bool, extra: &[&str]) -> Child {
    let mut cmd = Command::new(demo_bin());
    cmd.args([
        "worker",
        "--rank",
        &rank.to_string(),
        "--endpoint",
        endpoint,
        "--interval-ms",
        "200",
    ]);
    if http {
        cmd.arg("--http");
    }
    cmd.args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .stdin(Stdio::piped());
    cmd.spawn().expect("start a demo worker")
}

/// Waits for a worker started with `--print-totals` and returns its totals:
/// `"state/operation"` → seconds.
pub(crate) fn worker_totals(child: Child) -> BTreeMap<String, f64> {
    let out = child.wait_with_output().expect("wait for the worker");
    assert!(out.status.success(), "worker failed: {:?}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .last()
        .unwrap_or_else(|| panic!("worker printed nothing"));
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad totals {line:?}: {e}"));
    v["seconds"]
        .as_object()
        .expect("seconds")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().expect("number")))
        .collect()
}

/// The Python interpreter with the OpenTelemetry SDK (`bash .ci/setup` makes it).
pub(crate) fn python() -> PathBuf {
    let path = std::env::var_os("HIGGSMETER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    assert!(
        path.exists(),
        "no Python at {}: run `bash .ci/setup` (or set HIGGSMETER_PYTHON) to create the venv with the OpenTelemetry SDK",
        path.display()
    );
    path
}

/// `promtool` (Debian's `prometheus` package; `bash .ci/setup` installs it).
pub(crate) fn promtool() -> PathBuf {
    let candidates = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("promtool"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/usr/bin/promtool")])
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "promtool not found: run `bash .ci/setup` (installs Debian's prometheus package)"
            )
        })
}

/// promtool lint findings that come from the catalog's names, which the collector
/// exports exactly (catalog counters without `_total`, the seed's gauge with `_total`).
pub(crate) fn catalog_lints() -> Vec<String> {
    let mut out = Vec::new();
    for family in higgsmeter_catalog::ALL_FAMILY_GROUPS
        .iter()
        .flat_map(|g| g.iter())
    {
        let counter = family.kind == higgsmeter_catalog::Kind::Counter;
        if counter && !family.name.ends_with("_total") {
            out.push(format!(
                r#"{} counter metrics should have "_total" suffix"#,
                family.name
            ));
        }
        if !counter && family.name.ends_with("_total") {
            out.push(format!(
                r#"{} non-counter metrics should not have "_total" suffix"#,
                family.name
            ));
        }
    }
    out
}

/// Runs `promtool check metrics` on `text`; panics with its output on a parse error
/// or on any lint finding other than [`catalog_lints`].
pub(crate) fn promtool_check(text: &str) {
    use std::io::Write as _;
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool output");
    let findings: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let allowed = catalog_lints();
    let unexpected: Vec<&String> = findings.iter().filter(|f| !allowed.contains(f)).collect();
    // Exit 0: clean; 3: lint findings only (all allowed, checked above); 1: invalid.
    let ok_status = out.status.success() || (out.status.code() == Some(3) && !findings.is_empty());
    assert!(
        ok_status && unexpected.is_empty(),
        "promtool check metrics failed ({:?}): {unexpected:?}\n--- text ---\n{text}",
        out.status
    );
}

/// A point start time later than every collector of this test binary started (an hour
/// from the first call): the source started after the collector, so all of its value
/// counts. (A cumulative source that started before the collector, with no state to
/// say what was counted, is a baseline: only what it adds after its first point counts.)
pub(crate) fn started() -> u64 {
    static AT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *AT.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64
            + 3_600_000_000_000
    })
}

/// `body` (OTLP/JSON) with every `"startTimeUnixNano":"1"` set to [`started`].
pub(crate) fn started_json(body: &str) -> String {
    body.replace(
        r#""startTimeUnixNano":"1""#,
        &format!(r#""startTimeUnixNano":"{}""#, started()),
    )
}

/// A string attribute.
pub(crate) fn kv(k: &str, v: &str) -> opentelemetry_proto::tonic::common::v1::KeyValue {
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// The activity counter (`worker_activity_time_seconds_total`, cumulative, started when
/// the test began) as an SDK sends it: one `ResourceMetrics` per resource in `resources`,
/// each with a point per `(state, operation)` of `points`, all at `value` and `time`.
pub(crate) fn activity_request(
    resources: impl IntoIterator<Item = Vec<opentelemetry_proto::tonic::common::v1::KeyValue>>,
    points: &[(&str, String)],
    value: f64,
    time: u64,
) -> opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::{
        AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        metric::Data, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    let resource_metrics = resources
        .into_iter()
        .map(|attributes| {
            let data_points = points
                .iter()
                .map(|(state, operation)| NumberDataPoint {
                    attributes: vec![kv("state", state), kv("operation", operation)],
                    start_time_unix_nano: started(),
                    time_unix_nano: time,
                    value: Some(number_data_point::Value::AsDouble(value)),
                    ..Default::default()
                })
                .collect();
            ResourceMetrics {
                resource: Some(Resource {
                    attributes,
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: higgsmeter_catalog::WORKER_ACTIVITY_TIME.name.into(),
                        unit: "s".into(),
                        data: Some(Data::Sum(Sum {
                            data_points,
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}
