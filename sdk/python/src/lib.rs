//! `higgsmeter._core`: the native core of the Python package `higgsmeter`.
//!
//! The package puts the Rust SDK behind the Python `higgsmeter` 0.1.1 API. Everything
//! that counts, times or exports is here, over the `higgsmeter` crate: the tracker
//! (`Tracker`, `StateScope`, the goodput marks), the OpenTelemetry pipeline (`init`, `flush`, `shutdown`),
//! the engine catalog's recorders and spans, the NVML meter and traces, the engine
//! catalog's families (`higgsmeter.catalog`) and the lab agent's session counters
//! (`higgsmeter.lab`). The Python layer (`python/higgsmeter/`) adds what Python idiom wants: the `AppState` enum, the
//! `track_state` decorator for plain, async, generator and async-generator functions,
//! the `state_tracker` proxy and the `prometheus_client` collector.
//!
//! Nothing here panics into Python: bad arguments are `TypeError` / `ValueError` at the
//! call, a bad setting is `ConfigError`, an export failure is logged by the SDK and
//! never raised; anything that may block (starting exporters, flushing) runs without
//! the GIL and with a deadline.
//!
//! Build: `pip install ./sdk/python` (maturin, an abi3 wheel for CPython 3.10+).

mod catalog;
mod engine;
mod lab;
mod pipeline;
mod states;
mod traces;
mod tracker;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

pyo3::create_exception!(
    _core,
    ConfigError,
    pyo3::exceptions::PyValueError,
    "A higgsmeter setting (an OTEL_* or HIGGSMETER_* variable) is invalid."
);

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    traces::setup(py)?;
    // The Python package starts off, as the seed's did: nothing is tracked (or claimed
    // by `worker_current_state`) before `enable_tracker` on a tracking rank.
    higgsmeter::state_tracker().set_enabled(false);
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    // The activity families' names and help texts, from the catalog (nothing else
    // spells them): the Python layer's prometheus_client collector uses these.
    let (activity, current) = (
        higgsmeter::catalog::WORKER_ACTIVITY_TIME,
        higgsmeter::catalog::WORKER_CURRENT_STATE,
    );
    m.add("ACTIVITY_NAME", activity.name)?;
    m.add("ACTIVITY_HELP", activity.help)?;
    m.add("ACTIVITY_LABELS", activity.labels.to_vec())?;
    m.add("CURRENT_STATE_NAME", current.name)?;
    m.add("CURRENT_STATE_HELP", current.help)?;
    // The goodput marks' gauges, `(name, help)` in the catalog's order, and the
    // operations the collector's job view reads.
    let job_gauges: Vec<(&str, &str)> = higgsmeter::catalog::JOB_FAMILIES
        .iter()
        .map(|f| (f.name, f.help))
        .collect();
    m.add("JOB_GAUGES", job_gauges)?;
    m.add(
        "CHECKPOINT_SAVE_OPERATION",
        higgsmeter::job::CHECKPOINT_SAVE_OPERATION,
    )?;
    m.add(
        "CHECKPOINT_RESTORE_OPERATION",
        higgsmeter::job::CHECKPOINT_RESTORE_OPERATION,
    )?;
    m.add(
        "CUSTOM_BADPUT_PREFIX",
        higgsmeter::job::CUSTOM_BADPUT_PREFIX,
    )?;
    m.add(
        "BADPUT_CAUSES",
        PyTuple::new(py, higgsmeter::job::BADPUT_CAUSES)?,
    )?;
    m.add_class::<tracker::PyTracker>()?;
    m.add_class::<tracker::StateScope>()?;
    m.add_class::<traces::SpanRef>()?;
    m.add_class::<engine::CatalogScope>()?;
    m.add_class::<engine::PyEngineRecorders>()?;
    m.add_class::<engine::PyStepRecorder>()?;
    m.add_class::<engine::PyTransferRecorder>()?;
    m.add_class::<engine::PyPrefixCacheRecorder>()?;
    m.add_class::<engine::PyKvPagesRecorder>()?;
    m.add_class::<engine::PyGaugeRecorder>()?;
    m.add_class::<engine::PyConductorRequestsRecorder>()?;
    m.add_function(wrap_pyfunction!(states::register_states, m)?)?;
    m.add_function(wrap_pyfunction!(tracker::call_in_state, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::init, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::configured_exports, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::flush, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::running, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::forget_after_fork, m)?)?;
    pipeline::register_fork_handler();
    m.add_function(wrap_pyfunction!(engine::step, m)?)?;
    m.add_function(wrap_pyfunction!(engine::transfer, m)?)?;
    catalog::register(m)?;
    lab::register(m)?;
    Ok(())
}
