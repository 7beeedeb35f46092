//! What `init()` starts and the [`Telemetry`](crate::Telemetry) guard stops: the meter
//! provider (with the OTLP and Prometheus readers), the Prometheus endpoint, traces and
//! the GPU meter, each behind [`Pipeline`].
//!
//! A leaf: it uses nothing of the crate.

use std::any::Any;

/// A running part of the telemetry: flushed by `Telemetry::force_flush`, shut down
/// when the guard drops. Neither returns errors: a failure is logged, tracking goes on.
pub(crate) trait Pipeline: Any + Send + Sync {
    /// Exports what is pending now, blocking until done (at most the exporter's
    /// timeout). Default: nothing to export.
    fn flush(&self) {}

    /// Exports what is left and stops.
    fn shutdown(self: Box<Self>);
}

/// Runs `f` on a thread of its own and waits for it: exporter clients must not be
/// created or dropped inside the caller's async runtime, if it has one. `None` when
/// the thread could not start or panicked.
pub(crate) fn on_own_thread<T, F>(name: &str, f: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .ok()?
        .join()
        .ok()
}
