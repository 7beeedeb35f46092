//! The traces pipeline's hand-off from the receivers to the traces exporters: a trace
//! request's spans counted by a walk over its protobuf bytes ([`count_spans`]; they are
//! forwarded unchanged, never decoded into structs), and [`TraceForwarder`], which
//! queues one request for every exporter, or for none when one has no room.
//!
//! Between `receivers/` (which submit) and `exporters/traces.rs` (which drain the
//! queues), so neither side depends on the other.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::protobuf::{DecodeError, LEN, Reader};
use crate::self_metrics::{ExporterStats, SelfMetrics, Transport, add};

/// A malformed trace request.
#[derive(Debug, thiserror::Error)]
#[error("not an OTLP ExportTraceServiceRequest: {0}")]
pub(crate) struct MalformedTraces(DecodeError);

impl From<DecodeError> for MalformedTraces {
    fn from(e: DecodeError) -> Self {
        MalformedTraces(e)
    }
}

/// Calls `f(field, payload)` for each length-delimited field of a message and skips
/// the others; errors on anything malformed.
fn fields<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u32, &'a [u8]) -> Result<(), MalformedTraces>,
) -> Result<(), MalformedTraces> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        if wire == LEN {
            f(field, r.bytes()?)?;
        } else {
            r.skip(wire)?;
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
pub(crate) struct Item {
    pub(crate) bytes: Bytes,
    pub(crate) spans: u64,
    pub(crate) _room: OwnedSemaphorePermit,
}

pub(crate) struct Queue {
    /// The exporter's counters (and name, for the refusal).
    pub(crate) stats: Arc<ExporterStats>,
    /// Where its requests go.
    pub(crate) tx: mpsc::UnboundedSender<Item>,
    /// Bytes it may still take.
    pub(crate) room: Arc<Semaphore>,
    /// Its `traces_queue_mib`, bytes.
    pub(crate) capacity: usize,
}

/// Why a trace request was not taken.
#[derive(Debug)]
pub(crate) enum Refused {
    /// An exporter's queue has no room for it: retry later.
    Full(String),
    /// The collector is shutting down.
    Closed,
}

/// Hands trace requests to every exporter of the traces pipeline.
pub(crate) struct TraceForwarder {
    pub(crate) queues: Vec<Queue>,
    pub(crate) stats: Arc<SelfMetrics>,
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
                    return Err(Refused::Full(q.stats.name.clone()));
                }
            }
        }
        for (q, room) in self.queues.iter().zip(rooms) {
            add(&q.stats.spans_queued, spans);
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
    pub(crate) fn received(&self, transport: Transport, spans: u64) {
        add(&self.stats.spans_received[transport], spans);
    }
}
