//! Cost of a state transition: a scope (enter + exit) through the span path with the
//! activity layer installed, `set_state`, `#[track_state]`, the disabled path (another
//! rank in rank-0 mode), and a bare `tracing` Registry span (alone and with a no-op
//! layer) as the floor. The last group measures a scope and a step span through the
//! global subscriber `init()` installs (the fmt layer included); it runs last, because
//! a global subscriber stays registered and would weigh in on every later callsite.
//!
//! `cargo bench -p higgsmeter --bench transitions`

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use higgsmeter::{ActivityLayer, AppState, Tracker, track_state};
use std::hint::black_box;
use tracing_subscriber::layer::SubscriberExt;

/// A layer that does nothing: the floor a layered subscriber costs.
struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

#[track_state(AppState::Cpu, operation = "decode")]
fn decorated(x: u64) -> u64 {
    x.wrapping_add(1)
}

fn transitions(c: &mut Criterion) {
    let mut g = c.benchmark_group("transition");

    // The floor: one span created and closed through a bare Registry.
    tracing::subscriber::with_default(tracing_subscriber::registry(), || {
        g.bench_function("bare_registry_span", |b| {
            b.iter(|| {
                let span =
                    tracing::info_span!("state", state = "gpu", operation = black_box("inference"));
                drop(black_box(span));
            })
        });
    });
    // The baseline: the same span through a Registry with a no-op layer.
    tracing::subscriber::with_default(tracing_subscriber::registry().with(NoopLayer), || {
        g.bench_function("registry_noop_layer_span", |b| {
            b.iter(|| {
                let span =
                    tracing::info_span!("state", state = "gpu", operation = black_box("inference"));
                drop(black_box(span));
            })
        });
    });

    let tracker = Tracker::new();
    let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone()));
    tracing::subscriber::with_default(subscriber, || {
        g.bench_function("scope_enter_exit", |b| {
            b.iter(|| {
                let scope = tracker.scope(AppState::Gpu, black_box("inference"));
                drop(black_box(scope));
            })
        });
        g.bench_function("set_state", |b| {
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                let state = if i & 1 == 0 {
                    AppState::Idle
                } else {
                    AppState::Io
                };
                tracker.set_state(state, black_box("waiting_for_work"));
            })
        });
        g.bench_function("non_state_span_with_layer", |b| {
            b.iter(|| {
                let span = tracing::info_span!("other", request = black_box(7u64));
                drop(black_box(span));
            })
        });
        tracker.set_enabled(false);
        g.bench_function("scope_disabled", |b| {
            b.iter(|| {
                let scope = tracker.scope(AppState::Gpu, black_box("inference"));
                drop(black_box(scope));
            })
        });
        tracker.set_enabled(true);
    });

    let global = higgsmeter::state_tracker().clone();
    let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(global));
    tracing::subscriber::with_default(subscriber, || {
        g.bench_function("track_state_fn", |b| b.iter(|| decorated(black_box(1))));
    });
    g.finish();

    // A step span recording mstar_step_seconds and mstar_batch_size into a real SDK
    // meter provider (with a reader, so the histograms aggregate).
    let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
        .with_reader(opentelemetry_sdk::metrics::ManualReader::builder().build())
        .build();
    let meter = opentelemetry::metrics::MeterProvider::meter(&provider, "bench");
    let subscriber =
        tracing_subscriber::registry().with(ActivityLayer::new(Tracker::new()).with_meter(&meter));
    let mut g = c.benchmark_group("engine");
    tracing::subscriber::with_default(subscriber, || {
        g.bench_function("step_span", |b| {
            b.iter(|| {
                drop(black_box(higgsmeter::step_span(
                    "decoder",
                    black_box("decode"),
                    Some(32),
                )))
            })
        });
        g.bench_function("transfer_span", |b| {
            b.iter(|| {
                drop(black_box(higgsmeter::transfer_span(
                    "api_server",
                    "decoder",
                    "shm",
                    Some(4096),
                )))
            })
        });
        let step = higgsmeter::EngineRecorders::new(&meter)
            .step("decoder", "decode")
            .unwrap();
        g.bench_function("step_recorder", |b| {
            b.iter(|| step.record(black_box(std::time::Duration::from_micros(2100)), Some(32)))
        });
    });
    g.finish();
}

/// The subscriber `init()` installs (registry, the stderr log layer filtered by
/// `RUST_LOG`, the activity layers), as the global default; runs last (see the top).
fn with_init_subscriber(c: &mut Criterion) {
    let exporter = opentelemetry_sdk::metrics::InMemoryMetricExporter::default();
    let telemetry = higgsmeter::Telemetry::builder()
        .with_env(false)
        .with_gpu_meter(false)
        .with_global_meter_provider(false)
        .with_periodic_exporter(exporter, std::time::Duration::from_secs(3600))
        .init()
        .unwrap();
    let tracker = telemetry.tracker().clone();
    let mut g = c.benchmark_group("init_subscriber");
    // The baseline again, measured next to the scope: on a shared machine the two
    // numbers of the ratio should come from the same minute.
    tracing::subscriber::with_default(tracing_subscriber::registry().with(NoopLayer), || {
        g.bench_function("registry_noop_layer_span", |b| {
            b.iter(|| {
                let span =
                    tracing::info_span!("state", state = "gpu", operation = black_box("inference"));
                drop(black_box(span));
            })
        });
    });
    g.bench_function("scope_enter_exit", |b| {
        b.iter(|| {
            let scope = tracker.scope(AppState::Gpu, black_box("inference"));
            drop(black_box(scope));
        })
    });
    g.bench_function("track_state_fn", |b| b.iter(|| decorated(black_box(1))));
    g.bench_function("step_span", |b| {
        b.iter(|| {
            drop(black_box(higgsmeter::step_span(
                "decoder",
                black_box("decode"),
                Some(32),
            )))
        })
    });
    g.bench_function("non_state_span", |b| {
        b.iter(|| {
            let span = tracing::info_span!("other", request = black_box(7u64));
            drop(black_box(span));
        })
    });
    // Once a process has opened a step or transfer span, every close costs the
    // catalog layer a span look-up: the scope again, after the step spans above.
    g.bench_function("scope_enter_exit_after_step_spans", |b| {
        b.iter(|| {
            let scope = tracker.scope(AppState::Gpu, black_box("inference"));
            drop(black_box(scope));
        })
    });
    g.finish();
    // Leaked: dropping it would flush and shut down while criterion still reports.
    std::mem::forget(telemetry);
}

/// One reading of the tracker's clock (`Clock::monotonic()`: the time-stamp counter,
/// ADR 0022) against what it replaced (`Instant::elapsed` on an origin: `clock_gettime`
/// and the conversions).
fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    let tracker_clock = higgsmeter::Clock::monotonic();
    group.bench_function("tracker_clock_now_nanos", |b| {
        b.iter(|| black_box(tracker_clock.now_nanos()))
    });
    let origin = std::time::Instant::now();
    group.bench_function("instant_elapsed_nanos", |b| {
        b.iter(|| black_box(u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)))
    });
    group.finish();
}

criterion_group!(benches, transitions, with_init_subscriber, clock);
criterion_main!(benches);
