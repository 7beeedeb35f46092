//! GPU families recorded by the in-process NVML meter (`higgsmeter-nvml`).
//!
//! Two groups: the device readings of the last sample (named after the OpenTelemetry
//! hardware semantic conventions where they define the metric, `hw.gpu.*` extensions
//! of ours where they do not), and the session counters the meter derives from its
//! samples (`hw.gpu.session.*`, after the lab agent's aggregator).
//!
//! # Names
//!
//! [`Family::name`] is, as everywhere in this catalog, the Prometheus exposition name.
//! The OpenTelemetry instrument is registered under the semantic-conventions name with
//! dots (`hw.gpu.utilization`), which [`gpu_instrument_name`] returns; `name` is that with
//! every `.` replaced by `_`, plus `_total` for counters, as the OpenTelemetry-Prometheus
//! compatibility rules make it, so the name is the same in text and OpenMetrics
//! exposition. The collector maps the dotted names to these (`find_instrument`). The
//! SDK's in-process Prometheus endpoint adds no suffix to any name (the activity and
//! engine names carry theirs already), so there the four GPU counters appear without
//! `_total`; scrape the collector for the catalog names.
//!
//! # Labels
//!
//! Every GPU series carries [`GPU_DEVICE_LABELS`]: `hw.type` (always `gpu`), `hw.id`
//! (the device UUID, `GPU-…`), `hw.name` (the product name, e.g. `NVIDIA H200`) and
//! `hw.gpu.index` (the NVML device index, which is the physical index, not the CUDA
//! ordinal after `CUDA_VISIBLE_DEVICES` renumbering). Some families add one more.
//!
//! A reading a device does not support is left out of its family for that device,
//! never reported as 0: a missing series means "unavailable", 0 means "idle".

use crate::{Family, Fleet, Kind};

/// Labels every GPU series carries, in order: `hw.type`, `hw.id`, `hw.name`, `hw.gpu.index`.
pub const GPU_DEVICE_LABELS: &[&str] = &["hw.type", "hw.id", "hw.name", "hw.gpu.index"];

/// `hw_gpu_utilization` (gauge, ratio 0..1; OTel `hw.gpu.utilization`): fraction of the
/// driver's last sample period (1/6 s to 1 s depending on the product) during which one
/// or more kernels ran on the GPU.
///
/// Labels: the device labels and `hw.gpu.task` (always `general`: NVML's compute/graphics
/// utilisation; encoder and decoder are not read).
pub const HW_GPU_UTILIZATION: Family = Family {
    name: "hw_gpu_utilization",
    kind: Kind::Gauge,
    help: "Fraction of time the GPU was executing kernels, over the driver's last sample period",
    unit: "1",
    labels: &["hw.type", "hw.id", "hw.name", "hw.gpu.index", "hw.gpu.task"],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw.gpu.utilization`: the OpenTelemetry instrument name of [`HW_GPU_UTILIZATION`]
/// (what an SDK sends; [`gpu_instrument_name`] returns it too).
pub const HW_GPU_UTILIZATION_INSTRUMENT: &str = "hw.gpu.utilization";

/// `hw_gpu_memory_usage` (gauge, bytes; OTel `hw.gpu.memory.usage`): device memory in
/// use (NVML `used`, which includes the driver's own reservation).
pub const HW_GPU_MEMORY_USAGE: Family = Family {
    name: "hw_gpu_memory_usage",
    kind: Kind::Gauge,
    help: "GPU memory used, in bytes",
    unit: "By",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_memory_limit` (gauge, bytes; OTel `hw.gpu.memory.limit`): total device memory.
pub const HW_GPU_MEMORY_LIMIT: Family = Family {
    name: "hw_gpu_memory_limit",
    kind: Kind::Gauge,
    help: "GPU memory installed, in bytes",
    unit: "By",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_memory_utilization` (gauge, ratio 0..1; OTel `hw.gpu.memory.utilization`):
/// memory used divided by memory installed. (NVML's own "memory utilisation", the
/// fraction of time the memory bus was busy, is not this and is not exported.)
pub const HW_GPU_MEMORY_UTILIZATION: Family = Family {
    name: "hw_gpu_memory_utilization",
    kind: Kind::Gauge,
    help: "Fraction of GPU memory used",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_power` (gauge, watts; OTel `hw.power` with `hw.type=gpu`): the board's power
/// draw as NVML reports it (milliwatt resolution).
pub const HW_POWER: Family = Family {
    name: "hw_power",
    kind: Kind::Gauge,
    help: "Instantaneous power drawn by the GPU board, in watts",
    unit: "W",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_energy_total` (counter, joules; OTel `hw.energy` with `hw.type=gpu`): energy consumed
/// since the driver was last loaded (NVML total energy consumption, Volta and newer).
pub const HW_ENERGY: Family = Family {
    name: "hw_energy_total",
    kind: Kind::Counter,
    help: "Energy consumed by the GPU since the driver was loaded, in joules",
    unit: "J",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_errors_total` (counter; OTel `hw.errors` with `hw.type=gpu`): ECC memory errors since
/// the driver was last loaded (NVML volatile counters).
///
/// Labels: the device labels and `error.type`: `corrected` (single-bit, fixed by ECC) or
/// `uncorrected` (double-bit; the application saw corrupt data or was killed).
pub const HW_ERRORS: Family = Family {
    name: "hw_errors_total",
    kind: Kind::Counter,
    help: "ECC memory errors since the driver was loaded",
    unit: "{error}",
    labels: &["hw.type", "hw.id", "hw.name", "hw.gpu.index", "error.type"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_temperature` (gauge, °C; higgsmeter extension `hw.gpu.temperature`): the GPU
/// die temperature.
pub const HW_GPU_TEMPERATURE: Family = Family {
    name: "hw_gpu_temperature",
    kind: Kind::Gauge,
    help: "GPU die temperature, in degrees Celsius",
    unit: "Cel",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_clock_sm` (gauge, hertz; higgsmeter extension `hw.gpu.clock.sm`): the current
/// streaming-multiprocessor clock (NVML reports MHz; exported in Hz).
pub const HW_GPU_CLOCK_SM: Family = Family {
    name: "hw_gpu_clock_sm",
    kind: Kind::Gauge,
    help: "Current SM clock, in hertz",
    unit: "Hz",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_throttle` (gauge, 0 or 1; higgsmeter extension `hw.gpu.throttle`): whether
/// each clock throttle reason is active.
///
/// Labels: the device labels and `hw.gpu.throttle.reason`, one of
/// [`GPU_THROTTLE_REASONS`]. Every reason is reported on every sample (0 when not
/// active), so `max by (hw_id) (hw_gpu_throttle{hw_gpu_throttle_reason!="gpu_idle"})`
/// tells whether a GPU is being slowed down.
pub const HW_GPU_THROTTLE: Family = Family {
    name: "hw_gpu_throttle",
    kind: Kind::Gauge,
    help: "Whether a clock throttle reason is active (1) or not (0)",
    unit: "1",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.throttle.reason",
    ],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// The values of `hw.gpu.throttle.reason`, NVML's `nvmlClocksThrottleReason*` flags in
/// bit order.
pub const GPU_THROTTLE_REASONS: &[&str] = &[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
];

/// `hw_gpu_process_memory_usage` (gauge, bytes; higgsmeter extension
/// `hw.gpu.process.memory.usage`): GPU memory used by this process on the device, from
/// NVML's list of running compute processes filtered by our PID (0 when the process has
/// no context on the device).
///
/// An out-of-process exporter sees per-device totals; this attributes memory to the
/// worker that holds it. Inside a container without the host PID namespace NVML may list
/// host PIDs, which then never match: the series stays at 0.
pub const HW_GPU_PROCESS_MEMORY_USAGE: Family = Family {
    name: "hw_gpu_process_memory_usage",
    kind: Kind::Gauge,
    help: "GPU memory used by this process, in bytes",
    unit: "By",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_session_active_time_total` (counter, seconds; higgsmeter extension
/// `hw.gpu.session.active_time`): seconds the GPU was active (utilisation above the
/// meter's threshold, default 5 %) since the meter started, split by the worker's state
/// at sampling time.
///
/// Labels: the device labels and `state`: the activity state (idle, io, cpu, gpu,
/// warmup, startup, shutdown: the names of [`STATES`](crate::STATES)), or `unknown`
/// when the meter has no state source (a meter started without the SDK's tracker) or
/// the source panicked, or `other` for time whose state did not fit in the meter's
/// bound of 16 distinct `state` values per device (a custom state source can report
/// any name). Each sampling interval (measured, not nominal) is attributed whole to
/// the reading and the state at its end, so a transition is misattributed by at most
/// one interval.
pub const HW_GPU_SESSION_ACTIVE_TIME: Family = Family {
    name: "hw_gpu_session_active_time_total",
    kind: Kind::Counter,
    help: "Seconds the GPU was active since the meter started, by worker state at sampling time",
    unit: "s",
    labels: &["hw.type", "hw.id", "hw.name", "hw.gpu.index", "state"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_session_utilization_peak` (gauge, ratio 0..1; higgsmeter extension
/// `hw.gpu.session.utilization.peak`): highest utilisation sampled since the meter started.
pub const HW_GPU_SESSION_UTILIZATION_PEAK: Family = Family {
    name: "hw_gpu_session_utilization_peak",
    kind: Kind::Gauge,
    help: "Highest GPU utilization sampled since the meter started",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_session_memory_usage_peak` (gauge, bytes; higgsmeter extension
/// `hw.gpu.session.memory.usage.peak`): highest device memory used, sampled since the
/// meter started.
pub const HW_GPU_SESSION_MEMORY_USAGE_PEAK: Family = Family {
    name: "hw_gpu_session_memory_usage_peak",
    kind: Kind::Gauge,
    help: "Highest GPU memory used, sampled since the meter started, in bytes",
    unit: "By",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_session_samples_total` (counter; higgsmeter extension `hw.gpu.session.samples`):
/// samples of the device that had a utilisation reading.
pub const HW_GPU_SESSION_SAMPLES: Family = Family {
    name: "hw_gpu_session_samples_total",
    kind: Kind::Counter,
    help: "Samples of the GPU with a utilization reading since the meter started",
    unit: "{sample}",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_session_time_to_first_active` (gauge, seconds; higgsmeter extension
/// `hw.gpu.session.time_to_first_active`): seconds from the meter's start to the first
/// sample with the GPU active. Absent until that sample.
pub const HW_GPU_SESSION_TIME_TO_FIRST_ACTIVE: Family = Family {
    name: "hw_gpu_session_time_to_first_active",
    kind: Kind::Gauge,
    help: "Seconds from the meter's start to the first sample with the GPU active",
    unit: "s",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// Every GPU family the NVML meter exports.
pub const GPU_FAMILIES: &[Family] = &[
    HW_GPU_UTILIZATION,
    HW_GPU_MEMORY_USAGE,
    HW_GPU_MEMORY_LIMIT,
    HW_GPU_MEMORY_UTILIZATION,
    HW_POWER,
    HW_ENERGY,
    HW_ERRORS,
    HW_GPU_TEMPERATURE,
    HW_GPU_CLOCK_SM,
    HW_GPU_THROTTLE,
    HW_GPU_PROCESS_MEMORY_USAGE,
    HW_GPU_SESSION_ACTIVE_TIME,
    HW_GPU_SESSION_UTILIZATION_PEAK,
    HW_GPU_SESSION_MEMORY_USAGE_PEAK,
    HW_GPU_SESSION_SAMPLES,
    HW_GPU_SESSION_TIME_TO_FIRST_ACTIVE,
];

/// The OpenTelemetry instrument name of each GPU family, in [`GPU_FAMILIES`] order.
pub(crate) const GPU_INSTRUMENT_NAMES: &[&str] = &[
    HW_GPU_UTILIZATION_INSTRUMENT,
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
    "hw.gpu.memory.utilization",
    "hw.power",
    "hw.energy",
    "hw.errors",
    "hw.gpu.temperature",
    "hw.gpu.clock.sm",
    "hw.gpu.throttle",
    "hw.gpu.process.memory.usage",
    "hw.gpu.session.active_time",
    "hw.gpu.session.utilization.peak",
    "hw.gpu.session.memory.usage.peak",
    "hw.gpu.session.samples",
    "hw.gpu.session.time_to_first_active",
];

/// The OpenTelemetry instrument name (semantic-conventions style, dotted) of a GPU
/// family, e.g. `hw.gpu.utilization` for [`HW_GPU_UTILIZATION`]; `None` for a family
/// that is not in [`GPU_FAMILIES`].
///
/// ```
/// use higgsmeter_catalog::{gpu_instrument_name, HW_POWER, WORKER_CURRENT_STATE};
///
/// assert_eq!(gpu_instrument_name(&HW_POWER), Some("hw.power"));
/// assert_eq!(gpu_instrument_name(&WORKER_CURRENT_STATE), None);
/// ```
pub fn gpu_instrument_name(family: &Family) -> Option<&'static str> {
    GPU_FAMILIES
        .iter()
        .zip(GPU_INSTRUMENT_NAMES)
        .find(|(f, _)| f.name == family.name)
        .map(|(_, otel)| *otel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_an_instrument_name_that_maps_to_its_prometheus_name() {
        assert_eq!(GPU_FAMILIES.len(), GPU_INSTRUMENT_NAMES.len());
        for (family, otel) in GPU_FAMILIES.iter().zip(GPU_INSTRUMENT_NAMES) {
            assert_eq!(gpu_instrument_name(family), Some(*otel));
            let mut prom = otel.replace('.', "_");
            if family.kind == Kind::Counter {
                prom.push_str("_total");
            }
            assert_eq!(prom, family.name, "{otel} does not map to {}", family.name);
            assert!(
                family.labels.starts_with(GPU_DEVICE_LABELS),
                "{}",
                family.name
            );
            assert!(!family.unit.is_empty(), "{} has no unit", family.name);
        }
    }
}
