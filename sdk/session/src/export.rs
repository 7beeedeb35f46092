//! The session families for counters aggregated somewhere else: another sampler loop,
//! or the Python layer's `higgsmeter.lab` (the seed's dataclasses), which applies its
//! samples itself and publishes the result after each one.

use std::sync::Arc;

use opentelemetry::metrics::Meter;

use crate::counters::SessionCounters;
use crate::instruments::{self, SessionInstruments};
use crate::shared::Shared;

/// The session families on a meter, reading counters that you publish: what a
/// [`SessionAgent`](crate::SessionAgent) registers, without its tick thread.
///
/// Each export reports the counters last [`publish`](SessionExport::publish)ed (the
/// families and their labels are those of the agent; see the crate docs). Dropping it
/// unregisters nothing that was exported already; later exports just stop carrying the
/// session families.
///
/// ```
/// use higgsmeter_session::{Sample, SessionCounters, SessionExport, parse_timestamp};
///
/// let started = parse_timestamp("2025-03-01T09:00:00+00:00").expect("an ISO 8601 time");
/// let export = SessionExport::register(
///     &opentelemetry::global::meter("lab-session"),
///     SessionCounters::new(started),
/// );
/// let mut counters = SessionCounters::new(started);
/// counters.apply(&Sample {
///     ts: parse_timestamp("2025-03-01T09:00:02+00:00").expect("an ISO 8601 time"),
///     sample_interval_seconds: 2.0,
///     active_window_bucket: Some("subject".into()),
///     gpu_util_pct: 37.0,
///     vram_mb: 2048.0,
///     processes_seen: vec!["sleap-label".into()],
///     max_labeled_frames: Some(120),
///     training_epochs_completed: None,
///     training_final_loss: None,
/// });
/// export.publish(counters); // the next export reports these
/// assert_eq!(export.counters().sample_count, 1);
/// ```
pub struct SessionExport {
    shared: Arc<Shared>,
    _instruments: SessionInstruments,
}

impl std::fmt::Debug for SessionExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionExport").finish_non_exhaustive()
    }
}

impl SessionExport {
    /// Registers the session families on `meter`, reporting `counters` until the next
    /// [`publish`](SessionExport::publish).
    pub fn register(meter: &Meter, counters: SessionCounters) -> Self {
        let shared = Arc::new(Shared::new(counters));
        let instruments = instruments::register(meter, &shared);
        SessionExport {
            shared,
            _instruments: instruments,
        }
    }

    /// Makes `counters` what the next export reports.
    pub fn publish(&self, counters: SessionCounters) {
        *self.shared.lock() = counters;
    }

    /// A copy of the counters last published.
    pub fn counters(&self) -> SessionCounters {
        self.shared.lock().clone()
    }
}
