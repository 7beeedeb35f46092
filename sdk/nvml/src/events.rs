//! XID errors from NVML's event API, on a thread of their own.
//!
//! One event set holds every metered GPU that supports critical XID events. A thread
//! waits on it (`nvmlEventSetWait_v2`, at most [`WAIT_MS`] at a time so it notices a
//! stop) and counts each event into the shared snapshot under the snapshot's lock, which
//! it holds for a few instructions only: the sampler's tick never waits on the event
//! API.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::{EventSet, Nvml};

use crate::sampler::{DeviceInfo, Shared};
use crate::source::NvmlGuard;

/// The longest single wait on the event set, in milliseconds.
const WAIT_MS: u32 = 200;

/// How long starting waits for the thread to register the devices.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// The running XID thread; stop it with [`XidWatcher::stop`].
pub(crate) struct XidWatcher {
    stop: Arc<AtomicBool>,
    /// Behind a lock only so that the meter holding it is `Sync`; read once, in `stop`.
    done: Mutex<mpsc::Receiver<()>>,
    thread: Option<JoinHandle<()>>,
}

impl XidWatcher {
    /// Starts the thread, and returns once it has registered the devices (or after
    /// [`REGISTER_TIMEOUT`]). `None` when the thread cannot start; XID families are then
    /// absent, which is logged.
    pub(crate) fn start(
        nvml: Arc<NvmlGuard>,
        devices: Vec<DeviceInfo>,
        shared: Arc<Shared>,
    ) -> Option<XidWatcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let thread_stop = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("higgsmeter-nvml-xid".into())
            .spawn(move || {
                if let Some(handle) = nvml.nvml() {
                    watch(handle, &devices, &shared, &thread_stop, &ready_tx);
                }
                drop(ready_tx);
                let _ = done_tx.send(());
            });
        let thread = match spawned {
            Ok(thread) => thread,
            Err(e) => {
                tracing::warn!(error = %e, "could not start the NVML XID thread; XID errors are not counted");
                return None;
            }
        };
        // A message or a closed channel: registration is over either way.
        let _ = ready_rx.recv_timeout(REGISTER_TIMEOUT);
        Some(XidWatcher {
            stop,
            done: Mutex::new(done_rx),
            thread: Some(thread),
        })
    }

    /// Stops the thread, waiting at most `timeout` for its current wait to end.
    pub(crate) fn stop(mut self, timeout: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let done = self.done.get_mut().unwrap_or_else(PoisonError::into_inner);
        match done.recv_timeout(timeout) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => tracing::warn!(
                "the NVML XID thread did not stop in time (a driver call is hanging); leaving it behind"
            ),
        }
    }
}

/// Registers the devices and counts their XID events until `stop`.
fn watch(
    nvml: &Nvml,
    devices: &[DeviceInfo],
    shared: &Shared,
    stop: &AtomicBool,
    ready: &mpsc::Sender<()>,
) {
    let Some(set) = register(nvml, devices, shared) else {
        return;
    };
    let _ = ready.send(());
    let mut failing = false;
    while !stop.load(Ordering::Relaxed) {
        match set.wait(WAIT_MS) {
            Ok(event) => {
                failing = false;
                if !event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                    continue;
                }
                let Some(XidError::Value(code)) = event.event_data else {
                    tracing::warn!("NVML delivered an XID event without its code; not counted");
                    continue;
                };
                let index = event.device.index().ok();
                let position = index.and_then(|i| devices.iter().position(|d| d.index == i));
                let Some(position) = position else { continue };
                if let Some(device) = shared.lock().devices.get_mut(position) {
                    device.xid.record(code);
                }
                if let Some(device) = devices.get(position) {
                    tracing::error!(
                        gpu = device.index,
                        uuid = %device.uuid,
                        xid = code,
                        "XID {code} on GPU {} ({})",
                        device.index,
                        device.name
                    );
                }
            }
            Err(WrapperError::Timeout) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "waiting for NVML XID events failed; retrying (logged once while it fails)");
                    failing = true;
                }
                std::thread::sleep(Duration::from_millis(u64::from(WAIT_MS)));
            }
        }
    }
}

/// An event set with every device that supports critical XID events, each marked
/// `supported` in the snapshot; `None` (logged) when no device could be registered.
fn register<'nvml>(
    nvml: &'nvml Nvml,
    devices: &[DeviceInfo],
    shared: &Shared,
) -> Option<EventSet<'nvml>> {
    let mut wanted: Vec<usize> = Vec::new();
    for (position, info) in devices.iter().enumerate() {
        let supported = nvml
            .device_by_index(info.index)
            .and_then(|d| d.supported_event_types());
        match supported {
            Ok(types) if types.contains(EventTypes::CRITICAL_XID_ERROR) => wanted.push(position),
            Ok(_) | Err(WrapperError::NotSupported) => tracing::info!(
                gpu = info.index,
                uuid = %info.uuid,
                "GPU {} ({}) does not deliver XID events; hw.gpu.xid.* are left out for this GPU",
                info.index,
                info.name
            ),
            Err(e) => tracing::warn!(
                gpu = info.index,
                uuid = %info.uuid,
                error = %e,
                "cannot read GPU {}'s event types; its XID errors are not counted",
                info.index
            ),
        }
    }
    // nvml-wrapper frees the set when a registration fails: start again without the
    // device that failed (at most once per device).
    'again: while !wanted.is_empty() {
        let mut set = match nvml.create_event_set() {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %e, "cannot create an NVML event set; XID errors are not counted");
                return None;
            }
        };
        for (at, position) in wanted.iter().copied().enumerate() {
            let Some(info) = devices.get(position) else {
                continue;
            };
            let registered = nvml
                .device_by_index(info.index)
                .map_err(|e| e.into())
                .and_then(|d| d.register_events(EventTypes::CRITICAL_XID_ERROR, set));
            match registered {
                Ok(back) => set = back,
                Err(e) => {
                    tracing::warn!(
                        gpu = info.index,
                        error = %e.error,
                        "cannot register GPU {}'s XID events; its XID errors are not counted",
                        info.index
                    );
                    wanted.remove(at);
                    continue 'again;
                }
            }
        }
        let mut snapshot = shared.lock();
        for position in &wanted {
            if let Some(device) = snapshot.devices.get_mut(*position) {
                device.xid.supported = true;
            }
        }
        return Some(set);
    }
    None
}
