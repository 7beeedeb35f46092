//! The collector's own counters and gauges (names in `higgsmeter_catalog::COLLECTOR_FAMILIES`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::aggregate::RefusalReason;

/// The transport a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP.
    Http,
}

impl Transport {
    pub(crate) const ALL: [Transport; 2] = [Transport::Grpc, Transport::Http];

    /// The `transport` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// Why a whole request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestRefusal {
    Malformed,
    ContentType,
    Decompress,
    TooLarge,
    UnsupportedSignal,
    Unauthenticated,
    QueueFull,
    Other,
}

impl RequestRefusal {
    pub(crate) const COUNT: usize = 8;
    pub(crate) const ALL: [RequestRefusal; RequestRefusal::COUNT] = [
        RequestRefusal::Malformed,
        RequestRefusal::ContentType,
        RequestRefusal::Decompress,
        RequestRefusal::TooLarge,
        RequestRefusal::UnsupportedSignal,
        RequestRefusal::Unauthenticated,
        RequestRefusal::QueueFull,
        RequestRefusal::Other,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestRefusal::Malformed => "malformed",
            RequestRefusal::ContentType => "content_type",
            RequestRefusal::Decompress => "decompress",
            RequestRefusal::TooLarge => "too_large",
            RequestRefusal::UnsupportedSignal => "unsupported_signal",
            RequestRefusal::Unauthenticated => "unauthenticated",
            RequestRefusal::QueueFull => "queue_full",
            RequestRefusal::Other => "other",
        }
    }
}

/// Why a receiver closed a connection before its peer did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// No finished opening (TLS handshake, HTTP/2 preface and SETTINGS, first request
    /// headers) within the receiver's limit.
    OpeningTimeout,
    /// No request in flight for longer than the receiver allows.
    IdleTimeout,
    /// Unfinished or idle, closed to make room for a new connection.
    Shed,
    /// Unfinished or idle when the collector stopped.
    Shutdown,
}

impl CloseReason {
    pub(crate) const COUNT: usize = 4;
    pub(crate) const ALL: [CloseReason; CloseReason::COUNT] = [
        CloseReason::OpeningTimeout,
        CloseReason::IdleTimeout,
        CloseReason::Shed,
        CloseReason::Shutdown,
    ];

    /// The `reason` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::OpeningTimeout => "opening_timeout",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shed => "shed",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// What became of forwarded spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanOutcome {
    Ok,
    Rejected,
    Dropped,
}

impl SpanOutcome {
    pub(crate) const ALL: [SpanOutcome; 3] =
        [SpanOutcome::Ok, SpanOutcome::Rejected, SpanOutcome::Dropped];

    /// The `outcome` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SpanOutcome::Ok => "ok",
            SpanOutcome::Rejected => "rejected",
            SpanOutcome::Dropped => "dropped",
        }
    }
}

/// Why an exporter dropped points (the `reason` label of
/// `higgsmeter_collector_export_dropped_points_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// The bounded queue was full (the upstream down or slow): the oldest reading went.
    QueueFull,
    /// The upstream refused the request for good (a 4xx other than 408/429,
    /// `INVALID_ARGUMENT`, ...); never retried.
    Refused,
    /// The upstream took the request but rejected these points (OTLP partial success).
    Rejected,
    /// The final flush on shutdown did not go through.
    Shutdown,
    /// The points could not be encoded (never expected).
    Encode,
}

impl DropReason {
    pub(crate) const COUNT: usize = 5;
    pub(crate) const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::QueueFull,
        DropReason::Refused,
        DropReason::Rejected,
        DropReason::Shutdown,
        DropReason::Encode,
    ];

    /// The `reason` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::Refused => "refused",
            DropReason::Rejected => "rejected",
            DropReason::Shutdown => "shutdown",
            DropReason::Encode => "encode",
        }
    }
}

/// `higgsmeter_collector_export_dropped_points_total`, by exporter and reason.
pub(crate) const EXPORT_DROPPED: higgsmeter_catalog::Family =
    higgsmeter_catalog::COLLECTOR_EXPORT_DROPPED;

/// A listener that can be TLS-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listener {
    Grpc,
    Http,
    Prometheus,
}

impl Listener {
    pub(crate) const ALL: [Listener; 3] = [Listener::Grpc, Listener::Http, Listener::Prometheus];

    /// The `listener` label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Listener::Grpc => "grpc",
            Listener::Http => "http",
            Listener::Prometheus => "prometheus",
        }
    }
}

/// An upstream exporter: OTLP, or Prometheus remote write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExporterKind {
    Grpc,
    Http,
    RemoteWrite,
}

impl ExporterKind {
    pub(crate) const COUNT: usize = 3;
    /// The exporters that can carry traces (`otlp`, `otlphttp`), in index order.
    pub(crate) const TRACES: [ExporterKind; 2] = [ExporterKind::Grpc, ExporterKind::Http];

    pub(crate) const ALL: [ExporterKind; ExporterKind::COUNT] = [
        ExporterKind::Grpc,
        ExporterKind::Http,
        ExporterKind::RemoteWrite,
    ];

    /// The `exporter` label value: the exporter's key under `exporters`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExporterKind::Grpc => "otlp",
            ExporterKind::Http => "otlphttp",
            ExporterKind::RemoteWrite => "prometheusremotewrite",
        }
    }
}

/// Lock-free counters the receivers, the aggregator and the exporters bump.
#[derive(Debug, Default)]
pub(crate) struct SelfMetrics {
    pub(crate) requests: [AtomicU64; 2],
    pub(crate) requests_refused: [[AtomicU64; RequestRefusal::COUNT]; 2],
    pub(crate) points_received: [AtomicU64; 2],
    pub(crate) points_refused: [AtomicU64; RefusalReason::COUNT],
    pub(crate) exports_ok: [AtomicU64; ExporterKind::COUNT],
    pub(crate) exports_failed: [AtomicU64; ExporterKind::COUNT],
    pub(crate) queue_depth: [AtomicU64; ExporterKind::COUNT],
    /// Points dropped, per exporter and [`DropReason`].
    pub(crate) export_dropped: [[AtomicU64; DropReason::COUNT]; ExporterKind::COUNT],
    /// Checkpoint writes: `[ok, failed]`.
    pub(crate) checkpoints: [AtomicU64; 2],
    /// Connections refused at a receiver's `max_connections` (or the peer's
    /// `max_connections_per_peer`), every one busy, per transport.
    pub(crate) connections_refused: [AtomicU64; 2],
    /// Connections a receiver closed, per transport and [`CloseReason`].
    pub(crate) connections_closed: [[AtomicU64; CloseReason::COUNT]; 2],
    /// Failed TLS handshakes, per [`Listener`].
    pub(crate) tls_handshakes_failed: [AtomicU64; 3],
    /// Spans received by the traces pipeline, per transport.
    pub(crate) spans_received: [AtomicU64; 2],
    /// Spans forwarded, per exporter and [`SpanOutcome`].
    pub(crate) spans_exported: [[AtomicU64; 3]; 2],
    /// Spans taken but not yet sent, per exporter (counted as dropped if shutdown ends
    /// first).
    pub(crate) spans_queued: [AtomicU64; 2],
}

impl SelfMetrics {
    pub(crate) fn request(&self, t: Transport) {
        self.requests[t as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refuse_request(&self, t: Transport, reason: RequestRefusal) {
        self.requests_refused[t as usize][reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn close_connection(&self, t: Transport, reason: CloseReason) {
        self.connections_closed[t as usize][reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
}
