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
//! engine names carry theirs already), so there the GPU counters appear without
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
/// Labels: the device labels and `hw.gpu.task`: `general` (NVML's compute/graphics
/// utilisation, DCGM's `DCGM_FI_DEV_GPU_UTIL`), `encoder` or `decoder` (the video
/// engines, DCGM's `DCGM_FI_DEV_ENC_UTIL` / `DCGM_FI_DEV_DEC_UTIL`). Sum or average over
/// `hw.gpu.task="general"` only.
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

/// `hw_errors_total` (counter; OTel `hw.errors` with `hw.type=gpu`): errors the GPU
/// reported since the driver was last loaded.
///
/// Labels: the device labels and `error.type`, one of [`GPU_ERROR_TYPES`]:
/// `corrected` (single-bit ECC errors, fixed by ECC; NVML volatile counter),
/// `uncorrected` (double-bit ECC errors; the application saw corrupt data or was killed;
/// NVML volatile counter) or `pcie_replay` (PCIe packets the link had to send again:
/// NVML's PCIe replay counter, DCGM's `DCGM_FI_DEV_PCIE_REPLAY_COUNTER`). ECC counts
/// over the board's lifetime are [`HW_GPU_ECC_AGGREGATE_ERRORS`]; NVLink errors are
/// [`HW_GPU_NVLINK_ERRORS`]; XID errors are [`HW_GPU_XID_ERRORS`].
pub const HW_ERRORS: Family = Family {
    name: "hw_errors_total",
    kind: Kind::Counter,
    help: "Errors the GPU reported since the driver was loaded: ECC corrected, ECC uncorrected, PCIe replays",
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

/// The values of `error.type` in [`HW_ERRORS`].
pub const GPU_ERROR_TYPES: &[&str] = &["corrected", "uncorrected", "pcie_replay"];

/// `hw_gpu_ecc_aggregate_errors_total` (counter; higgsmeter extension
/// `hw.gpu.ecc.aggregate_errors`): ECC memory errors over the board's lifetime (NVML
/// aggregate counters, kept in the infoROM across driver reloads and reboots; DCGM's
/// `DCGM_FI_DEV_ECC_SBE_AGG_TOTAL` / `DCGM_FI_DEV_ECC_DBE_AGG_TOTAL`).
///
/// Labels: the device labels and `error.type`: `corrected` or `uncorrected`.
pub const HW_GPU_ECC_AGGREGATE_ERRORS: Family = Family {
    name: "hw_gpu_ecc_aggregate_errors_total",
    kind: Kind::Counter,
    help: "ECC memory errors over the GPU's lifetime (NVML aggregate counters)",
    unit: "{error}",
    labels: &["hw.type", "hw.id", "hw.name", "hw.gpu.index", "error.type"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_xid_errors_total` (counter; higgsmeter extension `hw.gpu.xid.errors`): XID
/// errors the driver reported for the GPU since the meter started, from NVML's event API
/// (critical XID events; one count per event).
///
/// Labels: the device labels and `hw.gpu.xid.code`, the XID number (e.g. `79`: fallen
/// off the bus; `48`: double-bit ECC; `63`/`64`: row remapping; `74`: NVLink; `94`/`95`:
/// contained/uncontained ECC). Absent for a GPU whose driver does not deliver XID events
/// to this process; no series until the first XID of a code. At most 32 codes per GPU
/// are kept apart; later new codes count under `other`.
pub const HW_GPU_XID_ERRORS: Family = Family {
    name: "hw_gpu_xid_errors_total",
    kind: Kind::Counter,
    help: "XID errors the driver reported for the GPU since the meter started, by XID code",
    unit: "{error}",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.xid.code",
    ],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_xid_last` (gauge; higgsmeter extension `hw.gpu.xid.last`): the code of the last
/// XID error since the meter started, 0 while there was none (DCGM's
/// `DCGM_FI_DEV_XID_ERRORS`). Absent when XID events are not available.
pub const HW_GPU_XID_LAST: Family = Family {
    name: "hw_gpu_xid_last",
    kind: Kind::Gauge,
    help: "Code of the last XID error since the meter started (0: none)",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_memory_retired_pages` (gauge; higgsmeter extension
/// `hw.gpu.memory.retired_pages`): device memory pages the driver has retired (pre-Ampere
/// page retirement; DCGM's `DCGM_FI_DEV_RETIRED_SBE` / `DCGM_FI_DEV_RETIRED_DBE`).
///
/// Labels: the device labels and `hw.gpu.memory.retirement.cause`:
/// `multiple_single_bit` (pages with repeated corrected errors) or `double_bit`.
pub const HW_GPU_MEMORY_RETIRED_PAGES: Family = Family {
    name: "hw_gpu_memory_retired_pages",
    kind: Kind::Gauge,
    help: "GPU memory pages retired by the driver, by cause",
    unit: "{page}",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.memory.retirement.cause",
    ],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_memory_retired_pages_pending` (gauge, 0 or 1; higgsmeter extension
/// `hw.gpu.memory.retired_pages.pending`): 1 when pages wait to be retired at the next
/// driver reload or GPU reset (DCGM's `DCGM_FI_DEV_RETIRED_PENDING`).
pub const HW_GPU_MEMORY_RETIRED_PAGES_PENDING: Family = Family {
    name: "hw_gpu_memory_retired_pages_pending",
    kind: Kind::Gauge,
    help: "Whether memory pages wait to be retired at the next GPU reset (1) or not (0)",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_memory_remapped_rows` (gauge; higgsmeter extension
/// `hw.gpu.memory.remapped_rows`): memory rows remapped to spare rows (Ampere and newer;
/// DCGM's `DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS` /
/// `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`).
///
/// Labels: the device labels and `hw.gpu.memory.remap.cause`: `correctable` or
/// `uncorrectable` (the error that caused the remap).
pub const HW_GPU_MEMORY_REMAPPED_ROWS: Family = Family {
    name: "hw_gpu_memory_remapped_rows",
    kind: Kind::Gauge,
    help: "GPU memory rows remapped to spare rows, by the kind of error that caused it",
    unit: "{row}",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.memory.remap.cause",
    ],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_memory_remapped_rows_pending` (gauge, 0 or 1; higgsmeter extension
/// `hw.gpu.memory.remapped_rows.pending`): 1 when a row remap waits for the next GPU
/// reset (the GPU should be drained and reset).
pub const HW_GPU_MEMORY_REMAPPED_ROWS_PENDING: Family = Family {
    name: "hw_gpu_memory_remapped_rows_pending",
    kind: Kind::Gauge,
    help: "Whether a memory row remap waits for the next GPU reset (1) or not (0)",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_memory_remapped_rows_failure` (gauge, 0 or 1; higgsmeter extension
/// `hw.gpu.memory.remapped_rows.failure`): 1 when a row remap failed (no spare row
/// left: the GPU needs service; DCGM's `DCGM_FI_DEV_ROW_REMAP_FAILURE`).
pub const HW_GPU_MEMORY_REMAPPED_ROWS_FAILURE: Family = Family {
    name: "hw_gpu_memory_remapped_rows_failure",
    kind: Kind::Gauge,
    help: "Whether a memory row remap has failed (1) or not (0)",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_io_total` (counter, bytes; OTel `hw.gpu.io`): bytes the GPU sent and received
/// over PCIe since the driver was loaded (NVML's PCIe byte counters, R535 drivers and
/// newer; DCGM's `DCGM_FI_PROF_PCIE_TX_BYTES` / `DCGM_FI_PROF_PCIE_RX_BYTES`).
///
/// Labels: the device labels and `network.io.direction`: `transmit` or `receive`.
/// NVML says these counters can wrap; a wrap reads as a counter reset, which `rate()`
/// and the collector handle.
pub const HW_GPU_IO: Family = Family {
    name: "hw_gpu_io_total",
    kind: Kind::Counter,
    help: "Bytes the GPU transmitted and received over PCIe since the driver was loaded",
    unit: "By",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "network.io.direction",
    ],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_pcie_link_generation` (gauge; higgsmeter extension
/// `hw.gpu.pcie.link.generation`): the PCIe generation the link runs at now (it drops
/// when idle to save power, and when the link is degraded).
pub const HW_GPU_PCIE_LINK_GENERATION: Family = Family {
    name: "hw_gpu_pcie_link_generation",
    kind: Kind::Gauge,
    help: "Current PCIe link generation of the GPU",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_pcie_link_width` (gauge, lanes; higgsmeter extension `hw.gpu.pcie.link.width`):
/// the PCIe lanes the link uses now.
pub const HW_GPU_PCIE_LINK_WIDTH: Family = Family {
    name: "hw_gpu_pcie_link_width",
    kind: Kind::Gauge,
    help: "Current PCIe link width of the GPU, in lanes",
    unit: "{lane}",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_nvlink_state` (gauge, 0 or 1; higgsmeter extension `hw.gpu.nvlink.state`):
/// whether each NVLink link is up.
///
/// Labels: the device labels and `hw.gpu.nvlink.link`, the link number (0 to the GPU's
/// link count - 1). Absent on GPUs without NVLink.
pub const HW_GPU_NVLINK_STATE: Family = Family {
    name: "hw_gpu_nvlink_state",
    kind: Kind::Gauge,
    help: "Whether an NVLink link is up (1) or down (0)",
    unit: "1",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.nvlink.link",
    ],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_nvlink_io_total` (counter, bytes; higgsmeter extension `hw.gpu.nvlink.io`):
/// data bytes sent and received over each NVLink link (NVML's NVLink data throughput
/// counters, which count KiB; DCGM's `DCGM_FI_PROF_NVLINK_TX_BYTES` /
/// `DCGM_FI_PROF_NVLINK_RX_BYTES`, `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` summed).
///
/// Labels: the device labels, `hw.gpu.nvlink.link` and `network.io.direction`
/// (`transmit` or `receive`).
pub const HW_GPU_NVLINK_IO: Family = Family {
    name: "hw_gpu_nvlink_io_total",
    kind: Kind::Counter,
    help: "Data bytes transmitted and received over an NVLink link",
    unit: "By",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.nvlink.link",
        "network.io.direction",
    ],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_nvlink_errors_total` (counter; higgsmeter extension `hw.gpu.nvlink.errors`):
/// NVLink data-link errors per link.
///
/// Labels: the device labels, `hw.gpu.nvlink.link` and `error.type`: `crc` (flits with
/// a CRC error), `replay` (replays after an error) or `recovery` (link recoveries), DCGM's
/// `DCGM_FI_DEV_NVLINK_{CRC_FLIT,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL` per link.
pub const HW_GPU_NVLINK_ERRORS: Family = Family {
    name: "hw_gpu_nvlink_errors_total",
    kind: Kind::Counter,
    help: "NVLink data-link errors on a link: CRC errors, replays, recoveries",
    unit: "{error}",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.nvlink.link",
        "error.type",
    ],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// The values of `error.type` in [`HW_GPU_NVLINK_ERRORS`].
pub const GPU_NVLINK_ERROR_TYPES: &[&str] = &["crc", "replay", "recovery"];

/// `hw_gpu_memory_copy_utilization` (gauge, ratio 0..1; higgsmeter extension
/// `hw.gpu.memory.copy_utilization`): fraction of the driver's last sample period during
/// which device memory was being read or written (NVML's memory utilisation, DCGM's
/// `DCGM_FI_DEV_MEM_COPY_UTIL`).
pub const HW_GPU_MEMORY_COPY_UTILIZATION: Family = Family {
    name: "hw_gpu_memory_copy_utilization",
    kind: Kind::Gauge,
    help: "Fraction of time GPU memory was being read or written, over the driver's last sample period",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_memory_temperature` (gauge, °C; higgsmeter extension
/// `hw.gpu.memory.temperature`): the device memory (HBM) temperature (DCGM's
/// `DCGM_FI_DEV_MEMORY_TEMP`).
pub const HW_GPU_MEMORY_TEMPERATURE: Family = Family {
    name: "hw_gpu_memory_temperature",
    kind: Kind::Gauge,
    help: "GPU memory temperature, in degrees Celsius",
    unit: "Cel",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_clock_memory` (gauge, hertz; higgsmeter extension `hw.gpu.clock.memory`): the
/// current memory clock (DCGM's `DCGM_FI_DEV_MEM_CLOCK`, which is in MHz).
pub const HW_GPU_CLOCK_MEMORY: Family = Family {
    name: "hw_gpu_clock_memory",
    kind: Kind::Gauge,
    help: "Current memory clock, in hertz",
    unit: "Hz",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_power_limit` (gauge, watts; higgsmeter extension `hw.gpu.power.limit`): the
/// power limit the driver enforces now (NVML enforced power limit; DCGM's
/// `DCGM_FI_DEV_POWER_MGMT_LIMIT`).
pub const HW_GPU_POWER_LIMIT: Family = Family {
    name: "hw_gpu_power_limit",
    kind: Kind::Gauge,
    help: "Power limit the driver enforces on the GPU board, in watts",
    unit: "W",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `hw_gpu_performance_state` (gauge; higgsmeter extension `hw.gpu.performance_state`):
/// the current performance state, 0 (P0, maximum performance) to 15 (P15, minimum)
/// (DCGM's `DCGM_FI_DEV_PSTATE`).
pub const HW_GPU_PERFORMANCE_STATE: Family = Family {
    name: "hw_gpu_performance_state",
    kind: Kind::Gauge,
    help: "Current performance state of the GPU, 0 (P0, maximum performance) to 15 (P15)",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_fan_speed` (gauge, ratio 0..1; higgsmeter extension `hw.gpu.fan.speed`): the
/// intended speed of the board's first fan as a fraction of its maximum (DCGM's
/// `DCGM_FI_DEV_FAN_SPEED`). Absent on boards without fans (most data-centre GPUs).
pub const HW_GPU_FAN_SPEED: Family = Family {
    name: "hw_gpu_fan_speed",
    kind: Kind::Gauge,
    help: "Intended speed of the GPU board's first fan, as a fraction of its maximum",
    unit: "1",
    labels: GPU_DEVICE_LABELS,
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `hw_gpu_profiling` (gauge, ratio 0..1; higgsmeter extension `hw.gpu.profiling`): GPU
/// performance monitoring (GPM) ratios over the last sampling interval, on GPUs with GPM
/// (Hopper and newer); what DCGM calls profiling metrics.
///
/// Labels: the device labels and `hw.gpu.profiling.metric`, one of
/// [`GPU_PROFILING_METRICS`]: `graphics_active` (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`),
/// `sm_active` (`DCGM_FI_PROF_SM_ACTIVE`), `sm_occupancy` (`DCGM_FI_PROF_SM_OCCUPANCY`),
/// `tensor_active` (`DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`) and `dram_active`
/// (`DCGM_FI_PROF_DRAM_ACTIVE`). Absent (not 0) on GPUs without GPM, and until the
/// second sample.
pub const HW_GPU_PROFILING: Family = Family {
    name: "hw_gpu_profiling",
    kind: Kind::Gauge,
    help: "GPU performance monitoring ratios over the last sampling interval: graphics, SM, occupancy, tensor and DRAM activity",
    unit: "1",
    labels: &[
        "hw.type",
        "hw.id",
        "hw.name",
        "hw.gpu.index",
        "hw.gpu.profiling.metric",
    ],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// The values of `hw.gpu.profiling.metric` in [`HW_GPU_PROFILING`], in the order the
/// meter reads them (NVML GPM metrics graphics util, SM util, SM occupancy, any-tensor
/// util, DRAM bandwidth util).
pub const GPU_PROFILING_METRICS: &[&str] = &[
    "graphics_active",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
];

/// `hw_status` (gauge, 0 or 1; OTel `hw.status` with `hw.type=gpu`): the GPU's health,
/// derived by the meter from its readings at every sample: 1 for the current state, 0 for
/// the others.
///
/// Labels: the device labels and `hw.state`, one of [`GPU_HEALTH_STATES`]:
/// - `failed`: NVML reports the GPU lost, or since the meter started an XID 79 (fallen
///   off the bus), 48 (double-bit ECC) or 95 (uncontained ECC) arrived, or a row remap
///   failed, or the volatile uncorrected ECC count is above 0;
/// - `degraded`: not failed, and a row remap or a page retirement is pending, or since
///   the meter started an XID 63/64 (row remap / page retirement event), 74 (NVLink), 92
///   (high single-bit ECC rate), 94 (contained ECC) or 119/120 (GSP) arrived;
/// - `ok`: otherwise.
///
/// A reading the GPU does not support never makes it worse than `ok`. The XID rules
/// are sticky until the worker restarts: the driver needs a GPU reset for them anyway.
pub const HW_STATUS: Family = Family {
    name: "hw_status",
    kind: Kind::Gauge,
    help: "GPU health derived from its error readings: 1 for the current hw.state (ok, degraded, failed), 0 for the others",
    unit: "1",
    labels: &["hw.type", "hw.id", "hw.name", "hw.gpu.index", "hw.state"],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// The values of `hw.state` in [`HW_STATUS`], from healthy to failed.
pub const GPU_HEALTH_STATES: &[&str] = &["ok", "degraded", "failed"];

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
    HW_GPU_ECC_AGGREGATE_ERRORS,
    HW_GPU_XID_ERRORS,
    HW_GPU_XID_LAST,
    HW_GPU_MEMORY_RETIRED_PAGES,
    HW_GPU_MEMORY_RETIRED_PAGES_PENDING,
    HW_GPU_MEMORY_REMAPPED_ROWS,
    HW_GPU_MEMORY_REMAPPED_ROWS_PENDING,
    HW_GPU_MEMORY_REMAPPED_ROWS_FAILURE,
    HW_GPU_IO,
    HW_GPU_PCIE_LINK_GENERATION,
    HW_GPU_PCIE_LINK_WIDTH,
    HW_GPU_NVLINK_STATE,
    HW_GPU_NVLINK_IO,
    HW_GPU_NVLINK_ERRORS,
    HW_GPU_MEMORY_COPY_UTILIZATION,
    HW_GPU_MEMORY_TEMPERATURE,
    HW_GPU_CLOCK_MEMORY,
    HW_GPU_POWER_LIMIT,
    HW_GPU_PERFORMANCE_STATE,
    HW_GPU_FAN_SPEED,
    HW_GPU_PROFILING,
    HW_STATUS,
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
    "hw.gpu.ecc.aggregate_errors",
    "hw.gpu.xid.errors",
    "hw.gpu.xid.last",
    "hw.gpu.memory.retired_pages",
    "hw.gpu.memory.retired_pages.pending",
    "hw.gpu.memory.remapped_rows",
    "hw.gpu.memory.remapped_rows.pending",
    "hw.gpu.memory.remapped_rows.failure",
    "hw.gpu.io",
    "hw.gpu.pcie.link.generation",
    "hw.gpu.pcie.link.width",
    "hw.gpu.nvlink.state",
    "hw.gpu.nvlink.io",
    "hw.gpu.nvlink.errors",
    "hw.gpu.memory.copy_utilization",
    "hw.gpu.memory.temperature",
    "hw.gpu.clock.memory",
    "hw.gpu.power.limit",
    "hw.gpu.performance_state",
    "hw.gpu.fan.speed",
    "hw.gpu.profiling",
    "hw.status",
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
