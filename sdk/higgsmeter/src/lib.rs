//! Where a GPU worker's wall-clock time goes, as OpenTelemetry metrics.
//!
//! A worker is always in exactly one of seven [`AppState`]s (idle, io, cpu, gpu,
//! warmup, startup, shutdown), with an operation label. States are `tracing` spans —
//! [`Tracker::scope`], [`#[track_state]`](track_state), or any span of yours with a
//! `state` field — and the [`ActivityLayer`] accounts them exactly: over any interval
//! the seconds exported under `worker_activity_time_seconds_total{state, operation}`
//! sum to the wall-clock seconds elapsed, across threads, async tasks, panics and
//! exports taken mid-state. `worker_current_state` carries the state's code. This is
//! the Rust, OpenTelemetry-native successor of the Python `higgsmeter` package, with
//! the same metric names, labels and codes.
//!
//! # Quick start
//!
//! ```no_run
//! use higgsmeter::{AppState, enable_tracker, state_tracker, track_state};
//!
//! #[track_state(AppState::Io)] // operation = "download_data"
//! fn download_data(url: &str) { /* ... */ }
//!
//! # fn run_inference() {}
//! # fn main() -> Result<(), higgsmeter::Error> {
//! // OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, Prometheus when
//! // HIGGSMETER_PROMETHEUS_ADDR is; flushes and shuts down when dropped.
//! let _telemetry = higgsmeter::init()?;
//! enable_tracker(0); // optional: the seed's rank-0-only mode
//!
//! state_tracker().set_state(AppState::Idle, "waiting_for_work");
//! {
//!     let _gpu = state_tracker().scope(AppState::Gpu, "inference");
//!     run_inference();
//! } // back to idle
//! download_data("s3://bucket/key");
//! state_tracker().set_state(AppState::Shutdown, "");
//! state_tracker().finalize();
//! # Ok(()) }
//! ```
//!
//! Async functions work the same (`#[track_state(AppState::Io)] async fn ...`): the
//! state covers the body's future from its first poll to its completion or drop, its
//! awaits included. To cover a future from its creation instead, instrument it with
//! [`Tracker::span`].
//!
//! # Engine steps, transfers and GPUs
//!
//! The serving engine's catalog families (`mstar_*`, exact names, help, labels and
//! buckets from `higgsmeter-catalog`) are recorded by spans the same layer accounts —
//! [`step_span`] (into `mstar_step_seconds` and `mstar_batch_size` when it closes) and
//! [`transfer_span`] (into `mstar_transfer_seconds`, `mstar_transfers_total`,
//! `mstar_transfer_bytes_total`) — and by typed recorders from [`EngineRecorders`] (KV
//! pages, prefix cache, pending steps, the conductor's gauges), whose labels are checked
//! against the catalog when they are made. With the `nvml` feature, [`init()`] also
//! starts the in-process NVML GPU meter (`higgsmeter-nvml`): GPU gauges, session
//! counters and GPU-active seconds split by the worker's state.
//!
//! # Goodput marks
//!
//! A training worker marks its progress with [`job`]: [`job::record_step`] after each
//! step, [`job::checkpoint_save`] and [`job::checkpoint_restore`] around a checkpoint's
//! save and restore (`io` scopes of their own), [`job::badput`] around custom badput
//! (an evaluation). They are exported as the catalog's `higgsmeter_job_*` gauges, and
//! with the job's identity in the resource (`job.id`, `job.incarnation`, below) the
//! collector derives the job's goodput and its badput by cause, across restarts.
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `otlp` | yes | OTLP push over gRPC (tonic) and HTTP/protobuf; implies `sdk` |
//! | `tls` | yes | TLS for the OTLP push (rustls with aws-lc-rs, no OpenSSL): `https://` endpoints and the certificate variables; implies `otlp` |
//! | `prometheus` | yes | the in-process Prometheus endpoint; implies `sdk` |
//! | `sdk` | via the above | [`init()`], [`Telemetry`]: the OpenTelemetry SDK wiring |
//! | `traces` | yes | with `OTEL_TRACES_EXPORTER=otlp`, `init()` exports spans through tracing-opentelemetry over OTLP; implies `otlp` |
//! | `nvml` | no | `init()` starts the in-process NVML GPU meter (`higgsmeter-nvml`): GPU gauges, session counters, GPU-active time by worker state |
//!
//! A library that only instruments depends on `higgsmeter` with
//! `default-features = false`: that pulls `tracing`, `tracing-subscriber`'s registry,
//! the `opentelemetry` API and the catalog, and nothing of the SDK or the network.
//!
//! # Environment variables
//!
//! Read by [`init()`]; builder settings win over them. Each `OTEL_EXPORTER_OTLP_*`
//! variable also has its `OTEL_EXPORTER_OTLP_METRICS_*` form, which wins over it.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` | where to push OTLP; OTLP is on when one is set | off |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` | `grpc` or `http/protobuf` | `http/protobuf` |
//! | `OTEL_EXPORTER_OTLP_HEADERS` | `key=value,...` sent with every export (values URL-encoded: `authorization=Bearer%20<token>`) | none |
//! | `OTEL_EXPORTER_OTLP_CERTIFICATE` | CA certificate(s), PEM, that verify an `https://` endpoint (only these) | the system's roots |
//! | `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`, `OTEL_EXPORTER_OTLP_CLIENT_KEY` | a client certificate and its key, PEM, for mutual TLS | none |
//! | `OTEL_METRIC_EXPORT_INTERVAL` | push interval, milliseconds | `1000` (the catalog's `STATUS_INTERVAL_S`) |
//! | `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` | `cumulative`, `delta` or `lowmemory` | `cumulative` |
//! | `OTEL_SERVICE_NAME` | `service.name` | the executable's name |
//! | `OTEL_RESOURCE_ATTRIBUTES` | extra resource attributes, `k=v,...` | none |
//! | `OTEL_SDK_DISABLED` | `true`: track, but export nothing | `false` |
//! | `HIGGSMETER_PROMETHEUS_ADDR` | serve `/metrics` here, e.g. `127.0.0.1:9465` (9464 is the collector's) | off |
//! | `RANK`, `WORLD_SIZE`, `LOCAL_RANK` | resource attributes `rank`, `world_size`, `local_rank` | unset |
//! | `TORCHELASTIC_RUN_ID`, else `HIGGSMETER_JOB_ID` | resource attribute `job.id`, unless `OTEL_RESOURCE_ATTRIBUTES` has one (torchrun's default run id `none` counts as unset) | unset |
//! | `TORCHELASTIC_RESTART_COUNT`, else `HIGGSMETER_JOB_INCARNATION` | resource attribute `job.incarnation`, a whole number ≥ 0, unless `OTEL_RESOURCE_ATTRIBUTES` has one (checked the same) | unset: the collector tells incarnations apart by `service.instance.id` |
//! | `RUST_LOG` | what higgsmeter's own log (stderr) shows, e.g. `warn,higgsmeter=info` | `warn` |
//! | `OTEL_TRACES_EXPORTER` | `otlp`: also export spans (`traces` feature); `none`: don't | off |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | where spans go, used as given | `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended for HTTP), else the exporter's default |
//! | `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` | the spans' protocol | `OTEL_EXPORTER_OTLP_PROTOCOL` |
//! | `OTEL_EXPORTER_OTLP_TRACES_HEADERS` | headers of span exports only (read by the OTLP exporter, with `OTEL_EXPORTER_OTLP_HEADERS`) | none |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | `always_on`, `always_off` (installs no trace layer), `traceidratio`, `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`; the ratio, 0 to 1 | `parentbased_always_on`, ratio 1 |
//! | `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_EXPORT_TIMEOUT` | the batch span processor (read by the OpenTelemetry SDK): spans held (more are dropped and counted), ms between pushes, spans per push, ms per push | 2048, 5000, 512, 30000 |
//!
//! # Traces
//!
//! With traces on, every state scope, `#[track_state]` call, [`step_span`],
//! [`transfer_span`] and span of yours at `INFO` and above becomes one OpenTelemetry span,
//! nested as in the code, under the metrics' resource. A [`StateScope`] guard makes its
//! span the current one on its thread while it lives, so spans opened inside nest under
//! it; in async code, instrument the future instead (the guard is not `Send`):
//!
//! ```no_run
//! use higgsmeter::{AppState, state_tracker};
//! use tracing::Instrument;
//! # async fn fetch() {}
//! # async fn run() {
//! fetch().instrument(state_tracker().span(AppState::Io, "fetch")).await;
//! # }
//! ```
//!
//! Spans leave through a batch processor with a bounded queue: a full queue drops and
//! counts ([`Telemetry::trace_counts`]), it never blocks the worker. The [`Telemetry`]
//! guard exports what is left when it drops. Builder settings:
//! [`TelemetryBuilder::with_traces`] and the `with_traces_*` and
//! `with_otlp_traces_endpoint` setters.
//!
//! # Supported Rust version
//!
//! 1.89 or newer.

mod clock;
mod engine;
mod error;
pub mod fork;
mod intern;
pub mod job;
mod layer;
mod metrics;
mod span;
mod state;
mod tracker;

// The wiring (`sdk`): settings resolved once, then one module per pipeline. A disabled
// pipeline's module is its stand-in under `off/`, which never starts anything.
#[cfg(feature = "sdk")]
mod meter;
#[cfg(feature = "sdk")]
mod pipeline;
#[cfg(feature = "sdk")]
mod settings;
#[cfg(feature = "sdk")]
mod subscriber;
#[cfg(feature = "sdk")]
mod telemetry;

#[cfg(feature = "otlp")]
mod otlp;
#[cfg(all(feature = "sdk", not(feature = "otlp")))]
#[path = "off/otlp.rs"]
mod otlp;

#[cfg(feature = "prometheus")]
mod prom;
#[cfg(all(feature = "sdk", not(feature = "prometheus")))]
#[path = "off/prom.rs"]
mod prom;

#[cfg(feature = "traces")]
mod traces;
#[cfg(all(feature = "sdk", not(feature = "traces")))]
#[path = "off/traces.rs"]
mod traces;

#[cfg(feature = "nvml")]
mod gpu;
#[cfg(all(feature = "sdk", not(feature = "nvml")))]
#[path = "off/gpu.rs"]
mod gpu;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use engine::{
    ConductorRequestsRecorder, CounterRecorder, EngineRecorders, GaugeRecorder, HistogramRecorder,
    KvPagesRecorder, PrefixCacheRecorder, STEP_SPAN_TARGET, StepRecorder, TRANSFER_SPAN_TARGET,
    TransferRecorder, step_span, transfer_span,
};
pub use error::Error;
pub use intern::{MAX_OPERATIONS, OVERFLOW_OPERATION};
pub use layer::ActivityLayer;
pub use metrics::{ActivityInstruments, register_activity_instruments};
#[cfg(feature = "sdk")]
pub use settings::Protocol;
pub use span::{OPERATION_FIELD, STATE_FIELD, STATE_SPAN_TARGET, TRACKER_FIELD};
pub use state::AppState;
#[cfg(feature = "sdk")]
pub use telemetry::{Exports, Telemetry, TelemetryBuilder, init};
#[cfg(feature = "traces")]
pub use traces::{TraceCounts, TraceLayer};
pub use tracker::{
    ScopeId, Snapshot, SnapshotEntry, StateScope, Tracker, enable_tracker, state_tracker,
};

/// The metric catalog (re-exported `higgsmeter-catalog`).
pub use higgsmeter_catalog as catalog;

/// Marks a function as time spent in a worker state; see the crate docs.
///
/// `#[track_state(AppState::Io)]` or `#[track_state(AppState::Io, operation = "s3_get")]`;
/// the operation defaults to the function's name. Works on sync and async functions.
#[doc(inline)]
pub use higgsmeter_macros::track_state;

/// The README's Rust examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// Support for code generated by `#[track_state]`. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use tracing::Instrument;

    use crate::{AppState, StateScope, state_tracker};

    /// A scope of the process-wide tracker.
    #[inline]
    pub fn state_scope(state: AppState, operation: &str) -> StateScope {
        state_tracker().scope(state, operation)
    }

    /// A state span of the process-wide tracker.
    #[inline]
    pub fn state_span(state: AppState, operation: &str) -> tracing::Span {
        state_tracker().span(state, operation)
    }

    /// A state span that no tracker accounts (tracker id 0, which no tracker has): for
    /// bindings that account scopes with [`Tracker::open_scope`](crate::Tracker::open_scope)
    /// and want the span only for traces (the Python package).
    #[inline]
    pub fn untracked_state_span(state: AppState, operation: &str) -> tracing::Span {
        crate::span::state_span(0, state, operation)
    }

    /// Pins a future's output type, so `?` in an instrumented async body infers.
    #[inline]
    pub fn with_output<T, F: core::future::Future<Output = T>>(future: F) -> F {
        future
    }
}
