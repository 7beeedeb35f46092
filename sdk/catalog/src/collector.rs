//! The collector's own families (its health and throughput) and the families it derives.

use crate::{
    Family, Fleet, JOB_BADPUT, JOB_DISRUPTIONS, JOB_GOODPUT, JOB_GOODPUT_RATIO, JOB_TIME, Kind,
};

/// `worker_sources_in_state` (gauge): live sources whose `worker_current_state` is in
/// each state.
///
/// Derived by the collector from the per-source `worker_current_state` gauges (which
/// cannot be summed) for the fleet view: `sum(worker_sources_in_state{state="gpu"})`
/// is the number of workers in `gpu` now. Label `state`: idle, io, cpu, gpu, warmup,
/// startup, shutdown; every state is always present (0 when no source is in it).
pub const WORKER_SOURCES_IN_STATE: Family = Family {
    name: "worker_sources_in_state",
    kind: Kind::Gauge,
    help: "Live sources whose worker_current_state is in each state",
    unit: "{source}",
    labels: &["state"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_requests_total` (counter): OTLP export requests received, by
/// transport (`grpc`, `http`), whatever became of them.
pub const COLLECTOR_REQUESTS: Family = Family {
    name: "higgsmeter_collector_requests_total",
    kind: Kind::Counter,
    help: "OTLP export requests received, by transport",
    unit: "{request}",
    labels: &["transport"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_requests_refused_total` (counter): whole OTLP requests refused
/// before any point was read, by transport and reason.
///
/// Reasons: `malformed` (not valid protobuf/JSON), `content_type` (neither
/// `application/x-protobuf` nor `application/json`), `decompress` (truncated or corrupt
/// gzip, or an unknown content encoding), `too_large` (over the configured maximum
/// message size), `unsupported_signal` (traces or logs: this collector receives
/// metrics only), `unauthenticated` (no or a wrong bearer token, where the receiver
/// asks for one), `queue_full` (traces: an exporter's queue had no room; the sender is
/// told to retry), `other`.
pub const COLLECTOR_REQUESTS_REFUSED: Family = Family {
    name: "higgsmeter_collector_requests_refused_total",
    kind: Kind::Counter,
    help: "Whole OTLP requests refused before any point was read, by transport and reason",
    unit: "{request}",
    labels: &["transport", "reason"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_points_received_total` (counter): data points read from
/// well-formed OTLP requests, accepted or refused, by transport.
pub const COLLECTOR_POINTS_RECEIVED: Family = Family {
    name: "higgsmeter_collector_points_received_total",
    kind: Kind::Counter,
    help: "Data points read from well-formed OTLP requests, accepted or refused, by transport",
    unit: "{point}",
    labels: &["transport"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_points_refused_total` (counter): data points refused (reported
/// to the sender as OTLP partial success), by reason.
///
/// Reasons: `non_finite` (NaN or ±Inf value), `negative_counter` (a monotonic sum
/// below zero), `histogram_bounds` (bounds differ from the series' earlier bounds),
/// `invalid` (a point that breaks the OTLP data model: no value, bucket counts that do
/// not match the bounds, unsorted bounds), `type_conflict` (a name already used with
/// another type, or a reserved name), `unsupported_type` (exponential histograms and
/// summaries), `cardinality` (over the series limits), `out_of_order` (a cumulative
/// point that started before the series' current start: a late point of an earlier
/// incarnation, or several processes sharing one resource).
pub const COLLECTOR_POINTS_REFUSED: Family = Family {
    name: "higgsmeter_collector_points_refused_total",
    kind: Kind::Counter,
    help: "Data points refused (reported as OTLP partial success), by reason",
    unit: "{point}",
    labels: &["reason"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_sources` (gauge): sources (distinct OTLP resources) heard
/// from within `stale_after`.
pub const COLLECTOR_SOURCES: Family = Family {
    name: "higgsmeter_collector_sources",
    kind: Kind::Gauge,
    help: "Sources (distinct OTLP resources) heard from within stale_after",
    unit: "{source}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_series` (gauge): series held in memory, by view: `source`
/// (per-source series, stale ones still remembered for reset safety included) and
/// `fleet` (aggregated series).
pub const COLLECTOR_SERIES: Family = Family {
    name: "higgsmeter_collector_series",
    kind: Kind::Gauge,
    help: "Series held in memory, by view (source, fleet)",
    unit: "{series}",
    labels: &["view"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_series_budget` (gauge): the series budget, the most series
/// held in all (`processors.higgsmeter.memory_limit_mib` × 1,024, or `max_series`);
/// compare `higgsmeter_collector_series` summed over its views.
pub const COLLECTOR_SERIES_BUDGET: Family = Family {
    name: "higgsmeter_collector_series_budget",
    kind: Kind::Gauge,
    help: "The series budget: the most series held in memory in all (per-source, overflow and fleet)",
    unit: "{series}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_overflow_points_total` (counter): points folded into a
/// source's overflow series (`otel_metric_overflow="true"`) because the source was past
/// its series quota, by metric, with the source's identity labels (`job`, `instance`,
/// `rank`, …): which source's labels ran away. Totals stay exact; label detail is lost.
pub const COLLECTOR_OVERFLOW_POINTS: Family = Family {
    name: "higgsmeter_collector_overflow_points_total",
    kind: Kind::Counter,
    help: "Points folded into a source's overflow series because the source was past its series quota, by metric and source",
    unit: "{point}",
    labels: &["metric"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_exports_total` (counter): requests to the upstream, by
/// exporter (`otlp`, `otlphttp`, `prometheusremotewrite`) and outcome (`ok`,
/// `failed`; every failed attempt, retries and refused requests included).
pub const COLLECTOR_EXPORTS: Family = Family {
    name: "higgsmeter_collector_exports_total",
    kind: Kind::Counter,
    help: "Requests to the upstream (OTLP pushes, remote writes), by exporter and outcome (ok, failed)",
    unit: "{request}",
    labels: &["exporter", "outcome"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_export_queue_depth` (gauge): export requests waiting in the
/// bounded queue, by exporter.
pub const COLLECTOR_EXPORT_QUEUE_DEPTH: Family = Family {
    name: "higgsmeter_collector_export_queue_depth",
    kind: Kind::Gauge,
    help: "Export requests waiting in the bounded queue, by exporter",
    unit: "{request}",
    labels: &["exporter"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_export_dropped_points_total` (counter): points (remote
/// write: samples) of export requests dropped, by exporter and reason: `queue_full`
/// (the export queue was full: the upstream down or slow), `refused` (the upstream
/// refused the request for good: a 4xx other than 408/429, a permanent gRPC status),
/// `rejected` (the rejected part of an OTLP partial success), `shutdown` (the final
/// flush failed), `encode`.
pub const COLLECTOR_EXPORT_DROPPED: Family = Family {
    name: "higgsmeter_collector_export_dropped_points_total",
    kind: Kind::Counter,
    help: "Points of export requests dropped, by exporter and reason (queue_full: the export queue was full; refused: the upstream refused the request for good; rejected: the upstream's partial success; shutdown: the final flush failed; encode)",
    unit: "{point}",
    labels: &["exporter", "reason"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_checkpoints_total` (counter): writes of the aggregation
/// state to its storage directory, by outcome (`ok`, `failed`: a full disk, an I/O
/// error; ingest goes on, and the next write tries again).
pub const COLLECTOR_CHECKPOINTS: Family = Family {
    name: "higgsmeter_collector_checkpoints_total",
    kind: Kind::Counter,
    help: "Writes of the aggregation state to its storage directory, by outcome (ok, failed)",
    unit: "{checkpoint}",
    labels: &["outcome"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_connections_closed_total` (counter): connections a receiver
/// closed before their peer did, by transport and reason (`opening_timeout`: no
/// finished TLS handshake, HTTP/2 preface or first request headers in time;
/// `idle_timeout`: no request for longer than the receiver allows; `shed`: closed,
/// unfinished or idle, to make room for a new connection; `shutdown`: unfinished or
/// idle when the collector stopped).
pub const COLLECTOR_CONNECTIONS_CLOSED: Family = Family {
    name: "higgsmeter_collector_connections_closed_total",
    kind: Kind::Counter,
    help: "Connections a receiver closed: no opening in time, idle too long, shed for a new connection, or unfinished at shutdown; by transport and reason",
    unit: "{connection}",
    labels: &["transport", "reason"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_connections_refused_total` (counter): connections closed at
/// once because a receiver already had `max_connections` open (or the peer its
/// `max_connections_per_peer`), every one of them busy, by transport.
pub const COLLECTOR_CONNECTIONS_REFUSED: Family = Family {
    name: "higgsmeter_collector_connections_refused_total",
    kind: Kind::Counter,
    help: "Connections refused because the receiver (or the peer) had all its connections open and busy, by transport",
    unit: "{connection}",
    labels: &["transport"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_tls_handshakes_failed_total` (counter): TLS handshakes that
/// failed on a TLS-only listener (a plaintext client, an untrusted or missing client
/// certificate, a client that gave up), by listener (`grpc`, `http`, `prometheus`).
pub const COLLECTOR_TLS_HANDSHAKES_FAILED: Family = Family {
    name: "higgsmeter_collector_tls_handshakes_failed_total",
    kind: Kind::Counter,
    help: "TLS handshakes that failed on a TLS-only listener (plaintext client, untrusted or missing client certificate), by listener",
    unit: "{handshake}",
    labels: &["listener"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_spans_received_total` (counter): spans the traces pipeline
/// took in, by transport.
pub const COLLECTOR_SPANS_RECEIVED: Family = Family {
    name: "higgsmeter_collector_spans_received_total",
    kind: Kind::Counter,
    help: "Spans the traces pipeline took in, by transport",
    unit: "{span}",
    labels: &["transport"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_collector_spans_exported_total` (counter): spans the traces pipeline
/// forwarded, by exporter and outcome: `ok` (accepted upstream), `rejected` (the
/// upstream's partial success), `dropped` (refused outright by the upstream, or still
/// queued when shutdown ran out of time).
pub const COLLECTOR_SPANS_EXPORTED: Family = Family {
    name: "higgsmeter_collector_spans_exported_total",
    kind: Kind::Counter,
    help: "Spans the traces pipeline forwarded, by exporter and outcome (ok, rejected upstream, dropped)",
    unit: "{span}",
    labels: &["exporter", "outcome"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// Every family the collector exports about itself or derives for the fleet view.
pub const COLLECTOR_FAMILIES: &[Family] = &[
    WORKER_SOURCES_IN_STATE,
    COLLECTOR_REQUESTS,
    COLLECTOR_REQUESTS_REFUSED,
    COLLECTOR_POINTS_RECEIVED,
    COLLECTOR_POINTS_REFUSED,
    COLLECTOR_SOURCES,
    COLLECTOR_SERIES,
    COLLECTOR_SERIES_BUDGET,
    COLLECTOR_OVERFLOW_POINTS,
    COLLECTOR_EXPORTS,
    COLLECTOR_EXPORT_QUEUE_DEPTH,
    COLLECTOR_EXPORT_DROPPED,
    COLLECTOR_CHECKPOINTS,
    COLLECTOR_CONNECTIONS_CLOSED,
    COLLECTOR_CONNECTIONS_REFUSED,
    COLLECTOR_TLS_HANDSHAKES_FAILED,
    COLLECTOR_SPANS_RECEIVED,
    COLLECTOR_SPANS_EXPORTED,
    JOB_TIME,
    JOB_GOODPUT,
    JOB_BADPUT,
    JOB_GOODPUT_RATIO,
    JOB_DISRUPTIONS,
];
