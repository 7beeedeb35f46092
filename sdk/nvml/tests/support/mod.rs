//! Shared test helpers: the fake `libnvidia-ml.so.1`, child processes, an in-memory
//! OpenTelemetry pipeline.

#![allow(dead_code, unreachable_pub, reason = "each test binary uses a part")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::metrics::Meter;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// A build of the fake NVML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Every entry point.
    Complete,
    /// No `nvmlShutdown`.
    NoShutdown,
    /// No `nvmlInit_v2`.
    NoInit,
}

impl Variant {
    fn dir(self) -> &'static str {
        match self {
            Variant::Complete => "complete",
            Variant::NoShutdown => "no-shutdown",
            Variant::NoInit => "no-init",
        }
    }

    fn defines(self) -> &'static [&'static str] {
        match self {
            Variant::Complete => &[],
            Variant::NoShutdown => &["-DFAKE_NO_SHUTDOWN"],
            Variant::NoInit => &["-DFAKE_NO_INIT"],
        }
    }
}

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_nvml/fake_nvml.c");

/// Builds the fake library (once per variant and process) with gcc and returns the path
/// of its `libnvidia-ml.so.1`.
pub fn fake_library(variant: Variant) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<BTreeMap<&'static str, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = built.get(variant.dir()) {
        return path.clone();
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fake_nvml")
        .join(variant.dir());
    std::fs::create_dir_all(&dir).expect("create the fake NVML build directory");
    let target = dir.join("libnvidia-ml.so.1");
    if is_newer(&target, Path::new(SOURCE)) {
        // Built by an earlier process (a parent test, another test binary).
        built.insert(variant.dir(), target.clone());
        return target;
    }
    // Build beside the target and rename, so concurrent test binaries never load a
    // half-written library.
    let partial = dir.join(format!("libnvidia-ml.so.1.{}.partial", std::process::id()));
    let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "gcc".to_owned()))
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&partial)
        .arg(SOURCE)
        .args(variant.defines())
        .output()
        .expect("run gcc (the NVML tests build a fake libnvidia-ml.so.1 with it)");
    assert!(
        output.status.success(),
        "gcc failed to build the fake NVML:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&partial, &target).expect("move the fake NVML into place");
    built.insert(variant.dir(), target.clone());
    target
}

/// Whether `path` exists and was modified after `than`.
fn is_newer(path: &Path, than: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(path), modified(than)), (Some(a), Some(b)) if a > b)
}

/// The environment variable that tells a test binary it runs as a scenario's child.
pub const CHILD_ENV: &str = "HIGGSMETER_NVML_TEST_SCENARIO";

/// Runs `scenario` in a fresh process of this test binary (its `child_entry` test),
/// with `env` on top of an environment cleared of every `FAKE_NVML_*`,
/// `CUDA_VISIBLE_DEVICES` and `HIGGSMETER_NVML_*` variable, and asserts that the
/// child's scenario ran and passed.
pub fn run_child(scenario: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command.args([
        "child_entry",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("FAKE_NVML_")
            || key.starts_with("HIGGSMETER_NVML_")
            || key == "CUDA_VISIBLE_DEVICES"
        {
            command.env_remove(key.as_ref());
        }
    }
    command.env(CHILD_ENV, scenario);
    command.envs(env.iter().copied());
    let output = command.output().expect("start the child test process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "scenario {scenario} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains(&format!("scenario {scenario} done")),
        "scenario {scenario} did not run to its end:\n{stdout}"
    );
}

/// An SDK pipeline exporting to memory.
pub struct Pipeline {
    pub provider: SdkMeterProvider,
    pub exporter: InMemoryMetricExporter,
    pub meter: Meter,
}

impl Pipeline {
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let reader = PeriodicReader::builder(exporter.clone())
            // Exports happen on force_flush only.
            .with_interval(Duration::from_secs(3600))
            .build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        let meter = provider.meter("higgsmeter-nvml-test");
        Pipeline {
            provider,
            exporter,
            meter,
        }
    }

    /// Collects once and returns every data point.
    pub fn collect(&self) -> Vec<Point> {
        self.exporter.reset();
        self.provider
            .force_flush()
            .expect("flush the meter provider");
        let mut points = Vec::new();
        let exported = self
            .exporter
            .get_finished_metrics()
            .expect("read the exported metrics");
        for resource in &exported {
            for scope in resource.scope_metrics() {
                for metric in scope.metrics() {
                    push_points(&mut points, metric.name(), metric.unit(), metric.data());
                }
            }
        }
        points
    }
}

/// One exported data point, its value as f64 (exact for the values in these tests).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub name: String,
    pub unit: String,
    /// `gauge`, `counter` (monotonic sum) or `updown` (non-monotonic sum).
    pub kind: &'static str,
    pub attributes: BTreeMap<String, String>,
    pub value: f64,
}

fn push_points(points: &mut Vec<Point>, name: &str, unit: &str, data: &AggregatedMetrics) {
    fn push<T: Copy + Into<Value>>(
        points: &mut Vec<Point>,
        name: &str,
        unit: &str,
        data: &MetricData<T>,
    ) {
        let mut add = |kind, attributes: Vec<&opentelemetry::KeyValue>, value: T| {
            points.push(Point {
                name: name.to_owned(),
                unit: unit.to_owned(),
                kind,
                attributes: attributes
                    .into_iter()
                    .map(|kv| (kv.key.as_str().to_owned(), kv.value.as_str().into_owned()))
                    .collect(),
                value: value.into().0,
            })
        };
        match data {
            MetricData::Gauge(gauge) => {
                for p in gauge.data_points() {
                    add("gauge", p.attributes().collect(), p.value());
                }
            }
            MetricData::Sum(sum) => {
                let kind = if sum.is_monotonic() {
                    "counter"
                } else {
                    "updown"
                };
                for p in sum.data_points() {
                    add(kind, p.attributes().collect(), p.value());
                }
            }
            _ => panic!("{name}: unexpected histogram aggregation"),
        }
    }
    match data {
        AggregatedMetrics::F64(d) => push(points, name, unit, d),
        AggregatedMetrics::U64(d) => push(points, name, unit, d),
        AggregatedMetrics::I64(d) => push(points, name, unit, d),
    }
}

/// A numeric value as f64.
pub struct Value(pub f64);

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value(v)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value(v as f64)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value(v as f64)
    }
}

/// The points of one instrument for the GPU with `uuid`.
pub fn of<'a>(points: &'a [Point], name: &str, uuid: &str) -> Vec<&'a Point> {
    points
        .iter()
        .filter(|p| p.name == name && p.attributes.get("hw.id").map(String::as_str) == Some(uuid))
        .collect()
}

/// The single value of one instrument for one GPU (panics unless there is exactly one).
pub fn value(points: &[Point], name: &str, uuid: &str) -> f64 {
    let found = of(points, name, uuid);
    assert_eq!(
        found.len(),
        1,
        "{name} for {uuid}: expected one point, got {found:#?}"
    );
    found[0].value
}

/// The UUID the fake gives device `index`.
pub fn fake_uuid(index: u32) -> String {
    format!("GPU-fa4e0000-0000-4000-8000-{index:012}")
}

/// The points of one instrument for one GPU, keyed by the values of the labels `keys`
/// joined with `/` (e.g. `"0/transmit"` for a link and a direction).
pub fn by(points: &[Point], name: &str, uuid: &str, keys: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for p in of(points, name, uuid) {
        let key: Vec<&str> = keys
            .iter()
            .map(|k| p.attributes.get(*k).map_or("", String::as_str))
            .collect();
        let previous = out.insert(key.join("/"), p.value);
        assert!(
            previous.is_none(),
            "{name} for {uuid}: two points for {key:?}"
        );
    }
    out
}

/// `hw.gpu.utilization` with `hw.gpu.task="general"` for one GPU, if reported.
pub fn general_utilization(points: &[Point], uuid: &str) -> Option<f64> {
    by(points, "hw.gpu.utilization", uuid, &["hw.gpu.task"])
        .get("general")
        .copied()
}

/// A `BTreeMap<String, f64>` from literal pairs.
pub fn map<const N: usize>(pairs: [(&str, f64); N]) -> BTreeMap<String, f64> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
