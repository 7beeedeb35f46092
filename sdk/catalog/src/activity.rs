//! The worker-activity families of the Python `higgsmeter` 0.1.1.

use crate::{Family, Fleet, Kind};

/// `worker_activity_time_seconds_total` (counter, seconds): total cumulative seconds
/// spent in each (state, operation).
///
/// Labels: `state` (idle, io, cpu, gpu, warmup, startup, shutdown: the names of
/// [`STATES`](crate::STATES)) and `operation` (function name or custom label; `""` for
/// none). Over any interval its increments, summed over every series of one worker,
/// equal the wall-clock time elapsed.
pub const WORKER_ACTIVITY_TIME: Family = Family {
    name: "worker_activity_time_seconds_total",
    kind: Kind::Counter,
    help: "Total seconds spent in each state and operation",
    unit: "s",
    labels: &["state", "operation"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `worker_current_state` (gauge): the worker's current state as a number, for alerting.
///
/// 0 = idle, 1 = io, 2 = cpu, 3 = gpu, 4 = warmup, 5 = startup, 6 = shutdown (each
/// [`State`](crate::State)'s `code`).
/// It describes one worker and cannot be summed across workers.
pub const WORKER_CURRENT_STATE: Family = Family {
    name: "worker_current_state",
    kind: Kind::Gauge,
    help: "Current state indicator: 0=Idle, 1=IO, 2=CPU, 3=GPU, 4=Warmup, 5=Startup, 6=Shutdown",
    unit: "1",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// The activity families every tracked worker exports.
pub const ACTIVITY_FAMILIES: &[Family] = &[WORKER_ACTIVITY_TIME, WORKER_CURRENT_STATE];
