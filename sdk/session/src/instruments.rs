//! The session families as observable OpenTelemetry instruments reading the counters.
//!
//! The callbacks copy a few numbers under the counters' lock at each export; they never
//! sample anything themselves.

use std::any::Any;
use std::sync::Arc;

use higgsmeter_catalog::{
    Family, SESSION_PROCESS_TIME_TO_FIRST_SEEN, SESSION_SAMPLES, SESSION_TRAINING_EPOCHS_COMPLETED,
    SESSION_TRAINING_LABELED_FRAMES_MAX, SESSION_TRAINING_LOSS, SESSION_WINDOW_TIME,
    session_instrument_name,
};
use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;

use crate::counters::{SLEAP_PROCESSES, WINDOW_BUCKETS};
use crate::shared::Shared;

/// Keeps the registered instruments alive.
pub(crate) struct SessionInstruments {
    _handles: Vec<Box<dyn Any + Send + Sync>>,
}

fn name(family: &Family) -> &'static str {
    session_instrument_name(family).unwrap_or(family.name)
}

/// One attribute set per value of a family's only label.
fn label_sets(family: &Family, values: &[&'static str]) -> Arc<Vec<[KeyValue; 1]>> {
    let key = family.labels.first().copied().unwrap_or("");
    Arc::new(values.iter().map(|v| [KeyValue::new(key, *v)]).collect())
}

/// Registers every session family on `meter`, reading `shared`.
pub(crate) fn register(meter: &Meter, shared: &Arc<Shared>) -> SessionInstruments {
    let mut handles: Vec<Box<dyn Any + Send + Sync>> = Vec::new();

    macro_rules! observable {
        ($builder:ident, $family:expr, |$counters:ident, $observer:ident| $body:block) => {{
            let shared = Arc::clone(shared);
            let family: &Family = &$family;
            handles.push(Box::new(
                meter
                    .$builder(name(family))
                    .with_description(family.help)
                    .with_unit(family.unit)
                    .with_callback(move |$observer| {
                        let $counters = shared.lock();
                        $body
                    })
                    .build(),
            ));
        }};
    }

    observable!(u64_observable_counter, SESSION_SAMPLES, |c, observer| {
        observer.observe(c.sample_count, &[]);
    });
    let buckets = label_sets(&SESSION_WINDOW_TIME, &WINDOW_BUCKETS);
    observable!(
        f64_observable_counter,
        SESSION_WINDOW_TIME,
        |c, observer| {
            for ((_, seconds), attributes) in c.window_seconds().iter().zip(buckets.iter()) {
                observer.observe(*seconds, attributes);
            }
        }
    );
    let processes = label_sets(&SESSION_PROCESS_TIME_TO_FIRST_SEEN, &SLEAP_PROCESSES);
    observable!(
        i64_observable_gauge,
        SESSION_PROCESS_TIME_TO_FIRST_SEEN,
        |c, observer| {
            for ((_, first), attributes) in c.first_seen().iter().zip(processes.iter()) {
                if let Some(seconds) = first {
                    observer.observe(*seconds, attributes);
                }
            }
        }
    );
    observable!(
        i64_observable_gauge,
        SESSION_TRAINING_LABELED_FRAMES_MAX,
        |c, observer| {
            observer.observe(c.max_labeled_frames, &[]);
        }
    );
    observable!(
        i64_observable_gauge,
        SESSION_TRAINING_EPOCHS_COMPLETED,
        |c, observer| {
            observer.observe(c.training_epochs_completed, &[]);
        }
    );
    observable!(
        f64_observable_gauge,
        SESSION_TRAINING_LOSS,
        |c, observer| {
            if let Some(loss) = c.training_final_loss {
                observer.observe(loss, &[]);
            }
        }
    );
    SessionInstruments { _handles: handles }
}
