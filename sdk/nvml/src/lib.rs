//! The NVML GPU meter (work in progress).
