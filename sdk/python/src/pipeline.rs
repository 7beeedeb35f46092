//! The OpenTelemetry pipeline of a Python worker: `higgsmeter::init()`'s, started once
//! by `enable_tracker` on a tracking rank, flushed by `finalize()`, shut down at exit.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use higgsmeter::Telemetry;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::ConfigError;
use crate::traces;
use crate::tracker::PyTracker;

/// The running pipeline, if `init` started one. The lock is held only to read or swap
/// the slot (a flush works on a clone), so a `fork()` never finds it held for long.
static TELEMETRY: Mutex<Option<Shared>> = Mutex::new(None);

/// The pipeline, shared with a flush in progress (the guard is `Send`, not `Sync`).
type Shared = Arc<Mutex<Telemetry>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Telemetry> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

fn telemetry() -> std::sync::MutexGuard<'static, Option<Shared>> {
    TELEMETRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the pipeline would export, from the environment, without starting anything:
/// `{"otlp": bool, "prometheus": bool, "traces": bool}` (all false with
/// `OTEL_SDK_DISABLED=true`). A bad setting raises `ConfigError`, as `init` would.
#[pyfunction]
pub(crate) fn configured_exports(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let exports = Telemetry::builder()
        .exports()
        .map_err(|e| ConfigError::new_err(e.to_string()))?;
    let out = PyDict::new(py);
    out.set_item("otlp", exports.otlp)?;
    out.set_item("prometheus", exports.prometheus)?;
    out.set_item("traces", exports.traces)?;
    Ok(out)
}

/// Starts the pipeline for `tracker` from the environment (the Rust SDK's variables: `OTEL_*`,
/// `HIGGSMETER_PROMETHEUS_ADDR`, `RANK`, …) unless it runs already. `rank`, when
/// given, is the `rank` resource attribute (else `RANK`); `service_name` is used when
/// neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names the service;
/// `gpu_meter` starts the NVML meter. Returns what runs, as a dict: `otlp` (bool),
/// `prometheus_addr` (str or None), `traces` (bool), `gpu_meter` (bool),
/// `started` (false when it was running already). A bad setting raises `ConfigError`.
#[pyfunction]
#[pyo3(signature = (tracker, rank = None, service_name = None, gpu_meter = false))]
pub(crate) fn init<'py>(
    py: Python<'py>,
    tracker: &PyTracker,
    rank: Option<i64>,
    service_name: Option<String>,
    gpu_meter: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let mut started = false;
    {
        let mut slot = telemetry();
        if slot.is_none() {
            let make = || {
                let mut b = Telemetry::builder()
                    .with_tracker(tracker.inner.clone())
                    .with_gpu_meter(gpu_meter)
                    .with_resource_attribute("telemetry.sdk.language", "python");
                if let Some(rank) = rank {
                    b = b.with_resource_attribute("rank", rank);
                }
                if let Some(name) = &service_name {
                    b = b.with_default_service_name(name.clone());
                }
                b
            };
            // Builds exporters, binds the Prometheus port, starts threads: without the GIL.
            let built = py.detach(|| match make().init() {
                // Another library of this process installed a global `tracing`
                // subscriber: state time does not need one (Python scopes go to the
                // tracker directly); step and transfer spans and traces do, and are off.
                Err(higgsmeter::Error::SubscriberAlreadySet) => {
                    make().with_subscriber(false).init().map(|t| (t, false))
                }
                other => other.map(|t| (t, true)),
            });
            let (t, subscriber) = built.map_err(|e| ConfigError::new_err(e.to_string()))?;
            if !subscriber {
                warn(
                    py,
                    "higgsmeter: a tracing subscriber is already installed in this process \
                     (another library's, or the one of the process this one was forked \
                     from); states are tracked and exported, but engine step/transfer \
                     spans and traces are not recorded",
                );
            }
            traces::set_on(subscriber && t.trace_counts().is_some());
            *slot = Some(Arc::new(Mutex::new(t)));
            started = true;
        }
    }
    let current = telemetry().clone();
    let info = PyDict::new(py);
    if let Some(t) = current.as_ref().map(lock) {
        let otlp = Telemetry::builder().exports().is_ok_and(|e| e.otlp);
        info.set_item("otlp", t.meter_provider().is_some() && otlp)?;
        info.set_item(
            "prometheus_addr",
            t.prometheus_addr().map(|a| a.to_string()),
        )?;
        info.set_item("traces", t.trace_counts().is_some())?;
        info.set_item("gpu_meter", t.gpu_meter().is_some())?;
    }
    info.set_item("started", started)?;
    Ok(info)
}

fn warn(py: Python<'_>, message: &str) {
    let _ = py.import("warnings").and_then(|w| {
        w.call_method1(
            "warn",
            (
                message,
                py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
                2,
            ),
        )
    });
}

/// Exports now to every push exporter, waiting at most `timeout` seconds (the export
/// goes on in the background past that). Returns whether it finished in time. Never
/// raises: an export failure is logged by the SDK. The GIL is released meanwhile.
#[pyfunction]
#[pyo3(signature = (timeout = 5.0))]
pub(crate) fn flush(py: Python<'_>, timeout: f64) -> bool {
    let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
    py.detach(|| {
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("higgsmeter-py-flush".into())
            .spawn(move || {
                let current = telemetry().clone();
                if let Some(t) = current {
                    lock(&t).force_flush();
                }
                let _ = tx.send(());
            });
        spawned.is_ok() && rx.recv_timeout(timeout).is_ok()
    })
}

/// Stops the pipeline: commits the time so far, makes the final export and shuts
/// every exporter down, waiting at most `timeout` seconds. Registered with `atexit`,
/// so a short-lived rank's last seconds arrive. Never raises.
#[pyfunction]
#[pyo3(signature = (timeout = 10.0))]
pub(crate) fn shutdown(py: Python<'_>, timeout: f64) -> bool {
    let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
    traces::set_on(false);
    let Some(t) = telemetry().take() else {
        return true;
    };
    // The last clone to drop (this one, or a flush's still running) makes the final
    // export and shuts the exporters down.
    py.detach(|| {
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("higgsmeter-py-shutdown".into())
            .spawn(move || {
                drop(t);
                let _ = tx.send(());
            });
        spawned.is_ok() && rx.recv_timeout(timeout).is_ok()
    })
}

/// In a child process just forked: forgets the parent's pipeline without touching it.
/// Its exporter threads were not copied by `fork()`, so shutting it down would wait on
/// threads that do not exist; it is leaked instead (the child's copy of its memory).
/// Registered with `os.register_at_fork(after_in_child=...)`.
#[pyfunction]
pub(crate) fn forget_after_fork() {
    traces::set_on(false);
    // Held at the instant of the fork by a thread that does not exist here: leave it.
    if let Ok(mut slot) = TELEMETRY.try_lock()
        && let Some(t) = slot.take()
    {
        std::mem::forget(t);
    }
}

/// The running pipeline's meter provider, if one runs and exports metrics.
pub(crate) fn meter_provider() -> Option<opentelemetry_sdk::metrics::SdkMeterProvider> {
    let current = telemetry().clone()?;
    lock(&current).meter_provider().cloned()
}

/// Whether a pipeline runs.
#[pyfunction]
pub(crate) fn running() -> bool {
    telemetry().is_some()
}
