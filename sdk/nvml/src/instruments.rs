//! The GPU families as observable OpenTelemetry instruments reading the last snapshot.
//!
//! The callbacks never call NVML: they read what the last sample published, so an
//! export costs a lock and a walk over a few devices, and a slow or hung driver call
//! can never stall the exporter.
//!
//! [`FAMILIES`] is the registration: one entry per catalog GPU family, in
//! `GPU_FAMILIES` order, saying which instrument it is and how a device's points are
//! read from its snapshot; [`register`] builds one instrument per entry.

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
use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::{KeyValue, Value};

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
    let mut attributes = Vec::with_capacity(GPU_DEVICE_LABELS.len() + 2);
    attributes.extend(values);
    attributes
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

fn name(family: &Family) -> &'static str {
    gpu_instrument_name(family).unwrap_or(family.name)
}

/// One device's points of one family: each carries the device labels, then values for
/// the family's labels after them, in the family's order.
struct Points<'a, T> {
    observer: &'a dyn AsyncInstrument<T>,
    attributes: &'a mut Vec<KeyValue>,
    family: &'static Family,
}

impl<T> Points<'_, T> {
    /// The key of the family's `n`th label after the device labels.
    fn key(&self, n: usize) -> &'static str {
        self.family
            .labels
            .get(GPU_DEVICE_LABELS.len() + n)
            .copied()
            .unwrap_or("")
    }

    /// A point with the device labels only.
    fn observe(&mut self, measurement: T) {
        self.observer.observe(measurement, self.attributes);
    }

    /// A point with the family's label after the device labels set to `value`.
    fn by(&mut self, value: impl Into<Value>, measurement: T) {
        self.attributes.push(KeyValue::new(self.key(0), value));
        self.observer.observe(measurement, self.attributes);
        self.attributes.pop();
    }

    /// A point with the family's two labels after the device labels set to `first` and
    /// `second`.
    fn by_two(&mut self, first: impl Into<Value>, second: impl Into<Value>, measurement: T) {
        self.attributes.push(KeyValue::new(self.key(0), first));
        self.attributes.push(KeyValue::new(self.key(1), second));
        self.observer.observe(measurement, self.attributes);
        self.attributes.truncate(self.attributes.len() - 2);
    }
}

/// Observes one device's points of a family from its snapshot.
type Observe<T> = fn(&DeviceSnapshot, &mut Points<'_, T>);

/// How a family is read: its instrument (value type, and gauge or counter as the
/// catalog's `kind` says) and what it observes of each device.
#[derive(Clone, Copy)]
enum Read {
    F64Gauge(Observe<f64>),
    F64Counter(Observe<f64>),
    U64Gauge(Observe<u64>),
    U64Counter(Observe<u64>),
    I64Gauge(Observe<i64>),
}

impl Read {
    /// Registers `family`'s instrument on `meter`, observing every live device of
    /// `shared` at each export.
    fn register(
        self,
        meter: &Meter,
        family: &'static Family,
        shared: &Arc<Shared>,
    ) -> Box<dyn Any + Send + Sync> {
        macro_rules! build {
            ($builder:ident, $observe:expr) => {{
                let shared = Arc::clone(shared);
                let observe = $observe;
                Box::new(
                    meter
                        .$builder(name(family))
                        .with_description(family.help)
                        .with_unit(family.unit)
                        .with_callback(move |observer| {
                            each_device(&shared, |device, attributes| {
                                observe(
                                    device,
                                    &mut Points {
                                        observer,
                                        attributes,
                                        family,
                                    },
                                );
                            });
                        })
                        .build(),
                )
            }};
        }
        match self {
            Read::F64Gauge(observe) => build!(f64_observable_gauge, observe),
            Read::F64Counter(observe) => build!(f64_observable_counter, observe),
            Read::U64Gauge(observe) => build!(u64_observable_gauge, observe),
            Read::U64Counter(observe) => build!(u64_observable_counter, observe),
            Read::I64Gauge(observe) => build!(i64_observable_gauge, observe),
        }
    }
}

/// Every GPU family and how it is read, in `GPU_FAMILIES` order. A reading that is
/// `None` (the GPU does not support it) gives no point, never 0.
const FAMILIES: &[(&Family, Read)] = &[
    (
        &HW_GPU_UTILIZATION,
        Read::F64Gauge(|device, points| {
            let r = &device.readings;
            for (task, util) in [
                (TASK_GENERAL, r.utilization),
                (TASK_ENCODER, r.encoder),
                (TASK_DECODER, r.decoder),
            ] {
                if let Some(util) = util {
                    points.by(task, util);
                }
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_USAGE,
        Read::U64Gauge(|device, points| {
            if let Some(memory) = device.readings.memory {
                points.observe(memory.used);
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_LIMIT,
        Read::U64Gauge(|device, points| {
            if let Some(memory) = device.readings.memory {
                points.observe(memory.total);
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_UTILIZATION,
        Read::F64Gauge(|device, points| {
            if let Some(memory) = device.readings.memory.filter(|m| m.total > 0) {
                points.observe(memory.used as f64 / memory.total as f64);
            }
        }),
    ),
    (
        &HW_POWER,
        Read::F64Gauge(|device, points| {
            if let Some(watts) = device.readings.power {
                points.observe(watts);
            }
        }),
    ),
    (
        &HW_ENERGY,
        Read::F64Counter(|device, points| {
            if let Some(joules) = device.readings.energy {
                points.observe(joules);
            }
        }),
    ),
    (
        &HW_ERRORS,
        Read::U64Counter(|device, points| {
            if let Some((corrected, uncorrected)) = device.readings.ecc {
                points.by(GPU_ERROR_TYPES[0], corrected);
                points.by(GPU_ERROR_TYPES[1], uncorrected);
            }
            if let Some(replays) = device.readings.pcie_replay {
                points.by(GPU_ERROR_TYPES[2], replays);
            }
        }),
    ),
    (
        &HW_GPU_TEMPERATURE,
        Read::I64Gauge(|device, points| {
            if let Some(celsius) = device.readings.temperature {
                points.observe(i64::from(celsius));
            }
        }),
    ),
    (
        &HW_GPU_CLOCK_SM,
        Read::F64Gauge(|device, points| {
            if let Some(hertz) = device.readings.sm_clock {
                points.observe(hertz);
            }
        }),
    ),
    (
        &HW_GPU_THROTTLE,
        Read::U64Gauge(|device, points| {
            if let Some(bits) = device.readings.throttle {
                for (reason, bit) in GPU_THROTTLE_REASONS.iter().zip(THROTTLE_BITS) {
                    points.by(*reason, u64::from(bits & bit != 0));
                }
            }
        }),
    ),
    (
        &HW_GPU_PROCESS_MEMORY_USAGE,
        Read::U64Gauge(|device, points| {
            if let Some(bytes) = device.readings.process_memory {
                points.observe(bytes);
            }
        }),
    ),
    (
        &HW_GPU_SESSION_ACTIVE_TIME,
        Read::F64Counter(|device, points| {
            for (state, seconds) in &device.session.active_seconds {
                points.by(*state, *seconds);
            }
        }),
    ),
    (
        &HW_GPU_SESSION_UTILIZATION_PEAK,
        Read::F64Gauge(|device, points| {
            if let Some(peak) = device.session.utilization_peak {
                points.observe(peak);
            }
        }),
    ),
    (
        &HW_GPU_SESSION_MEMORY_USAGE_PEAK,
        Read::U64Gauge(|device, points| {
            if let Some(peak) = device.session.memory_peak {
                points.observe(peak);
            }
        }),
    ),
    (
        &HW_GPU_SESSION_SAMPLES,
        Read::U64Counter(|device, points| points.observe(device.session.samples)),
    ),
    (
        &HW_GPU_SESSION_TIME_TO_FIRST_ACTIVE,
        Read::F64Gauge(|device, points| {
            if let Some(seconds) = device.session.time_to_first_active {
                points.observe(seconds);
            }
        }),
    ),
    (
        &HW_GPU_ECC_AGGREGATE_ERRORS,
        Read::U64Counter(|device, points| {
            if let Some((corrected, uncorrected)) = device.readings.ecc_aggregate {
                points.by(GPU_ERROR_TYPES[0], corrected);
                points.by(GPU_ERROR_TYPES[1], uncorrected);
            }
        }),
    ),
    (
        &HW_GPU_XID_ERRORS,
        Read::U64Counter(|device, points| {
            if device.xid.supported {
                for (code, count) in &device.xid.by_code {
                    points.by(code.to_string(), *count);
                }
                if device.xid.other > 0 {
                    points.by(XID_OTHER, device.xid.other);
                }
            }
        }),
    ),
    (
        &HW_GPU_XID_LAST,
        Read::U64Gauge(|device, points| {
            if device.xid.supported {
                points.observe(device.xid.last.unwrap_or(0));
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_RETIRED_PAGES,
        Read::U64Gauge(|device, points| {
            if let Some((sbe, dbe)) = device.readings.retired_pages {
                points.by(RETIREMENT_CAUSES[0], sbe);
                points.by(RETIREMENT_CAUSES[1], dbe);
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_RETIRED_PAGES_PENDING,
        Read::U64Gauge(|device, points| {
            if let Some(pending) = device.readings.retired_pages_pending {
                points.observe(u64::from(pending));
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_REMAPPED_ROWS,
        Read::U64Gauge(|device, points| {
            if let Some((correctable, uncorrectable)) = device.readings.remapped_rows {
                points.by(REMAP_CAUSES[0], correctable);
                points.by(REMAP_CAUSES[1], uncorrectable);
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_REMAPPED_ROWS_PENDING,
        Read::U64Gauge(|device, points| {
            if let Some(pending) = device.readings.remap_pending {
                points.observe(u64::from(pending));
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_REMAPPED_ROWS_FAILURE,
        Read::U64Gauge(|device, points| {
            if let Some(failure) = device.readings.remap_failure {
                points.observe(u64::from(failure));
            }
        }),
    ),
    (
        &HW_GPU_IO,
        Read::U64Counter(|device, points| {
            if let Some((tx, rx)) = device.readings.pcie_bytes {
                points.by(DIRECTIONS[0], tx);
                points.by(DIRECTIONS[1], rx);
            }
        }),
    ),
    (
        &HW_GPU_PCIE_LINK_GENERATION,
        Read::U64Gauge(|device, points| {
            if let Some(generation) = device.readings.pcie_link_generation {
                points.observe(u64::from(generation));
            }
        }),
    ),
    (
        &HW_GPU_PCIE_LINK_WIDTH,
        Read::U64Gauge(|device, points| {
            if let Some(width) = device.readings.pcie_link_width {
                points.observe(u64::from(width));
            }
        }),
    ),
    (
        &HW_GPU_NVLINK_STATE,
        Read::U64Gauge(|device, points| {
            for link in &device.readings.nvlinks {
                if let Some(up) = link.up {
                    points.by(i64::from(link.link), u64::from(up));
                }
            }
        }),
    ),
    (
        &HW_GPU_NVLINK_IO,
        Read::U64Counter(|device, points| {
            for link in &device.readings.nvlinks {
                if let Some((tx, rx)) = link.bytes {
                    points.by_two(i64::from(link.link), DIRECTIONS[0], tx);
                    points.by_two(i64::from(link.link), DIRECTIONS[1], rx);
                }
            }
        }),
    ),
    (
        &HW_GPU_NVLINK_ERRORS,
        Read::U64Counter(|device, points| {
            for link in &device.readings.nvlinks {
                for (kind, count) in GPU_NVLINK_ERROR_TYPES.iter().zip(link.errors) {
                    if let Some(count) = count {
                        points.by_two(i64::from(link.link), *kind, count);
                    }
                }
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_COPY_UTILIZATION,
        Read::F64Gauge(|device, points| {
            if let Some(util) = device.readings.memory_copy {
                points.observe(util);
            }
        }),
    ),
    (
        &HW_GPU_MEMORY_TEMPERATURE,
        Read::I64Gauge(|device, points| {
            if let Some(celsius) = device.readings.memory_temperature {
                points.observe(celsius);
            }
        }),
    ),
    (
        &HW_GPU_CLOCK_MEMORY,
        Read::F64Gauge(|device, points| {
            if let Some(hertz) = device.readings.memory_clock {
                points.observe(hertz);
            }
        }),
    ),
    (
        &HW_GPU_POWER_LIMIT,
        Read::F64Gauge(|device, points| {
            if let Some(watts) = device.readings.power_limit {
                points.observe(watts);
            }
        }),
    ),
    (
        &HW_GPU_PERFORMANCE_STATE,
        Read::U64Gauge(|device, points| {
            if let Some(state) = device.readings.performance_state {
                points.observe(u64::from(state));
            }
        }),
    ),
    (
        &HW_GPU_FAN_SPEED,
        Read::F64Gauge(|device, points| {
            if let Some(speed) = device.readings.fan_speed {
                points.observe(speed);
            }
        }),
    ),
    (
        &HW_GPU_PROFILING,
        Read::F64Gauge(|device, points| {
            for (metric, value) in GPU_PROFILING_METRICS.iter().zip(device.readings.profiling) {
                if let Some(value) = value {
                    points.by(*metric, value);
                }
            }
        }),
    ),
    (
        &HW_STATUS,
        Read::U64Gauge(|device, points| {
            let now = health(&device.readings, &device.xid) as usize;
            for (at, state) in GPU_HEALTH_STATES.iter().enumerate() {
                points.by(*state, u64::from(at == now));
            }
        }),
    ),
];

/// Registers every GPU family on `meter`, reading `shared`.
pub(crate) fn register(meter: &Meter, shared: &Arc<Shared>) -> GpuInstruments {
    let handles = FAMILIES
        .iter()
        .map(|(family, read)| read.register(meter, family, shared))
        .collect();
    GpuInstruments { _handles: handles }
}

#[cfg(test)]
mod tests {
    use higgsmeter_catalog::{GPU_FAMILIES, Kind};

    use super::*;

    /// The catalog kind of a family's instrument.
    fn kind(read: Read) -> Kind {
        match read {
            Read::F64Gauge(_) | Read::U64Gauge(_) | Read::I64Gauge(_) => Kind::Gauge,
            Read::F64Counter(_) | Read::U64Counter(_) => Kind::Counter,
        }
    }

    #[test]
    fn every_gpu_family_is_read_once_in_catalog_order_as_its_catalog_kind() {
        let read: Vec<&str> = FAMILIES.iter().map(|(family, _)| family.name).collect();
        let catalog: Vec<&str> = GPU_FAMILIES.iter().map(|family| family.name).collect();
        assert_eq!(read, catalog);
        for (family, read) in FAMILIES {
            assert_eq!(kind(*read), family.kind, "{}", family.name);
        }
    }
}
