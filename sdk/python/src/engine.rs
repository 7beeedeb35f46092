//! The serving-engine catalog's recorders from Python: step and transfer scopes (the
//! Rust SDK's `step_span` / `transfer_span`, recorded by its catalog layer when they
//! close) and `EngineRecorders`' typed recorders, the same names as in Rust.

use std::sync::Mutex;
use std::time::Duration;

use higgsmeter::{
    ConductorRequestsRecorder, EngineRecorders, GaugeRecorder, KvPagesRecorder,
    PrefixCacheRecorder, StepRecorder, TransferRecorder,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::traces;

fn labels_err(e: higgsmeter::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn seconds(value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!("seconds must be a finite number >= 0, not {value}"))
    })
}

/// A span-backed scope: `with step(...)` / `with transfer(...)`.
#[pyclass(module = "higgsmeter._core", name = "CatalogScope", frozen)]
pub(crate) struct CatalogScope {
    kind: Kind,
    open: Mutex<Vec<traces::Open>>,
}

enum Kind {
    Step {
        component: String,
        graph_walk: String,
        batch_size: Option<u64>,
    },
    Transfer {
        src: String,
        dst: String,
        transport: String,
        bytes: Option<u64>,
    },
}

impl CatalogScope {
    fn span(&self) -> tracing::Span {
        match &self.kind {
            Kind::Step {
                component,
                graph_walk,
                batch_size,
            } => higgsmeter::step_span(component, graph_walk, *batch_size),
            Kind::Transfer {
                src,
                dst,
                transport,
                bytes,
            } => higgsmeter::transfer_span(src, dst, transport, *bytes),
        }
    }
}

#[pymethods]
impl CatalogScope {
    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        {
            let this = slf.get();
            let open = traces::catalog_span(slf.py(), || this.span());
            this.open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(open);
        }
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner()).pop();
        traces::end(py, open);
        false
    }

    /// Records the batch size (a step) or the bytes moved (a transfer) of the open scope,
    /// when they are known only inside it.
    fn record(&self, value: u64) {
        let field = match self.kind {
            Kind::Step { .. } => "batch_size",
            Kind::Transfer { .. } => "bytes",
        };
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = open.last() {
            open.span
                .record(field, i64::try_from(value).unwrap_or(i64::MAX));
        }
    }
}

/// `with step("decoder", "decode", batch_size=8):` one engine step, into
/// `mstar_step_seconds` and `mstar_batch_size` when it closes.
#[pyfunction]
#[pyo3(signature = (component, graph_walk, batch_size = None))]
pub(crate) fn step(component: String, graph_walk: String, batch_size: Option<u64>) -> CatalogScope {
    CatalogScope {
        kind: Kind::Step {
            component,
            graph_walk,
            batch_size,
        },
        open: Mutex::new(Vec::new()),
    }
}

/// `with transfer(src, dst, transport, bytes=n):` one edge's transfer, into
/// `mstar_transfer_seconds`, `mstar_transfers_total` and `mstar_transfer_bytes_total`.
#[pyfunction]
#[pyo3(signature = (src, dst, transport, bytes = None))]
pub(crate) fn transfer(
    src: String,
    dst: String,
    transport: String,
    bytes: Option<u64>,
) -> CatalogScope {
    CatalogScope {
        kind: Kind::Transfer {
            src,
            dst,
            transport,
            bytes,
        },
        open: Mutex::new(Vec::new()),
    }
}

/// Every engine instrument, built once from the catalog on the global meter provider
/// (the pipeline `enable_tracker` starts; made before it, they record nowhere).
#[pyclass(module = "higgsmeter._core", name = "EngineRecorders", frozen)]
pub(crate) struct PyEngineRecorders {
    inner: EngineRecorders,
}

#[pymethods]
impl PyEngineRecorders {
    #[new]
    fn new() -> Self {
        PyEngineRecorders {
            inner: EngineRecorders::new(&opentelemetry::global::meter("higgsmeter")),
        }
    }

    /// `mstar_step_seconds` and `mstar_batch_size` for one (component, graph_walk).
    fn step(&self, component: &str, graph_walk: &str) -> PyResult<PyStepRecorder> {
        self.inner
            .step(component, graph_walk)
            .map(|inner| PyStepRecorder { inner })
            .map_err(labels_err)
    }

    /// The transfer families for one edge.
    fn transfer(&self, src: &str, dst: &str, transport: &str) -> PyResult<PyTransferRecorder> {
        self.inner
            .transfer(src, dst, transport)
            .map(|inner| PyTransferRecorder { inner })
            .map_err(labels_err)
    }

    /// The prefix-cache token counters of one component.
    fn prefix_cache(&self, component: &str) -> PyResult<PyPrefixCacheRecorder> {
        self.inner
            .prefix_cache(component)
            .map(|inner| PyPrefixCacheRecorder { inner })
            .map_err(labels_err)
    }

    /// The paged KV cache gauges of one (component, resource).
    fn kv_pages(&self, component: &str, resource: &str) -> PyResult<PyKvPagesRecorder> {
        self.inner
            .kv_pages(component, resource)
            .map(|inner| PyKvPagesRecorder { inner })
            .map_err(labels_err)
    }

    /// `mstar_component_pending_steps` of one component.
    fn pending_steps(&self, component: &str) -> PyResult<PyGaugeRecorder> {
        self.inner
            .pending_steps(component)
            .map(|inner| PyGaugeRecorder { inner })
            .map_err(labels_err)
    }

    /// `mstar_component_in_flight` of one component.
    fn in_flight(&self, component: &str) -> PyResult<PyGaugeRecorder> {
        self.inner
            .in_flight(component)
            .map(|inner| PyGaugeRecorder { inner })
            .map_err(labels_err)
    }

    /// `mstar_conductor_requests` for waiting, running and draining.
    fn conductor_requests(&self) -> PyResult<PyConductorRequestsRecorder> {
        self.inner
            .conductor_requests()
            .map(|inner| PyConductorRequestsRecorder { inner })
            .map_err(labels_err)
    }
}

/// Records engine steps of one (component, graph_walk).
#[pyclass(module = "higgsmeter._core", name = "StepRecorder", frozen)]
pub(crate) struct PyStepRecorder {
    inner: StepRecorder,
}

#[pymethods]
impl PyStepRecorder {
    /// One step of `seconds`, with its batch size if known.
    #[pyo3(signature = (seconds, batch_size = None))]
    fn record(&self, seconds: f64, batch_size: Option<u64>) -> PyResult<()> {
        self.inner.record(self::seconds(seconds)?, batch_size);
        Ok(())
    }
}

/// Records transfers of one edge.
#[pyclass(module = "higgsmeter._core", name = "TransferRecorder", frozen)]
pub(crate) struct PyTransferRecorder {
    inner: TransferRecorder,
}

#[pymethods]
impl PyTransferRecorder {
    /// One transfer of `bytes` that took `seconds`.
    fn record(&self, seconds: f64, bytes: u64) -> PyResult<()> {
        self.inner.record(self::seconds(seconds)?, bytes);
        Ok(())
    }
}

/// The prefix-cache counters of one component.
#[pyclass(module = "higgsmeter._core", name = "PrefixCacheRecorder", frozen)]
pub(crate) struct PyPrefixCacheRecorder {
    inner: PrefixCacheRecorder,
}

#[pymethods]
impl PyPrefixCacheRecorder {
    /// One lookup: tokens queried and tokens found in the cache.
    fn record_lookup(&self, query_tokens: u64, hit_tokens: u64) {
        self.inner.record_lookup(query_tokens, hit_tokens);
    }
}

/// The KV page gauges of one (component, resource).
#[pyclass(module = "higgsmeter._core", name = "KvPagesRecorder", frozen)]
pub(crate) struct PyKvPagesRecorder {
    inner: KvPagesRecorder,
}

#[pymethods]
impl PyKvPagesRecorder {
    /// Total, used and cached pages now.
    fn set(&self, total: u64, used: u64, cached: u64) {
        self.inner.set(total, used, cached);
    }
}

/// One gauge series of the catalog.
#[pyclass(module = "higgsmeter._core", name = "GaugeRecorder", frozen)]
pub(crate) struct PyGaugeRecorder {
    inner: GaugeRecorder,
}

#[pymethods]
impl PyGaugeRecorder {
    /// The value now.
    fn set(&self, value: u64) {
        self.inner.set(value);
    }
}

/// The conductor's request gauges.
#[pyclass(
    module = "higgsmeter._core",
    name = "ConductorRequestsRecorder",
    frozen
)]
pub(crate) struct PyConductorRequestsRecorder {
    inner: ConductorRequestsRecorder,
}

#[pymethods]
impl PyConductorRequestsRecorder {
    /// Requests waiting, running and draining now.
    fn set(&self, waiting: u64, running: u64, draining: u64) {
        self.inner.set(waiting, running, draining);
    }
}
