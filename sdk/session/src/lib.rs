//! The lab session agent: the lab monitoring agent's rolling session counters — time by
//! active-window bucket, GPU activity, time to the first SLEAP process, training
//! progress — as OpenTelemetry metrics and as the allocator's JSON push.
//!
//! A tick thread (every 2 s by default) reads four samplers into a [`Sample`] and
//! applies it to [`SessionCounters`] with exactly the seed's arithmetic
//! (`apply_sample`): the same field names, the same strict 5 % GPU threshold, each
//! sample's own interval, `None` ignored, unknown window buckets counted as `other`.
//! There is no per-sample storage.
//!
//! # Quick start
//!
//! ```
//! use std::time::Duration;
//! use higgsmeter_session::{SessionAgent, TrainingProgress};
//!
//! # fn main() -> Result<(), higgsmeter_session::Error> {
//! let meter = opentelemetry::global::meter("lab-session");
//! let progress = TrainingProgress::new(); // give clones to the training code
//! let agent = SessionAgent::builder()
//!     .with_interval(Duration::from_millis(50)) // default 2 s
//!     .with_training_sampler(progress.clone())
//!     .start(&meter)?; // X11 window, /proc scan for SLEAP; no GPU unless given
//! progress.record_epochs_completed(3);
//! progress.record_loss(0.012);
//! // ... later: the counters as the allocator gets them
//! let json = agent.counters().to_json();
//! assert!(json.contains("\"seconds_in_subject_software\""));
//! # Ok(()) }
//! ```
//!
//! Push the counters to the allocator (every 60 s, retried, and once more on stop):
//!
//! ```no_run
//! # use higgsmeter_session::{Pusher, SessionAgent};
//! # fn main() -> Result<(), higgsmeter_session::Error> {
//! # let agent = SessionAgent::builder().start(&opentelemetry::global::meter("x"))?;
//! let counters = agent.handle();
//! let pusher = Pusher::builder("http://allocator.lab:8000/api/sessions/42/counters")
//!     .start(move || counters.counters())?;
//! // ... on shutdown: one final push of the latest counters, 5 s at most
//! pusher.stop(std::time::Duration::from_secs(5));
//! # Ok(()) }
//! ```
//!
//! Counters aggregated elsewhere (your own sampling loop, or the Python layer's
//! `higgsmeter.lab`) are exported the same way with a [`SessionExport`]: register it on a
//! meter and `publish` the counters after each sample.
//!
//! GPU readings come from an [`NvmlMeter`](higgsmeter_nvml::NvmlMeter) already running in
//! the process — `higgsmeter::init()`'s with the `nvml` feature
//! (`telemetry.gpu_meter()`), or one you start — so NVML is opened once:
//! `.with_gpu_sampler(NvmlGpu::new(meter.readings()))`. That meter exports the GPU
//! session counters itself (`hw.gpu.session.*`).
//!
//! # The counters
//!
//! | field (JSON key) | instrument (Prometheus name) |
//! |---|---|
//! | `session_started_at` | — (ISO 8601) |
//! | `sample_count` | `session.samples` (`session_samples_total`) |
//! | `seconds_in_subject_software`, `_terminal`, `_browser`, `_other` | `session.window.time{session.window.bucket}` (`session_window_time_total`) |
//! | `gpu_active_seconds`, `gpu_util_peak`, `vram_used_peak_mb` | the NVML meter's `hw.gpu.session.*`, per GPU |
//! | `seconds_to_first_sleap_label`, `_train`, `_track` | `session.process.time_to_first_seen{session.process.name}` |
//! | `max_labeled_frames` | `session.training.labeled_frames.max` |
//! | `training_epochs_completed` | `session.training.epochs_completed` |
//! | `training_final_loss` | `session.training.loss` |
//!
//! The families are in `higgsmeter-catalog` (`SESSION_FAMILIES`). The gauges describe
//! one session and do not sum: the collector keeps them per source in its fleet view
//! (a built-in rule, as for the GPU gauges). The JSON's GPU fields
//! follow the seed exactly (each sample's interval, busiest GPU, memory summed over
//! GPUs, MiB); the NVML meter's per-GPU counters use measured intervals and bytes.
//!
//! # Samplers
//!
//! Each is a trait, so tests and other platforms put in their own:
//!
//! - [`WindowSampler`] — [`X11Window`]: the root window's `_NET_ACTIVE_WINDOW`, then its
//!   `WM_CLASS` and `_NET_WM_NAME`, bucketed by [`WindowRule`]s (first match wins;
//!   defaults: SLEAP is `subject`, common terminals and browsers by class). No display
//!   is `other`, logged once.
//! - [`ProcessSampler`] — [`ProcScanner`]: `/proc/*/comm` and `cmdline` against
//!   [`ProcessRule`]s, by default `sleap-label`, `sleap-train` and `sleap-track` (by
//!   name, as a Python script, or by the module they run).
//! - [`GpuSampler`] — [`NvmlGpu`] (the NVML meter's last sample) or [`NoGpu`].
//! - [`TrainingSampler`] — [`TrainingProgress`] (the application calls
//!   `record_labeled_frames`, `record_epochs_completed`, `record_loss`: one atomic
//!   operation each) and [`TrainingLogFollower`] (a CSV training log as it grows).
//!
//! # Formats
//!
//! **Replay samples** (`higgsmeter-session replay`, [`replay()`]): JSON Lines, one
//! [`Sample`] per line with the seed's field names, `null` for `None`, `ts` in ISO 8601
//! (an offset or `Z`; none means UTC), blank lines skipped, unknown fields refused:
//!
//! ```text
//! {"ts": "2025-03-01T09:00:02+00:00", "sample_interval_seconds": 2, "active_window_bucket": "subject", "gpu_util_pct": 37, "vram_mb": 2048, "processes_seen": ["sleap-label"], "max_labeled_frames": 120, "training_epochs_completed": null, "training_final_loss": null}
//! ```
//!
//! The output is one JSON object, [`SessionCounters::to_json`]: the seed's field names
//! in the seed's order, `session_started_at` as Python's `isoformat()` writes it.
//!
//! **Training log** ([`TrainingLogFollower`]): CSV with a header line, e.g. SLEAP's
//! `training_log.csv` (Keras' `CSVLogger`): `epoch,loss,val_loss,...`, one row per
//! finished epoch, `epoch` counted from 0 (so a row with epoch e means e + 1 epochs
//! completed); the loss is the last row's. Column names and the epoch base are
//! settable.
//!
//! # What a crash loses
//!
//! The counters live in memory only. The allocator holds those of the last delivered
//! push, so a crash loses at most one push interval (default 60 s) of counting — more
//! only while pushes are already failing. SIGTERM (and [`Pusher::stop`]) pushes the
//! latest counters before the agent exits. OTLP export likewise loses at most one export
//! interval.
//!
//! # The binary
//!
//! `higgsmeter-session run` samples, exports OTLP from the standard `OTEL_*` variables
//! (as `higgsmeter::init()` reads them), pushes to `--push-url` if given, and on SIGTERM
//! or SIGINT pushes once more and exits. `higgsmeter-session replay --session-started-at
//! ISO --samples FILE.jsonl` prints the counters of a sample file; a malformed line
//! exits non-zero with its line number and prints nothing on stdout. `--help` lists
//! every flag.
//!
//! | variable | meaning |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` (and the other `OTEL_*` of `higgsmeter::init()`) | push OTLP there |
//! | `HIGGSMETER_NVML_LIBRARY`, `CUDA_VISIBLE_DEVICES` | which NVML library and GPUs are read |
//! | `DISPLAY` | the X server whose active window is read |
//! | `RUST_LOG` | log filter on stderr (default `warn`; `info` shows pushes) |
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `cli` | yes | the `higgsmeter-session` binary (pulls the OpenTelemetry SDK through `higgsmeter`, `clap`, `tokio`) |
//!
//! A library that embeds the agent uses `default-features = false`: the OpenTelemetry
//! API, `x11rb`, `reqwest`'s blocking client, `chrono`, `serde`.
//!
//! Supported Rust version: 1.89 or newer.

mod agent;
mod counters;
mod error;
mod export;
mod instruments;
mod iso;
mod push;
mod replay;
mod samplers;
mod shared;

pub use agent::{
    CountersHandle, DEFAULT_TICK_INTERVAL, MIN_TICK_INTERVAL, SessionAgent, SessionAgentBuilder,
};
pub use counters::{
    GPU_ACTIVE_UTIL_THRESHOLD, SLEAP_PROCESSES, SUBJECT_FIELD, Sample, SessionCounters,
    WINDOW_BUCKETS,
};
pub use error::Error;
pub use export::SessionExport;
pub use iso::Timestamp;
pub use push::{
    DEFAULT_FINAL_PUSH_DEADLINE, DEFAULT_INITIAL_BACKOFF, DEFAULT_PUSH_INTERVAL,
    DEFAULT_PUSH_TIMEOUT, Pusher, PusherBuilder,
};
pub use replay::{parse_timestamp, replay};
pub use samplers::{
    DEFAULT_PROCESS_RULES, DEFAULT_WINDOW_RULES, GpuSample, GpuSampler, NoGpu, NvmlGpu,
    ProcScanner, ProcessRule, ProcessSampler, TrainingLogFollower, TrainingProgress,
    TrainingReading, TrainingSampler, WindowBucket, WindowField, WindowRule, WindowSampler,
    X11Window, default_window_rules,
};
