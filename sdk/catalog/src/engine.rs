//! The serving engine's catalog (`mstar.observability.catalog`), exactly as the seed lists it.
//!
//! Metric families whose values come from a process other than the API server.
//! Dependency-free, so the conductor and workers can use it: they record by these
//! names, and the API server builds the Prometheus families from the same entries, so
//! the names cannot drift. `model_name` is added by the API server and is not listed
//! in `labels`.

use crate::{Family, Fleet, Kind};

/// How often the conductor sends its status message while metrics are on, in seconds.
///
/// higgsmeter's default OTLP export interval matches it.
pub const STATUS_INTERVAL_S: f64 = 1.0;

/// The `src`/`dst` of a tensor edge into or out of the graph where the data worker (a
/// thread of the API server) sends the request's inputs and reads its results. Every
/// other endpoint is a graph node name.
pub const TRANSFER_API_SERVER: &str = "api_server";

/// The `state` label values of [`MSTAR_CONDUCTOR_REQUESTS`].
///
/// - `waiting`: queued at `max_concurrent_requests`, not dispatched yet.
/// - `running`: dispatched to workers and not finished.
/// - `draining`: finished (completed, aborted or failed) and waiting for every reader
///   to release its outputs before the workers free its state; it still counts toward
///   `max_concurrent_requests`.
pub const CONDUCTOR_REQUEST_STATES: [&str; 3] = ["waiting", "running", "draining"];

/// `mstar_batch_size` (histogram): Engine steps: rows the step's forward ran.
pub const MSTAR_BATCH_SIZE: Family = Family {
    name: "mstar_batch_size",
    kind: Kind::Histogram,
    help: "Engine steps: rows the step's forward ran.",
    unit: "{row}",
    labels: &["component", "graph_walk"],
    buckets: &[
        1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
    ],
    fleet: Fleet::Sum,
};

/// `mstar_component_in_flight` (gauge): Running requests with a pass on this graph node that the conductor dispatched and whose completion it has not received yet.
pub const MSTAR_COMPONENT_IN_FLIGHT: Family = Family {
    name: "mstar_component_in_flight",
    kind: Kind::Gauge,
    help: "Running requests with a pass on this graph node that the conductor dispatched and whose completion it has not received yet.",
    unit: "{request}",
    labels: &["component"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_component_pending_steps` (gauge): Requests whose next step on this graph node is ready (its inputs arrived) but not in a running step: waiting for a batch slot, or for the worker to schedule the node.
pub const MSTAR_COMPONENT_PENDING_STEPS: Family = Family {
    name: "mstar_component_pending_steps",
    kind: Kind::Gauge,
    help: "Requests whose next step on this graph node is ready (its inputs arrived) but not in a running step: waiting for a batch slot, or for the worker to schedule the node.",
    unit: "{request}",
    labels: &["component"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_conductor_requests` (gauge): Requests the conductor holds, by state.
pub const MSTAR_CONDUCTOR_REQUESTS: Family = Family {
    name: "mstar_conductor_requests",
    kind: Kind::Gauge,
    help: "Requests the conductor holds, by state.",
    unit: "{request}",
    labels: &["state"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_kv_pages_cached` (gauge): Pages of a paged KV cache its prefix cache names, including pages running requests also hold; the cache frees the others on demand.
pub const MSTAR_KV_PAGES_CACHED: Family = Family {
    name: "mstar_kv_pages_cached",
    kind: Kind::Gauge,
    help: "Pages of a paged KV cache its prefix cache names, including pages running requests also hold; the cache frees the others on demand.",
    unit: "{page}",
    labels: &["component", "resource"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_kv_pages_total` (gauge): Pages of a paged KV cache that requests can hold.
pub const MSTAR_KV_PAGES_TOTAL: Family = Family {
    name: "mstar_kv_pages_total",
    kind: Kind::Gauge,
    help: "Pages of a paged KV cache that requests can hold.",
    unit: "{page}",
    labels: &["component", "resource"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_kv_pages_used` (gauge): Pages of a paged KV cache not on its free list: held by requests, or kept by the prefix cache (see mstar_kv_pages_cached).
pub const MSTAR_KV_PAGES_USED: Family = Family {
    name: "mstar_kv_pages_used",
    kind: Kind::Gauge,
    help: "Pages of a paged KV cache not on its free list: held by requests, or kept by the prefix cache (see mstar_kv_pages_cached).",
    unit: "{page}",
    labels: &["component", "resource"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_prefix_cache_hit_tokens_total` (counter): Prompt tokens the prefix cache already held at that lookup.
pub const MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL: Family = Family {
    name: "mstar_prefix_cache_hit_tokens_total",
    kind: Kind::Counter,
    help: "Prompt tokens the prefix cache already held at that lookup.",
    unit: "{token}",
    labels: &["component"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_prefix_cache_query_tokens_total` (counter): Prompt tokens looked up in the prefix cache, once per request.
pub const MSTAR_PREFIX_CACHE_QUERY_TOKENS_TOTAL: Family = Family {
    name: "mstar_prefix_cache_query_tokens_total",
    kind: Kind::Counter,
    help: "Prompt tokens looked up in the prefix cache, once per request.",
    unit: "{token}",
    labels: &["component"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_step_seconds` (histogram): Engine steps: from the later of the step's hand-off to the GPU thread and the end of the worker's previous step, to the end of this step's postprocess. In steady state, the interval between step completions.
pub const MSTAR_STEP_SECONDS: Family = Family {
    name: "mstar_step_seconds",
    kind: Kind::Histogram,
    help: "Engine steps: from the later of the step's hand-off to the GPU thread and the end of the worker's previous step, to the end of this step's postprocess. In steady state, the interval between step completions.",
    unit: "s",
    labels: &["component", "graph_walk"],
    buckets: &[
        0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
        0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ],
    fleet: Fleet::Sum,
};

/// `mstar_transfer_bytes_total` (counter): Tensor bytes the consumer read from the producer over this edge.
pub const MSTAR_TRANSFER_BYTES_TOTAL: Family = Family {
    name: "mstar_transfer_bytes_total",
    kind: Kind::Counter,
    help: "Tensor bytes the consumer read from the producer over this edge.",
    unit: "By",
    labels: &["src", "dst", "transport"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `mstar_transfer_seconds` (histogram): Consumer-side time to read one edge's tensors from the producer (one observation per edge read; the producer's own write or registration is not included).
pub const MSTAR_TRANSFER_SECONDS: Family = Family {
    name: "mstar_transfer_seconds",
    kind: Kind::Histogram,
    help: "Consumer-side time to read one edge's tensors from the producer (one observation per edge read; the producer's own write or registration is not included).",
    unit: "s",
    labels: &["src", "dst", "transport"],
    buckets: &[
        1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ],
    fleet: Fleet::Sum,
};

/// `mstar_transfers_total` (counter): Tensors the consumer read from the producer over this edge.
pub const MSTAR_TRANSFERS_TOTAL: Family = Family {
    name: "mstar_transfers_total",
    kind: Kind::Counter,
    help: "Tensors the consumer read from the producer over this edge.",
    unit: "{tensor}",
    labels: &["src", "dst", "transport"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// Families the engine workers report to the conductor (`WorkerStatus`); the conductor
/// sums the workers' series and forwards them in its status message.
pub const WORKER_FAMILIES: &[Family] = &[
    MSTAR_BATCH_SIZE,
    MSTAR_COMPONENT_PENDING_STEPS,
    MSTAR_KV_PAGES_CACHED,
    MSTAR_KV_PAGES_TOTAL,
    MSTAR_KV_PAGES_USED,
    MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL,
    MSTAR_PREFIX_CACHE_QUERY_TOKENS_TOTAL,
    MSTAR_STEP_SECONDS,
    MSTAR_TRANSFER_BYTES_TOTAL,
    MSTAR_TRANSFER_SECONDS,
    MSTAR_TRANSFERS_TOTAL,
];

/// Families the conductor's status message carries, exported from the latest message.
pub const STATUS_FAMILIES: &[Family] = &[
    MSTAR_BATCH_SIZE,
    MSTAR_COMPONENT_IN_FLIGHT,
    MSTAR_COMPONENT_PENDING_STEPS,
    MSTAR_CONDUCTOR_REQUESTS,
    MSTAR_KV_PAGES_CACHED,
    MSTAR_KV_PAGES_TOTAL,
    MSTAR_KV_PAGES_USED,
    MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL,
    MSTAR_PREFIX_CACHE_QUERY_TOKENS_TOTAL,
    MSTAR_STEP_SECONDS,
    MSTAR_TRANSFER_BYTES_TOTAL,
    MSTAR_TRANSFER_SECONDS,
    MSTAR_TRANSFERS_TOTAL,
];
