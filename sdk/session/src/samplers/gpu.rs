//! GPU utilisation and memory, from the NVML meter's last sample.

use higgsmeter_nvml::GpuReadings;

/// What the counters need of the GPUs at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuSample {
    /// Utilisation, percent (the seed's `gpu_util_pct`).
    pub util_pct: f64,
    /// Memory used, MiB (the seed's `vram_mb`).
    pub vram_mb: f64,
}

/// Reads the GPUs once per tick.
pub trait GpuSampler: Send {
    /// The GPUs' utilisation and memory now.
    fn read(&mut self) -> GpuSample;
}

/// No GPU (none visible, or GPU sampling off): 0 % and 0 MiB, as an idle GPU reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGpu;

impl GpuSampler for NoGpu {
    fn read(&mut self) -> GpuSample {
        GpuSample::default()
    }
}

/// The readings of an [`NvmlMeter`](higgsmeter_nvml::NvmlMeter) already running in this
/// process ([`NvmlMeter::readings`](higgsmeter_nvml::NvmlMeter::readings)): NVML is
/// opened once, by the meter, which also exports the GPU session counters
/// (`hw.gpu.session.*`).
///
/// With several GPUs, a sample's utilisation is the busiest GPU's and its memory the
/// sum over the GPUs (the lab VMs have one). A reading that is unavailable counts as 0.
/// NVML's utilisation is in whole percents, and it is reported as such; memory in whole
/// MiB (rounded down), as `nvidia-smi` prints it.
#[derive(Debug, Clone)]
pub struct NvmlGpu {
    readings: GpuReadings,
}

impl NvmlGpu {
    /// Reads the meter behind `readings`.
    pub fn new(readings: GpuReadings) -> Self {
        NvmlGpu { readings }
    }
}

impl GpuSampler for NvmlGpu {
    fn read(&mut self) -> GpuSample {
        let mut sample = GpuSample::default();
        let mut bytes: u64 = 0;
        for gpu in self.readings.latest() {
            if let Some(util) = gpu.utilization {
                sample.util_pct = sample.util_pct.max((util * 100.0).round());
            }
            bytes = bytes.saturating_add(gpu.memory_used.unwrap_or(0));
        }
        sample.vram_mb = (bytes / (1024 * 1024)) as f64;
        sample
    }
}

impl GpuSampler for Box<dyn GpuSampler> {
    fn read(&mut self) -> GpuSample {
        (**self).read()
    }
}
