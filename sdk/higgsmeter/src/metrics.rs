//! The activity families as OpenTelemetry instruments, read live from a tracker.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableCounter, ObservableGauge};

use higgsmeter_catalog::{WORKER_ACTIVITY_TIME, WORKER_CURRENT_STATE};

use crate::tracker::Tracker;

/// The registered activity instruments; keep them alive as long as you export.
///
/// `worker_activity_time_seconds_total` is an asynchronous (observable) counter read
/// from the tracker at each collection, so every export includes the time spent so far
/// in the current state and the counter never decreases. `worker_current_state` is an
/// observable gauge of the current state's code. A disabled tracker (another rank in
/// the seed's rank-0 mode) reports neither.
#[derive(Debug)]
pub struct ActivityInstruments {
    _activity: ObservableCounter<f64>,
    _current: ObservableGauge<i64>,
}

/// Registers the activity families on `meter`, reading `tracker`.
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
        .with_callback(move |observer| {
            if tracker.is_enabled() {
                observer.observe(i64::from(tracker.current_state().code()), &[]);
            }
        })
        .build();
    ActivityInstruments {
        _activity: activity,
        _current: current,
    }
}
