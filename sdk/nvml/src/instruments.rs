//! The GPU families as observable OpenTelemetry instruments reading the last snapshot.
//!
//! The callbacks never call NVML: they read what the last sample published, so an
//! export costs a lock and a walk over a few devices, and a slow or hung driver call
//! can never stall the exporter.

use std::any::Any;
use std::sync::Arc;

use higgsmeter_catalog::{
    Family, GPU_DEVICE_LABELS, GPU_THROTTLE_REASONS, HW_ENERGY, HW_ERRORS, HW_GPU_CLOCK_SM,
    HW_GPU_MEMORY_LIMIT, HW_GPU_MEMORY_USAGE, HW_GPU_MEMORY_UTILIZATION,
    HW_GPU_PROCESS_MEMORY_USAGE, HW_GPU_SESSION_ACTIVE_TIME, HW_GPU_SESSION_MEMORY_USAGE_PEAK,
    HW_GPU_SESSION_SAMPLES, HW_GPU_SESSION_TIME_TO_FIRST_ACTIVE, HW_GPU_SESSION_UTILIZATION_PEAK,
    HW_GPU_TEMPERATURE, HW_GPU_THROTTLE, HW_GPU_UTILIZATION, HW_POWER, gpu_instrument_name,
};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use crate::sampler::{DeviceSnapshot, Shared};
use crate::source::THROTTLE_BITS;

/// `hw.type` of every series.
const HW_TYPE_GPU: &str = "gpu";
/// `hw.gpu.task` of utilisation: NVML's compute/graphics utilisation.
const TASK_GENERAL: &str = "general";
/// `error.type` values of `hw.errors`, in the order of the `ecc` reading.
const ECC_ERROR_TYPES: [&str; 2] = ["corrected", "uncorrected"];

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
            if let Some(util) = device.readings.utilization {
                with_extra(
                    observer,
                    attributes,
                    extra_label(&HW_GPU_UTILIZATION),
                    TASK_GENERAL,
                    util,
                );
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
            if let Some((corrected, uncorrected)) = device.readings.ecc {
                let key = extra_label(&HW_ERRORS);
                with_extra(observer, attributes, key, ECC_ERROR_TYPES[0], corrected);
                with_extra(observer, attributes, key, ECC_ERROR_TYPES[1], uncorrected);
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

    GpuInstruments { _handles: handles }
}
