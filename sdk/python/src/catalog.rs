//! The serving engine's catalog (`mstar.observability.catalog`) for the Python layer:
//! the families of `higgsmeter-catalog`, as plain tuples, so `higgsmeter.catalog` builds
//! its `Family` dataclasses from the one Rust list and cannot drift from it.

use higgsmeter::catalog::{self, Family};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// One family as `(name, kind, help, labels, buckets)`: the seed's `Family` fields.
fn family_tuple<'py>(py: Python<'py>, family: &Family) -> PyResult<Bound<'py, PyTuple>> {
    let labels = PyTuple::new(py, family.labels)?;
    let buckets = PyTuple::new(py, family.buckets)?;
    (
        family.name,
        family.kind.as_str(),
        family.help,
        labels,
        buckets,
    )
        .into_pyobject(py)
}

/// A group of families, as tuples, in the catalog's order.
type Group<'py> = Vec<Bound<'py, PyTuple>>;

fn group<'py>(py: Python<'py>, families: &[Family]) -> PyResult<Group<'py>> {
    families.iter().map(|f| family_tuple(py, f)).collect()
}

/// The engine families as `(WORKER_FAMILIES, STATUS_FAMILIES)`, each a list of
/// `(name, kind, help, labels, buckets)` tuples in the catalog's order.
#[pyfunction]
pub(crate) fn engine_families(py: Python<'_>) -> PyResult<(Group<'_>, Group<'_>)> {
    Ok((
        group(py, catalog::WORKER_FAMILIES)?,
        group(py, catalog::STATUS_FAMILIES)?,
    ))
}

/// Adds the engine catalog's constants to the module (`CONDUCTOR_REQUEST_STATES`,
/// `STATUS_INTERVAL_S`, `TRANSFER_API_SERVER`) and `engine_families`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add(
        "CONDUCTOR_REQUEST_STATES",
        PyTuple::new(py, catalog::CONDUCTOR_REQUEST_STATES)?,
    )?;
    m.add("STATUS_INTERVAL_S", catalog::STATUS_INTERVAL_S)?;
    m.add("TRANSFER_API_SERVER", catalog::TRANSFER_API_SERVER)?;
    m.add_function(wrap_pyfunction!(engine_families, m)?)?;
    Ok(())
}
