use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use super::encode::{Batch, parse_labels};
use super::prompb::WriteRequest;
use super::*;
use crate::aggregate::AggregateConfig;
use crate::exporters::settings::{Headers, RetryOnFailure, SendingQueue};
use crate::self_metrics::{DropReason, SelfMetrics, Signal, Transport};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// Rank `rank`'s request: a counter over two label sets, a summed gauge, the
/// per-source `worker_current_state`, a histogram; label values that need escaping.
fn request(rank: u32, scale: f64) -> ExportMetricsServiceRequest {
    let now = crate::aggregate::unix_nanos();
    let start = now + 3_600_000_000_000;
    let number = |attrs: Vec<KeyValue>, v: f64| NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    };
    let path = "a\"b\\c\nd é";
    let metrics = vec![
        Metric {
            name: "worker_activity_time".into(),
            unit: "s".into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![
                    number(vec![kv("state", "gpu"), kv("path", path)], 1.5 * scale),
                    number(vec![kv("state", "io"), kv("path", path)], 0.25 * scale),
                ],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        },
        Metric {
            name: "queue_depth".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![number(vec![], 3.0 * scale)],
            })),
            ..Default::default()
        },
        Metric {
            name: "worker_current_state".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![number(vec![], f64::from(rank % 7))],
            })),
            ..Default::default()
        },
        Metric {
            name: "step_seconds".into(),
            unit: "s".into(),
            data: Some(Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    start_time_unix_nano: start,
                    time_unix_nano: now,
                    count: 6,
                    sum: Some(0.7 * scale),
                    bucket_counts: vec![1, 2, 0, 3],
                    explicit_bounds: vec![0.005, 0.1, 2.5],
                    ..Default::default()
                }],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            })),
            ..Default::default()
        },
    ];
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "w"),
                    kv("service.instance.id", &format!("id-{rank}")),
                    kv("rank", &rank.to_string()),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn aggregator() -> Aggregator {
    let a = Aggregator::standalone(AggregateConfig::default()).unwrap();
    for rank in 0..3 {
        let r = a
            .ingest_protobuf(
                &request(rank, f64::from(rank + 1)).encode_to_vec(),
                Transport::Http,
            )
            .unwrap();
        assert_eq!(r.rejected, 0, "{}", r.message);
    }
    a
}

type Series = BTreeMap<(String, BTreeMap<String, String>), u64>;

/// The exposition text as series → value bits.
fn exposition(text: &str) -> Series {
    let mut out = Series::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}').unwrap()).unwrap()),
            None => (series, Vec::new()),
        };
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap(),
        };
        let old = out.insert(
            (name.to_owned(), labels.into_iter().collect()),
            value.to_bits(),
        );
        assert!(old.is_none(), "{line} twice");
    }
    out
}

/// The batches decoded as series → value bits, each checked: labels sorted and
/// unique, one sample at `ts`.
fn decoded(batches: &[Batch], ts: i64) -> Series {
    let mut out = Series::new();
    for batch in batches {
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&batch.body)
            .unwrap();
        let request = WriteRequest::decode(raw.as_slice()).unwrap();
        assert_eq!(batch.samples, request.timeseries.len() as u64);
        for series in request.timeseries {
            let names: Vec<&str> = series.labels.iter().map(|l| l.name.as_str()).collect();
            assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
            assert!(series.labels.iter().all(|l| !l.value.is_empty()));
            assert_eq!(series.samples.len(), 1);
            assert_eq!(series.samples[0].timestamp, ts);
            let mut labels: BTreeMap<String, String> = series
                .labels
                .into_iter()
                .map(|l| (l.name, l.value))
                .collect();
            let name = labels.remove("__name__").unwrap();
            let old = out.insert((name, labels), series.samples[0].value.to_bits());
            assert!(old.is_none(), "a series twice");
        }
    }
    out
}

fn encode(a: &Aggregator, view: View, label: Option<(&str, &str)>, max: usize) -> Vec<Batch> {
    let external = [
        ("cluster".to_owned(), "a".to_owned()),
        ("job".to_owned(), "never-wins".to_owned()),
    ];
    let mut b = BatchBuilder::new(Extra {
        external: &external,
        max_batch: max,
        timestamp_ms: 1234,
    });
    b.add_view(&a.rows(view), label);
    let (batches, lost) = b.finish();
    assert_eq!(lost, 0);
    batches
}

#[test]
fn series_and_values_equal_the_exposition_plus_external_labels() {
    let a = aggregator();
    for (view, label) in [
        (View::Fleet, None),
        (View::Sources, Some((SOURCES_VIEW_LABEL, "sources"))),
    ] {
        let mut expected = exposition(&a.render(view));
        assert!(expected.len() > 20, "{expected:?}");
        expected = expected
            .into_iter()
            .map(|((name, mut labels), v)| {
                labels
                    .entry("job".to_owned())
                    .or_insert("never-wins".to_owned());
                labels.insert("cluster".to_owned(), "a".to_owned());
                if let Some((k, val)) = label {
                    labels.insert(k.to_owned(), val.to_owned());
                }
                ((name, labels), v)
            })
            .collect();
        let got = decoded(&encode(&a, view, label, 3_000_000), 1234);
        assert_eq!(got, expected);
    }
    // The histogram's buckets are there, cumulative, with `le` as the text has it.
    let fleet = decoded(&encode(&a, View::Fleet, None, 3_000_000), 1234);
    let bucket = |le: &str| {
        fleet
            .iter()
            .find(|((n, l), _)| {
                n == "step_seconds_bucket" && l.get("le").map(String::as_str) == Some(le)
            })
            .map(|(_, v)| f64::from_bits(*v))
    };
    assert_eq!(bucket("0.005"), Some(3.0));
    assert_eq!(bucket("0.1"), Some(9.0));
    assert_eq!(bucket("2.5"), Some(9.0));
    assert_eq!(bucket("+Inf"), Some(18.0));
}

#[test]
fn batches_split_at_the_size_limit_and_lose_nothing() {
    let a = aggregator();
    let whole = encode(&a, View::Sources, None, 3_000_000);
    let split = encode(&a, View::Sources, None, 1024);
    assert_eq!(whole.len(), 1);
    assert!(split.len() > 2, "{}", split.len());
    assert_eq!(decoded(&whole, 1234), decoded(&split, 1234));
}

fn exporter(endpoint: String) -> RemoteWriteExporter {
    RemoteWriteExporter {
        endpoint,
        tls: None,
        headers: Headers([("X-Scope-OrgID".to_owned(), "tenant-1".to_owned())].into()),
        external_labels: [("cluster".to_owned(), "a".to_owned())].into(),
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        include_sources: false,
        max_batch_size_bytes: 3_000_000,
        sending_queue: SendingQueue {
            queue_size: 2,
            ..SendingQueue::default()
        },
        retry_on_failure: RetryOnFailure {
            initial_interval: Duration::from_millis(10),
            max_interval: Duration::from_millis(50),
        },
    }
}

/// What a receiver got, and the statuses it answers with, in order (then 204).
#[derive(Default)]
struct Receiver {
    statuses: Mutex<VecDeque<(u16, Option<&'static str>)>>,
    requests: Mutex<Vec<(http::HeaderMap, Bytes)>>,
}

async fn receiver(state: Arc<Receiver>) -> String {
    use axum::extract::State;
    use axum::response::IntoResponse;
    let app = axum::Router::new()
        .route(
            "/api/v1/write",
            axum::routing::post(
                |State(s): State<Arc<Receiver>>, headers: http::HeaderMap, body: Bytes| async move {
                    s.requests.lock().unwrap().push((headers, body));
                    let (code, retry_after) = s
                        .statuses
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or((204, None));
                    let mut response = http::StatusCode::from_u16(code).unwrap().into_response();
                    if let Some(r) = retry_after {
                        response
                            .headers_mut()
                            .insert(http::header::RETRY_AFTER, r.parse().unwrap());
                    }
                    response
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/api/v1/write")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_5xx_and_429_drops_other_4xx_and_flushes_on_shutdown() {
    let state = Arc::new(Receiver::default());
    state.statuses.lock().unwrap().extend([
        (503, None),
        (429, Some("0")),
        (500, None),
        (400, None),
    ]);
    let endpoint = receiver(state.clone()).await;
    let aggregator = Arc::new(aggregator());
    let stats = Arc::new(SelfMetrics::default());
    let cancel = CancellationToken::new();
    let e = stats.exporter("prometheusremotewrite", Signal::Metrics);
    let task = tokio::spawn(run(
        plan(exporter(endpoint)),
        aggregator.clone(),
        e.clone(),
        cancel.clone(),
    ));
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&e.exports_ok) < 2 {
        assert!(Instant::now() < deadline, "no successful sends");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_shutdown = state.requests.lock().unwrap().len();
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let requests = state.requests.lock().unwrap();
    assert!(requests.len() > before_shutdown, "no final flush");
    assert_eq!(get(&e.exports_failed), 4);
    // The 400 (the fourth answer) dropped its request's samples; the 5xx and 429 were
    // retried. Counted against that request, not the first: under load two readings
    // were seen to differ in their number of series.
    let samples = {
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&requests[3].1)
            .unwrap();
        WriteRequest::decode(raw.as_slice())
            .unwrap()
            .timeseries
            .len() as u64
    };
    assert_eq!(get(&e.dropped[DropReason::Refused]), samples);
    assert_eq!(get(&e.exports_ok) as usize, requests.len() - 4);
    // The first three requests are one retried request.
    assert_eq!(requests[0].1, requests[1].1);
    assert_eq!(requests[1].1, requests[2].1);
    for (headers, body) in requests.iter() {
        assert_eq!(headers["content-encoding"], "snappy");
        assert_eq!(headers["content-type"], "application/x-protobuf");
        assert_eq!(headers["x-prometheus-remote-write-version"], "0.1.0");
        assert_eq!(headers["x-scope-orgid"], "tenant-1");
        let raw = snap::raw::Decoder::new().decompress_vec(body).unwrap();
        let request = WriteRequest::decode(raw.as_slice()).unwrap();
        assert!(request.timeseries.iter().all(|s| {
            s.labels
                .iter()
                .any(|l| l.name == "cluster" && l.value == "a")
        }));
    }
    assert_eq!(get(&e.queue_depth), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_receiver_fills_the_queue_and_drops_are_counted() {
    // A port nothing listens on: bind one, note it, close it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let aggregator = Arc::new(aggregator());
    let stats = Arc::new(SelfMetrics::default());
    let cancel = CancellationToken::new();
    let e = stats.exporter("prometheusremotewrite", Signal::Metrics);
    let task = tokio::spawn(run(
        plan(exporter(format!("http://{addr}/api/v1/write"))),
        aggregator.clone(),
        e.clone(),
        cancel.clone(),
    ));
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&e.dropped[DropReason::QueueFull]) == 0 {
        assert!(Instant::now() < deadline, "nothing dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(get(&e.queue_depth) <= 2);
    assert!(get(&e.exports_failed) >= 1);
    assert_eq!(get(&e.exports_ok), 0);
    // Ingest goes on while the receiver is down.
    let r = aggregator
        .ingest_protobuf(&request(9, 1.0).encode_to_vec(), Transport::Grpc)
        .unwrap();
    assert_eq!(r.rejected, 0);
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
}

#[test]
fn config_errors_name_the_key() {
    let check = |yaml: &str, key: &str| {
        let text = format!(
            "exporters:\n  prometheusremotewrite:\n{yaml}\nservice:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [prometheusremotewrite]\n"
        );
        let err = match crate::Config::from_yaml(&text) {
            Ok(c) => c.plan().unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(key), "{key}: {err}");
    };
    check(
        "    endpoint: 127.0.0.1:9090/api/v1/write",
        "exporters.prometheusremotewrite.endpoint",
    );
    check(
        "    endpoint: http://127.0.0.1:9090",
        "exporters.prometheusremotewrite.endpoint",
    );
    check(
        "    endpoint: http://h:1/api/v1/write\n    external_labels:\n      __x: y",
        "exporters.prometheusremotewrite.external_labels.__x",
    );
    check(
        "    endpoint: http://h:1/api/v1/write\n    external_labels:\n      bad-name: y",
        "external_labels.bad-name",
    );
    check(
        "    endpoint: http://h:1/api/v1/write\n    sending_queue:\n      queue_size: 0",
        "exporters.prometheusremotewrite.sending_queue.queue_size",
    );
    check(
        "    endpoint: http://h:1/api/v1/write\n    headers:\n      \"bad header\": x",
        "exporters.prometheusremotewrite.headers.bad header",
    );
    check(
        "    endpoint: http://h:1/api/v1/write\n    tls:\n      ca_file: /x.pem",
        "exporters.prometheusremotewrite.tls",
    );
    check(
        "    endpoint: http://h:1/api/v1/write\n    intervall: 1s",
        "intervall",
    );
    let ok = crate::Config::from_yaml(
        "exporters:\n  prometheusremotewrite:\n    endpoint: https://mimir.example/api/v1/push\n    headers:\n      authorization: Bearer s3cret\n    external_labels:\n      cluster: a\n    include_sources: true\n",
    )
    .unwrap()
    .plan()
    .unwrap();
    let rw = ok.remote_writes().next().unwrap();
    assert!(rw.settings.include_sources);
    assert!(!format!("{rw:?}").contains("s3cret"));
}

fn plan(settings: RemoteWriteExporter) -> RemoteWritePlan {
    RemoteWritePlan {
        id: ComponentId::new("prometheusremotewrite"),
        settings,
    }
}
