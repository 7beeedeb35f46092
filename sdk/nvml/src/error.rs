//! Errors of the NVML meter.

use std::path::PathBuf;

/// A boxed error from the layer below (nvml-wrapper, libloading, the OS).
type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why [`NvmlMeterBuilder::start`](crate::NvmlMeterBuilder::start) could not start the
/// meter. Every variant leaves the process as it was: the caller logs it and runs on
/// without GPU metrics. Sampling itself never returns errors; a reading that fails is
/// left out and logged once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NvmlError {
    /// The NVML shared library could not be loaded.
    #[error(
        "could not load the NVML library {path:?}: {source}; on a GPU host install the NVIDIA \
         driver (it ships libnvidia-ml.so.1), or set HIGGSMETER_NVML_LIBRARY (or \
         with_library_path) to the library's path; on a host without GPUs leave the meter off"
    )]
    LibraryNotLoaded {
        /// The path or file name that was tried.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: Source,
    },

    /// The library loaded but lacks an entry point the meter cannot do without.
    #[error(
        "the NVML library {path:?} lacks {symbol}: it is not a complete libnvidia-ml (a stub, \
         or a driver older than the meter supports); point HIGGSMETER_NVML_LIBRARY at the \
         driver's libnvidia-ml.so.1"
    )]
    MissingSymbol {
        /// The path or file name that was loaded.
        path: PathBuf,
        /// The missing entry point, as the loader reported it.
        symbol: String,
    },

    /// `nvmlInit` failed: the driver is not loaded or not reachable.
    #[error(
        "NVML initialisation failed: {source}; check that the NVIDIA driver is loaded \
         (`nvidia-smi` works) and that this user may open /dev/nvidia* (in a container: run \
         it with the NVIDIA container runtime)"
    )]
    Init {
        /// NVML's error.
        #[source]
        source: Source,
    },

    /// NVML initialised but could not list its devices.
    #[error("NVML could not list the GPUs: {source}; `nvidia-smi -L` should show the same problem")]
    DeviceQuery {
        /// NVML's error.
        #[source]
        source: Source,
    },

    /// No GPU is visible to this process, so there is nothing to meter.
    #[error(
        "no GPU to meter: NVML lists {found} device(s) and CUDA_VISIBLE_DEVICES={selection:?} \
         selects none of them; fix CUDA_VISIBLE_DEVICES (indices or GPU- UUIDs) or leave the \
         meter off on this host"
    )]
    NoVisibleDevice {
        /// Devices NVML lists.
        found: u32,
        /// The `CUDA_VISIBLE_DEVICES` value in effect (`None` when unset).
        selection: Option<String>,
    },

    /// A builder setting has a value the meter cannot use.
    #[error("invalid {name}: {reason}")]
    InvalidSetting {
        /// The setting.
        name: &'static str,
        /// What is expected instead.
        reason: &'static str,
    },

    /// The sampler thread could not be started.
    #[error("could not start the NVML sampler thread: {0}")]
    Spawn(#[source] std::io::Error),
}
