//! `SessionExport`: the session families of counters published from outside, read by a
//! real SDK pipeline at each collection (the last published counters, not the first).

use std::collections::BTreeMap;
use std::time::Duration;

use higgsmeter_session::{Sample, SessionCounters, SessionExport, parse_timestamp};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// Every data point of one collection: `(name, labels) -> value`.
fn collect(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
) -> BTreeMap<(String, String), f64> {
    exporter.reset();
    provider.force_flush().expect("flush the meter provider");
    let mut out = BTreeMap::new();
    for resource in exporter.get_finished_metrics().expect("exported metrics") {
        for scope in resource.scope_metrics() {
            for metric in scope.metrics() {
                let mut add = |labels: String, value: f64| {
                    out.insert((metric.name().to_owned(), labels), value);
                };
                let labels = |attrs: Vec<&opentelemetry::KeyValue>| {
                    attrs
                        .iter()
                        .map(|kv| format!("{}={}", kv.key, kv.value))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                macro_rules! points {
                    ($data:expr) => {
                        match $data {
                            MetricData::Gauge(g) => {
                                for p in g.data_points() {
                                    add(labels(p.attributes().collect()), p.value() as f64);
                                }
                            }
                            MetricData::Sum(s) => {
                                for p in s.data_points() {
                                    add(labels(p.attributes().collect()), p.value() as f64);
                                }
                            }
                            _ => {}
                        }
                    };
                }
                match metric.data() {
                    AggregatedMetrics::F64(d) => points!(d),
                    AggregatedMetrics::U64(d) => points!(d),
                    AggregatedMetrics::I64(d) => points!(d),
                }
            }
        }
    }
    out
}

fn sample(ts: &str, bucket: &str, seen: &[&str], loss: Option<f64>) -> Sample {
    Sample {
        ts: parse_timestamp(ts).expect("timestamp"),
        sample_interval_seconds: 2.0,
        active_window_bucket: Some(bucket.to_owned()),
        gpu_util_pct: 37.0,
        vram_mb: 2048.0,
        processes_seen: seen.iter().map(|s| (*s).to_owned()).collect(),
        max_labeled_frames: Some(120),
        training_epochs_completed: Some(3),
        training_final_loss: loss,
    }
}

#[test]
fn each_collection_reports_the_counters_last_published() {
    let exporter = InMemoryMetricExporter::default();
    let reader = PeriodicReader::builder(exporter.clone())
        .with_interval(Duration::from_secs(3600))
        .build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let started = parse_timestamp("2025-03-01T09:00:00+00:00").expect("timestamp");
    let export = SessionExport::register(
        &provider.meter("higgsmeter-session-test"),
        SessionCounters::new(started),
    );

    let zero = collect(&provider, &exporter);
    assert_eq!(zero[&("session.samples".to_owned(), String::new())], 0.0);
    assert!(
        !zero.keys().any(|(name, _)| name == "session.training.loss"),
        "no loss before one is reported: {zero:?}"
    );

    let mut counters = SessionCounters::new(started);
    counters.apply(&sample(
        "2025-03-01T09:00:02+00:00",
        "subject",
        &["sleap-label"],
        None,
    ));
    counters.apply(&sample(
        "2025-03-01T09:00:04+00:00",
        "browser",
        &[],
        Some(0.25),
    ));
    export.publish(counters.clone());
    counters.apply(&sample(
        "2025-03-01T09:00:07+00:00",
        "terminal",
        &["sleap-train"],
        None,
    ));
    // Not published yet: the collection still reports two samples.
    let two = collect(&provider, &exporter);
    assert_eq!(two[&("session.samples".to_owned(), String::new())], 2.0);

    export.publish(counters.clone());
    assert_eq!(export.counters(), counters);
    let three = collect(&provider, &exporter);
    let get = |name: &str, labels: &str| three[&(name.to_owned(), labels.to_owned())];
    assert_eq!(get("session.samples", ""), 3.0);
    assert_eq!(
        get("session.window.time", "session.window.bucket=subject"),
        2.0
    );
    assert_eq!(
        get("session.window.time", "session.window.bucket=browser"),
        2.0
    );
    assert_eq!(
        get("session.window.time", "session.window.bucket=terminal"),
        2.0
    );
    assert_eq!(
        get("session.window.time", "session.window.bucket=other"),
        0.0
    );
    assert_eq!(
        get(
            "session.process.time_to_first_seen",
            "session.process.name=sleap-label"
        ),
        2.0
    );
    assert_eq!(
        get(
            "session.process.time_to_first_seen",
            "session.process.name=sleap-train"
        ),
        7.0
    );
    assert!(
        !three.contains_key(&(
            "session.process.time_to_first_seen".to_owned(),
            "session.process.name=sleap-track".to_owned()
        )),
        "a process never seen has no point"
    );
    assert_eq!(get("session.training.labeled_frames.max", ""), 120.0);
    assert_eq!(get("session.training.epochs_completed", ""), 3.0);
    assert_eq!(get("session.training.loss", ""), 0.25);
    drop(export);
    provider.shutdown().expect("shut the provider down");
}
