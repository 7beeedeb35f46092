//! The sampling tick: read every device, update the session counters, publish a snapshot.
//!
//! The tick is generic over where readings come from ([`GpuSource`]: NVML in production,
//! a script in the arithmetic tests) and over the clock ([`Clock`]), so the counters can
//! be tested without a GPU and without sleeping.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::session::SessionCounters;
use crate::xid::XidCounts;

/// The worker's current state, as the `state` label value (`idle`, `io`, `cpu`, `gpu`,
/// `warmup`, `startup`, `shutdown`).
pub(crate) type StateFn = Arc<dyn Fn() -> &'static str + Send + Sync>;

/// The `state` label when no state source is set, or when it panicked.
pub(crate) const UNKNOWN_STATE: &str = "unknown";

/// Memory of one device, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    pub(crate) used: u64,
    pub(crate) total: u64,
}

/// One device's readings at one sample; `None` where the reading is unavailable.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Readings {
    /// GPU utilisation, ratio 0..1.
    pub(crate) utilization: Option<f64>,
    pub(crate) memory: Option<Memory>,
    /// Degrees Celsius.
    pub(crate) temperature: Option<u32>,
    /// Watts.
    pub(crate) power: Option<f64>,
    /// Joules since the driver was loaded.
    pub(crate) energy: Option<f64>,
    /// SM clock, hertz.
    pub(crate) sm_clock: Option<f64>,
    /// Volatile ECC errors: (corrected, uncorrected).
    pub(crate) ecc: Option<(u64, u64)>,
    /// Throttle-reason bit mask (NVML's `nvmlClocksThrottleReason*` bits).
    pub(crate) throttle: Option<u64>,
    /// Bytes of device memory used by this process.
    pub(crate) process_memory: Option<u64>,
    /// Encoder utilisation, ratio 0..1.
    pub(crate) encoder: Option<f64>,
    /// Decoder utilisation, ratio 0..1.
    pub(crate) decoder: Option<f64>,
    /// Memory read/write utilisation, ratio 0..1.
    pub(crate) memory_copy: Option<f64>,
    /// Aggregate (lifetime) ECC errors: (corrected, uncorrected).
    pub(crate) ecc_aggregate: Option<(u64, u64)>,
    /// PCIe replay counter.
    pub(crate) pcie_replay: Option<u64>,
    /// Current PCIe link generation.
    pub(crate) pcie_link_generation: Option<u32>,
    /// Current PCIe link width, lanes.
    pub(crate) pcie_link_width: Option<u32>,
    /// Memory clock, hertz.
    pub(crate) memory_clock: Option<f64>,
    /// Enforced power limit, watts.
    pub(crate) power_limit: Option<f64>,
    /// Performance state, 0 (P0) to 15.
    pub(crate) performance_state: Option<u32>,
    /// First fan's speed, ratio 0..1.
    pub(crate) fan_speed: Option<f64>,
    /// Memory temperature, degrees Celsius.
    pub(crate) memory_temperature: Option<i64>,
    /// PCIe bytes since driver load: (transmitted, received).
    pub(crate) pcie_bytes: Option<(u64, u64)>,
    /// Retired pages: (multiple single-bit, double-bit).
    pub(crate) retired_pages: Option<(u64, u64)>,
    /// Whether a page retirement is pending.
    pub(crate) retired_pages_pending: Option<bool>,
    /// Remapped rows: (correctable, uncorrectable).
    pub(crate) remapped_rows: Option<(u64, u64)>,
    /// Whether a row remap is pending.
    pub(crate) remap_pending: Option<bool>,
    /// Whether a row remap failed.
    pub(crate) remap_failure: Option<bool>,
    /// One entry per NVLink link the GPU has (empty without NVLink).
    pub(crate) nvlinks: Vec<NvLinkReading>,
    /// GPM ratios 0..1, in `GPU_PROFILING_METRICS` order.
    pub(crate) profiling: [Option<f64>; 5],
    /// NVML said the GPU is lost (fallen off the bus) on this sample.
    pub(crate) lost: bool,
}

impl Readings {
    /// All-`None`, keeping the NVLink vector's allocation.
    pub(crate) fn reset(&mut self) {
        let mut nvlinks = std::mem::take(&mut self.nvlinks);
        nvlinks.clear();
        *self = Readings {
            nvlinks,
            ..Readings::default()
        };
    }
}

/// One NVLink link's readings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NvLinkReading {
    /// Link number.
    pub(crate) link: u32,
    /// Whether the link is up.
    pub(crate) up: Option<bool>,
    /// Data bytes (transmitted, received).
    pub(crate) bytes: Option<(u64, u64)>,
    /// Errors in `GPU_NVLINK_ERROR_TYPES` order: CRC, replay, recovery.
    pub(crate) errors: [Option<u64>; 3],
}

/// Identity of one metered device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceInfo {
    /// NVML index.
    pub(crate) index: u32,
    /// `GPU-…` UUID.
    pub(crate) uuid: String,
    /// Product name.
    pub(crate) name: String,
}

/// Where readings come from.
pub(crate) trait GpuSource: Send {
    /// The devices, in the order [`read`](GpuSource::read) takes them.
    fn devices(&self) -> &[DeviceInfo];
    /// Reads device number `position` (into [`devices`](GpuSource::devices)) into `out`,
    /// which the caller has reset to all-`None`.
    fn read(&mut self, position: usize, out: &mut Readings);
}

/// A monotonic clock.
pub(crate) trait Clock: Send {
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// One device in the published snapshot.
#[derive(Debug, Clone)]
pub(crate) struct DeviceSnapshot {
    pub(crate) info: DeviceInfo,
    /// Readings of the last sample.
    pub(crate) readings: Readings,
    pub(crate) session: SessionCounters,
    /// XID errors from the event thread.
    pub(crate) xid: XidCounts,
}

/// What the observable instruments read: the last sample of every device.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) devices: Vec<DeviceSnapshot>,
    /// Whether any sample was taken (before the first, nothing is reported).
    pub(crate) sampled: bool,
    /// Set when the meter stops; nothing is reported afterwards.
    pub(crate) stopped: bool,
}

/// The snapshot shared between the sampler and the instrument callbacks.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    snapshot: Mutex<Snapshot>,
}

impl Shared {
    /// Locks the snapshot. A panic while it was held (none is expected) leaves a snapshot
    /// that is still consistent field by field, so poisoning is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Snapshot> {
        self.snapshot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The tick and everything it needs.
pub(crate) struct Sampler<S, C> {
    source: S,
    clock: C,
    state: Option<StateFn>,
    /// Activity threshold, ratio.
    threshold: f64,
    shared: Arc<Shared>,
    /// Reused between ticks: one entry per device.
    scratch: Vec<Readings>,
    state_panicked: bool,
}

impl<S: GpuSource, C: Clock> Sampler<S, C> {
    /// A sampler whose session starts now (by `clock`).
    pub(crate) fn new(source: S, clock: C, state: Option<StateFn>, threshold: f64) -> Self {
        let started = clock.now();
        let devices = source
            .devices()
            .iter()
            .map(|info| DeviceSnapshot {
                info: info.clone(),
                readings: Readings::default(),
                session: SessionCounters::new(started),
                xid: XidCounts::default(),
            })
            .collect();
        let shared = Arc::new(Shared {
            snapshot: Mutex::new(Snapshot {
                devices,
                sampled: false,
                stopped: false,
            }),
        });
        let scratch = vec![Readings::default(); source.devices().len()];
        Sampler {
            source,
            clock,
            state,
            threshold,
            shared,
            scratch,
            state_panicked: false,
        }
    }

    /// The snapshot this sampler publishes to.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Takes one sample of every device and publishes it.
    pub(crate) fn tick(&mut self) {
        for (position, out) in self.scratch.iter_mut().enumerate() {
            out.reset();
            self.source.read(position, out);
        }
        let state = self.current_state();
        let now = self.clock.now();
        let mut snapshot = self.shared.lock();
        for (device, readings) in snapshot.devices.iter_mut().zip(&mut self.scratch) {
            device.session.apply(
                now,
                readings.utilization,
                readings.memory.map(|m| m.used),
                state,
                self.threshold,
            );
            std::mem::swap(&mut device.readings, readings);
        }
        snapshot.sampled = true;
    }

    /// The worker's state now; a panicking state source is reported once and then
    /// read as [`UNKNOWN_STATE`].
    fn current_state(&mut self) -> &'static str {
        let Some(state) = &self.state else {
            return UNKNOWN_STATE;
        };
        if self.state_panicked {
            return UNKNOWN_STATE;
        }
        match catch_unwind(AssertUnwindSafe(|| state())) {
            Ok(label) => label,
            Err(_) => {
                self.state_panicked = true;
                tracing::error!(
                    "the NVML meter's state source panicked; GPU-active time is labelled \
                     state=\"unknown\" from now on"
                );
                UNKNOWN_STATE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Scripted utilisation per tick per device; `None` = not available.
    struct Script {
        devices: Vec<DeviceInfo>,
        ticks: Vec<Vec<Option<f64>>>,
        at: usize,
    }

    impl GpuSource for Script {
        fn devices(&self) -> &[DeviceInfo] {
            &self.devices
        }
        fn read(&mut self, position: usize, out: &mut Readings) {
            let util = self.ticks[self.at][position];
            out.utilization = util;
            out.memory = util.map(|u| Memory {
                used: (u * 1000.0) as u64,
                total: 1000,
            });
            if position + 1 == self.devices.len() {
                self.at += 1;
            }
        }
    }

    /// A clock that advances by scripted steps at every reading.
    struct Steps {
        base: Instant,
        offsets_ms: Vec<u64>,
        at: Cell<usize>,
    }

    impl Clock for Steps {
        fn now(&self) -> Instant {
            let i = self.at.get();
            self.at.set(i + 1);
            self.base + Duration::from_millis(self.offsets_ms[i])
        }
    }

    fn devices(n: u32) -> Vec<DeviceInfo> {
        (0..n)
            .map(|index| DeviceInfo {
                index,
                uuid: format!("GPU-{index}"),
                name: "scripted".to_owned(),
            })
            .collect()
    }

    #[test]
    fn ticks_feed_each_device_its_own_counters_with_measured_intervals() {
        let script = Script {
            devices: devices(2),
            ticks: vec![
                vec![Some(0.5), Some(0.0)],
                vec![Some(0.5), Some(0.0)],
                vec![Some(0.02), None],
                vec![Some(1.0), Some(0.3)],
            ],
            at: 0,
        };
        // Start at 0; ticks at 0.1 s, 1.1 s, 2.6 s (late), 3.0 s.
        let clock = Steps {
            base: Instant::now(),
            offsets_ms: vec![0, 100, 1100, 2600, 3000],
            at: Cell::new(0),
        };
        let states = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&states);
        let state: StateFn =
            Arc::new(move || ["gpu", "gpu", "io", "cpu"][seen.fetch_add(1, Ordering::Relaxed) % 4]);
        let mut sampler = Sampler::new(script, clock, Some(state), 0.05);
        assert!(!sampler.shared().lock().sampled);
        for _ in 0..4 {
            sampler.tick();
        }
        let snapshot = sampler.shared().lock();
        assert!(snapshot.sampled);
        let (a, b) = (&snapshot.devices[0], &snapshot.devices[1]);
        assert_eq!(a.session.samples, 4);
        // 0.1 (gpu) + 1.0 (gpu) + [0.02 is idle] + 0.4 (cpu).
        let active: Vec<(&str, f64)> = a
            .session
            .active_seconds
            .iter()
            .map(|(s, v)| (*s, (v * 1e6).round() / 1e6))
            .collect();
        assert_eq!(active, vec![("gpu", 1.1), ("cpu", 0.4)]);
        assert_eq!(a.session.utilization_peak, Some(1.0));
        assert_eq!(a.session.memory_peak, Some(1000));
        assert_eq!(a.session.time_to_first_active, Some(0.1));
        assert_eq!(a.readings.utilization, Some(1.0));
        // Device 1: idle, then unavailable, then active for the last 0.4 s only.
        assert_eq!(b.session.samples, 3);
        let active: Vec<(&str, f64)> = b
            .session
            .active_seconds
            .iter()
            .map(|(s, v)| (*s, (v * 1e6).round() / 1e6))
            .collect();
        assert_eq!(active, vec![("cpu", 0.4)]);
        assert_eq!(b.session.time_to_first_active, Some(3.0));
        assert_eq!(b.session.memory_peak, Some(300));
    }

    #[test]
    fn a_panicking_state_source_is_read_as_unknown() {
        let script = Script {
            devices: devices(1),
            ticks: vec![vec![Some(0.9)]; 2],
            at: 0,
        };
        let clock = Steps {
            base: Instant::now(),
            offsets_ms: vec![0, 1000, 2000],
            at: Cell::new(0),
        };
        let state: StateFn = Arc::new(|| panic!("state source failure"));
        let mut sampler = Sampler::new(script, clock, Some(state), 0.05);
        sampler.tick();
        sampler.tick();
        let snapshot = sampler.shared().lock();
        assert_eq!(
            snapshot.devices[0].session.active_seconds,
            vec![(UNKNOWN_STATE, 2.0)]
        );
    }
}
