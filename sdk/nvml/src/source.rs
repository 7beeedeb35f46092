//! Readings from NVML through `nvml-wrapper`.

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::{Device, Nvml};

use crate::error::NvmlError;
use crate::sampler::{DeviceInfo, GpuSource, Memory, Readings};
use crate::visible::{self, Listed};

/// The throttle-reason bits, in the order of the catalog's `GPU_THROTTLE_REASONS`.
pub(crate) const THROTTLE_BITS: [u64; 9] = [
    ThrottleReasons::GPU_IDLE.bits(),
    ThrottleReasons::APPLICATIONS_CLOCKS_SETTING.bits(),
    ThrottleReasons::SW_POWER_CAP.bits(),
    ThrottleReasons::HW_SLOWDOWN.bits(),
    ThrottleReasons::SYNC_BOOST.bits(),
    ThrottleReasons::SW_THERMAL_SLOWDOWN.bits(),
    ThrottleReasons::HW_THERMAL_SLOWDOWN.bits(),
    ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN.bits(),
    ThrottleReasons::DISPLAY_CLOCK_SETTING.bits(),
];

/// A loaded, initialised NVML that never panics when dropped.
///
/// `nvml-wrapper`'s `Drop for Nvml` (and its `shutdown` on an early error) calls
/// `nvmlShutdown` through an `expect`, which panics if the loaded library lacks the
/// symbol. This guard keeps the `Nvml` in a `ManuallyDrop`; on drop it shuts NVML down
/// only when the symbol is there (logging an error from it), and otherwise leaves the
/// library loaded until the process exits.
pub(crate) struct NvmlGuard {
    /// `Some` until dropped.
    nvml: Option<ManuallyDrop<Nvml>>,
    path: PathBuf,
}

impl NvmlGuard {
    /// Loads the library at `path` (a bare file name is searched for by the dynamic
    /// loader) and calls `nvmlInit_v2`.
    pub(crate) fn init(path: &Path) -> Result<Self, NvmlError> {
        match Nvml::builder().lib_path(path.as_os_str()).init() {
            Ok(nvml) => {
                let nvml = ManuallyDrop::new(nvml);
                if nvml.lib().nvmlShutdown.is_err() {
                    tracing::warn!(
                        path = %path.display(),
                        "the NVML library lacks nvmlShutdown; it stays loaded until the process exits"
                    );
                }
                Ok(NvmlGuard {
                    nvml: Some(nvml),
                    path: path.to_owned(),
                })
            }
            Err(WrapperError::LibloadingError(e)) => Err(NvmlError::LibraryNotLoaded {
                path: path.to_owned(),
                source: Box::new(e),
            }),
            Err(WrapperError::FailedToLoadSymbol(symbol)) => Err(NvmlError::MissingSymbol {
                path: path.to_owned(),
                symbol,
            }),
            Err(e) => Err(NvmlError::Init {
                source: Box::new(e),
            }),
        }
    }

    fn nvml(&self) -> Option<&Nvml> {
        self.nvml.as_deref()
    }
}

impl Drop for NvmlGuard {
    fn drop(&mut self) {
        let Some(nvml) = self.nvml.take() else { return };
        if nvml.lib().nvmlShutdown.is_err() {
            // Dropping the Nvml would panic: leave it, and the library, loaded.
            return;
        }
        if let Err(e) = ManuallyDrop::into_inner(nvml).shutdown() {
            tracing::warn!(path = %self.path.display(), error = %e, "NVML shutdown failed");
        }
    }
}

/// One reading the meter takes, for the log-once bookkeeping.
#[derive(Debug, Clone, Copy)]
enum Reading {
    Handle,
    Utilization,
    Memory,
    Temperature,
    Power,
    Energy,
    SmClock,
    Ecc,
    Throttle,
    Processes,
}

impl Reading {
    fn bit(self) -> u16 {
        1 << self as u16
    }

    fn what(self) -> &'static str {
        match self {
            Reading::Handle => "its device handle (every reading)",
            Reading::Utilization => "utilization (hw.gpu.utilization and the session counters)",
            Reading::Memory => "memory (hw.gpu.memory.*)",
            Reading::Temperature => "temperature (hw.gpu.temperature)",
            Reading::Power => "power (hw.power)",
            Reading::Energy => "energy (hw.energy)",
            Reading::SmClock => "the SM clock (hw.gpu.clock.sm)",
            Reading::Ecc => "ECC counters (hw.errors)",
            Reading::Throttle => "throttle reasons (hw.gpu.throttle)",
            Reading::Processes => "running compute processes (hw.gpu.process.memory.usage)",
        }
    }
}

/// The metered devices of an initialised NVML.
pub(crate) struct NvmlSource {
    nvml: NvmlGuard,
    devices: Vec<DeviceInfo>,
    /// Per device: readings whose failure was already logged.
    logged: Vec<u16>,
    pid: u32,
}

impl NvmlSource {
    /// Initialises NVML from `path` and selects the devices `selection` (the value of
    /// `CUDA_VISIBLE_DEVICES`) makes visible.
    pub(crate) fn open(path: &Path, selection: Option<&str>) -> Result<Self, NvmlError> {
        let nvml = NvmlGuard::init(path)?;
        let devices = list(&nvml, selection)?;
        let logged = vec![0; devices.len()];
        Ok(NvmlSource {
            nvml,
            devices,
            logged,
            pid: std::process::id(),
        })
    }

    /// `Some(value)` for a reading, `None` (logged once per device and reading) for a
    /// failure.
    fn keep<T>(
        &mut self,
        position: usize,
        reading: Reading,
        result: Result<T, WrapperError>,
    ) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.log_once(position, reading, &e);
                None
            }
        }
    }

    fn log_once(&mut self, position: usize, reading: Reading, error: &WrapperError) {
        let Some(logged) = self.logged.get_mut(position) else {
            return;
        };
        if *logged & reading.bit() != 0 {
            return;
        }
        *logged |= reading.bit();
        let Some(device) = self.devices.get(position) else {
            return;
        };
        if matches!(error, WrapperError::NotSupported) {
            tracing::info!(
                gpu = device.index,
                uuid = %device.uuid,
                "GPU {} ({}) does not support {}; it is left out for this GPU",
                device.index,
                device.name,
                reading.what()
            );
        } else {
            tracing::warn!(
                gpu = device.index,
                uuid = %device.uuid,
                error = %error,
                "GPU {} ({}): reading {} failed; it is left out while it fails (logged once)",
                device.index,
                device.name,
                reading.what()
            );
        }
    }
}

impl GpuSource for NvmlSource {
    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn read(&mut self, position: usize, out: &mut Readings) {
        let Some(index) = self.devices.get(position).map(|d| d.index) else {
            return;
        };
        let Some(nvml) = self.nvml.nvml() else { return };
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(e) => {
                self.log_once(position, Reading::Handle, &e);
                return;
            }
        };
        let raw = RawReadings::take(&device, self.pid);
        out.utilization = self.keep(position, Reading::Utilization, raw.utilization);
        out.memory = self.keep(position, Reading::Memory, raw.memory);
        out.temperature = self.keep(position, Reading::Temperature, raw.temperature);
        out.power = self.keep(position, Reading::Power, raw.power);
        out.energy = self.keep(position, Reading::Energy, raw.energy);
        out.sm_clock = self.keep(position, Reading::SmClock, raw.sm_clock);
        out.ecc = self.keep(position, Reading::Ecc, raw.ecc);
        out.throttle = self.keep(position, Reading::Throttle, raw.throttle);
        out.process_memory = self.keep(position, Reading::Processes, raw.process_memory);
    }
}

/// Every reading of one device, as NVML returned it, converted to the meter's units.
struct RawReadings {
    utilization: Result<f64, WrapperError>,
    memory: Result<Memory, WrapperError>,
    temperature: Result<u32, WrapperError>,
    power: Result<f64, WrapperError>,
    energy: Result<f64, WrapperError>,
    sm_clock: Result<f64, WrapperError>,
    ecc: Result<(u64, u64), WrapperError>,
    throttle: Result<u64, WrapperError>,
    process_memory: Result<u64, WrapperError>,
}

impl RawReadings {
    fn take(device: &Device<'_>, pid: u32) -> Self {
        let ecc = |kind| device.total_ecc_errors(kind, EccCounter::Volatile);
        RawReadings {
            utilization: device
                .utilization_rates()
                .map(|u| f64::from(u.gpu.min(100)) / 100.0),
            memory: device.memory_info().map(|m| Memory {
                used: m.used,
                total: m.total,
            }),
            temperature: device.temperature(TemperatureSensor::Gpu),
            power: device.power_usage().map(|mw| f64::from(mw) / 1000.0),
            energy: device
                .total_energy_consumption()
                .map(|mj| mj as f64 / 1000.0),
            sm_clock: device.clock_info(Clock::SM).map(|mhz| f64::from(mhz) * 1e6),
            ecc: ecc(MemoryError::Corrected)
                .and_then(|corrected| Ok((corrected, ecc(MemoryError::Uncorrected)?))),
            throttle: device.current_throttle_reasons().map(|r| r.bits()),
            process_memory: device.running_compute_processes().map(|processes| {
                processes
                    .iter()
                    .filter(|p| p.pid == pid)
                    .map(|p| match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => bytes,
                        UsedGpuMemory::Unavailable => 0,
                    })
                    .sum()
            }),
        }
    }
}

/// The visible devices with their identities.
fn list(nvml: &NvmlGuard, selection: Option<&str>) -> Result<Vec<DeviceInfo>, NvmlError> {
    let Some(handle) = nvml.nvml() else {
        return Ok(Vec::new());
    };
    let count = handle.device_count().map_err(|e| NvmlError::DeviceQuery {
        source: Box::new(e),
    })?;
    let mut listed = Vec::new();
    let mut names = Vec::new();
    for index in 0..count {
        let device = match handle.device_by_index(index) {
            Ok(device) => device,
            Err(e) => {
                tracing::warn!(gpu = index, error = %e, "NVML cannot open GPU {index}; it is not metered");
                continue;
            }
        };
        let uuid = match device.uuid() {
            Ok(uuid) => uuid,
            Err(e) => {
                tracing::warn!(gpu = index, error = %e, "NVML cannot read GPU {index}'s UUID; it is not metered");
                continue;
            }
        };
        let name = device.name().unwrap_or_else(|e| {
            tracing::warn!(gpu = index, error = %e, "NVML cannot read GPU {index}'s name");
            String::from("unknown")
        });
        listed.push(Listed { index, uuid });
        names.push(name);
    }
    let chosen = visible::select(&listed, selection);
    if chosen.is_empty() {
        return Err(NvmlError::NoVisibleDevice {
            found: count,
            selection: selection.map(str::to_owned),
        });
    }
    Ok(chosen
        .into_iter()
        .filter_map(|index| {
            let at = listed.iter().position(|d| d.index == index)?;
            Some(DeviceInfo {
                index,
                uuid: listed[at].uuid.clone(),
                name: names[at].clone(),
            })
        })
        .collect())
}
