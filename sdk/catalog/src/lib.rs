//! Every metric family higgsmeter emits, as documented constants, with zero dependencies.
//!
//! The SDK (workers), the collector and the tests all build from this one list, so a
//! metric's name, kind, help text, unit, labels and histogram buckets cannot drift
//! between the process that records it and the process that exports it. Outside test
//! code (which spells some names on purpose, to catch a change here), nothing else in
//! the workspace spells a metric name as a raw string: the OpenTelemetry instrument
//! names of the GPU families come from [`gpu_instrument_name`] or, for the one the
//! collector's cluster view reads, [`HW_GPU_UTILIZATION_INSTRUMENT`]; those of the lab
//! session agent's families from [`session_instrument_name`].
//!
//! The worker states (`idle` 0, `io` 1, `cpu` 2, `gpu` 3, `warmup` 4, `startup` 5,
//! `shutdown` 6) live here too, as [`State`] constants ([`STATES`]): the `state` label
//! values and the `worker_current_state` codes.
//!
//! It is the Rust form of two seeds:
//! - the Python `higgsmeter` 0.1.1 activity families, [`WORKER_ACTIVITY_TIME`] and
//!   [`WORKER_CURRENT_STATE`], with the Python package's exact names and help texts;
//! - a serving engine's metric catalog (`mstar.observability.catalog`): the engine
//!   families ([`WORKER_FAMILIES`], [`STATUS_FAMILIES`]), [`CONDUCTOR_REQUEST_STATES`],
//!   [`STATUS_INTERVAL_S`] and [`TRANSFER_API_SERVER`], character for character.
//!   `model_name` is added by the API server (in higgsmeter: a static label of the
//!   collector) and is not listed in `labels`.
//!
//! # Quick start
//!
//! ```
//! use higgsmeter_catalog::{find, Kind, MSTAR_STEP_SECONDS, WORKER_FAMILIES};
//!
//! assert_eq!(MSTAR_STEP_SECONDS.kind, Kind::Histogram);
//! assert_eq!(MSTAR_STEP_SECONDS.labels, &["component", "graph_walk"]);
//! assert!(WORKER_FAMILIES.iter().any(|f| f.name == MSTAR_STEP_SECONDS.name));
//! assert_eq!(find("worker_current_state").map(|f| f.kind), Some(Kind::Gauge));
//! ```
//!
//! `name` is the family's Prometheus exposition name, which is also the OpenTelemetry
//! instrument name higgsmeter uses (counters keep the `_total` the seeds spell), so an
//! exporter must not append unit or `_total` suffixes to catalog families.
//!
//! Supported Rust version: 1.89 or newer.

#![no_std]

mod activity;
mod collector;
mod engine;
mod gpu;
mod job;
mod session;
mod state;

pub use activity::*;
pub use collector::*;
pub use engine::*;
pub use gpu::*;
pub use job::*;
pub use session::*;
pub use state::*;

/// The kind of instrument a family is recorded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A monotonic sum (Prometheus `counter`).
    Counter,
    /// A value that goes up and down (Prometheus `gauge`).
    Gauge,
    /// An explicit-bucket histogram (Prometheus `histogram`).
    Histogram,
}

impl Kind {
    /// The Prometheus `# TYPE` word: `counter`, `gauge` or `histogram`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// How a fleet view (the collector's `/metrics`) combines one gauge's series from
/// several sources: only by a rule that fits what the gauge measures.
///
/// A queue depth or a page count adds up over workers ([`Fleet::Sum`]); a temperature,
/// a utilisation or a state code does not, and summing them shows a number nobody can
/// justify (two GPUs at 60 and 61 °C are not at 121 °C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fleet {
    /// The sum over sources: counts of things each source holds (queue depths, pages,
    /// requests in flight, bytes of memory, watts). Every counter and histogram.
    Sum,
    /// The largest value among sources (e.g. a peak, a worst-case lag).
    Max,
    /// The smallest value among sources (e.g. free headroom).
    Min,
    /// The mean over sources (e.g. a fleet-wide average utilisation).
    Mean,
    /// Not combined: each source's series stays as it is, with the source's identity
    /// labels (a state code, a device's temperature or clock).
    PerSource,
}

impl Fleet {
    /// The collector config's spelling: `sum`, `max`, `min`, `mean` or `per_source`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Fleet::Sum => "sum",
            Fleet::Max => "max",
            Fleet::Min => "min",
            Fleet::Mean => "mean",
            Fleet::PerSource => "per_source",
        }
    }
}

/// One metric family: everything needed to create its instrument and to export it.
///
/// The seed's `Family(name, kind, help, labels, buckets=())` plus an OpenTelemetry
/// `unit` (UCUM, e.g. `s`, `By`, `1`, `{page}`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Family {
    /// Exposition and instrument name, e.g. `mstar_step_seconds`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// One-line help text (Prometheus `# HELP`, OpenTelemetry description).
    pub help: &'static str,
    /// OpenTelemetry unit (UCUM).
    pub unit: &'static str,
    /// Label (attribute) keys every series of the family carries, in order.
    pub labels: &'static [&'static str],
    /// Explicit histogram bucket upper bounds; empty for counters and gauges.
    pub buckets: &'static [f64],
    /// How a collector's fleet view combines this family's series from several
    /// sources (ranks, workers, hosts). Counters and histograms are always
    /// [`Fleet::Sum`]; a gauge says which rule fits what it measures.
    pub fleet: Fleet,
}

impl Family {
    /// Whether `key` is one of this family's labels.
    pub fn has_label(&self, key: &str) -> bool {
        self.labels.contains(&key)
    }
}

/// Every family of every group in this crate, for lookups by name.
pub const ALL_FAMILY_GROUPS: &[&[Family]] = &[
    ACTIVITY_FAMILIES,
    STATUS_FAMILIES,
    GPU_FAMILIES,
    SESSION_FAMILIES,
    JOB_FAMILIES,
    COLLECTOR_FAMILIES,
];

/// Looks a family up by the name an OpenTelemetry SDK sends for it: its exposition
/// name, or for a GPU or session family its dotted instrument name
/// (`hw.gpu.utilization`, `session.window.time`).
///
/// ```
/// use higgsmeter_catalog::{find_instrument, HW_GPU_UTILIZATION, WORKER_CURRENT_STATE};
///
/// assert_eq!(find_instrument("hw.gpu.utilization"), Some(&HW_GPU_UTILIZATION));
/// assert_eq!(find_instrument("worker_current_state"), Some(&WORKER_CURRENT_STATE));
/// assert_eq!(find_instrument("hw.gpu.nonsense"), None);
/// ```
pub fn find_instrument(name: &str) -> Option<&'static Family> {
    const DOTTED: [(&[Family], &[&str]); 2] = [
        (GPU_FAMILIES, gpu::GPU_INSTRUMENT_NAMES),
        (SESSION_FAMILIES, session::SESSION_INSTRUMENT_NAMES),
    ];
    find(name).or_else(|| {
        DOTTED.iter().find_map(|(families, names)| {
            names
                .iter()
                .position(|otel| *otel == name)
                .and_then(|i| families.get(i))
        })
    })
}

/// Looks a family up by its exact name across every group of the catalog.
pub fn find(name: &str) -> Option<&'static Family> {
    ALL_FAMILY_GROUPS
        .iter()
        .flat_map(|group| group.iter())
        .find(|family| family.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_sum_and_state_codes_do_not() {
        for family in ALL_FAMILY_GROUPS.iter().flat_map(|g| g.iter()) {
            if family.kind != Kind::Gauge {
                assert_eq!(family.fleet, Fleet::Sum, "{}", family.name);
            }
        }
        assert_eq!(WORKER_CURRENT_STATE.fleet, Fleet::PerSource);
        assert_eq!(HW_GPU_TEMPERATURE.fleet, Fleet::PerSource);
        assert_eq!(MSTAR_KV_PAGES_USED.fleet, Fleet::Sum);
    }
}
