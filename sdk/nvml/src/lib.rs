//! An in-process NVML GPU meter: GPU gauges and session counters as OpenTelemetry
//! instruments, for the GPUs this worker process can see.
//!
//! A sampler thread reads every visible GPU through NVML (`nvml-wrapper`) once per
//! interval and publishes a snapshot; observable instruments registered on your
//! [`Meter`](opentelemetry::metrics::Meter) report the last snapshot at each export
//! (they never call NVML themselves). Families, all in `higgsmeter-catalog`:
//!
//! | instrument | unit | what |
//! |---|---|---|
//! | `hw.gpu.utilization` | 1 | busy fraction by `hw.gpu.task`: `general` (kernels), `encoder`, `decoder` |
//! | `hw.gpu.memory.usage` / `.limit` | By | memory used / installed |
//! | `hw.gpu.memory.utilization` | 1 | used / installed |
//! | `hw.gpu.memory.copy_utilization` | 1 | memory read/write busy fraction |
//! | `hw.power` | W | board power draw |
//! | `hw.gpu.power.limit` | W | enforced power limit (extension) |
//! | `hw.energy` | J | energy since driver load (counter) |
//! | `hw.errors` | {error} | `error.type=corrected\|uncorrected` (volatile ECC), `pcie_replay` (counter) |
//! | `hw.gpu.ecc.aggregate_errors` | {error} | lifetime ECC errors by `error.type` (counter, extension) |
//! | `hw.gpu.xid.errors` | {error} | XID errors by `hw.gpu.xid.code`, from NVML's event API (counter, extension) |
//! | `hw.gpu.xid.last` | 1 | last XID code, 0 for none (extension) |
//! | `hw.gpu.memory.retired_pages` / `.pending` | {page} / 1 | retired pages by cause; retirement pending (extension) |
//! | `hw.gpu.memory.remapped_rows` / `.pending` / `.failure` | {row} / 1 / 1 | remapped rows by cause; remap pending; remap failed (extension) |
//! | `hw.gpu.io` | By | PCIe bytes by `network.io.direction` (counter) |
//! | `hw.gpu.pcie.link.generation` / `.width` | 1 / {lane} | current PCIe link (extension) |
//! | `hw.gpu.nvlink.state` | 1 | 1 per NVLink link that is up (extension) |
//! | `hw.gpu.nvlink.io` | By | NVLink data bytes per link and direction (counter, extension) |
//! | `hw.gpu.nvlink.errors` | {error} | NVLink CRC, replay, recovery errors per link (counter, extension) |
//! | `hw.gpu.temperature` / `hw.gpu.memory.temperature` | Cel | die / memory temperature (extension) |
//! | `hw.gpu.clock.sm` / `hw.gpu.clock.memory` | Hz | SM / memory clock (extension) |
//! | `hw.gpu.performance_state` | 1 | P-state, 0 = P0 (extension) |
//! | `hw.gpu.fan.speed` | 1 | first fan's speed, fraction of maximum (extension) |
//! | `hw.gpu.profiling` | 1 | GPM ratios by `hw.gpu.profiling.metric` (Hopper and newer; extension) |
//! | `hw.gpu.throttle` | 1 | 0/1 per `hw.gpu.throttle.reason` (extension) |
//! | `hw.gpu.process.memory.usage` | By | memory used by this process (extension) |
//! | `hw.status` | 1 | health: 1 for the current `hw.state` (`ok`, `degraded`, `failed`) |
//! | `hw.gpu.session.active_time` | s | GPU-active seconds by worker `state` (counter) |
//! | `hw.gpu.session.utilization.peak` | 1 | peak utilisation |
//! | `hw.gpu.session.memory.usage.peak` | By | peak memory used |
//! | `hw.gpu.session.samples` | {sample} | samples with a utilisation reading (counter) |
//! | `hw.gpu.session.time_to_first_active` | s | start to first GPU-active sample |
//!
//! Every series carries `hw.type=gpu`, `hw.id` (UUID), `hw.name` and `hw.gpu.index`.
//! A reading a GPU does not support is left out for that GPU (and logged once), never
//! reported as 0: a missing series is "unavailable", 0 is "idle".
//!
//! XID errors come from NVML's event API: the meter registers every GPU that delivers
//! critical XID events in one event set, and a second thread (`higgsmeter-nvml-xid`)
//! waits on it and counts each event; the sampling tick never waits on events.
//! `hw.status` applies the health rules of the catalog's `HW_STATUS` to each sample.
//! `README.md` beside this crate maps every DCGM-exporter default counter to these
//! families, and `otel-config/rules/` alerts on them.
//!
//! The session counters follow the lab agent's aggregator, with measured intervals:
//! each sample adds the time since the previous sample to GPU-active time if the
//! utilisation is above the threshold (default 5 %), under the worker state at that
//! moment. Attribution granularity is one interval: a state change inside an interval
//! puts that whole interval's GPU time under the state at its end (see
//! [`NvmlMeterBuilder::with_interval`]).
//!
//! # Quick start
//!
//! ```
//! use std::time::Duration;
//! use higgsmeter_nvml::NvmlMeter;
//!
//! let meter = opentelemetry::global::meter("my-worker");
//! let gpus = match NvmlMeter::builder()
//!     .with_interval(Duration::from_secs(1))
//!     .with_active_threshold(5.0)
//!     .with_state_source(|| "gpu")
//!     .start(&meter)
//! {
//!     Ok(gpus) => Some(gpus),
//!     Err(e) => {
//!         // No driver, no GPU: run on without GPU metrics.
//!         eprintln!("GPU metrics off: {e}");
//!         None
//!     }
//! };
//! // ... work; dropping `gpus` stops the sampler.
//! drop(gpus);
//! ```
//!
//! `higgsmeter::init()` does this for you with the `nvml` feature, wiring the state
//! source to its tracker.
//!
//! # Feature flags
//!
//! None. The crate depends on the OpenTelemetry API only (no SDK), `nvml-wrapper`
//! (which loads the driver's library at run time: nothing to link at build time) and
//! `tracing` for its log lines.
//!
//! # Environment variables
//!
//! | variable | effect |
//! |---|---|
//! | `HIGGSMETER_NVML_LIBRARY` | NVML library to load (path or file name); default `libnvidia-ml.so.1`. [`NvmlMeterBuilder::with_library_path`] wins over it. |
//! | `CUDA_VISIBLE_DEVICES` | which GPUs are metered, with CUDA's rules: indices (NVML/PCI bus order) or `GPU-` UUIDs and unique prefixes, up to the first entry naming no GPU; unset = all. [`NvmlMeterBuilder::with_visible_devices`] wins over it. |
//!
//! Supported Rust version: 1.89 or newer.

mod error;
mod events;
mod health;
mod instruments;
mod meter;
mod readings;
mod sampler;
mod session;
mod source;
mod visible;
mod xid;

pub use error::NvmlError;
pub use meter::{
    DEFAULT_ACTIVE_THRESHOLD, DEFAULT_INTERVAL, DEFAULT_LIBRARY, GpuDevice, LIBRARY_ENV,
    MIN_INTERVAL, NvmlMeter, NvmlMeterBuilder,
};
pub use readings::{GpuReading, GpuReadings};
