//! Readings from NVML through `nvml-wrapper`.

use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::{NvmlError as WrapperError, nvml_try};
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::sys_exports::field_id;
use nvml_wrapper::{Device, GpmSample, Nvml};
use nvml_wrapper_sys::bindings::{nvmlFieldValue_t, nvmlGpmSample_t, nvmlValue_t};

use crate::error::NvmlError;
use crate::sampler::{DeviceInfo, GpuSource, Memory, NvLinkReading, Readings};
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

    /// The initialised NVML (`None` only while dropping).
    pub(crate) fn nvml(&self) -> Option<&Nvml> {
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
    EccAggregate,
    Encoder,
    Decoder,
    MemoryClock,
    PowerLimit,
    PerformanceState,
    Fan,
    PcieReplay,
    PcieLink,
    FieldValues,
    MemoryTemperature,
    PcieBytes,
    RetiredPages,
    RemappedRows,
    NvLink,
    Gpm,
}

impl Reading {
    fn bit(self) -> u64 {
        1 << self as u64
    }

    fn what(self) -> &'static str {
        match self {
            Reading::Handle => "its device handle (every reading)",
            Reading::Utilization => {
                "utilization (hw.gpu.utilization, hw.gpu.memory.copy_utilization and the session counters)"
            }
            Reading::Memory => "memory (hw.gpu.memory.*)",
            Reading::Temperature => "temperature (hw.gpu.temperature)",
            Reading::Power => "power (hw.power)",
            Reading::Energy => "energy (hw.energy)",
            Reading::SmClock => "the SM clock (hw.gpu.clock.sm)",
            Reading::Ecc => "volatile ECC counters (hw.errors corrected/uncorrected)",
            Reading::Throttle => "throttle reasons (hw.gpu.throttle)",
            Reading::Processes => "running compute processes (hw.gpu.process.memory.usage)",
            Reading::EccAggregate => "aggregate ECC counters (hw.gpu.ecc.aggregate_errors)",
            Reading::Encoder => "encoder utilization (hw.gpu.utilization task=encoder)",
            Reading::Decoder => "decoder utilization (hw.gpu.utilization task=decoder)",
            Reading::MemoryClock => "the memory clock (hw.gpu.clock.memory)",
            Reading::PowerLimit => "the enforced power limit (hw.gpu.power.limit)",
            Reading::PerformanceState => "the performance state (hw.gpu.performance_state)",
            Reading::Fan => "fan speed (hw.gpu.fan.speed)",
            Reading::PcieReplay => "the PCIe replay counter (hw.errors pcie_replay)",
            Reading::PcieLink => "the PCIe link generation and width (hw.gpu.pcie.link.*)",
            Reading::FieldValues => {
                "field values (memory temperature, PCIe bytes, retired pages, remapped rows, NVLink)"
            }
            Reading::MemoryTemperature => "memory temperature (hw.gpu.memory.temperature)",
            Reading::PcieBytes => "PCIe byte counters (hw.gpu.io)",
            Reading::RetiredPages => "retired pages (hw.gpu.memory.retired_pages*)",
            Reading::RemappedRows => "remapped rows (hw.gpu.memory.remapped_rows*)",
            Reading::NvLink => "NVLink (hw.gpu.nvlink.*)",
            Reading::Gpm => "GPU performance monitoring (hw.gpu.profiling)",
        }
    }
}

/// The GPM metrics read, in the catalog's `GPU_PROFILING_METRICS` order.
const GPM_METRICS: [GpmMetricId; 5] = [
    GpmMetricId::GraphicsUtil,
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
];

/// NVLink links probed at most (NVML's `NVML_NVLINK_MAX_LINKS`).
const MAX_NVLINKS: u32 = 18;

/// Field values read once per sample for every device, before the per-link ones.
const DEVICE_FIELDS: [u32; 10] = [
    field_id::NVML_FI_DEV_MEMORY_TEMP,
    field_id::NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
    field_id::NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    field_id::NVML_FI_DEV_RETIRED_SBE,
    field_id::NVML_FI_DEV_RETIRED_DBE,
    field_id::NVML_FI_DEV_RETIRED_PENDING,
    field_id::NVML_FI_DEV_REMAPPED_COR,
    field_id::NVML_FI_DEV_REMAPPED_UNC,
    field_id::NVML_FI_DEV_REMAPPED_PENDING,
    field_id::NVML_FI_DEV_REMAPPED_FAILURE,
];

/// Field values read per NVLink link (the link number is the scope), in the order
/// `read_links` takes them.
const LINK_FIELDS: [u32; 6] = [
    field_id::NVML_FI_DEV_NVLINK_GET_STATE,
    field_id::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    field_id::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    field_id::NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
    field_id::NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    field_id::NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
];

/// A GPM sample kept from one tick to the next, as its raw handle (a `GpmSample`
/// borrows the `Nvml` it came from, which this struct owns).
struct GpmPrevious(nvmlGpmSample_t);

// SAFETY: a GPM sample handle is a heap buffer NVML allocated; it may be used and freed
// from any thread (nvml-wrapper's `GpmSample` is `Send` for the same reason). Only the
// sampler, under its mutex, touches it.
#[allow(unsafe_code, reason = "a raw GPM sample handle kept between ticks")]
unsafe impl Send for GpmPrevious {}

/// What the meter learnt about a device when it opened it.
struct DeviceExtra {
    /// NVLink links (0: none or not supported).
    nvlinks: u32,
    /// Whether the device supports GPM.
    gpm: bool,
    /// The last tick's GPM sample.
    gpm_previous: Option<GpmPrevious>,
}

/// The metered devices of an initialised NVML.
pub(crate) struct NvmlSource {
    nvml: Arc<NvmlGuard>,
    devices: Vec<DeviceInfo>,
    extra: Vec<DeviceExtra>,
    /// Per device: readings whose failure was already logged.
    logged: Vec<u64>,
    /// Reused field-value request.
    fields: Vec<nvmlFieldValue_t>,
    pid: u32,
}

impl NvmlSource {
    /// Initialises NVML from `path` and selects the devices `selection` (the value of
    /// `CUDA_VISIBLE_DEVICES`) makes visible.
    pub(crate) fn open(path: &Path, selection: Option<&str>) -> Result<Self, NvmlError> {
        let nvml = Arc::new(NvmlGuard::init(path)?);
        let devices = list(&nvml, selection)?;
        let logged = vec![0; devices.len()];
        let mut source = NvmlSource {
            extra: Vec::with_capacity(devices.len()),
            nvml,
            devices,
            logged,
            fields: Vec::new(),
            pid: std::process::id(),
        };
        for position in 0..source.devices.len() {
            let extra = source.probe(position);
            source.extra.push(extra);
        }
        Ok(source)
    }

    /// The devices' identities, for the XID event thread.
    pub(crate) fn device_infos(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }

    /// The loaded NVML, for the XID event thread.
    pub(crate) fn nvml(&self) -> &Arc<NvmlGuard> {
        &self.nvml
    }

    /// NVLink links and GPM support of device `position`.
    fn probe(&mut self, position: usize) -> DeviceExtra {
        let mut extra = DeviceExtra {
            nvlinks: 0,
            gpm: false,
            gpm_previous: None,
        };
        let guard = Arc::clone(&self.nvml);
        let Some(nvml) = guard.nvml() else {
            return extra;
        };
        let Some(index) = self.devices.get(position).map(|d| d.index) else {
            return extra;
        };
        let Ok(device) = nvml.device_by_index(index) else {
            return extra;
        };
        let mut count = [request(field_id::NVML_FI_DEV_NVLINK_LINK_COUNT, 0)];
        let links = field_values(nvml, &device, &mut count).and_then(|()| field_u64(&count[0]));
        if let Some(links) = self.keep(position, Reading::NvLink, links) {
            extra.nvlinks = u32::try_from(links).unwrap_or(MAX_NVLINKS).min(MAX_NVLINKS);
        }
        let gpm = device.gpm_support().and_then(|supported| {
            if supported {
                Ok(())
            } else {
                Err(WrapperError::NotSupported)
            }
        });
        extra.gpm = self.keep(position, Reading::Gpm, gpm).is_some();
        extra
    }

    /// `Some(value)` for a reading, `None` (logged once per device and reading) for a
    /// failure; a GPU-lost error marks `lost`.
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

    /// The batched field values: memory temperature, PCIe bytes, retired pages,
    /// remapped rows and every NVLink link's state, bytes and errors, in one call.
    fn read_fields(
        &mut self,
        position: usize,
        nvml: &Nvml,
        device: &Device<'_>,
        out: &mut Readings,
    ) {
        let links = self.extra.get(position).map_or(0, |e| e.nvlinks);
        let mut fields = std::mem::take(&mut self.fields);
        fields.clear();
        fields.extend(DEVICE_FIELDS.iter().map(|id| request(*id, 0)));
        for link in 0..links {
            fields.extend(LINK_FIELDS.iter().map(|id| request(*id, link)));
        }
        if let Err(e) = field_values(nvml, device, &mut fields) {
            if matches!(e, WrapperError::GpuLost) {
                out.lost = true;
            }
            self.log_once(position, Reading::FieldValues, &e);
            self.fields = fields;
            return;
        }
        let value = |i: usize| {
            fields
                .get(i)
                .map_or(Err(WrapperError::NotSupported), field_u64)
        };
        out.memory_temperature = self.keep(
            position,
            Reading::MemoryTemperature,
            fields
                .first()
                .map_or(Err(WrapperError::NotSupported), field_i64),
        );
        out.pcie_bytes = self.keep(
            position,
            Reading::PcieBytes,
            value(1).and_then(|tx| Ok((tx, value(2)?))),
        );
        out.retired_pages = self.keep(
            position,
            Reading::RetiredPages,
            value(3).and_then(|sbe| Ok((sbe, value(4)?))),
        );
        out.retired_pages_pending = self
            .keep(position, Reading::RetiredPages, value(5))
            .map(|v| v != 0);
        out.remapped_rows = self.keep(
            position,
            Reading::RemappedRows,
            value(6).and_then(|cor| Ok((cor, value(7)?))),
        );
        out.remap_pending = self
            .keep(position, Reading::RemappedRows, value(8))
            .map(|v| v != 0);
        out.remap_failure = self
            .keep(position, Reading::RemappedRows, value(9))
            .map(|v| v != 0);
        for link in 0..links {
            let at = DEVICE_FIELDS.len() + link as usize * LINK_FIELDS.len();
            let up = self
                .keep(position, Reading::NvLink, value(at))
                .map(|v| v != 0);
            // NVML counts NVLink data in KiB.
            let bytes = self.keep(
                position,
                Reading::NvLink,
                value(at + 1).and_then(|tx| {
                    Ok((tx.saturating_mul(1024), value(at + 2)?.saturating_mul(1024)))
                }),
            );
            let errors = [
                self.keep(position, Reading::NvLink, value(at + 3)),
                self.keep(position, Reading::NvLink, value(at + 4)),
                self.keep(position, Reading::NvLink, value(at + 5)),
            ];
            out.nvlinks.push(NvLinkReading {
                link,
                up,
                bytes,
                errors,
            });
        }
        self.fields = fields;
    }

    /// GPM ratios between the previous tick's sample and a new one.
    fn read_gpm<'nvml>(
        &mut self,
        position: usize,
        nvml: &'nvml Nvml,
        device: &Device<'nvml>,
        out: &mut Readings,
    ) {
        if !self.extra.get(position).is_some_and(|e| e.gpm) {
            return;
        }
        let current = match device.gpm_sample() {
            Ok(sample) => sample,
            Err(e) => {
                self.log_once(position, Reading::Gpm, &e);
                return;
            }
        };
        let previous = self
            .extra
            .get_mut(position)
            .and_then(|e| e.gpm_previous.take())
            .map(|p| gpm_sample(nvml, p));
        if let Some(previous) = previous {
            match gpm_metrics_get(nvml, &previous, &current, &GPM_METRICS) {
                Ok(results) => {
                    for (slot, result) in out.profiling.iter_mut().zip(results) {
                        *slot = self
                            .keep(position, Reading::Gpm, result)
                            .map(|m| (m.value / 100.0).clamp(0.0, 1.0));
                    }
                }
                Err(e) => self.log_once(position, Reading::Gpm, &e),
            }
        }
        if let Some(extra) = self.extra.get_mut(position) {
            extra.gpm_previous = Some(GpmPrevious(current.into_handle()));
        }
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        // Free the kept GPM samples while NVML is still initialised.
        let Some(nvml) = self.nvml.nvml() else { return };
        for extra in &mut self.extra {
            if let Some(previous) = extra.gpm_previous.take() {
                drop(gpm_sample(nvml, previous));
            }
        }
    }
}

/// The `GpmSample` a kept handle stands for (it frees the sample when dropped).
#[allow(
    unsafe_code,
    reason = "rebuilding a GpmSample from the handle kept between ticks"
)]
fn gpm_sample(nvml: &Nvml, previous: GpmPrevious) -> GpmSample<'_> {
    // SAFETY: the handle came from `GpmSample::into_handle` on a sample of this same
    // NVML, and `previous` is consumed here, so it is wrapped (and later freed) once.
    unsafe { GpmSample::from_handle(nvml, previous.0) }
}

/// A field-value request for `id` in `scope`.
fn request(id: u32, scope: u32) -> nvmlFieldValue_t {
    nvmlFieldValue_t {
        fieldId: id,
        scopeId: scope,
        timestamp: 0,
        latencyUsec: 0,
        valueType: 0,
        nvmlReturn: 0,
        value: nvmlValue_t { ullVal: 0 },
    }
}

/// `nvmlDeviceGetFieldValues` on `values`, through nvml-wrapper's `sys` bindings:
/// nvml-wrapper's `field_values_for` cannot set the scope (the NVLink link number), and
/// one batched call per device and sample costs one driver round trip instead of one per
/// reading (what DCGM does). The field ids used here are all below the range nvml-wrapper
/// renumbers for newer drivers (251 to 273), so they need no translation.
#[allow(unsafe_code, reason = "nvmlDeviceGetFieldValues with scoped field ids")]
fn field_values(
    nvml: &Nvml,
    device: &Device<'_>,
    values: &mut [nvmlFieldValue_t],
) -> Result<(), WrapperError> {
    let get = nvml
        .lib()
        .nvmlDeviceGetFieldValues
        .as_ref()
        .map_err(|e| WrapperError::FailedToLoadSymbol(e.to_string()))?;
    let count = i32::try_from(values.len()).map_err(|_| WrapperError::InvalidArg)?;
    // SAFETY: the handle belongs to this initialised NVML; `values` is a writable array
    // of `count` initialised nvmlFieldValue_t with their field and scope ids set, which is
    // what nvmlDeviceGetFieldValues reads and writes, and nothing beyond it.
    let result = unsafe { get(device.handle(), count, values.as_mut_ptr()) };
    nvml_try(result)
}

/// The value of one field, as an unsigned integer (negative values read as 0).
fn field_u64(field: &nvmlFieldValue_t) -> Result<u64, WrapperError> {
    field_i64(field).map(|v| u64::try_from(v).unwrap_or(0))
}

/// The value of one field, as a signed integer.
#[allow(
    unsafe_code,
    reason = "reading the union member NVML's valueType names"
)]
fn field_i64(field: &nvmlFieldValue_t) -> Result<i64, WrapperError> {
    nvml_try(field.nvmlReturn)?;
    let v = &field.value;
    // SAFETY: every member of nvmlValue_t is a plain number valid for any bit pattern,
    // and `valueType` says which one NVML wrote (nvmlValueType_t: 0 double, 1 unsigned
    // int, 2 unsigned long, 3 unsigned long long, 4 signed long long, 5 signed int,
    // 6 unsigned short).
    let value = unsafe {
        match field.valueType {
            0 => v.dVal as i64,
            1 => i64::from(v.uiVal),
            2 => i64::try_from(v.ulVal).unwrap_or(i64::MAX),
            3 => i64::try_from(v.ullVal).unwrap_or(i64::MAX),
            4 => v.sllVal,
            5 => i64::from(v.siVal),
            6 => i64::from(v.usVal),
            other => return Err(WrapperError::UnexpectedVariant(other)),
        }
    };
    Ok(value)
}

impl GpuSource for NvmlSource {
    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn read(&mut self, position: usize, out: &mut Readings) {
        let Some(index) = self.devices.get(position).map(|d| d.index) else {
            return;
        };
        let guard = Arc::clone(&self.nvml);
        let Some(nvml) = guard.nvml() else { return };
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(e) => {
                out.lost = matches!(e, WrapperError::GpuLost);
                self.log_once(position, Reading::Handle, &e);
                return;
            }
        };
        let raw = RawReadings::take(&device, self.pid);
        out.lost = raw.any_lost();
        if let Some((gpu, memory)) = self.keep(position, Reading::Utilization, raw.utilization) {
            out.utilization = Some(gpu);
            out.memory_copy = Some(memory);
        }
        out.memory = self.keep(position, Reading::Memory, raw.memory);
        out.temperature = self.keep(position, Reading::Temperature, raw.temperature);
        out.power = self.keep(position, Reading::Power, raw.power);
        out.energy = self.keep(position, Reading::Energy, raw.energy);
        out.sm_clock = self.keep(position, Reading::SmClock, raw.sm_clock);
        out.ecc = self.keep(position, Reading::Ecc, raw.ecc);
        out.throttle = self.keep(position, Reading::Throttle, raw.throttle);
        out.process_memory = self.keep(position, Reading::Processes, raw.process_memory);
        out.ecc_aggregate = self.keep(position, Reading::EccAggregate, raw.ecc_aggregate);
        out.encoder = self.keep(position, Reading::Encoder, raw.encoder);
        out.decoder = self.keep(position, Reading::Decoder, raw.decoder);
        out.memory_clock = self.keep(position, Reading::MemoryClock, raw.memory_clock);
        out.power_limit = self.keep(position, Reading::PowerLimit, raw.power_limit);
        out.performance_state =
            self.keep(position, Reading::PerformanceState, raw.performance_state);
        out.fan_speed = self.keep(position, Reading::Fan, raw.fan_speed);
        out.pcie_replay = self.keep(position, Reading::PcieReplay, raw.pcie_replay);
        if let Some((generation, width)) = self.keep(position, Reading::PcieLink, raw.pcie_link) {
            out.pcie_link_generation = Some(generation);
            out.pcie_link_width = Some(width);
        }
        self.read_fields(position, nvml, &device, out);
        self.read_gpm(position, nvml, &device, out);
    }
}

/// Every single-call reading of one device, as NVML returned it, converted to the
/// meter's units.
struct RawReadings {
    /// (GPU, memory) utilisation ratios.
    utilization: Result<(f64, f64), WrapperError>,
    memory: Result<Memory, WrapperError>,
    temperature: Result<u32, WrapperError>,
    power: Result<f64, WrapperError>,
    energy: Result<f64, WrapperError>,
    sm_clock: Result<f64, WrapperError>,
    ecc: Result<(u64, u64), WrapperError>,
    throttle: Result<u64, WrapperError>,
    process_memory: Result<u64, WrapperError>,
    ecc_aggregate: Result<(u64, u64), WrapperError>,
    encoder: Result<f64, WrapperError>,
    decoder: Result<f64, WrapperError>,
    memory_clock: Result<f64, WrapperError>,
    power_limit: Result<f64, WrapperError>,
    performance_state: Result<u32, WrapperError>,
    fan_speed: Result<f64, WrapperError>,
    pcie_replay: Result<u64, WrapperError>,
    pcie_link: Result<(u32, u32), WrapperError>,
}

fn ratio(percent: u32) -> f64 {
    f64::from(percent.min(100)) / 100.0
}

impl RawReadings {
    fn take(device: &Device<'_>, pid: u32) -> Self {
        let ecc = |kind, counter| device.total_ecc_errors(kind, counter);
        let ecc_pair = |counter: fn() -> EccCounter| {
            ecc(MemoryError::Corrected, counter())
                .and_then(|corrected| Ok((corrected, ecc(MemoryError::Uncorrected, counter())?)))
        };
        RawReadings {
            utilization: device
                .utilization_rates()
                .map(|u| (ratio(u.gpu), ratio(u.memory))),
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
            ecc: ecc_pair(|| EccCounter::Volatile),
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
            ecc_aggregate: ecc_pair(|| EccCounter::Aggregate),
            encoder: device.encoder_utilization().map(|u| ratio(u.utilization)),
            decoder: device.decoder_utilization().map(|u| ratio(u.utilization)),
            memory_clock: device
                .clock_info(Clock::Memory)
                .map(|mhz| f64::from(mhz) * 1e6),
            power_limit: device
                .enforced_power_limit()
                .map(|mw| f64::from(mw) / 1000.0),
            // P0..P15 are 0..15; NVML's "unknown" (32) is no reading.
            performance_state: device.performance_state().and_then(|p| {
                Some(p.as_c())
                    .filter(|p| *p <= 15)
                    .ok_or(WrapperError::NotSupported)
            }),
            fan_speed: device.num_fans().and_then(|fans| {
                if fans == 0 {
                    Err(WrapperError::NotSupported)
                } else {
                    device.fan_speed(0).map(ratio)
                }
            }),
            pcie_replay: device.pcie_replay_counter().map(u64::from),
            pcie_link: device
                .current_pcie_link_gen()
                .and_then(|generation| Ok((generation, device.current_pcie_link_width()?))),
        }
    }

    /// Whether any reading said the GPU is lost.
    fn any_lost(&self) -> bool {
        fn lost<T>(r: &Result<T, WrapperError>) -> bool {
            matches!(r, Err(WrapperError::GpuLost))
        }
        lost(&self.utilization)
            || lost(&self.memory)
            || lost(&self.temperature)
            || lost(&self.power)
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
