//! The SDK's own helpers for its integration tests (a tracker on a manual clock,
//! isolated telemetry); what every crate's tests share is the workspace's test kit,
//! `higgsmeter-testkit`.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "test code: each module uses a part; a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use higgsmeter::{ActivityLayer, AppState, ManualClock, Snapshot, Tracker};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

/// A tracker on a manual clock and a dispatcher that accounts its spans.
pub fn manual() -> (Tracker, ManualClock, Dispatch) {
    let clock = ManualClock::new();
    let tracker = Tracker::with_clock(clock.clone());
    let dispatch =
        Dispatch::new(tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone())));
    (tracker, clock, dispatch)
}

/// Asserts the invariant: the (state, operation) times sum to the elapsed time, exactly.
pub fn assert_exact(snap: &Snapshot) {
    assert_eq!(
        snap.sum(),
        snap.elapsed(),
        "activity must sum to wall time: {snap:#?}"
    );
}

/// Milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Time in (state, op), zero if never visited.
pub fn at(snap: &Snapshot, state: AppState, op: &str) -> Duration {
    snap.get(state, op).unwrap_or_default()
}

/// A layer counting WARN events of target `higgsmeter` (to check warn-once behaviour).
#[derive(Clone, Default)]
pub struct WarnCounter(pub Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarnCounter {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() == tracing::Level::WARN
            && event.metadata().target() == "higgsmeter"
        {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A builder for tests: no environment, no global subscriber or meter provider,
/// accounting `tracker`.
pub fn isolated(tracker: &Tracker) -> higgsmeter::TelemetryBuilder {
    higgsmeter::Telemetry::builder()
        .with_env(false)
        .with_subscriber(false)
        .with_global_meter_provider(false)
        .with_tracker(tracker.clone())
}

/// `tracker`'s pipeline into an in-memory exporter that exports only when flushed:
/// the guard and the exporter to read.
pub fn memory_pipeline(
    tracker: &Tracker,
) -> (
    higgsmeter::Telemetry,
    opentelemetry_sdk::metrics::InMemoryMetricExporter,
) {
    let exporter = opentelemetry_sdk::metrics::InMemoryMetricExporter::default();
    let telemetry = with_memory_exporter(tracker, exporter.clone())
        .init()
        .expect("an in-memory pipeline");
    (telemetry, exporter)
}

/// [`isolated`] with an in-memory exporter that exports only when flushed.
pub fn with_memory_exporter<E: opentelemetry_sdk::metrics::exporter::PushMetricExporter>(
    tracker: &Tracker,
    exporter: E,
) -> higgsmeter::TelemetryBuilder {
    isolated(tracker).with_periodic_exporter(exporter, Duration::from_secs(3600))
}
