//! The GPU meter of a build without the `nvml` feature: none starts.

use opentelemetry::metrics::Meter;

use crate::pipeline::Pipeline;
use crate::tracker::Tracker;

/// Never made without the `nvml` feature.
pub(crate) enum GpuMeter {}

/// Starts nothing.
pub(crate) fn start(_meter: &Meter, _tracker: &Tracker) -> Option<GpuMeter> {
    None
}

impl Pipeline for GpuMeter {
    fn shutdown(self: Box<Self>) {
        match *self {}
    }
}
