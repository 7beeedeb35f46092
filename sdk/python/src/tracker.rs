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
        // Checked here (a `TypeError` at the call); read again at `__enter__`, which
        // keeps a reference to the `str` rather than a copy of it.
        with_operation(operation, |_| ())?;
        let operation = operation
            .filter(|op| !op.is_none())
            .map(|op| op.clone().unbind());
        Ok(StateScope {
            tracker: self.inner.clone(),
            state,
            operation,
            open: Mutex::new(Open::default()),
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
    /// The operation (`None` for none), a checked `str`.
    operation: Option<Py<PyAny>>,
    open: Mutex<Open>,
}

/// A scope object's open entries: the tracker's scope and, with traces on, the span.
/// The first is kept inline, so the usual `with` allocates nothing; entering the same
/// object again while it is open spills to `more`.
#[derive(Default)]
struct Open {
    first: Option<Entry>,
    more: Vec<Entry>,
}

type Entry = (ScopeId, Option<traces::Open>);

impl Open {
    fn push(&mut self, entry: Entry) {
        match self.first {
            None => self.first = Some(entry),
            Some(_) => self.more.push(entry),
        }
    }

    fn pop(&mut self) -> Option<Entry> {
        self.more.pop().or_else(|| self.first.take())
    }
}

impl StateScope {
    /// Calls `f` with the operation's text (`""` for none).
    fn with_operation<R>(&self, py: Python<'_>, f: impl FnOnce(&str) -> R) -> R {
        match &self.operation {
            None => f(""),
            // Checked to be a `str` when the scope was made; a `str` is immutable.
            Some(op) => match op.bind(py).cast::<pyo3::types::PyString>() {
                Ok(s) => f(s.to_str().unwrap_or("")),
                Err(_) => f(""),
            },
        }
    }
}

#[pymethods]
impl StateScope {
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        {
            let this = slf.get();
            let py = slf.py();
            let entry = this.with_operation(py, |op| {
                let span = traces::state_span(py, this.state, op);
                (this.tracker.open_scope(this.state, op), span)
            });
            this.open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(entry);
        }
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
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
    fn operation(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.operation.as_ref().map(|op| op.clone_ref(py))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.with_operation(py, |op| {
            format!(
                "StateScope(AppState.{}, {op:?})",
                self.state.as_str().to_ascii_uppercase(),
            )
        })
    }
}
