//! The push driver against real upstreams on 127.0.0.1: an OTLP/HTTP server (axum) and
//! an OTLP/gRPC server (tonic) answering a scripted sequence, and a port that accepts
//! connections and never answers. The real OTLP metrics and traces exporters run
//! against them with a real aggregator; nothing here asserts a duration.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use tokio_util::sync::CancellationToken;

use super::Exporter as _;
use crate::aggregate::{AggregateConfig, Aggregator};
use crate::component::{ComponentId, Context};
use crate::config::{
    Compression, Headers, OtlpExporter, OtlpPlan, PushProtocol, RetryOnFailure, SendingQueue,
};
use crate::forward::Refused;
use crate::self_metrics::{DropReason, ExporterStats, SelfMetrics, Signal, SpanOutcome, Transport};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// One worker's cumulative counter.
fn metrics_request(value: f64) -> Vec<u8> {
    let now = crate::aggregate::unix_nanos();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "w"), kv("service.instance.id", "w-1")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "steps".into(),
                    data: Some(Data::Sum(Sum {
                        data_points: vec![NumberDataPoint {
                            start_time_unix_nano: now + 3_600_000_000_000,
                            time_unix_nano: now,
                            value: Some(number_data_point::Value::AsDouble(value)),
                            ..Default::default()
                        }],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn aggregator() -> Arc<Aggregator> {
    let a = Aggregator::standalone(AggregateConfig::default()).unwrap();
    let r = a
        .ingest_protobuf(&metrics_request(5.0), Transport::Http)
        .unwrap();
    assert_eq!(r.rejected, 0, "{}", r.message);
    Arc::new(a)
}

fn exporter(endpoint: String) -> OtlpExporter {
    OtlpExporter {
        endpoint,
        tls: None,
        headers: Headers::default(),
        traces_endpoint: None,
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(500),
        compression: Compression::None,
        include_sources: false,
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

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Waits (bounded) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An upstream's script: the answers it gives in order (then success), and the
/// request bodies it got.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    got: Mutex<Vec<Bytes>>,
}

#[derive(Clone)]
enum Answer {
    Http(u16),
    Grpc(tonic::Code),
    Partial(i64),
}

impl Script {
    fn new(answers: impl IntoIterator<Item = Answer>) -> Arc<Script> {
        Arc::new(Script {
            answers: Mutex::new(answers.into_iter().collect()),
            got: Mutex::new(Vec::new()),
        })
    }

    fn next(&self, body: Bytes) -> Option<Answer> {
        self.got.lock().unwrap().push(body);
        self.answers.lock().unwrap().pop_front()
    }

    fn got(&self) -> Vec<Bytes> {
        self.got.lock().unwrap().clone()
    }
}

/// An OTLP/HTTP upstream on 127.0.0.1 (`/v1/metrics`, `/v1/traces`); its base URL.
async fn http_upstream(script: Arc<Script>) -> String {
    use axum::extract::State;
    use axum::response::IntoResponse;
    let handler = |State(s): State<Arc<Script>>, body: Bytes| async move {
        match s.next(body) {
            Some(Answer::Http(code)) => (
                http::StatusCode::from_u16(code).unwrap(),
                format!("scripted {code}"),
            )
                .into_response(),
            _ => http::StatusCode::OK.into_response(),
        }
    };
    let app = axum::Router::new()
        .route("/v1/metrics", axum::routing::post(handler))
        .route("/v1/traces", axum::routing::post(handler))
        .with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

struct GrpcUpstream(Arc<Script>);

#[tonic::async_trait]
impl MetricsService for GrpcUpstream {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let body = Bytes::from(request.into_inner().encode_to_vec());
        match self.0.next(body) {
            Some(Answer::Grpc(code)) => Err(tonic::Status::new(code, "scripted")),
            Some(Answer::Partial(rejected)) => {
                Ok(tonic::Response::new(ExportMetricsServiceResponse {
                    partial_success: Some(ExportMetricsPartialSuccess {
                        rejected_data_points: rejected,
                        error_message: "scripted partial success".into(),
                    }),
                }))
            }
            _ => Ok(tonic::Response::new(ExportMetricsServiceResponse::default())),
        }
    }
}

/// An OTLP/gRPC metrics upstream on 127.0.0.1; its URL.
async fn grpc_upstream(script: Arc<Script>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(GrpcUpstream(script)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

/// Runs the OTLP metrics exporter until `done` holds, then stops it (its final flush
/// included) and returns the stats.
async fn run_metrics(
    protocol: PushProtocol,
    cfg: OtlpExporter,
    done: impl Fn(&ExporterStats) -> bool,
) -> Arc<ExporterStats> {
    let stats = Arc::new(SelfMetrics::default());
    let cancel = CancellationToken::new();
    let plan = otlp_plan(protocol, cfg);
    let exporter = stats.exporter(&plan.id().to_string(), Signal::Metrics);
    let started = plan.start(&context(aggregator(), &stats, &cancel)).await;
    let task = tokio::spawn(started.expect("an OTLP push starts").run);
    until("the exporter's counters", || done(&exporter)).await;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the exporter stops")
        .expect("the exporter task");
    exporter
}

/// The plan of the unnamed `otlp` (gRPC) or `otlphttp` exporter.
fn otlp_plan(protocol: PushProtocol, cfg: OtlpExporter) -> OtlpPlan {
    let kind = match protocol {
        PushProtocol::Grpc => "otlp",
        PushProtocol::Http => "otlphttp",
    };
    cfg.plan(&ComponentId::new(kind), protocol)
        .expect("a valid exporter")
}

/// What an exporter starts with.
fn context(
    aggregator: Arc<Aggregator>,
    stats: &Arc<SelfMetrics>,
    cancel: &CancellationToken,
) -> Context {
    Context {
        aggregator,
        stats: stats.clone(),
        traces: None,
        stop: cancel.clone(),
        stopped: cancel.clone(),
    }
}

/// Every request body the upstream got once: none was sent twice.
fn all_distinct(bodies: &[Bytes]) -> bool {
    let mut seen = std::collections::HashSet::new();
    bodies.iter().all(|b| seen.insert(b.clone()))
}

/// The points of one push of `aggregator()`'s fleet view.
fn points_per_push() -> u64 {
    aggregator().export_request(false).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_400_is_dropped_and_counted_never_retried() {
    let script = Script::new(std::iter::repeat_n(Answer::Http(400), 1000));
    let url = http_upstream(script.clone()).await;
    let stats = run_metrics(PushProtocol::Http, exporter(url), |s| {
        get(&s.exports_failed) >= 3
    })
    .await;
    let got = script.got();
    // Each request was sent once: its refusal dropped it (the final flush's too).
    assert!(all_distinct(&got), "a refused request was sent again");
    assert_eq!(get(&stats.exports_failed), got.len() as u64);
    assert_eq!(get(&stats.exports_ok), 0);
    let refused = get(&stats.dropped[DropReason::Refused]);
    assert_eq!(refused, got.len() as u64 * points_per_push());
    assert!(refused > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_invalid_argument_is_dropped_and_counted_never_retried() {
    let script = Script::new(std::iter::repeat_n(
        Answer::Grpc(tonic::Code::InvalidArgument),
        1000,
    ));
    let url = grpc_upstream(script.clone()).await;
    let stats = run_metrics(PushProtocol::Grpc, exporter(url), |s| {
        get(&s.exports_failed) >= 3
    })
    .await;
    let got = script.got();
    assert!(all_distinct(&got), "a refused request was sent again");
    assert_eq!(get(&stats.exports_failed), got.len() as u64);
    assert_eq!(
        get(&stats.dropped[DropReason::Refused]),
        got.len() as u64 * points_per_push()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_then_ok_sends_the_same_request_again_and_it_arrives_once() {
    let script = Script::new([
        Answer::Grpc(tonic::Code::Unavailable),
        Answer::Grpc(tonic::Code::ResourceExhausted),
    ]);
    let url = grpc_upstream(script.clone()).await;
    let mut cfg = exporter(url);
    // A long interval: only the first reading (and the final flush) is sent.
    cfg.interval = Duration::from_millis(300);
    let stats = run_metrics(PushProtocol::Grpc, cfg, |s| get(&s.exports_ok) >= 1).await;
    let got = script.got();
    assert!(got.len() >= 3, "{}", got.len());
    // The two retryable failures were the same request, sent again; then accepted.
    assert_eq!(got[0], got[1]);
    assert_eq!(got[1], got[2]);
    assert!(
        all_distinct(&got[2..]),
        "an accepted request was sent again"
    );
    assert_eq!(get(&stats.exports_failed), 2);
    assert_eq!(get(&stats.exports_ok) as usize, got.len() - 2);
    for r in DropReason::ALL {
        assert_eq!(get(&stats.dropped[r]), 0, "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_drops_and_counts_the_rejected_points_only() {
    let script = Script::new([Answer::Partial(1)]);
    let url = grpc_upstream(script.clone()).await;
    let stats = run_metrics(PushProtocol::Grpc, exporter(url), |s| {
        get(&s.exports_ok) >= 2
    })
    .await;
    assert!(all_distinct(&script.got()), "a partial success was retried");
    assert_eq!(get(&stats.dropped[DropReason::Rejected]), 1);
    assert_eq!(get(&stats.exports_failed), 0);
}

/// A trace request with `spans` spans.
fn traces_request(spans: usize) -> Bytes {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|n| Span {
                        trace_id: vec![1; 16],
                        span_id: vec![n as u8 + 1; 8],
                        name: format!("span {n}"),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Bytes::from(request.encode_to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_503_then_200_arrive_exactly_once_and_400_is_dropped() {
    let script = Script::new([Answer::Http(503), Answer::Http(503)]);
    let url = http_upstream(script.clone()).await;
    let stats = Arc::new(SelfMetrics::default());
    let cancel = CancellationToken::new();
    let (forwarder, tasks) = super::traces::start(
        vec![otlp_plan(PushProtocol::Http, exporter(url))],
        stats.clone(),
        cancel.clone(),
    );
    let e = stats.exporter("otlphttp", Signal::Traces);
    let exported = |o: SpanOutcome| get(&e.spans[o]);
    let request = traces_request(3);
    forwarder.submit(request.clone(), 3).expect("room");
    until("the spans accepted", || exported(SpanOutcome::Ok) == 3).await;
    let got = script.got();
    assert_eq!(got.len(), 3, "two 503s, then the 200");
    assert!(
        got.iter().all(|b| *b == request),
        "the same batch each time"
    );
    // Now a refusal: dropped and counted, not sent again.
    script.answers.lock().unwrap().push_back(Answer::Http(400));
    forwarder.submit(traces_request(2), 2).expect("room");
    until("the refused spans dropped", || {
        exported(SpanOutcome::Dropped) == 2
    })
    .await;
    cancel.cancel();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the traces exporter stops")
            .expect("the traces task");
    }
    assert_eq!(script.got().len(), 4, "the refused batch was sent once");
    assert_eq!(exported(SpanOutcome::Ok), 3);
    assert_eq!(exported(SpanOutcome::Rejected), 0);
    assert_eq!(get(&e.spans_queued), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_upstream_never_blocks_ingest() {
    // Accepts connections and never answers.
    let stuck = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = stuck.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let holder = held.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = stuck.accept().await {
            holder.lock().unwrap().push(conn);
        }
    });
    let aggregator = aggregator();
    let stats = Arc::new(SelfMetrics::default());
    let cancel = CancellationToken::new();
    let mut cfg = exporter(format!("http://{addr}"));
    cfg.timeout = Duration::from_millis(200);
    cfg.sending_queue.traces_queue_mib = 1;
    let started = otlp_plan(PushProtocol::Grpc, cfg.clone())
        .start(&context(aggregator.clone(), &stats, &cancel))
        .await;
    let metrics = tokio::spawn(started.expect("an OTLP push starts").run);
    let (forwarder, tasks) = super::traces::start(
        vec![otlp_plan(PushProtocol::Http, cfg)],
        stats.clone(),
        cancel.clone(),
    );
    let g = stats.exporter("otlp", Signal::Metrics);
    // While the pushes hang: ingest goes on, the metrics queue stays bounded and
    // drops its oldest readings (counted), and traces are taken until their queue is
    // full, then refused at once (the sender retries), never waited on.
    let mut value = 5.0;
    let mut traces_full = false;
    until("queue drops while the upstream hangs", || {
        value += 1.0;
        let r = aggregator
            .ingest_protobuf(&metrics_request(value), Transport::Grpc)
            .unwrap();
        assert_eq!(r.rejected, 0);
        match forwarder.submit(traces_request(200), 200) {
            Ok(()) => {}
            Err(Refused::Full(_)) => traces_full = true,
            Err(Refused::Closed) => panic!("traces closed"),
        }
        get(&g.dropped[DropReason::QueueFull]) > 0 && traces_full
    })
    .await;
    assert!(get(&g.queue_depth) <= 2);
    assert_eq!(get(&g.exports_ok), 0);
    assert!(
        aggregator
            .render(crate::View::Fleet)
            .contains("steps_total")
    );
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), metrics)
        .await
        .expect("the metrics exporter stops with the upstream hanging")
        .expect("the metrics task");
    // The traces exporter retries until its deadline: shutdown aborts it.
    for task in tasks {
        task.abort();
    }
    assert!(!held.lock().unwrap().is_empty(), "nothing connected");
}
