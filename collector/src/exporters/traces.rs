//! The traces pipeline: OTLP trace requests from the receivers, forwarded unchanged to
//! each configured upstream (`otlp`, `otlphttp`).
//!
//! - **Unchanged.** Requests are never decoded into structs: their protobuf bytes are
//!   checked and their spans counted by a walk over the wire format ([`count_spans`]),
//!   and batched by concatenation (concatenated `ExportTraceServiceRequest`s are one
//!   request holding all their `resource_spans`).
//! - **Batched**: up to [`BATCH_BYTES`] or [`BATCH_WAIT`] after the first request.
//! - **Bounded**: each exporter holds at most `sending_queue.traces_queue_mib` of
//!   spans; a request that does not fit is refused with a retryable status
//!   (`UNAVAILABLE` / 503) so the sender retries: nothing is dropped for room.
//! - **Retried** with exponential backoff (`retry_on_failure`) while the upstream is
//!   unreachable or answers a retryable status; a batch the upstream refuses outright
//!   (e.g. `INVALID_ARGUMENT`, HTTP 400) is dropped and counted.
//! - **Partial success** from the upstream is logged (at most once a minute) and its
//!   rejected spans counted (`outcome="rejected"`).
//! - On shutdown what is queued is sent within the exporters' share of
//!   `service.shutdown_timeout`; what is left then is counted as dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;

use super::connect::Connector;
use crate::config::{Compression, OtlpExporter, PushProtocol};
use crate::self_metrics::{ExporterKind, SelfMetrics, SpanOutcome};

/// A batch is sent once it holds this many bytes.
pub(crate) const BATCH_BYTES: usize = 1024 * 1024;
/// ... or this long after its first request arrived.
pub(crate) const BATCH_WAIT: Duration = Duration::from_millis(200);

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// A malformed trace request.
#[derive(Debug, thiserror::Error)]
#[error("not an OTLP ExportTraceServiceRequest: {0}")]
pub(crate) struct MalformedTraces(&'static str);

/// Reads a varint at the front of `buf`.
fn varint(buf: &mut &[u8]) -> Result<u64, MalformedTraces> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(MalformedTraces("truncated varint"));
        };
        *buf = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(MalformedTraces("varint over 10 bytes"))
}

/// Calls `f(field, payload)` for each length-delimited field of a message and skips
/// the others; errors on anything malformed.
fn fields<'a>(
    mut buf: &'a [u8],
    mut f: impl FnMut(u64, &'a [u8]) -> Result<(), MalformedTraces>,
) -> Result<(), MalformedTraces> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err(MalformedTraces("field number 0"));
        }
        match wire {
            0 => {
                varint(&mut buf)?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if buf.len() < n {
                    return Err(MalformedTraces("truncated fixed-width field"));
                }
                buf = &buf[n..];
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?)
                    .map_err(|_| MalformedTraces("length overflows"))?;
                if buf.len() < len {
                    return Err(MalformedTraces("truncated length-delimited field"));
                }
                let (payload, rest) = buf.split_at(len);
                buf = rest;
                f(field, payload)?;
            }
            _ => return Err(MalformedTraces("unsupported wire type")),
        }
    }
    Ok(())
}

/// The spans in an `ExportTraceServiceRequest`'s protobuf bytes (resource_spans = 1,
/// scope_spans = 2, spans = 2), checking the framing down to the spans.
pub(crate) fn count_spans(request: &[u8]) -> Result<u64, MalformedTraces> {
    let mut spans = 0u64;
    fields(request, |field, resource_spans| {
        if field != 1 {
            return Ok(());
        }
        fields(resource_spans, |field, scope_spans| {
            if field != 2 {
                return Ok(());
            }
            fields(scope_spans, |field, _span| {
                if field == 2 {
                    spans += 1;
                }
                Ok(())
            })
        })
    })?;
    Ok(spans)
}

/// One request's place in an exporter's queue.
struct Item {
    bytes: Bytes,
    spans: u64,
    _room: OwnedSemaphorePermit,
}

struct Queue {
    kind: ExporterKind,
    tx: mpsc::UnboundedSender<Item>,
    room: Arc<Semaphore>,
    capacity: usize,
}

/// Why a trace request was not taken.
#[derive(Debug)]
pub(crate) enum Refused {
    /// An exporter's queue has no room for it: retry later.
    Full(&'static str),
    /// The collector is shutting down.
    Closed,
}

/// Hands trace requests to every exporter of the traces pipeline.
pub(crate) struct TraceForwarder {
    queues: Vec<Queue>,
    stats: Arc<SelfMetrics>,
}

impl std::fmt::Debug for TraceForwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceForwarder")
            .field("exporters", &self.queues.len())
            .finish_non_exhaustive()
    }
}

impl TraceForwarder {
    /// Takes one request for every exporter, or for none: when one exporter's queue
    /// has no room, nothing is queued and the sender is to retry.
    pub(crate) fn submit(&self, bytes: Bytes, spans: u64) -> Result<(), Refused> {
        let mut rooms = Vec::with_capacity(self.queues.len());
        for q in &self.queues {
            let need = u32::try_from(bytes.len().max(1).min(q.capacity)).unwrap_or(u32::MAX);
            match q.room.clone().try_acquire_many_owned(need) {
                Ok(permit) => rooms.push(permit),
                Err(tokio::sync::TryAcquireError::Closed) => return Err(Refused::Closed),
                Err(tokio::sync::TryAcquireError::NoPermits) => {
                    return Err(Refused::Full(q.kind.as_str()));
                }
            }
        }
        for (q, room) in self.queues.iter().zip(rooms) {
            self.stats.spans_queued[q.kind as usize].fetch_add(spans, Ordering::Relaxed);
            let item = Item {
                bytes: bytes.clone(),
                spans,
                _room: room,
            };
            if q.tx.send(item).is_err() {
                return Err(Refused::Closed);
            }
        }
        Ok(())
    }

    /// Counts spans received on a transport.
    pub(crate) fn received(&self, transport: crate::Transport, spans: u64) {
        self.stats.spans_received[transport as usize].fetch_add(spans, Ordering::Relaxed);
    }
}

/// Starts one forwarding task per exporter; they run until `cancel`, then send what
/// is queued until `deadline` passes (the caller aborts them then).
pub(crate) fn start(
    exporters: Vec<(PushProtocol, OtlpExporter)>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) -> (Arc<TraceForwarder>, Vec<tokio::task::JoinHandle<()>>) {
    let mut queues = Vec::new();
    let mut tasks = Vec::new();
    for (protocol, cfg) in exporters {
        let kind = match protocol {
            PushProtocol::Grpc => ExporterKind::Grpc,
            PushProtocol::Http => ExporterKind::Http,
        };
        let capacity = usize::try_from(cfg.sending_queue.traces_queue_mib.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        let room = Arc::new(Semaphore::new(capacity));
        let (tx, rx) = mpsc::unbounded_channel();
        queues.push(Queue {
            kind,
            tx,
            room: room.clone(),
            capacity,
        });
        tasks.push(tokio::spawn(run(
            protocol,
            cfg,
            rx,
            room,
            stats.clone(),
            cancel.clone(),
        )));
    }
    (Arc::new(TraceForwarder { queues, stats }), tasks)
}

enum Sender {
    Grpc {
        grpc: tonic::client::Grpc<tonic::transport::Channel>,
        metadata: tonic::metadata::MetadataMap,
    },
    Http {
        client: Box<Client<Connector, Full<Bytes>>>,
        url: http::Uri,
        gzip: bool,
        headers: http::HeaderMap,
    },
}

/// Passes request bytes through; decodes the upstream's response.
#[derive(Clone, Copy)]
struct RawCodec;
struct RawEncoder;
struct ResponseDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for ResponseDecoder {
    type Item = ExportTraceServiceResponse;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<ExportTraceServiceResponse>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        ExportTraceServiceResponse::decode(bytes)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("decoding the upstream's response: {e}")))
    }
}

/// How one send went.
enum Sent {
    /// Accepted; the upstream rejected this many spans (partial success) with a message.
    Ok(u64, String),
    /// Worth trying again (unreachable, timed out, `UNAVAILABLE`, 429, 5xx).
    Retry(String),
    /// Refused outright: dropped.
    Drop(String),
}

impl Sender {
    fn new(protocol: PushProtocol, cfg: &OtlpExporter) -> Result<Sender, String> {
        let connector = super::otlp::connector(protocol, cfg)?;
        match protocol {
            PushProtocol::Grpc => {
                let (endpoint, metadata) = super::otlp::grpc_endpoint(cfg)?;
                let channel = endpoint.connect_with_connector_lazy(connector);
                let grpc = tonic::client::Grpc::new(channel);
                let grpc = if cfg.compression == Compression::Gzip {
                    grpc.send_compressed(CompressionEncoding::Gzip)
                } else {
                    grpc
                }
                .accept_compressed(CompressionEncoding::Gzip);
                Ok(Sender::Grpc { grpc, metadata })
            }
            PushProtocol::Http => {
                let url = match &cfg.traces_endpoint {
                    Some(u) => u
                        .parse::<http::Uri>()
                        .map_err(|e| format!("bad traces endpoint {u}: {e}"))?,
                    None => super::otlp::signal_url(&cfg.endpoint, "traces")?,
                };
                Ok(Sender::Http {
                    client: Box::new(Client::builder(TokioExecutor::new()).build(connector)),
                    url,
                    gzip: cfg.compression == Compression::Gzip,
                    headers: super::otlp::header_map(cfg)?,
                })
            }
        }
    }

    async fn send(&mut self, batch: Bytes, timeout: Duration) -> Sent {
        match self {
            Sender::Grpc { grpc, metadata } => {
                let call = async {
                    grpc.ready()
                        .await
                        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                    let mut request = tonic::Request::new(batch);
                    *request.metadata_mut() = metadata.clone();
                    grpc.unary(
                        request,
                        http::uri::PathAndQuery::from_static(EXPORT_PATH),
                        RawCodec,
                    )
                    .await
                };
                match tokio::time::timeout(timeout, call).await {
                    Err(_) => Sent::Retry("timed out".to_owned()),
                    Ok(Ok(response)) => partial(response.get_ref()),
                    Ok(Err(status)) => {
                        let text = format!("{}: {}", status.code(), status.message());
                        match status.code() {
                            tonic::Code::Unavailable
                            | tonic::Code::ResourceExhausted
                            | tonic::Code::DeadlineExceeded
                            | tonic::Code::Aborted
                            | tonic::Code::Cancelled
                            | tonic::Code::Unknown
                            | tonic::Code::Internal => Sent::Retry(text),
                            _ => Sent::Drop(text),
                        }
                    }
                }
            }
            Sender::Http {
                client,
                url,
                gzip,
                headers,
            } => {
                let request = match super::otlp::protobuf_post(url, headers, *gzip, batch) {
                    Ok(r) => r,
                    Err(e) => return Sent::Drop(e),
                };
                let call = async {
                    let response = client.request(request).await.map_err(|e| e.to_string())?;
                    let status = response.status();
                    let body = response
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    Ok::<_, String>((status, body))
                };
                match tokio::time::timeout(timeout, call).await {
                    Err(_) => Sent::Retry("timed out".to_owned()),
                    Ok(Err(e)) => Sent::Retry(e),
                    Ok(Ok((status, body))) if status.is_success() => {
                        partial(&ExportTraceServiceResponse::decode(body).unwrap_or_default())
                    }
                    Ok(Ok((status, body))) => {
                        let text = format!(
                            "HTTP {status}: {}",
                            String::from_utf8_lossy(&body)
                                .chars()
                                .take(200)
                                .collect::<String>()
                        );
                        if status.as_u16() == 429 || status.is_server_error() {
                            Sent::Retry(text)
                        } else {
                            Sent::Drop(text)
                        }
                    }
                }
            }
        }
    }
}

fn partial(response: &ExportTraceServiceResponse) -> Sent {
    match &response.partial_success {
        Some(p) if p.rejected_spans > 0 => Sent::Ok(
            u64::try_from(p.rejected_spans).unwrap_or(0),
            p.error_message.clone(),
        ),
        _ => Sent::Ok(0, String::new()),
    }
}

/// Logs at most once a minute.
struct RateLimited(Option<std::time::Instant>);

impl RateLimited {
    fn ready(&mut self) -> bool {
        if self
            .0
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            self.0 = Some(std::time::Instant::now());
            return true;
        }
        false
    }
}

async fn run(
    protocol: PushProtocol,
    cfg: OtlpExporter,
    mut rx: mpsc::UnboundedReceiver<Item>,
    room: Arc<Semaphore>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let kind = match protocol {
        PushProtocol::Grpc => ExporterKind::Grpc,
        PushProtocol::Http => ExporterKind::Http,
    };
    let count = |outcome: SpanOutcome, n: u64| {
        stats.spans_exported[kind as usize][outcome as usize].fetch_add(n, Ordering::Relaxed);
    };
    let mut sender = match Sender::new(protocol, &cfg) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(exporter = kind.as_str(), error = %e, "cannot start the traces exporter; traces are refused");
            room.close();
            return;
        }
    };
    let mut log_failure = RateLimited(None);
    let mut log_partial = RateLimited(None);
    let mut stopping = false;
    loop {
        // Gather one batch: up to BATCH_BYTES, or BATCH_WAIT after its first request.
        let mut batch = BytesMut::new();
        let mut spans = 0u64;
        let mut held = Vec::new();
        let first = tokio::select! {
            item = rx.recv() => item,
            _ = cancel.cancelled(), if !stopping => {
                stopping = true;
                rx.close();
                continue;
            }
        };
        let Some(first) = first else { break };
        let until = Instant::now() + BATCH_WAIT;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            batch.extend_from_slice(&item.bytes);
            spans += item.spans;
            held.push(item);
            if batch.len() >= BATCH_BYTES {
                break;
            }
            next = if stopping {
                rx.try_recv().ok()
            } else {
                tokio::select! {
                    item = rx.recv() => item,
                    _ = tokio::time::sleep_until(until) => None,
                    _ = cancel.cancelled() => None,
                }
            };
        }
        let batch = batch.freeze();
        let mut backoff = cfg.retry_on_failure.initial_interval;
        loop {
            match sender.send(batch.clone(), cfg.timeout).await {
                Sent::Ok(rejected, message) => {
                    count(SpanOutcome::Ok, spans.saturating_sub(rejected));
                    if rejected > 0 {
                        count(SpanOutcome::Rejected, rejected);
                        if log_partial.ready() {
                            tracing::warn!(exporter = kind.as_str(), rejected, %message, "the traces upstream rejected some spans (partial success; counted in higgsmeter_collector_spans_exported_total{{outcome=\"rejected\"}})");
                        }
                    }
                    break;
                }
                Sent::Drop(e) => {
                    count(SpanOutcome::Dropped, spans);
                    tracing::warn!(exporter = kind.as_str(), spans, error = %e, "the traces upstream refused a batch; dropped (counted)");
                    break;
                }
                Sent::Retry(e) => {
                    if log_failure.ready() {
                        tracing::warn!(exporter = kind.as_str(), endpoint = %cfg.endpoint, error = %e, "traces push failed; retrying with backoff (senders are told to retry once the queue is full)");
                    }
                    // Past the cancel, the caller's deadline bounds the retries.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(cfg.retry_on_failure.max_interval);
                }
            }
        }
        stats.spans_queued[kind as usize].fetch_sub(spans, Ordering::Relaxed);
        drop(held);
    }
}

/// Counts what the traces exporters still held when shutdown stopped them as dropped.
pub(crate) fn count_unsent(stats: &SelfMetrics) {
    for kind in ExporterKind::TRACES {
        let left = stats.spans_queued[kind as usize].swap(0, Ordering::Relaxed);
        if left > 0 {
            stats.spans_exported[kind as usize][SpanOutcome::Dropped as usize]
                .fetch_add(left, Ordering::Relaxed);
            tracing::warn!(
                exporter = kind.as_str(),
                spans = left,
                "spans still queued when service.shutdown_timeout ran out were dropped (counted)"
            );
        }
    }
}
