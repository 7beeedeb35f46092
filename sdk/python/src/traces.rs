//! Spans for traces (`OTEL_TRACES_EXPORTER=otlp`), nested as the Python code nests them.
//!
//! A Python scope is accounted by the tracker directly ([`higgsmeter::Tracker::open_scope`]);
//! only while a trace pipeline runs does it also make a `tracing` span, exported by the
//! Rust SDK's trace layer. Python threads never enter Rust spans, and asyncio tasks
//! share one thread, so the parent is not the thread's current span but the value of a
//! `contextvars.ContextVar`: per thread and per asyncio task, as Python code expects.
//! The span carries tracker id 0, which no tracker has, so the activity layer leaves
//! it alone and the time is counted once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use higgsmeter::AppState;
use pyo3::prelude::*;

/// Whether a trace pipeline runs (set by `init`).
static ON: AtomicBool = AtomicBool::new(false);

/// The `contextvars.ContextVar` holding the current span ([`SpanRef`]) of this thread
/// or asyncio task.
static CURRENT: OnceLock<Py<PyAny>> = OnceLock::new();

/// Turns span-making on or off (the pipeline started or stopped).
pub(crate) fn set_on(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Makes the context variable; called once at import.
pub(crate) fn setup(py: Python<'_>) -> PyResult<()> {
    if CURRENT.get().is_none() {
        let var = py
            .import("contextvars")?
            .getattr("ContextVar")?
            .call1(("higgsmeter_current_span",))?;
        let _ = CURRENT.set(var.unbind());
    }
    Ok(())
}

/// A span held by the context variable.
#[pyclass(module = "higgsmeter._core", name = "SpanRef", frozen)]
pub(crate) struct SpanRef {
    span: tracing::Span,
}

/// An open span and the context variable's token that restores the parent.
pub(crate) struct Open {
    pub(crate) span: tracing::Span,
    token: Option<Py<PyAny>>,
}

/// The current span of this thread or asyncio task, if any.
fn parent(py: Python<'_>) -> Option<tracing::Span> {
    let var = CURRENT.get()?.bind(py);
    let current = var.call_method1("get", (py.None(),)).ok()?;
    let span = current.cast::<SpanRef>().ok()?;
    Some(span.get().span.clone())
}

/// Makes `make`'s span a child of the current one and the current one itself.
fn open(py: Python<'_>, make: impl FnOnce() -> tracing::Span) -> Open {
    let span = match parent(py) {
        Some(parent) => parent.in_scope(make),
        None => make(),
    };
    let token = CURRENT.get().and_then(|var| {
        let handle = Bound::new(py, SpanRef { span: span.clone() }).ok()?;
        var.bind(py)
            .call_method1("set", (handle,))
            .ok()
            .map(Bound::unbind)
    });
    Open { span, token }
}

/// A state span for a Python scope (None while no trace pipeline runs).
#[inline]
pub(crate) fn state_span(py: Python<'_>, state: AppState, operation: &str) -> Option<Open> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    Some(open(py, || {
        higgsmeter::__private::untracked_state_span(state, operation)
    }))
}

/// A step or transfer span: always made (the catalog layer records it when it
/// closes), a child of the current span while traces are on.
pub(crate) fn catalog_span(py: Python<'_>, make: impl FnOnce() -> tracing::Span) -> Open {
    if ON.load(Ordering::Relaxed) {
        open(py, make)
    } else {
        Open {
            span: make(),
            token: None,
        }
    }
}

/// Ends a span: restores the parent as the current span and closes it.
#[inline]
pub(crate) fn end(py: Python<'_>, open: Option<Open>) {
    if let Some(open) = open {
        if let (Some(token), Some(var)) = (open.token, CURRENT.get()) {
            // A token set in another context (an async generator resumed elsewhere)
            // cannot be reset there; the span still closes.
            let _ = var.bind(py).call_method1("reset", (token,));
        }
        drop(open.span);
    }
}
