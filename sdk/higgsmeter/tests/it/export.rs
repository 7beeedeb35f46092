//! The activity families through a real OpenTelemetry pipeline (in-memory exporter).

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support::{manual, ms};
use higgsmeter::AppState;
use higgsmeter::catalog::{WORKER_ACTIVITY_TIME, WORKER_CURRENT_STATE};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};

/// (state, operation) → seconds of the last export's activity counter.
fn activity(rm: &ResourceMetrics) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for sm in rm.scope_metrics() {
        for m in sm.metrics() {
            if m.name() != WORKER_ACTIVITY_TIME.name {
                continue;
            }
            assert_eq!(m.unit(), "s");
            assert_eq!(m.description(), WORKER_ACTIVITY_TIME.help);
            let AggregatedMetrics::F64(MetricData::Sum(sum)) = m.data() else {
                panic!("f64 sum")
            };
            assert!(sum.is_monotonic());
            for p in sum.data_points() {
                let mut state = String::new();
                let mut op = String::new();
                for kv in p.attributes() {
                    match kv.key.as_str() {
                        "state" => state = kv.value.to_string(),
                        "operation" => op = kv.value.to_string(),
                        other => panic!("unexpected label {other}"),
                    }
                }
                out.push((state, op, p.value()));
            }
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

fn current_state(rm: &ResourceMetrics) -> Option<i64> {
    rm.scope_metrics()
        .flat_map(|sm| sm.metrics())
        .find(|m| m.name() == WORKER_CURRENT_STATE.name)
        .map(|m| {
            let AggregatedMetrics::I64(MetricData::Gauge(g)) = m.data() else {
                panic!("i64 gauge")
            };
            g.data_points().next().expect("one point").value()
        })
}

fn seconds(v: &[(String, String, f64)], state: &str, op: &str) -> f64 {
    v.iter()
        .find(|(s, o, _)| s == state && o == op)
        .map_or(0.0, |x| x.2)
}

#[test]
fn exports_taken_mid_state_show_live_time_and_never_decrease() {
    let (tracker, clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        tracker.set_state(AppState::Idle, "waiting_for_work");
        clock.advance(ms(500));
        let gpu = tracker.scope(AppState::Gpu, "inference");
        let mut last_total = 0.0;
        for step in 1..=4u64 {
            clock.advance(ms(500)); // a 2 s GPU call, exported every 0.5 s while it runs
            telemetry.force_flush();
            let exported = exporter.get_finished_metrics().unwrap();
            let rm = exported.last().unwrap();
            let v = activity(rm);
            assert_eq!(
                seconds(&v, "gpu", "inference"),
                0.5 * step as f64,
                "live gpu time at step {step}"
            );
            assert_eq!(current_state(rm), Some(i64::from(AppState::Gpu.code())));
            let total: f64 = v.iter().map(|x| x.2).sum();
            assert!(total >= last_total, "cumulative totals never decrease");
            assert_eq!(
                total,
                0.5 + 0.5 * step as f64,
                "sum = wall time since start"
            );
            last_total = total;
        }
        drop(gpu);
        telemetry.force_flush();
        let exported = exporter.get_finished_metrics().unwrap();
        assert_eq!(
            current_state(exported.last().unwrap()),
            Some(i64::from(AppState::Idle.code()))
        );
    });
    drop(telemetry);
}

/// `finalize()` ends the timeline: an export long after it, and the last one (the guard's
/// drop), carry exactly the totals at `finalize()`.
#[test]
fn exports_after_finalize_show_the_totals_at_finalize() {
    let (tracker, clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        {
            let _gpu = tracker.scope(AppState::Gpu, "train_step");
            clock.advance(ms(700));
        }
        tracker.set_state(AppState::Shutdown, "");
        clock.advance(ms(100));
        tracker.finalize();
        clock.advance(ms(10_000)); // the process lingers after finalize
    });
    let want = vec![
        ("gpu".to_string(), "train_step".to_string(), 0.7),
        ("shutdown".to_string(), String::new(), 0.1),
        ("startup".to_string(), String::new(), 0.0),
    ];
    telemetry.force_flush();
    let exported = exporter.get_finished_metrics().unwrap();
    assert_eq!(
        activity(exported.last().unwrap()),
        want,
        "a scrape after finalize"
    );
    drop(telemetry);
    let exported = exporter.get_finished_metrics().unwrap();
    assert!(exported.len() >= 2, "the guard's drop exported once more");
    assert_eq!(activity(exported.last().unwrap()), want, "the last export");
    assert_eq!(
        current_state(exported.last().unwrap()),
        Some(i64::from(AppState::Shutdown.code()))
    );
}

#[test]
fn delta_temporality_exports_increments_that_add_up() {
    let (tracker, clock, dispatch) = manual();
    let exporter = opentelemetry_sdk::metrics::InMemoryMetricExporterBuilder::new()
        .with_temporality(Temporality::Delta)
        .build();
    let telemetry = crate::support::with_memory_exporter(&tracker, exporter.clone())
        .init()
        .unwrap();
    let mut sum = 0.0;
    tracing::dispatcher::with_default(&dispatch, || {
        for (i, state) in [AppState::Io, AppState::Gpu, AppState::Cpu, AppState::Idle]
            .into_iter()
            .enumerate()
        {
            tracker.set_state(state, "loop");
            clock.advance(ms(250 * (i as u64 + 1)));
            telemetry.force_flush();
            let exported = exporter.get_finished_metrics().unwrap();
            let v = activity(exported.last().unwrap());
            assert!(
                v.iter().all(|x| x.2 >= 0.0),
                "no negative increments: {v:?}"
            );
            sum += v.iter().map(|x| x.2).sum::<f64>();
        }
    });
    assert_eq!(sum, 2.5, "the deltas add up to the wall time");
    drop(telemetry);
}

#[test]
fn every_state_code_is_the_seeds() {
    let (tracker, _clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    let expected = [
        ("idle", 0),
        ("io", 1),
        ("cpu", 2),
        ("gpu", 3),
        ("warmup", 4),
        ("startup", 5),
        ("shutdown", 6),
    ];
    tracing::dispatcher::with_default(&dispatch, || {
        for (name, code) in expected {
            let _s = tracker.scope(name.parse().unwrap(), "");
            telemetry.force_flush();
            let exported = exporter.get_finished_metrics().unwrap();
            assert_eq!(
                current_state(exported.last().unwrap()),
                Some(code),
                "{name}"
            );
        }
    });
}
