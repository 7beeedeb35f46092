//! The GPU meter's accessor (`nvml` feature).

use super::Telemetry;
use crate::gpu::GpuMeter;

impl Telemetry {
    /// The NVML GPU meter `init()` started, if it did: its
    /// [`readings`](higgsmeter_nvml::NvmlMeter::readings) feed other in-process consumers
    /// (the lab session agent) without opening NVML a second time.
    pub fn gpu_meter(&self) -> Option<&higgsmeter_nvml::NvmlMeter> {
        self.pipeline::<GpuMeter>().map(GpuMeter::nvml)
    }
}
