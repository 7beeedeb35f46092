//! Session families recorded by the lab session agent (`higgsmeter-session`): the lab
//! monitoring agent's rolling session counters that are not GPU readings.
//!
//! The agent's GPU counters (GPU-active seconds, peaks, samples) are the NVML meter's
//! `hw.gpu.session.*` families in [`GPU_FAMILIES`](crate::GPU_FAMILIES); these are the
//! rest: time by active-window bucket, time to the first sight of each watched process,
//! training progress and the sample count.
//!
//! # Names
//!
//! As for the GPU families, the OpenTelemetry instrument is registered under a dotted
//! name (`session.window.time`, from [`session_instrument_name`]) and [`Family::name`] is
//! the Prometheus exposition name the OpenTelemetry-Prometheus compatibility rules make
//! of it (dots to `_`, `_total` for counters), which the collector exports
//! ([`find_instrument`](crate::find_instrument) maps one to the other).
//!
//! # Labels
//!
//! - `session.window.bucket`: one of [`SESSION_WINDOW_BUCKETS`] (`subject`, `terminal`,
//!   `browser`, `other`), the lab agent's `WINDOW_BUCKETS`; an unknown bucket counts as
//!   `other`, as in the seed.
//! - `session.process.name`: a watched process name (`sleap-label`, `sleap-train`,
//!   `sleap-track`), bounded by the agent's configuration.

use crate::{Family, Fleet, Kind};

/// The window buckets, in the lab agent's `WINDOW_BUCKETS` order: the values of the
/// `session.window.bucket` label.
pub const SESSION_WINDOW_BUCKETS: &[&str] = &["subject", "terminal", "browser", "other"];

/// `session_samples_total` (counter; `session.samples`): samples taken since the session
/// started (the lab agent's `sample_count`).
pub const SESSION_SAMPLES: Family = Family {
    name: "session_samples_total",
    kind: Kind::Counter,
    help: "Samples the session agent took since the session started",
    unit: "{sample}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `session_window_time_total` (counter, seconds; `session.window.time`): seconds the
/// active window was in each bucket (the lab agent's `seconds_in_subject_software`,
/// `seconds_in_terminal`, `seconds_in_browser`, `seconds_in_other`).
pub const SESSION_WINDOW_TIME: Family = Family {
    name: "session_window_time_total",
    kind: Kind::Counter,
    help: "Seconds the active window was in each bucket since the session started",
    unit: "s",
    labels: &["session.window.bucket"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `session_process_time_to_first_seen` (gauge, whole seconds;
/// `session.process.time_to_first_seen`): seconds from the session's start to the first
/// sample that saw the process (the lab agent's `seconds_to_first_sleap_label`, `_train`,
/// `_track`). Absent until that sample.
pub const SESSION_PROCESS_TIME_TO_FIRST_SEEN: Family = Family {
    name: "session_process_time_to_first_seen",
    kind: Kind::Gauge,
    help: "Whole seconds from the session's start to the first sample that saw the process",
    unit: "s",
    labels: &["session.process.name"],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `session_training_labeled_frames_max` (gauge; `session.training.labeled_frames.max`):
/// the most labeled frames reported in the session (the lab agent's `max_labeled_frames`).
pub const SESSION_TRAINING_LABELED_FRAMES_MAX: Family = Family {
    name: "session_training_labeled_frames_max",
    kind: Kind::Gauge,
    help: "Most labeled frames reported since the session started",
    unit: "{frame}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `session_training_epochs_completed` (gauge; `session.training.epochs_completed`): the
/// most training epochs reported completed in the session (the lab agent's
/// `training_epochs_completed`).
pub const SESSION_TRAINING_EPOCHS_COMPLETED: Family = Family {
    name: "session_training_epochs_completed",
    kind: Kind::Gauge,
    help: "Most training epochs reported completed since the session started",
    unit: "{epoch}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `session_training_loss` (gauge; `session.training.loss`): the last training loss
/// reported (the lab agent's `training_final_loss`). Absent until one is reported.
pub const SESSION_TRAINING_LOSS: Family = Family {
    name: "session_training_loss",
    kind: Kind::Gauge,
    help: "Last training loss reported in the session",
    unit: "1",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// Every family the session agent exports.
pub const SESSION_FAMILIES: &[Family] = &[
    SESSION_SAMPLES,
    SESSION_WINDOW_TIME,
    SESSION_PROCESS_TIME_TO_FIRST_SEEN,
    SESSION_TRAINING_LABELED_FRAMES_MAX,
    SESSION_TRAINING_EPOCHS_COMPLETED,
    SESSION_TRAINING_LOSS,
];

/// The OpenTelemetry instrument name of each session family, in [`SESSION_FAMILIES`] order.
pub(crate) const SESSION_INSTRUMENT_NAMES: &[&str] = &[
    "session.samples",
    "session.window.time",
    "session.process.time_to_first_seen",
    "session.training.labeled_frames.max",
    "session.training.epochs_completed",
    "session.training.loss",
];

/// The OpenTelemetry instrument name (dotted) of a session family, e.g.
/// `session.window.time` for [`SESSION_WINDOW_TIME`]; `None` for a family that is not in
/// [`SESSION_FAMILIES`].
///
/// ```
/// use higgsmeter_catalog::{session_instrument_name, SESSION_SAMPLES, HW_POWER};
///
/// assert_eq!(session_instrument_name(&SESSION_SAMPLES), Some("session.samples"));
/// assert_eq!(session_instrument_name(&HW_POWER), None);
/// ```
pub fn session_instrument_name(family: &Family) -> Option<&'static str> {
    SESSION_FAMILIES
        .iter()
        .zip(SESSION_INSTRUMENT_NAMES)
        .find(|(f, _)| f.name == family.name)
        .map(|(_, otel)| *otel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_an_instrument_name_that_maps_to_its_prometheus_name() {
        assert_eq!(SESSION_FAMILIES.len(), SESSION_INSTRUMENT_NAMES.len());
        for (family, otel) in SESSION_FAMILIES.iter().zip(SESSION_INSTRUMENT_NAMES) {
            assert_eq!(session_instrument_name(family), Some(*otel));
            assert_eq!(crate::find_instrument(otel), Some(family));
            let mut prom = otel.replace('.', "_");
            if family.kind == Kind::Counter {
                prom.push_str("_total");
            }
            assert_eq!(prom, family.name, "{otel} does not map to {}", family.name);
            assert!(!family.unit.is_empty(), "{} has no unit", family.name);
        }
    }
}
