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

use bytes::BytesMut;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::otlp::OtlpPlan;
use super::push::{self, Backoff, Outcomes, Signal};
use crate::forward::{Item, Queue, TraceForwarder};
use crate::self_metrics::{ExporterStats, SelfMetrics, SpanOutcome, add};

/// A batch is sent once it holds this many bytes.
pub(crate) const BATCH_BYTES: usize = 1024 * 1024;
/// ... or this long after its first request arrived.
pub(crate) const BATCH_WAIT: Duration = Duration::from_millis(200);

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Starts one forwarding task per exporter; they run until `cancel`, then send what
/// is queued until `deadline` passes (the caller aborts them then).
pub(crate) fn start(
    exporters: Vec<OtlpPlan>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) -> (Arc<TraceForwarder>, Vec<tokio::task::JoinHandle<()>>) {
    let mut queues = Vec::new();
    let mut tasks = Vec::new();
    for plan in exporters {
        let exporter = stats.exporter(&plan.id().to_string(), Signal::Traces);
        let capacity = usize::try_from(
            plan.settings()
                .sending_queue
                .traces_queue_mib
                .saturating_mul(1 << 20),
        )
        .unwrap_or(usize::MAX)
        .min(Semaphore::MAX_PERMITS)
        .min(u32::MAX as usize);
        let room = Arc::new(Semaphore::new(capacity));
        let (tx, rx) = mpsc::unbounded_channel();
        queues.push(Queue {
            stats: exporter.clone(),
            tx,
            room: room.clone(),
            capacity,
        });
        tasks.push(tokio::spawn(run(plan, rx, room, exporter, cancel.clone())));
    }
    (Arc::new(TraceForwarder { queues, stats }), tasks)
}

async fn run(
    plan: OtlpPlan,
    mut rx: mpsc::UnboundedReceiver<Item>,
    room: Arc<Semaphore>,
    stats: Arc<ExporterStats>,
    cancel: CancellationToken,
) {
    let cfg = plan.settings();
    let client = super::otlp::client(&plan, EXPORT_PATH, || match &cfg.traces_endpoint {
        Some(u) => u
            .parse::<http::Uri>()
            .map_err(|e| format!("bad traces endpoint {u}: {e}")),
        None => super::otlp::signal_url(&cfg.endpoint, "traces"),
    });
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(exporter = %plan.id(), error = %e, "cannot start the traces exporter; traces are refused");
            room.close();
            return;
        }
    };
    let mut outcomes = Outcomes::new(Signal::Traces, &cfg.endpoint, stats.clone());
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
            add(
                &stats.spans[SpanOutcome::Ok],
                spans.saturating_sub(accepted.rejected),
            );
        }
        stats.spans_queued.fetch_sub(spans, Ordering::Relaxed);
        drop(held);
    }
}

/// Counts what the traces exporters still held when shutdown stopped them as dropped.
pub(crate) fn count_unsent(stats: &SelfMetrics) {
    for exporter in stats.exporters() {
        let left = exporter.spans_queued.swap(0, Ordering::Relaxed);
        if left > 0 {
            add(&exporter.spans[SpanOutcome::Dropped], left);
            tracing::warn!(
                exporter = exporter.name.as_str(),
                spans = left,
                "spans still queued when service.shutdown_timeout ran out were dropped (counted)"
            );
        }
    }
}
