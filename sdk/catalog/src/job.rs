//! A training job's progress marks (what a worker exports about its steps and
//! checkpoints) and the job view's families (what the collector derives from them and
//! from the activity seconds: goodput and badput by cause).
//!
//! A worker belongs to a job through its resource: `job.id` (from
//! `OTEL_RESOURCE_ATTRIBUTES`, else torchrun's `TORCHELASTIC_RUN_ID`, else
//! `HIGGSMETER_JOB_ID`; torchrun's default run id `none` is not one) and
//! `job.incarnation` (from `OTEL_RESOURCE_ATTRIBUTES`, else torchrun's
//! `TORCHELASTIC_RESTART_COUNT`, else `HIGGSMETER_JOB_INCARNATION`; without one, each
//! process of a rank is an incarnation of its own, told apart by
//! `service.instance.id`).

use crate::{Family, Fleet, Kind};

/// The resource attribute naming the job a worker belongs to.
pub const JOB_ID_ATTRIBUTE: &str = "job.id";

/// The resource attribute numbering a job's incarnations (0 for the first start, one
/// more per restart of the whole job).
pub const JOB_INCARNATION_ATTRIBUTE: &str = "job.incarnation";

/// The operation of a checkpoint save's scope (`io` state): its time is the
/// `checkpoint_save` badput.
pub const CHECKPOINT_SAVE_OPERATION: &str = "checkpoint_save";

/// The operation of a checkpoint restore's scope (`io` state): its time is the
/// `checkpoint_restore` badput.
pub const CHECKPOINT_RESTORE_OPERATION: &str = "checkpoint_restore";

/// Operations starting with this prefix (e.g. `badput.evaluation`) are custom badput,
/// whatever their state.
pub const CUSTOM_BADPUT_PREFIX: &str = "badput.";

/// `higgsmeter_job_step` (gauge): the last training step this process completed.
pub const JOB_STEP: Family = Family {
    name: "higgsmeter_job_step",
    kind: Kind::Gauge,
    help: "The last training step this process completed",
    unit: "{step}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `higgsmeter_job_checkpoint_step` (gauge): the step the last checkpoint this process
/// saved covers.
pub const JOB_CHECKPOINT_STEP: Family = Family {
    name: "higgsmeter_job_checkpoint_step",
    kind: Kind::Gauge,
    help: "The step the last checkpoint this process saved covers",
    unit: "{step}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `higgsmeter_job_checkpoint_productive_seconds` (gauge): per checkpoint this process
/// saved (label `step`, the last eight), its productive `gpu` seconds (all but custom
/// badput's, `badput.*` operations) when it was saved: the progress it keeps. Every
/// export carries the last eight, so a reader sees each one even when several are saved
/// between two of its readings.
pub const JOB_CHECKPOINT_PRODUCTIVE: Family = Family {
    name: "higgsmeter_job_checkpoint_productive_seconds",
    kind: Kind::Gauge,
    help: "Per checkpoint this process saved (the last eight), its gpu seconds when saved",
    unit: "s",
    labels: &["step"],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// `higgsmeter_job_restored_step` (gauge): the step of the checkpoint this process
/// restored at its start (absent when it started from scratch).
pub const JOB_RESTORED_STEP: Family = Family {
    name: "higgsmeter_job_restored_step",
    kind: Kind::Gauge,
    help: "The step of the checkpoint this process restored at its start",
    unit: "{step}",
    labels: &[],
    buckets: &[],
    fleet: Fleet::PerSource,
};

/// The progress marks a training worker exports (per source; the collector's job view
/// reads them).
pub const JOB_FAMILIES: &[Family] = &[
    JOB_STEP,
    JOB_CHECKPOINT_STEP,
    JOB_CHECKPOINT_PRODUCTIVE,
    JOB_RESTORED_STEP,
];

/// `higgsmeter_job_time_seconds` (gauge): a job's time, summed over its ranks: from
/// each rank's first start to its last point, across incarnations (recovery gaps
/// included). Label `job_id`.
pub const JOB_TIME: Family = Family {
    name: "higgsmeter_job_time_seconds",
    kind: Kind::Gauge,
    help: "Job time summed over ranks, first start to last point, across incarnations",
    unit: "s",
    labels: &["job_id"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_job_goodput_seconds` (gauge): of [`JOB_TIME`], the `gpu` seconds of
/// steps that were not redone after a restart. Can go down when a restart shows that
/// steps were lost. Label `job_id`.
pub const JOB_GOODPUT: Family = Family {
    name: "higgsmeter_job_goodput_seconds",
    kind: Kind::Gauge,
    help: "Job time in gpu steps that were not redone after a restart, summed over ranks",
    unit: "s",
    labels: &["job_id"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_job_badput_seconds` (gauge): the rest of [`JOB_TIME`], by cause:
/// `startup`, `initialization` (warm-up), `data_loading` (`io`), `checkpoint_save`,
/// `checkpoint_restore`, `waiting` (`idle`: at a collective or for work),
/// `wasted_progress` (steps redone after a restart), `recovery` (between a failed
/// incarnation's last point and the next one's start), `custom` (`badput.*`
/// operations), `other` (`cpu`, `shutdown`). Goodput plus every cause equals the job
/// time. Labels `job_id`, `cause`.
pub const JOB_BADPUT: Family = Family {
    name: "higgsmeter_job_badput_seconds",
    kind: Kind::Gauge,
    help: "Job time that did not move it forward, by cause, summed over ranks",
    unit: "s",
    labels: &["job_id", "cause"],
    buckets: &[],
    fleet: Fleet::Sum,
};

/// `higgsmeter_job_goodput_ratio` (gauge): [`JOB_GOODPUT`] over [`JOB_TIME`]. Label
/// `job_id`.
pub const JOB_GOODPUT_RATIO: Family = Family {
    name: "higgsmeter_job_goodput_ratio",
    kind: Kind::Gauge,
    help: "Goodput seconds over job time",
    unit: "1",
    labels: &["job_id"],
    buckets: &[],
    fleet: Fleet::Mean,
};

/// `higgsmeter_job_disruptions` (gauge): restarts of a job seen so far (its
/// incarnations less one, on the rank that saw the most). Label `job_id`.
pub const JOB_DISRUPTIONS: Family = Family {
    name: "higgsmeter_job_disruptions",
    kind: Kind::Gauge,
    help: "Restarts of the job seen so far",
    unit: "{restart}",
    labels: &["job_id"],
    buckets: &[],
    fleet: Fleet::Max,
};

/// The badput causes, in the order the job view lists them.
pub const BADPUT_CAUSES: &[&str] = &[
    "startup",
    "initialization",
    "data_loading",
    "checkpoint_save",
    "checkpoint_restore",
    "waiting",
    "wasted_progress",
    "recovery",
    "custom",
    "other",
];

/// The job view's families, derived by the collector.
pub const JOB_VIEW_FAMILIES: &[Family] = &[
    JOB_TIME,
    JOB_GOODPUT,
    JOB_BADPUT,
    JOB_GOODPUT_RATIO,
    JOB_DISRUPTIONS,
];
