//! The builder, the sampler thread and the handle that stops it.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;

use crate::error::NvmlError;
use crate::events::XidWatcher;
use crate::instruments::{self, GpuInstruments};
use crate::sampler::{DeviceInfo, MonotonicClock, Sampler, Shared, StateFn};
use crate::source::NvmlSource;

/// The library loaded when neither [`NvmlMeterBuilder::with_library_path`] nor
/// `HIGGSMETER_NVML_LIBRARY` names one: the driver's `libnvidia-ml.so.1`, found by the
/// dynamic loader.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

/// The environment variable naming the NVML library to load.
pub const LIBRARY_ENV: &str = "HIGGSMETER_NVML_LIBRARY";

/// The sampling interval unless set: 1 s.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// The utilisation (percent) above which a sample counts as GPU-active unless set: 5,
/// the lab agent's `GPU_ACTIVE_UTIL_THRESHOLD`.
pub const DEFAULT_ACTIVE_THRESHOLD: f64 = 5.0;

/// The shortest sampling interval accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// How long stopping waits for a sample in progress before leaving the thread behind.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// One metered GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuDevice {
    /// NVML index (`hw.gpu.index`): the GPU's position in PCI bus order.
    pub index: u32,
    /// NVML UUID, `GPU-…` (`hw.id`).
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H200` (`hw.name`).
    pub name: String,
}

impl From<&DeviceInfo> for GpuDevice {
    fn from(info: &DeviceInfo) -> Self {
        GpuDevice {
            index: info.index,
            uuid: info.uuid.clone(),
            name: info.name.clone(),
        }
    }
}

/// Where the visible-device selection comes from.
#[derive(Debug, Clone)]
enum Selection {
    Environment,
    Given(Option<String>),
}

/// Configures and starts an [`NvmlMeter`]; from [`NvmlMeter::builder`].
#[must_use = "call start() to start the meter"]
pub struct NvmlMeterBuilder {
    interval: Duration,
    active_threshold: f64,
    state: Option<StateFn>,
    library: Option<PathBuf>,
    selection: Selection,
}

impl std::fmt::Debug for NvmlMeterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlMeterBuilder")
            .field("interval", &self.interval)
            .field("active_threshold", &self.active_threshold)
            .field("state", &self.state.as_ref().map(|_| "<fn>"))
            .field("library", &self.library)
            .field("selection", &self.selection)
            .finish()
    }
}

impl Default for NvmlMeterBuilder {
    fn default() -> Self {
        NvmlMeterBuilder {
            interval: DEFAULT_INTERVAL,
            active_threshold: DEFAULT_ACTIVE_THRESHOLD,
            state: None,
            library: None,
            selection: Selection::Environment,
        }
    }
}

impl NvmlMeterBuilder {
    /// How often the sampler reads the GPUs (default 1 s, at least [`MIN_INTERVAL`]).
    /// The session counters use the measured time between samples, so a late sample
    /// loses nothing; the interval is the attribution granularity of GPU-active time.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The utilisation, in percent (0 to 100), a sample must exceed to count as
    /// GPU-active (default 5).
    pub fn with_active_threshold(mut self, percent: f64) -> Self {
        self.active_threshold = percent;
        self
    }

    /// Where the worker's current state comes from: a function returning the state label
    /// (`idle`, `io`, `cpu`, `gpu`, `warmup`, `startup`, `shutdown`), read once per sample
    /// to label GPU-active time. higgsmeter wires it to its tracker; without it the label
    /// is `unknown`. It runs on the sampler thread and must be quick; if it panics, the
    /// label is `unknown` from then on.
    pub fn with_state_source<F>(mut self, state: F) -> Self
    where
        F: Fn() -> &'static str + Send + Sync + 'static,
    {
        self.state = Some(Arc::new(state));
        self
    }

    /// The NVML library to load: a path, or a file name for the dynamic loader to find.
    /// Overrides `HIGGSMETER_NVML_LIBRARY`; the default is [`DEFAULT_LIBRARY`].
    pub fn with_library_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.library = Some(path.into());
        self
    }

    /// The visible-device selection, in `CUDA_VISIBLE_DEVICES` syntax, instead of the
    /// process's `CUDA_VISIBLE_DEVICES` (`None`: every GPU).
    pub fn with_visible_devices(mut self, selection: Option<&str>) -> Self {
        self.selection = Selection::Given(selection.map(str::to_owned));
        self
    }

    /// Loads NVML, takes a first sample, registers the GPU instruments on `meter` and
    /// starts the sampler thread.
    ///
    /// # Errors
    ///
    /// When the library cannot be loaded or initialised, no GPU is visible, a setting is
    /// out of range, or the thread cannot start. Nothing is left running then; log the
    /// error and run on without GPU metrics.
    pub fn start(self, meter: &Meter) -> Result<NvmlMeter, NvmlError> {
        if self.interval < MIN_INTERVAL {
            return Err(NvmlError::InvalidSetting {
                name: "interval",
                reason: "the sampling interval must be at least 10 ms",
            });
        }
        if !(0.0..=100.0).contains(&self.active_threshold) {
            return Err(NvmlError::InvalidSetting {
                name: "active_threshold",
                reason: "the GPU-active threshold is a utilisation in percent, from 0 to 100",
            });
        }
        let library = self
            .library
            .or_else(|| {
                std::env::var_os(LIBRARY_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from(DEFAULT_LIBRARY));
        let selection = match self.selection {
            Selection::Given(selection) => selection,
            Selection::Environment => {
                std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned())
            }
        };
        let source = NvmlSource::open(&library, selection.as_deref())?;
        let nvml = std::sync::Arc::clone(source.nvml());
        let device_infos = source.device_infos();
        let mut sampler = Sampler::new(
            source,
            MonotonicClock,
            self.state,
            self.active_threshold / 100.0,
        );
        sampler.tick();
        let shared = Arc::clone(sampler.shared());
        let devices: Vec<GpuDevice> = shared
            .lock()
            .devices
            .iter()
            .map(|d| GpuDevice::from(&d.info))
            .collect();
        let sampler = Arc::new(Mutex::new(sampler));
        // XID events: a thread of their own, so the tick never waits on the event API.
        let mut xid = XidWatcher::start(nvml, device_infos, Arc::clone(&shared));

        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let thread_sampler = Arc::clone(&sampler);
        let interval = self.interval;
        let thread = std::thread::Builder::new()
            .name("higgsmeter-nvml".into())
            .spawn(move || {
                run(&thread_sampler, interval, &stop_rx);
                drop(thread_sampler);
                let _ = done_tx.send(());
            })
            .map_err(|e| {
                if let Some(xid) = xid.take() {
                    xid.stop(STOP_TIMEOUT);
                }
                NvmlError::Spawn(e)
            })?;
        // Registered last: a meter that failed to start leaves no instruments behind.
        let instruments = instruments::register(meter, &shared);
        tracing::info!(
            gpus = devices_summary(&devices),
            library = %library.display(),
            interval_ms = interval.as_millis() as u64,
            "NVML meter started"
        );
        Ok(NvmlMeter {
            sampler,
            shared,
            devices,
            stop: Some(stop_tx),
            done: Mutex::new(done_rx),
            thread: Some(thread),
            xid,
            _instruments: instruments,
        })
    }
}

fn devices_summary(devices: &[GpuDevice]) -> String {
    let parts: Vec<String> = devices
        .iter()
        .map(|d| format!("{} {} {}", d.index, d.name, d.uuid))
        .collect();
    parts.join(", ")
}

type NvmlSampler = Sampler<NvmlSource, MonotonicClock>;

/// The sampler thread: a sample every `interval`, on a fixed schedule, until stopped.
fn run(sampler: &Mutex<NvmlSampler>, interval: Duration, stop: &mpsc::Receiver<()>) {
    let mut next = Instant::now() + interval;
    loop {
        match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            // A stop request, or the handle is gone.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        sampler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tick();
        next += interval;
        let now = Instant::now();
        if next <= now {
            // Fell behind (a slow driver call, a suspended process): skip, don't burst.
            next = now + interval;
        }
    }
}

/// A running NVML meter: GPU gauges and session counters on the meter it was started
/// with. Dropping it (or [`stop`](NvmlMeter::stop)) stops the sampler thread, waiting at
/// most 2 s for a sample in progress, and the instruments report nothing from then on.
#[must_use = "the meter stops when this handle is dropped"]
pub struct NvmlMeter {
    sampler: Arc<Mutex<NvmlSampler>>,
    shared: Arc<Shared>,
    devices: Vec<GpuDevice>,
    stop: Option<mpsc::Sender<()>>,
    /// Behind a lock only so that the handle is `Sync`; read once, in `drop`.
    done: Mutex<mpsc::Receiver<()>>,
    thread: Option<JoinHandle<()>>,
    xid: Option<XidWatcher>,
    _instruments: GpuInstruments,
}

impl std::fmt::Debug for NvmlMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlMeter")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl NvmlMeter {
    /// A builder with the defaults: 1 s interval, 5 % threshold, no state source, the
    /// library from `HIGGSMETER_NVML_LIBRARY` or `libnvidia-ml.so.1`, the GPUs
    /// `CUDA_VISIBLE_DEVICES` selects.
    pub fn builder() -> NvmlMeterBuilder {
        NvmlMeterBuilder::default()
    }

    /// The metered GPUs, in `CUDA_VISIBLE_DEVICES` order.
    pub fn devices(&self) -> &[GpuDevice] {
        &self.devices
    }

    /// A handle on the readings of the last sample, for another consumer in this process
    /// (the lab session agent) that must not open NVML a second time.
    pub fn readings(&self) -> crate::GpuReadings {
        crate::GpuReadings::new(Arc::clone(&self.shared))
    }

    /// Takes a sample now, on the calling thread, in addition to the schedule: before a
    /// final export, or to read the GPUs at a point of interest. It waits for a sample
    /// in progress on the sampler thread.
    pub fn sample_now(&self) {
        self.sampler
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tick();
    }

    /// Stops the sampler thread and the instruments (the same as dropping the handle).
    pub fn stop(self) {}
}

impl Drop for NvmlMeter {
    fn drop(&mut self) {
        self.shared.lock().stopped = true;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let done = self.done.get_mut().unwrap_or_else(PoisonError::into_inner);
        match done.recv_timeout(STOP_TIMEOUT) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => tracing::warn!(
                "the NVML sampler thread did not stop within 2 s (a driver call is hanging); \
                 leaving it behind"
            ),
        }
        if let Some(xid) = self.xid.take() {
            xid.stop(STOP_TIMEOUT);
        }
    }
}
