//! The GPU families as observable OpenTelemetry instruments reading the last snapshot.
//!
//! The callbacks never call NVML: they read what the last sample published, so an
//! export costs a lock and a walk over a few devices, and a slow or hung driver call
//! can never stall the exporter.

use std::any::Any;
use std::sync::Arc;

use higgsmeter_catalog::{
    Family, GPU_DEVICE_LABELS, GPU_ERROR_TYPES, GPU_HEALTH_STATES, GPU_NVLINK_ERROR_TYPES,
    GPU_PROFILING_METRICS, GPU_THROTTLE_REASONS, HW_ENERGY, HW_ERRORS, HW_GPU_CLOCK_MEMORY,
    HW_GPU_CLOCK_SM, HW_GPU_ECC_AGGREGATE_ERRORS, HW_GPU_FAN_SPEED, HW_GPU_IO,
    HW_GPU_MEMORY_COPY_UTILIZATION, HW_GPU_MEMORY_LIMIT, HW_GPU_MEMORY_REMAPPED_ROWS,
    HW_GPU_MEMORY_REMAPPED_ROWS_FAILURE, HW_GPU_MEMORY_REMAPPED_ROWS_PENDING,
    HW_GPU_MEMORY_RETIRED_PAGES, HW_GPU_MEMORY_RETIRED_PAGES_PENDING, HW_GPU_MEMORY_TEMPERATURE,
    HW_GPU_MEMORY_USAGE, HW_GPU_MEMORY_UTILIZATION, HW_GPU_NVLINK_ERRORS, HW_GPU_NVLINK_IO,
    HW_GPU_NVLINK_STATE, HW_GPU_PCIE_LINK_GENERATION, HW_GPU_PCIE_LINK_WIDTH,
    HW_GPU_PERFORMANCE_STATE, HW_GPU_POWER_LIMIT, HW_GPU_PROCESS_MEMORY_USAGE, HW_GPU_PROFILING,
    HW_GPU_SESSION_ACTIVE_TIME, HW_GPU_SESSION_MEMORY_USAGE_PEAK, HW_GPU_SESSION_SAMPLES,
    HW_GPU_SESSION_TIME_TO_FIRST_ACTIVE, HW_GPU_SESSION_UTILIZATION_PEAK, HW_GPU_TEMPERATURE,
    HW_GPU_THROTTLE, HW_GPU_UTILIZATION, HW_GPU_XID_ERRORS, HW_GPU_XID_LAST, HW_POWER, HW_STATUS,
    gpu_instrument_name,
};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use crate::health::health;
use crate::sampler::{DeviceSnapshot, Shared};
use crate::source::THROTTLE_BITS;

/// `hw.type` of every series.
const HW_TYPE_GPU: &str = "gpu";
/// `hw.gpu.task` of utilisation: NVML's compute/graphics utilisation.
const TASK_GENERAL: &str = "general";
/// `hw.gpu.task` of the encoder's utilisation.
const TASK_ENCODER: &str = "encoder";
/// `hw.gpu.task` of the decoder's utilisation.
const TASK_DECODER: &str = "decoder";
/// `network.io.direction` values, in the order of the (transmit, receive) readings.
const DIRECTIONS: [&str; 2] = ["transmit", "receive"];
/// `hw.gpu.memory.retirement.cause` values, in the order of the `retired_pages` reading.
const RETIREMENT_CAUSES: [&str; 2] = ["multiple_single_bit", "double_bit"];
/// `hw.gpu.memory.remap.cause` values, in the order of the `remapped_rows` reading.
const REMAP_CAUSES: [&str; 2] = ["correctable", "uncorrectable"];
/// `hw.gpu.xid.code` of the codes beyond the bound.
const XID_OTHER: &str = "other";

/// Keeps the registered instruments alive.
pub(crate) struct GpuInstruments {
    _handles: Vec<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for GpuInstruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuInstruments")
            .field("instruments", &self._handles.len())
            .finish()
    }
}

/// The device labels of one device, in `GPU_DEVICE_LABELS` order.
fn device_attributes(device: &DeviceSnapshot) -> Vec<KeyValue> {
    let values = [
        KeyValue::new(GPU_DEVICE_LABELS[0], HW_TYPE_GPU),
        KeyValue::new(GPU_DEVICE_LABELS[1], device.info.uuid.clone()),
        KeyValue::new(GPU_DEVICE_LABELS[2], device.info.name.clone()),
        KeyValue::new(GPU_DEVICE_LABELS[3], i64::from(device.info.index)),
    ];
    let mut attributes = Vec::with_capacity(GPU_DEVICE_LABELS.len() + 1);
    attributes.extend(values);
    attributes
}

/// The key of a family's label after the device labels.
fn extra_label(family: &Family) -> &'static str {
    family
        .labels
        .get(GPU_DEVICE_LABELS.len())
        .copied()
        .unwrap_or("")
}

/// Calls `observe` for every device of a snapshot that is live (sampled, not stopped).
fn each_device(shared: &Shared, mut observe: impl FnMut(&DeviceSnapshot, &mut Vec<KeyValue>)) {
    let snapshot = shared.lock();
    if !snapshot.sampled || snapshot.stopped {
        return;
    }
    for device in &snapshot.devices {
        let mut attributes = device_attributes(device);
        observe(device, &mut attributes);
    }
}

/// Calls `observe` with the device's attributes plus `key=value`.
fn with_extra<T>(
    observer: &dyn AsyncInstrument<T>,
    attributes: &mut Vec<KeyValue>,
    key: &'static str,
    value: &'static str,
    measurement: T,
) {
    attributes.push(KeyValue::new(key, value));
    observer.observe(measurement, attributes);
    attributes.pop();
}

fn name(family: &Family) -> &'static str {
    gpu_instrument_name(family).unwrap_or(family.name)
}

/// Registers every GPU family on `meter`, reading `shared`.
pub(crate) fn register(meter: &Meter, shared: &Arc<Shared>) -> GpuInstruments {
    let mut handles: Vec<Box<dyn Any + Send + Sync>> = Vec::new();

    macro_rules! observable {
        ($builder:ident, $family:expr, |$device:ident, $attributes:ident, $observer:ident| $body:block) => {{
            let shared = Arc::clone(shared);
            let family: &Family = &$family;
            handles.push(Box::new(
                meter
                    .$builder(name(family))
                    .with_description(family.help)
                    .with_unit(family.unit)
                    .with_callback(move |$observer| {
                        each_device(&shared, |$device, $attributes| $body)
                    })
                    .build(),
            ));
        }};
    }

    observable!(
        f64_observable_gauge,
        HW_GPU_UTILIZATION,
        |device, attributes, observer| {
            let key = extra_label(&HW_GPU_UTILIZATION);
            let r = &device.readings;
            for (task, util) in [
                (TASK_GENERAL, r.utilization),
                (TASK_ENCODER, r.encoder),
                (TASK_DECODER, r.decoder),
            ] {
                if let Some(util) = util {
                    with_extra(observer, attributes, key, task, util);
                }
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_USAGE,
        |device, attributes, observer| {
            if let Some(memory) = device.readings.memory {
                observer.observe(memory.used, attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_LIMIT,
        |device, attributes, observer| {
            if let Some(memory) = device.readings.memory {
                observer.observe(memory.total, attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_MEMORY_UTILIZATION,
        |device, attributes, observer| {
            if let Some(memory) = device.readings.memory.filter(|m| m.total > 0) {
                observer.observe(memory.used as f64 / memory.total as f64, attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_POWER,
        |device, attributes, observer| {
            if let Some(watts) = device.readings.power {
                observer.observe(watts, attributes);
            }
        }
    );
    observable!(
        f64_observable_counter,
        HW_ENERGY,
        |device, attributes, observer| {
            if let Some(joules) = device.readings.energy {
                observer.observe(joules, attributes);
            }
        }
    );
    observable!(
        u64_observable_counter,
        HW_ERRORS,
        |device, attributes, observer| {
            let key = extra_label(&HW_ERRORS);
            if let Some((corrected, uncorrected)) = device.readings.ecc {
                with_extra(observer, attributes, key, GPU_ERROR_TYPES[0], corrected);
                with_extra(observer, attributes, key, GPU_ERROR_TYPES[1], uncorrected);
            }
            if let Some(replays) = device.readings.pcie_replay {
                with_extra(observer, attributes, key, GPU_ERROR_TYPES[2], replays);
            }
        }
    );
    observable!(
        i64_observable_gauge,
        HW_GPU_TEMPERATURE,
        |device, attributes, observer| {
            if let Some(celsius) = device.readings.temperature {
                observer.observe(i64::from(celsius), attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_CLOCK_SM,
        |device, attributes, observer| {
            if let Some(hertz) = device.readings.sm_clock {
                observer.observe(hertz, attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_THROTTLE,
        |device, attributes, observer| {
            if let Some(bits) = device.readings.throttle {
                let key = extra_label(&HW_GPU_THROTTLE);
                for (reason, bit) in GPU_THROTTLE_REASONS.iter().zip(THROTTLE_BITS) {
                    with_extra(
                        observer,
                        attributes,
                        key,
                        reason,
                        u64::from(bits & bit != 0),
                    );
                }
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_PROCESS_MEMORY_USAGE,
        |device, attributes, observer| {
            if let Some(bytes) = device.readings.process_memory {
                observer.observe(bytes, attributes);
            }
        }
    );
    observable!(
        f64_observable_counter,
        HW_GPU_SESSION_ACTIVE_TIME,
        |device, attributes, observer| {
            let key = extra_label(&HW_GPU_SESSION_ACTIVE_TIME);
            for (state, seconds) in &device.session.active_seconds {
                with_extra(observer, attributes, key, state, *seconds);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_SESSION_UTILIZATION_PEAK,
        |device, attributes, observer| {
            if let Some(peak) = device.session.utilization_peak {
                observer.observe(peak, attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_SESSION_MEMORY_USAGE_PEAK,
        |device, attributes, observer| {
            if let Some(peak) = device.session.memory_peak {
                observer.observe(peak, attributes);
            }
        }
    );
    observable!(
        u64_observable_counter,
        HW_GPU_SESSION_SAMPLES,
        |device, attributes, observer| {
            observer.observe(device.session.samples, attributes);
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_SESSION_TIME_TO_FIRST_ACTIVE,
        |device, attributes, observer| {
            if let Some(seconds) = device.session.time_to_first_active {
                observer.observe(seconds, attributes);
            }
        }
    );

    observable!(
        u64_observable_counter,
        HW_GPU_ECC_AGGREGATE_ERRORS,
        |device, attributes, observer| {
            if let Some((corrected, uncorrected)) = device.readings.ecc_aggregate {
                let key = extra_label(&HW_GPU_ECC_AGGREGATE_ERRORS);
                with_extra(observer, attributes, key, GPU_ERROR_TYPES[0], corrected);
                with_extra(observer, attributes, key, GPU_ERROR_TYPES[1], uncorrected);
            }
        }
    );
    observable!(
        u64_observable_counter,
        HW_GPU_XID_ERRORS,
        |device, attributes, observer| {
            if device.xid.supported {
                let key = extra_label(&HW_GPU_XID_ERRORS);
                for (code, count) in &device.xid.by_code {
                    attributes.push(KeyValue::new(key, code.to_string()));
                    observer.observe(*count, attributes);
                    attributes.pop();
                }
                if device.xid.other > 0 {
                    with_extra(observer, attributes, key, XID_OTHER, device.xid.other);
                }
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_XID_LAST,
        |device, attributes, observer| {
            if device.xid.supported {
                observer.observe(device.xid.last.unwrap_or(0), attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_RETIRED_PAGES,
        |device, attributes, observer| {
            if let Some((sbe, dbe)) = device.readings.retired_pages {
                let key = extra_label(&HW_GPU_MEMORY_RETIRED_PAGES);
                with_extra(observer, attributes, key, RETIREMENT_CAUSES[0], sbe);
                with_extra(observer, attributes, key, RETIREMENT_CAUSES[1], dbe);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_RETIRED_PAGES_PENDING,
        |device, attributes, observer| {
            if let Some(pending) = device.readings.retired_pages_pending {
                observer.observe(u64::from(pending), attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_REMAPPED_ROWS,
        |device, attributes, observer| {
            if let Some((correctable, uncorrectable)) = device.readings.remapped_rows {
                let key = extra_label(&HW_GPU_MEMORY_REMAPPED_ROWS);
                with_extra(observer, attributes, key, REMAP_CAUSES[0], correctable);
                with_extra(observer, attributes, key, REMAP_CAUSES[1], uncorrectable);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_REMAPPED_ROWS_PENDING,
        |device, attributes, observer| {
            if let Some(pending) = device.readings.remap_pending {
                observer.observe(u64::from(pending), attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_MEMORY_REMAPPED_ROWS_FAILURE,
        |device, attributes, observer| {
            if let Some(failure) = device.readings.remap_failure {
                observer.observe(u64::from(failure), attributes);
            }
        }
    );
    observable!(
        u64_observable_counter,
        HW_GPU_IO,
        |device, attributes, observer| {
            if let Some((tx, rx)) = device.readings.pcie_bytes {
                let key = extra_label(&HW_GPU_IO);
                with_extra(observer, attributes, key, DIRECTIONS[0], tx);
                with_extra(observer, attributes, key, DIRECTIONS[1], rx);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_PCIE_LINK_GENERATION,
        |device, attributes, observer| {
            if let Some(generation) = device.readings.pcie_link_generation {
                observer.observe(u64::from(generation), attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_PCIE_LINK_WIDTH,
        |device, attributes, observer| {
            if let Some(width) = device.readings.pcie_link_width {
                observer.observe(u64::from(width), attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_NVLINK_STATE,
        |device, attributes, observer| {
            let key = extra_label(&HW_GPU_NVLINK_STATE);
            for link in &device.readings.nvlinks {
                if let Some(up) = link.up {
                    attributes.push(KeyValue::new(key, i64::from(link.link)));
                    observer.observe(u64::from(up), attributes);
                    attributes.pop();
                }
            }
        }
    );
    observable!(
        u64_observable_counter,
        HW_GPU_NVLINK_IO,
        |device, attributes, observer| {
            let link_key = extra_label(&HW_GPU_NVLINK_IO);
            let direction_key = HW_GPU_NVLINK_IO.labels.last().copied().unwrap_or("");
            for link in &device.readings.nvlinks {
                if let Some((tx, rx)) = link.bytes {
                    attributes.push(KeyValue::new(link_key, i64::from(link.link)));
                    with_extra(observer, attributes, direction_key, DIRECTIONS[0], tx);
                    with_extra(observer, attributes, direction_key, DIRECTIONS[1], rx);
                    attributes.pop();
                }
            }
        }
    );
    observable!(
        u64_observable_counter,
        HW_GPU_NVLINK_ERRORS,
        |device, attributes, observer| {
            let link_key = extra_label(&HW_GPU_NVLINK_ERRORS);
            let type_key = HW_GPU_NVLINK_ERRORS.labels.last().copied().unwrap_or("");
            for link in &device.readings.nvlinks {
                attributes.push(KeyValue::new(link_key, i64::from(link.link)));
                for (kind, count) in GPU_NVLINK_ERROR_TYPES.iter().zip(link.errors) {
                    if let Some(count) = count {
                        with_extra(observer, attributes, type_key, kind, count);
                    }
                }
                attributes.pop();
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_MEMORY_COPY_UTILIZATION,
        |device, attributes, observer| {
            if let Some(util) = device.readings.memory_copy {
                observer.observe(util, attributes);
            }
        }
    );
    observable!(
        i64_observable_gauge,
        HW_GPU_MEMORY_TEMPERATURE,
        |device, attributes, observer| {
            if let Some(celsius) = device.readings.memory_temperature {
                observer.observe(celsius, attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_CLOCK_MEMORY,
        |device, attributes, observer| {
            if let Some(hertz) = device.readings.memory_clock {
                observer.observe(hertz, attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_POWER_LIMIT,
        |device, attributes, observer| {
            if let Some(watts) = device.readings.power_limit {
                observer.observe(watts, attributes);
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_GPU_PERFORMANCE_STATE,
        |device, attributes, observer| {
            if let Some(state) = device.readings.performance_state {
                observer.observe(u64::from(state), attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_FAN_SPEED,
        |device, attributes, observer| {
            if let Some(speed) = device.readings.fan_speed {
                observer.observe(speed, attributes);
            }
        }
    );
    observable!(
        f64_observable_gauge,
        HW_GPU_PROFILING,
        |device, attributes, observer| {
            let key = extra_label(&HW_GPU_PROFILING);
            for (metric, value) in GPU_PROFILING_METRICS.iter().zip(device.readings.profiling) {
                if let Some(value) = value {
                    with_extra(observer, attributes, key, metric, value);
                }
            }
        }
    );
    observable!(
        u64_observable_gauge,
        HW_STATUS,
        |device, attributes, observer| {
            let key = extra_label(&HW_STATUS);
            let now = health(&device.readings, &device.xid) as usize;
            for (at, state) in GPU_HEALTH_STATES.iter().enumerate() {
                with_extra(observer, attributes, key, state, u64::from(at == now));
            }
        }
    );

    GpuInstruments { _handles: handles }
}
