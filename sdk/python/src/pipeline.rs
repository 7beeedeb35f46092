//! The OpenTelemetry pipeline of a Python worker: `higgsmeter::init()`'s, started once
//! by `enable_tracker` on a tracking rank, flushed by `finalize()`, shut down at exit.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use higgsmeter::Telemetry;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::ConfigError;
use crate::traces;
use crate::tracker::PyTracker;

/// The running pipeline, if `init` started one. The lock is held only to read or swap
/// the slot (never while building a pipeline, flushing one, or taking the GIL), and
/// every `fork()` takes it first (`register_fork_handler`), so a forked child always
/// finds it free.
static TELEMETRY: Mutex<Option<Shared>> = Mutex::new(None);

/// The pipeline, shared with a flush in progress (the guard is `Send`, not `Sync`).
type Shared = Arc<Mutex<Telemetry>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Telemetry> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

fn telemetry() -> std::sync::MutexGuard<'static, Option<Shared>> {
    TELEMETRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes every `fork()` of this process hold the pipeline's slot across the fork (see
/// `higgsmeter::fork`): a flush thread of the parent's may hold it at that instant.
/// Called once, when the module is imported.
pub(crate) fn register_fork_handler() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| higgsmeter::fork::hold_across_fork(|| Box::new(telemetry())));
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
    // Built with the slot released (the GIL is taken back before the slot is filled):
    // callers serialize `init` (the Python tracker's lock); of two racing calls, the
    // second's pipeline is shut down and the first's reported.
    if telemetry().is_none() {
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
        let traces_on = subscriber && t.trace_counts().is_some();
        let ours = Arc::new(Mutex::new(t));
        let lost = {
            let mut slot = telemetry();
            if slot.is_none() {
                *slot = Some(ours);
                None
            } else {
                Some(ours)
            }
        };
        match lost {
            None => {
                started = true;
                traces::set_on(traces_on);
                if !subscriber {
                    warn(
                        py,
                        "higgsmeter: a tracing subscriber is already installed in this \
                         process (another library's, or the one of the process this one \
                         was forked from); states are tracked and exported, but engine \
                         step/transfer spans and traces are not recorded",
                    );
                }
            }
            Some(ours) => py.detach(|| drop(ours)),
        }
    }
    // Read without the GIL: a flush in progress holds the pipeline.
    let running = py.detach(|| {
        let current = telemetry().clone()?;
        let t = lock(&current);
        let otlp = Telemetry::builder().exports().is_ok_and(|e| e.otlp);
        Some((
            t.meter_provider().is_some() && otlp,
            t.prometheus_addr().map(|a| a.to_string()),
            t.trace_counts().is_some(),
            t.gpu_meter().is_some(),
        ))
    });
    let info = PyDict::new(py);
    if let Some((otlp, prometheus_addr, traces, gpu_meter)) = running {
        info.set_item("otlp", otlp)?;
        info.set_item("prometheus_addr", prometheus_addr)?;
        info.set_item("traces", traces)?;
        info.set_item("gpu_meter", gpu_meter)?;
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
    // Free: every fork takes it first (`register_fork_handler`); `try_lock` all the
    // same, so that this can never wait.
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
