//! A read handle on the meter's last sample, for other in-process consumers (the lab
//! session agent) that need the GPU readings without opening NVML a second time.

use std::sync::Arc;

use crate::meter::GpuDevice;
use crate::sampler::Shared;

/// One GPU's readings at the meter's last sample.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GpuReading {
    /// The GPU.
    pub device: GpuDevice,
    /// Utilisation, ratio 0..1 (NVML reports whole percents); `None` when unavailable.
    pub utilization: Option<f64>,
    /// Device memory used, in bytes; `None` when unavailable.
    pub memory_used: Option<u64>,
}

/// A cloneable handle on an [`NvmlMeter`](crate::NvmlMeter)'s last sample, from
/// [`NvmlMeter::readings`](crate::NvmlMeter::readings). Reading it never calls NVML: it
/// costs a lock and a copy of a few numbers per GPU. It reads nothing once the meter has
/// stopped.
#[derive(Debug, Clone)]
pub struct GpuReadings {
    shared: Arc<Shared>,
}

impl GpuReadings {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        GpuReadings { shared }
    }

    /// The readings of every metered GPU at the last sample, in the meter's device
    /// order; empty before the first sample and after the meter stopped.
    pub fn latest(&self) -> Vec<GpuReading> {
        let snapshot = self.shared.lock();
        if !snapshot.sampled || snapshot.stopped {
            return Vec::new();
        }
        snapshot
            .devices
            .iter()
            .map(|d| GpuReading {
                device: GpuDevice::from(&d.info),
                utilization: d.readings.utilization,
                memory_used: d.readings.memory.map(|m| m.used),
            })
            .collect()
    }
}
