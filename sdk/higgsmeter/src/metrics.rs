//! The activity families and a job's progress marks as OpenTelemetry instruments, read
//! live from a tracker.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableCounter, ObservableGauge};

use higgsmeter_catalog::{
    Family, JOB_CHECKPOINT_PRODUCTIVE, JOB_CHECKPOINT_STEP, JOB_RESTORED_STEP, JOB_STEP,
    WORKER_ACTIVITY_TIME, WORKER_CURRENT_STATE,
};

use crate::tracker::{Mark, Marks, Tracker};

/// The registered activity instruments; keep them alive as long as you export.
///
/// `worker_activity_time_seconds_total` is an asynchronous (observable) counter read
/// from the tracker at each collection, so every export includes the time spent so far
/// in the current state and the counter never decreases. `worker_current_state` is an
/// observable gauge of the current state's code. The job's progress marks
/// ([`crate::job`]: `higgsmeter_job_step`, `higgsmeter_job_checkpoint_step`,
/// `higgsmeter_job_checkpoint_productive_seconds`, `higgsmeter_job_restored_step`) are
/// observable gauges too, each reported once its mark is set. A disabled tracker
/// (another rank in the seed's rank-0 mode) reports none of them.
#[derive(Debug)]
pub struct ActivityInstruments {
    _activity: ObservableCounter<f64>,
    _current: ObservableGauge<i64>,
    _steps: [ObservableGauge<i64>; 3],
    _productive: ObservableGauge<f64>,
}

/// Registers the activity families and the job's progress marks on `meter`, reading
/// `tracker`.
///
/// [`init()`](crate::init) does this for you; call it when you build your own
/// `MeterProvider`.
pub fn register_activity_instruments(meter: &Meter, tracker: Tracker) -> ActivityInstruments {
    let activity_tracker = tracker.clone();
    let activity = meter
        .f64_observable_counter(WORKER_ACTIVITY_TIME.name)
        .with_description(WORKER_ACTIVITY_TIME.help)
        .with_unit(WORKER_ACTIVITY_TIME.unit)
        .with_callback(move |observer| {
            if !activity_tracker.is_enabled() {
                return;
            }
            let [state_key, op_key] = [
                WORKER_ACTIVITY_TIME.labels[0],
                WORKER_ACTIVITY_TIME.labels[1],
            ];
            for entry in activity_tracker.snapshot().entries() {
                observer.observe(
                    entry.seconds(),
                    &[
                        KeyValue::new(state_key, entry.state.as_str()),
                        KeyValue::new(
                            op_key,
                            opentelemetry::StringValue::from(entry.operation.clone()),
                        ),
                    ],
                );
            }
        })
        .build();
    let current = meter
        .i64_observable_gauge(WORKER_CURRENT_STATE.name)
        .with_description(WORKER_CURRENT_STATE.help)
        .with_unit(WORKER_CURRENT_STATE.unit)
        .with_callback({
            let tracker = tracker.clone();
            move |observer| {
                if tracker.is_enabled() {
                    observer.observe(i64::from(tracker.current_state().code()), &[]);
                }
            }
        })
        .build();
    let steps = [
        (JOB_STEP, (|m| &m.step) as fn(&Marks) -> &Mark),
        (JOB_CHECKPOINT_STEP, |m| &m.checkpoint_step),
        (JOB_RESTORED_STEP, |m| &m.restored_step),
    ]
    .map(|(family, mark)| step_gauge(meter, &tracker, family, mark));
    let productive = meter
        .f64_observable_gauge(JOB_CHECKPOINT_PRODUCTIVE.name)
        .with_description(JOB_CHECKPOINT_PRODUCTIVE.help)
        .with_unit(JOB_CHECKPOINT_PRODUCTIVE.unit)
        .with_callback(move |observer| {
            if !tracker.is_enabled() {
                return;
            }
            // One point per recent checkpoint, labelled with its step (the seconds
            // converted as the activity seconds are, `SnapshotEntry::seconds`).
            let recent = tracker
                .marks()
                .recent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for (step, nanos) in recent {
                let step = i64::try_from(step).unwrap_or(i64::MAX);
                observer.observe(nanos as f64 / 1e9, &[KeyValue::new("step", step)]);
            }
        })
        .build();
    ActivityInstruments {
        _activity: activity,
        _current: current,
        _steps: steps,
        _productive: productive,
    }
}

/// A step mark's gauge: observed once the mark is set, on an enabled tracker.
fn step_gauge(
    meter: &Meter,
    tracker: &Tracker,
    family: Family,
    mark: fn(&Marks) -> &Mark,
) -> ObservableGauge<i64> {
    let tracker = tracker.clone();
    meter
        .i64_observable_gauge(family.name)
        .with_description(family.help)
        .with_unit(family.unit)
        .with_callback(move |observer| {
            if !tracker.is_enabled() {
                return;
            }
            if let Some(step) = mark(tracker.marks()).get() {
                // Marks are stored clamped to `job::MAX_STEP` (`i64::MAX`).
                observer.observe(i64::try_from(step).unwrap_or(i64::MAX), &[]);
            }
        })
        .build()
}
