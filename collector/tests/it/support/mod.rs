//! Helpers for the collector's integration tests: real processes, real sockets on
//! 127.0.0.1 (port 0 everywhere), real clients. What every crate's tests share (the
//! collector process, the exposition parser, waits, Prometheus, promtool, Python) is
//! the workspace's test kit, `higgsmeter-testkit`, re-exported here under the names
//! these modules use; what is here is the collector's own: the demo's simulated ranks
//! and OTLP requests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};

pub(crate) use higgsmeter_testkit::collector::{
    CollectorProcess, EPHEMERAL_PORTS, parse_listening,
};
pub(crate) use higgsmeter_testkit::exposition::{Sample, sum};
pub(crate) use higgsmeter_testkit::prometheus::{self, Prometheus};
pub(crate) use higgsmeter_testkit::tools::{promtool_check, python};
pub(crate) use higgsmeter_testkit::{bins, exposition, repo_root, temp_dir, wait_for, wait_for_or};

/// Starts one simulated rank (the demo's hidden `worker` subcommand, `service.name`
/// `demo-worker`) pushing to `endpoint`.
pub(crate) fn spawn_worker(rank: u32, endpoint: &str, http: bool, extra: &[&str]) -> Child {
    let mut cmd = Command::new(bins::demo());
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
