//! GPU families recorded by the in-process NVML meter (`higgsmeter-nvml`).

use crate::Family;

/// Every GPU family the NVML meter exports.
pub const GPU_FAMILIES: &[Family] = &[];
