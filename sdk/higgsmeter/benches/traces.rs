//! Cost of a state scope (enter + exit) through the subscriber `init()` installs, with
//! traces off, and on at the samplers `always_off` and `always_on`. A global subscriber
//! is one per process, so each run measures one mode, chosen by
//! `HIGGSMETER_BENCH_TRACES` (`off`, the default, `always_off` or `always_on`):
//!
//! ```text
//! for m in off always_off always_on; do
//!   HIGGSMETER_BENCH_TRACES=$m cargo bench -p higgsmeter --bench traces
//! done
//! ```
//!
//! With `always_on` the span exporter points at a closed port on 127.0.0.1: its batch
//! thread's exports fail at once, so the numbers are what the worker's own thread pays
//! (the span's OpenTelemetry data, the sampler, the hand-off to the batch queue or a
//! counted drop when it is full), not the export.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use higgsmeter::{AppState, Protocol};
use opentelemetry_sdk::trace::Sampler;

fn scope(c: &mut Criterion) {
    let mode = std::env::var("HIGGSMETER_BENCH_TRACES").unwrap_or_else(|_| "off".into());
    let builder = higgsmeter::Telemetry::builder()
        .with_env(false)
        .with_gpu_meter(false)
        .with_global_meter_provider(false)
        .with_periodic_exporter(
            opentelemetry_sdk::metrics::InMemoryMetricExporter::default(),
            Duration::from_secs(3600),
        );
    let builder = match mode.as_str() {
        "off" => builder,
        "always_off" | "always_on" => builder
            .with_traces(true)
            .with_traces_sampler(if mode == "always_on" {
                Sampler::AlwaysOn
            } else {
                Sampler::AlwaysOff
            })
            .with_otlp_protocol(Protocol::Grpc)
            .with_otlp_traces_endpoint("http://127.0.0.1:9"),
        other => panic!("HIGGSMETER_BENCH_TRACES={other}: expected off, always_off or always_on"),
    };
    let telemetry = builder.init().unwrap();
    let tracker = telemetry.tracker().clone();
    let mut g = c.benchmark_group(format!("traces_{mode}"));
    g.bench_function("scope_enter_exit", |b| {
        b.iter(|| {
            let scope = tracker.scope(AppState::Gpu, black_box("inference"));
            drop(black_box(scope));
        })
    });
    g.finish();
    if let Some(counts) = telemetry.trace_counts() {
        eprintln!("{mode}: {counts:?}");
    }
    // Leaked: dropping it would flush and shut down while criterion still reports.
    std::mem::forget(telemetry);
}

criterion_group!(benches, scope);
criterion_main!(benches);
