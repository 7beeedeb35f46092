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
//! - **Retried** with exponential backoff (`retry_on_failure`, or the upstream's
//!   `Retry-After` / `RetryInfo`) while the upstream is unreachable or answers a
//!   retryable status; a batch the upstream refuses outright (e.g. `INVALID_ARGUMENT`,
//!   HTTP 400) is dropped and counted (`outcome="dropped"`). The push driver
//!   (`push.rs`) decides which is which, as for every exporter.
//! - **Partial success** from the upstream is logged (at most once a minute) and its
//!   rejected spans counted (`outcome="rejected"`).
//! - On shutdown what is queued is sent within the exporters' share of
//!   `service.shutdown_timeout`; what is left then is counted as dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::push::{self, Backoff, Outcomes, Signal};
use crate::config::{OtlpExporter, PushProtocol};
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
        let kind = super::otlp::kind(protocol);
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

async fn run(
    protocol: PushProtocol,
    cfg: OtlpExporter,
    mut rx: mpsc::UnboundedReceiver<Item>,
    room: Arc<Semaphore>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let kind = super::otlp::kind(protocol);
    let client = super::otlp::client(protocol, &cfg, EXPORT_PATH, || match &cfg.traces_endpoint {
        Some(u) => u
            .parse::<http::Uri>()
            .map_err(|e| format!("bad traces endpoint {u}: {e}")),
        None => super::otlp::signal_url(&cfg.endpoint, "traces"),
    });
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(exporter = kind.as_str(), error = %e, "cannot start the traces exporter; traces are refused");
            room.close();
            return;
        }
    };
    let mut outcomes = Outcomes::new(kind, Signal::Traces, &cfg.endpoint, stats.clone());
    let mut backoff = Backoff::new(&cfg.retry_on_failure);
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
        // Retried until taken or refused; past the cancel, the caller's deadline
        // bounds the retries. A refusal or a partial success is counted by `outcomes`.
        let sent = push::deliver(
            || client.export(batch.clone()),
            spans,
            "spans",
            &mut backoff,
            &mut outcomes,
        )
        .await;
        if let Ok(accepted) = sent {
            stats.spans_exported[kind as usize][SpanOutcome::Ok as usize]
                .fetch_add(spans.saturating_sub(accepted.rejected), Ordering::Relaxed);
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
