//! `Tracker` and `StateScope`: the Python face of [`higgsmeter::Tracker`], its goodput
//! marks ([`higgsmeter::job`]) included.

use std::sync::Mutex;

use higgsmeter::catalog::{
    JOB_CHECKPOINT_PRODUCTIVE, JOB_CHECKPOINT_STEP, JOB_RESTORED_STEP, JOB_STEP,
};
use higgsmeter::job::{CHECKPOINT_RESTORE_OPERATION, CHECKPOINT_SAVE_OPERATION};
use higgsmeter::{AppState, ScopeId, Tracker};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyTuple};

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
            mark: None,
            open: Mutex::new(Open::default()),
        })
    }

    /// Records `step` as the last training step completed (`higgsmeter_job_step`).
    fn record_step(&self, step: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.record_step(step_arg(step)?);
        Ok(())
    }

    /// A context manager: a checkpoint save of `step`, `io` with operation
    /// `checkpoint_save`; an `__exit__` without an exception records the checkpoint's
    /// marks (its step and the `gpu` seconds so far).
    fn checkpoint_save(&self, py: Python<'_>, step: &Bound<'_, PyAny>) -> PyResult<StateScope> {
        let step = step_arg(step)?;
        Ok(self.marked_scope(py, CHECKPOINT_SAVE_OPERATION, Mark::Saved(step)))
    }

    /// A context manager: a checkpoint restore of `step`, `io` with operation
    /// `checkpoint_restore`; an `__exit__` without an exception records the restored
    /// step.
    fn checkpoint_restore(&self, py: Python<'_>, step: &Bound<'_, PyAny>) -> PyResult<StateScope> {
        let step = step_arg(step)?;
        Ok(self.marked_scope(py, CHECKPOINT_RESTORE_OPERATION, Mark::Restored(step)))
    }

    /// A context manager: custom badput, operation `badput.<cause>`, in `state` (`cpu`
    /// when `None`).
    #[pyo3(signature = (cause, state = None))]
    fn badput(
        &self,
        py: Python<'_>,
        cause: &Bound<'_, PyAny>,
        state: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<StateScope> {
        let state = match state {
            Some(s) if !s.is_none() => state_arg(s)?,
            _ => AppState::Cpu,
        };
        let cause = cause.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "cause must be a str such as 'evaluation', not {}",
                cause
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "?".to_owned())
            ))
        })?;
        let operation = higgsmeter::job::badput_operation(cause.to_str()?);
        Ok(StateScope {
            tracker: self.inner.clone(),
            state,
            operation: Some(PyString::new(py, &operation).into_any().unbind()),
            mark: None,
            open: Mutex::new(Open::default()),
        })
    }

    /// The goodput marks set so far: `{family name: value}` (a step as an `int`, the
    /// checkpoint's productive seconds as a `float`); a mark never set is absent.
    fn job_marks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let marks = self.inner.job_marks();
        let out = PyDict::new(py);
        if let Some(step) = marks.step {
            out.set_item(JOB_STEP.name, step)?;
        }
        if let Some(step) = marks.checkpoint_step {
            out.set_item(JOB_CHECKPOINT_STEP.name, step)?;
        }
        if let Some(gpu) = marks.checkpoint_productive {
            out.set_item(JOB_CHECKPOINT_PRODUCTIVE.name, gpu.as_nanos() as f64 / 1e9)?;
        }
        if let Some(step) = marks.restored_step {
            out.set_item(JOB_RESTORED_STEP.name, step)?;
        }
        Ok(out)
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

impl PyTracker {
    /// An `io` scope with `operation` that records `mark` when it exits cleanly.
    fn marked_scope(&self, py: Python<'_>, operation: &str, mark: Mark) -> StateScope {
        StateScope {
            tracker: self.inner.clone(),
            state: AppState::Io,
            operation: Some(PyString::new(py, operation).into_any().unbind()),
            mark: Some(mark),
            open: Mutex::new(Open::default()),
        }
    }
}

/// A `step` argument: an `int` >= 0 (a `bool` is not a step).
fn step_arg(step: &Bound<'_, PyAny>) -> PyResult<u64> {
    if step.is_instance_of::<PyInt>() && !step.is_instance_of::<PyBool>() {
        step.extract::<u64>().map_err(|_| {
            PyValueError::new_err(format!("step must be a whole number >= 0, not {step}"))
        })
    } else {
        let type_name = step
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".to_owned());
        Err(PyTypeError::new_err(format!(
            "step must be an int (the training step), not {type_name}"
        )))
    }
}

/// What a checkpoint's scope records when it exits without an exception.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// A checkpoint of this step saved.
    Saved(u64),
    /// A checkpoint of this step restored.
    Restored(u64),
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
    /// A checkpoint's mark, recorded at each `__exit__` without an exception.
    mark: Option<Mark>,
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
        exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> bool {
        let entry = self.open.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some((id, span)) = entry {
            self.tracker.close_scope(id);
            traces::end(py, span);
            // After the scope closed: a save's gpu seconds are those at its end. A save
            // or restore that raised records nothing.
            match self.mark {
                Some(Mark::Saved(step)) if exc_type.is_none() => {
                    self.tracker.checkpoint_saved(step);
                }
                Some(Mark::Restored(step)) if exc_type.is_none() => {
                    self.tracker.checkpoint_restored(step);
                }
                _ => {}
            }
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

/// Calls `func(*args, **kwargs)` in `state` with `operation` on `tracker`: what
/// `@track_state` does for a plain function, without a scope object or the `with`
/// protocol (the two bound methods and calls every context manager costs). The state
/// opens before the call and closes after it, whether it returns or raises (the
/// exception goes on unchanged); with traces on, a span covers it as a scope's does.
#[pyfunction]
pub(crate) fn call_in_state<'py>(
    tracker: &Bound<'py, PyTracker>,
    state: &Bound<'py, PyAny>,
    operation: &Bound<'py, PyString>,
    func: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tracker.py();
    let state = state_arg(state)?;
    let tracker = &tracker.get().inner;
    let (span, id) = {
        let op = operation.to_str()?;
        let span = traces::state_span(py, state, op);
        (span, tracker.open_scope(state, op))
    };
    let kwargs = kwargs.filter(|k| !k.is_empty());
    let result = func.call(args, kwargs);
    tracker.close_scope(id);
    traces::end(py, span);
    result
}
