//! The NVML GPU meter (`nvml` feature), its state source wired to the tracker.

use opentelemetry::metrics::Meter;

use crate::pipeline::Pipeline;
use crate::tracker::Tracker;

/// The running NVML meter.
pub(crate) struct GpuMeter(higgsmeter_nvml::NvmlMeter);

impl GpuMeter {
    /// The meter, for in-process consumers of its readings.
    pub(crate) fn nvml(&self) -> &higgsmeter_nvml::NvmlMeter {
        &self.0
    }
}

/// Starts the NVML meter. Failing (no driver, no GPU) is one log line, never an error:
/// the worker runs on without GPU metrics.
pub(crate) fn start(meter: &Meter, tracker: &Tracker) -> Option<GpuMeter> {
    let tracker = tracker.clone();
    match higgsmeter_nvml::NvmlMeter::builder()
        .with_state_source(move || tracker.current_state().as_str())
        .start(meter)
    {
        Ok(gpus) => {
            tracing::info!(target: "higgsmeter", gpus = gpus.devices().len(), "NVML GPU meter started");
            Some(GpuMeter(gpus))
        }
        Err(e @ higgsmeter_nvml::NvmlError::LibraryNotLoaded { .. }) => {
            tracing::info!(target: "higgsmeter", "GPU metrics off: {e}");
            None
        }
        Err(e) => {
            tracing::warn!(target: "higgsmeter", "GPU metrics off: {e}");
            None
        }
    }
}

impl Pipeline for GpuMeter {
    /// Takes a last sample, so the final export carries it, and stops the sampler.
    fn shutdown(self: Box<Self>) {
        self.0.sample_now();
    }
}
