//! OTLP traces sent alongside the metrics load (`--traces-rate`): pre-encoded
//! `ExportTraceServiceRequest`s, paced at a fixed spans/s, on a thread and runtime of
//! their own so that they never delay the metrics senders' tasks.
//!
//! The requests are encoded once with prost (distinct trace ids per request, one root
//! span and its children, as a worker's step and its states would make) and sent as
//! they are: a collector that forwards traces unchanged neither needs nor checks fresh
//! ids or times.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use prost::Message as _;
use serde::Serialize;

use crate::send::{Client, Protocol, TRACES_EXPORT_PATH, note_error};

/// Distinct requests encoded up front and sent in turn.
const TEMPLATES: usize = 64;

/// State names the spans are named after (a training step's phases).
const STATES: [&str; 6] = [
    "data_wait",
    "forward",
    "backward",
    "optimizer_step",
    "allreduce",
    "checkpoint",
];

/// The shape of the trace requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpanShape {
    /// Spans per request: one root span, the rest its children.
    pub(crate) spans_per_request: usize,
    /// Attributes per span (`state`, `operation`, `code.filepath`, `code.lineno`,
    /// then `attr.N` strings); 0 gives bare spans.
    pub(crate) attributes: usize,
}

/// What the traces senders do.
#[derive(Debug, Clone)]
pub(crate) struct TracesConfig {
    /// Wire protocol.
    pub(crate) protocol: Protocol,
    /// `http://host:port` for gRPC, `http://host:port/v1/traces` for HTTP.
    pub(crate) endpoint: String,
    /// Spans per second, over all senders.
    pub(crate) rate: f64,
    /// Requests in flight (one sender and one connection each).
    pub(crate) concurrency: usize,
    /// When sending stops, counted from the start.
    pub(crate) stop_after: Duration,
    /// Per-request deadline.
    pub(crate) timeout: Duration,
}

/// One finished trace request.
#[derive(Debug, Clone, Copy)]
struct Record {
    done_at: Duration,
    latency: Duration,
    spans: u32,
    /// Spans sent minus the receiver's `rejected_spans` (0 on error).
    accepted: u32,
    ok: bool,
}

/// What the traces senders saw, for the report.
#[derive(Debug, Default)]
pub(crate) struct TracesResult {
    records: Vec<Record>,
    errors: Vec<String>,
    request_bytes: usize,
    spans_per_request: usize,
}

/// The traces part of the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TracesReport {
    /// `grpc` or `http`.
    pub(crate) protocol: Protocol,
    /// Where the spans went.
    pub(crate) endpoint: String,
    /// Spans per second asked for.
    pub(crate) target_spans_per_s: f64,
    /// Spans per request.
    pub(crate) spans_per_request: usize,
    /// Mean encoded request size, bytes.
    pub(crate) request_bytes: usize,
    /// Spans sent in the measured window (completed requests).
    pub(crate) spans_sent: u64,
    /// Spans accepted in the window.
    pub(crate) spans_accepted: u64,
    /// Spans in requests the receiver refused or that failed, in the window.
    pub(crate) spans_refused: u64,
    /// Accepted spans per second over the window.
    pub(crate) accepted_spans_per_s: f64,
    /// Requests that succeeded / failed in the window.
    pub(crate) requests_ok: u64,
    /// Requests that failed in the window.
    pub(crate) requests_failed: u64,
    /// Spans accepted over the whole run, warm-up included (what an upstream should
    /// have received once the collector has flushed).
    pub(crate) spans_accepted_total: u64,
    /// Median latency of successful requests, ms.
    pub(crate) latency_p50_ms: f64,
    /// First distinct errors.
    pub(crate) errors: Vec<String>,
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// splitmix64: distinct, well-spread ids from a counter.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Encodes the requests sent in turn: [`TEMPLATES`] of them, each one trace of one
/// worker (`rank` = request index).
pub(crate) fn build(shape: &SpanShape, now_ns: u64) -> anyhow::Result<Vec<Bytes>> {
    ensure!(
        (1..=100_000).contains(&shape.spans_per_request),
        "--spans-per-request must be 1..=100000"
    );
    ensure!(
        shape.attributes <= 64,
        "--span-attributes must be at most 64"
    );
    let mut out = Vec::with_capacity(TEMPLATES);
    for t in 0..TEMPLATES as u64 {
        let mut trace_id = mix(2 * t).to_be_bytes().to_vec();
        trace_id.extend_from_slice(&mix(2 * t + 1).to_be_bytes());
        let root_id = mix(1 << 40 | t).to_be_bytes().to_vec();
        let step_ns = 100_000 * shape.spans_per_request as u64;
        let t0 = now_ns.saturating_sub(step_ns + 1_000_000_000);
        let mut spans = Vec::with_capacity(shape.spans_per_request);
        for i in 0..shape.spans_per_request as u64 {
            let state = STATES[(i as usize) % STATES.len()];
            let attrs = (0..shape.attributes)
                .map(|a| match a {
                    0 => kv("state", any_value::Value::StringValue(state.to_owned())),
                    1 => kv(
                        "operation",
                        any_value::Value::StringValue(format!("train/step/{state}")),
                    ),
                    2 => kv(
                        "code.filepath",
                        any_value::Value::StringValue("src/training/loop.rs".to_owned()),
                    ),
                    3 => kv("code.lineno", any_value::Value::IntValue(100 + i as i64)),
                    _ => kv(
                        &format!("attr.{a}"),
                        any_value::Value::StringValue(format!("value-{a}-{i}")),
                    ),
                })
                .collect();
            let (span_id, parent, name, start, end) = if i == 0 {
                (
                    root_id.clone(),
                    Vec::new(),
                    "step".to_owned(),
                    t0,
                    t0 + step_ns,
                )
            } else {
                (
                    mix(2 << 40 | t << 20 | i).to_be_bytes().to_vec(),
                    root_id.clone(),
                    state.to_owned(),
                    t0 + 100_000 * i,
                    t0 + 100_000 * i + 90_000,
                )
            };
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id,
                parent_span_id: parent,
                flags: 0x01,
                name,
                kind: span::SpanKind::Internal as i32,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes: attrs,
                status: Some(Status {
                    code: status::StatusCode::Unset as i32,
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        kv(
                            "service.name",
                            any_value::Value::StringValue("loadgen-worker".to_owned()),
                        ),
                        kv(
                            "service.instance.id",
                            any_value::Value::StringValue(format!("worker-{t}")),
                        ),
                        kv("rank", any_value::Value::IntValue(t as i64)),
                    ],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "higgsmeter".to_owned(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        out.push(Bytes::from(req.encode_to_vec()));
    }
    Ok(out)
}

/// Starts the traces senders on a thread of their own (a current-thread runtime), so
/// that they take no turns from the metrics senders' runtime; join the handle for the
/// result.
pub(crate) fn spawn(
    cfg: TracesConfig,
    requests: Vec<Bytes>,
    spans_per_request: usize,
    start: Instant,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<TracesResult>>> {
    ensure!(
        cfg.rate.is_finite() && cfg.rate > 0.0,
        "--traces-rate must be a positive number"
    );
    ensure!(
        cfg.concurrency > 0,
        "--traces-concurrency must be at least 1"
    );
    std::thread::Builder::new()
        .name("loadgen-traces".to_owned())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the traces runtime")?;
            rt.block_on(run(&cfg, &requests, spans_per_request, start))
        })
        .context("starting the traces thread")
}

async fn run(
    cfg: &TracesConfig,
    requests: &[Bytes],
    spans_per_request: usize,
    start: Instant,
) -> anyhow::Result<TracesResult> {
    let mut clients = Vec::with_capacity(cfg.concurrency);
    for _ in 0..cfg.concurrency {
        clients.push(Client::connect(cfg.protocol, &cfg.endpoint, false).await?);
    }
    let spans = u32::try_from(spans_per_request).context("--spans-per-request is too large")?;
    let per_task = cfg.rate / cfg.concurrency as f64;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(id, client)| {
            let requests = requests.to_vec();
            let cfg = cfg.clone();
            tokio::spawn(async move {
                sender(client, &requests, id, spans, per_task, &cfg, start).await
            })
        })
        .collect();
    let mut out = TracesResult {
        request_bytes: requests.iter().map(Bytes::len).sum::<usize>() / requests.len().max(1),
        spans_per_request,
        ..Default::default()
    };
    for t in tasks {
        let r = t.await.context("a traces sender panicked")?;
        out.records.extend(r.records);
        for e in r.errors {
            note_error(&mut out.errors, e);
        }
    }
    Ok(out)
}

async fn sender(
    mut client: Client,
    requests: &[Bytes],
    id: usize,
    spans: u32,
    rate: f64,
    cfg: &TracesConfig,
    start: Instant,
) -> TracesResult {
    let mut res = TracesResult::default();
    let stop_at = start + cfg.stop_after;
    let mut sent = 0.0f64;
    let mut i = id;
    loop {
        let due = start + Duration::from_secs_f64(sent / rate);
        if due >= stop_at {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let Some(body) = requests.get(i % requests.len().max(1)).cloned() else {
            break;
        };
        i += cfg.concurrency;
        let t0 = Instant::now();
        let outcome =
            tokio::time::timeout(cfg.timeout, client.send_raw(TRACES_EXPORT_PATH, body)).await;
        let t1 = Instant::now();
        let (ok, accepted) = match outcome {
            Ok(Ok(resp)) => {
                let rejected = ExportTraceServiceResponse::decode(resp)
                    .ok()
                    .and_then(|r| r.partial_success)
                    .map_or(0, |p| p.rejected_spans.max(0) as u64);
                (true, u64::from(spans).saturating_sub(rejected) as u32)
            }
            Ok(Err(e)) => {
                note_error(&mut res.errors, e);
                (false, 0)
            }
            Err(_) => {
                note_error(
                    &mut res.errors,
                    format!("trace request timed out after {:?}", cfg.timeout),
                );
                (false, 0)
            }
        };
        res.records.push(Record {
            done_at: t1.duration_since(start),
            latency: t1.duration_since(t0),
            spans,
            accepted,
            ok,
        });
        sent += f64::from(spans);
    }
    res
}

impl TracesResult {
    /// Summarises the requests that completed within `[from, to]`.
    pub(crate) fn report(&self, cfg: &TracesConfig, from: Duration, to: Duration) -> TracesReport {
        let window = to.saturating_sub(from).as_secs_f64().max(1e-9);
        let (mut sent, mut accepted, mut refused, mut ok, mut failed) = (0, 0, 0, 0, 0);
        let mut lat = Vec::new();
        for r in self
            .records
            .iter()
            .filter(|r| r.done_at >= from && r.done_at <= to)
        {
            sent += u64::from(r.spans);
            accepted += u64::from(r.accepted);
            if r.ok {
                ok += 1;
                lat.push(r.latency.as_secs_f64() * 1e3);
            } else {
                failed += 1;
                refused += u64::from(r.spans);
            }
        }
        lat.sort_by(f64::total_cmp);
        TracesReport {
            protocol: cfg.protocol,
            endpoint: cfg.endpoint.clone(),
            target_spans_per_s: cfg.rate,
            spans_per_request: self.spans_per_request,
            request_bytes: self.request_bytes,
            spans_sent: sent,
            spans_accepted: accepted,
            spans_refused: refused,
            accepted_spans_per_s: accepted as f64 / window,
            requests_ok: ok,
            requests_failed: failed,
            spans_accepted_total: self.records.iter().map(|r| u64::from(r.accepted)).sum(),
            latency_p50_ms: lat.get(lat.len() / 2).copied().unwrap_or(0.0),
            errors: self.errors.clone(),
        }
    }
}
