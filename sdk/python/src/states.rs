//! `AppState` members to the Rust [`AppState`] and back, and the argument checks that
//! turn bad input into a `TypeError` at the call.

use std::sync::OnceLock;

use higgsmeter::AppState;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The Python enum's members, in code order (idle 0 … shutdown 6), registered once by
/// the Python layer at import. A state argument is matched by identity: seven pointer
/// comparisons, no attribute look-up.
static MEMBERS: OnceLock<[Py<PyAny>; 7]> = OnceLock::new();

/// Registers `higgsmeter.AppState`'s members, in code order; the Python layer calls it
/// once at import.
#[pyfunction]
pub(crate) fn register_states(members: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
    let members: [Bound<'_, PyAny>; 7] = members.try_into().map_err(|m: Vec<_>| {
        PyValueError::new_err(format!(
            "register_states expects the 7 AppState members, got {}",
            m.len()
        ))
    })?;
    // A second registration (a reloaded module) keeps the first: members of the
    // original enum stay valid.
    let _ = MEMBERS.set(members.map(Bound::unbind));
    Ok(())
}

/// The member of `higgsmeter.AppState` for a state (the Python layer's enum).
pub(crate) fn member(py: Python<'_>, state: AppState) -> PyResult<Py<PyAny>> {
    let members = MEMBERS
        .get()
        .ok_or_else(|| PyValueError::new_err("higgsmeter._core: AppState is not registered"))?;
    Ok(members[usize::from(state.code())].clone_ref(py))
}

/// A `state` argument: an `AppState` member, else a `TypeError` that says so.
#[inline]
pub(crate) fn state_arg(state: &Bound<'_, PyAny>) -> PyResult<AppState> {
    if let Some(members) = MEMBERS.get() {
        for (member, s) in members.iter().zip(AppState::ALL) {
            if state.is(member) {
                return Ok(s);
            }
        }
    }
    Err(not_a_state(state))
}

#[cold]
fn not_a_state(state: &Bound<'_, PyAny>) -> PyErr {
    let shown = state
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let type_name = type_name(state);
    PyTypeError::new_err(format!(
        "state must be a higgsmeter.AppState member such as AppState.GPU, not {type_name} {shown}"
    ))
}

/// Calls `f` with an `operation` argument's text: a `str`, or `""` for `None` (no
/// operation); anything else is a `TypeError` that says so.
#[inline]
pub(crate) fn with_operation<R>(
    operation: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce(&str) -> R,
) -> PyResult<R> {
    match operation {
        None => Ok(f("")),
        Some(op) if op.is_none() => Ok(f("")),
        Some(op) => match op.cast::<PyString>() {
            Ok(s) => Ok(f(s.to_str()?)),
            Err(_) => Err(not_an_operation(op)),
        },
    }
}

#[cold]
fn not_an_operation(op: &Bound<'_, PyAny>) -> PyErr {
    let type_name = type_name(op);
    PyTypeError::new_err(format!(
        "operation must be a str (or None for no operation), not {type_name}"
    ))
}

/// The name of an object's type, for messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}
