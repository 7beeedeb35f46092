//! `Tracker` and `StateScope`: the Python face of [`higgsmeter::Tracker`].

use std::sync::Mutex;

use higgsmeter::{AppState, ScopeId, Tracker};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::states::{member, state_arg, with_operation};
use crate::traces;

/// One worker's timeline (the Rust `higgsmeter::Tracker`): at every instant in exactly
/// one (state, operation). The Python layer's `StateTracker` subclasses it.
#[pyclass(module = "higgsmeter._core", name = "Tracker", subclass, frozen)]
pub(crate) struct PyTracker {
    pub(crate) inner: Tracker,
}

#[pymethods]
impl PyTracker {
    /// A tracker: the process-wide one (`process_wide=True`, what `state_tracker`
    /// wraps; its enabled flag is left as it is) or a timeline of its own, on or off as
    /// `enabled` says.
    #[new]
    #[pyo3(signature = (enabled = false, *, process_wide = false))]
    fn new(enabled: bool, process_wide: bool) -> Self {
        let inner = if process_wide {
            higgsmeter::state_tracker().clone()
        } else {
            let t = Tracker::new();
            t.set_enabled(enabled);
            t
        };
        PyTracker { inner }
    }

    /// Switches the current state: with no scope open, the base state; inside scopes,
    /// the frame of the most recently opened one.
    #[pyo3(signature = (new_state, operation = None))]
    fn set_state(
        &self,
        new_state: &Bound<'_, PyAny>,
        operation: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let state = state_arg(new_state)?;
        with_operation(operation, |op| self.inner.set_state(state, op))
    }

    /// A context manager: in `state` from `__enter__` until `__exit__`.
    #[pyo3(signature = (state, operation = None))]
    fn scope(
        &self,
        state: &Bound<'_, PyAny>,
        operation: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<StateScope> {
        let state = state_arg(state)?;
        let operation = with_operation(operation, str::to_owned)?;
        Ok(StateScope {
            tracker: self.inner.clone(),
            state,
            operation,
            open: Mutex::new(Vec::new()),
        })
    }

    /// Commits the time spent so far (idempotent: calling it twice counts nothing twice).
    fn finalize(&self) {
        self.inner.finalize();
    }

    /// Whether tracking is on.
    #[getter]
    fn enabled(&self) -> bool {
        self.inner.is_enabled()
    }

    #[setter]
    fn set_enabled(&self, enabled: bool) {
        self.inner.set_enabled(enabled);
    }

    /// The current state, an `AppState` member.
    #[getter]
    fn current_state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        member(py, self.inner.current_state())
    }

    /// The current operation (`""` for none).
    #[getter]
    fn current_operation(&self) -> String {
        self.inner.current().1.to_string()
    }

    /// `(entries, current_code, elapsed_seconds)`: every (state name, operation,
    /// seconds) visited, the current state's live time included; the current state's
    /// code; the seconds since the tracker was made (the entries sum to it).
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let snap = self.inner.snapshot();
        let entries: Vec<(&'static str, String, f64)> = snap
            .entries()
            .iter()
            .map(|e| (e.state.as_str(), e.operation.to_string(), e.seconds()))
            .collect();
        let current = snap.current().0.code();
        (entries, current, snap.elapsed().as_secs_f64()).into_pyobject(py)
    }
}

/// A state scope: `with tracker.scope(AppState.GPU, "x"):`. The scope opens at
/// `__enter__` (not when it is made) and closes at `__exit__`, exception or not; one
/// object can be entered again, also while it is open (each `__exit__` closes the
/// latest entry).
#[pyclass(module = "higgsmeter._core", name = "StateScope", frozen)]
pub(crate) struct StateScope {
    tracker: Tracker,
    state: AppState,
    operation: String,
    /// Open entries, latest last: the tracker's scope and, with traces on, the span.
    open: Mutex<Vec<(ScopeId, Option<traces::Open>)>>,
}

#[pymethods]
impl StateScope {
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        {
            let this = slf.get();
            let span = traces::state_span(slf.py(), this.state, &this.operation);
            let id = this.tracker.open_scope(this.state, &this.operation);
            this.open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((id, span));
        }
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        let entry = self.open.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some((id, span)) = entry {
            self.tracker.close_scope(id);
            traces::end(py, span);
        }
        false
    }

    /// The scope's state, an `AppState` member.
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        member(py, self.state)
    }

    /// The scope's operation (`None` for none).
    #[getter]
    fn operation(&self) -> Option<&str> {
        (!self.operation.is_empty()).then_some(self.operation.as_str())
    }

    fn __repr__(&self) -> String {
        format!(
            "StateScope(AppState.{}, {:?})",
            self.state.as_str().to_ascii_uppercase(),
            self.operation
        )
    }
}
