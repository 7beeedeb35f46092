//! The NVML meter's own test helpers: scenarios in child processes, an in-memory
//! OpenTelemetry pipeline and its points. The fake `libnvidia-ml.so.1` is built by the
//! workspace's test kit (`higgsmeter_testkit::nvml`), which the session agent's tests
//! share.

#![allow(dead_code, unreachable_pub, reason = "each test binary uses a part")]

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use opentelemetry::metrics::Meter;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

pub use higgsmeter_testkit::nvml::{Variant, fake_library};

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
