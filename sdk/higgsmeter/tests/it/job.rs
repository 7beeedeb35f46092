//! Goodput marks (`higgsmeter::job`) through a real OpenTelemetry pipeline (in-memory
//! exporter, manual clock: exact values): the `JOB_FAMILIES` gauges after each mark,
//! exported only once set; the checkpoint's productive seconds equal to the `gpu`
//! seconds at the save; the checkpoint and badput scopes' time under their operations;
//! no mark for a failed save; and `job.id` / `job.incarnation` in the resource from each
//! environment source, in a child process with an environment of its own.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{manual, ms};
use higgsmeter::catalog::{
    JOB_CHECKPOINT_PRODUCTIVE, JOB_CHECKPOINT_STEP, JOB_FAMILIES, JOB_RESTORED_STEP, JOB_STEP,
    WORKER_ACTIVITY_TIME,
};
use higgsmeter::job::{self, CHECKPOINT_RESTORE_OPERATION, CHECKPOINT_SAVE_OPERATION};
use higgsmeter::{AppState, Telemetry, Tracker};
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};

/// The job gauges of one export: family name → value (a step as `f64`); for the
/// checkpoint's productive seconds (one point per recent checkpoint, labelled `step`),
/// the latest checkpoint's.
fn job_gauges(rm: &ResourceMetrics) -> BTreeMap<String, f64> {
    job_points(rm)
        .into_iter()
        .filter_map(|(name, points)| points.last().map(|(_, v)| (name, *v)))
        .collect()
}

/// Every point of the job gauges of one export: family name → (its `step` label or
/// -1, value), in step order. Each point carries exactly its family's catalog labels.
fn job_points(rm: &ResourceMetrics) -> BTreeMap<String, Vec<(i64, f64)>> {
    let mut out = BTreeMap::new();
    for m in rm.scope_metrics().flat_map(|sm| sm.metrics()) {
        let Some(family) = JOB_FAMILIES.iter().find(|f| f.name == m.name()) else {
            continue;
        };
        assert_eq!(m.description(), family.help);
        assert_eq!(m.unit(), family.unit);
        let label = |attrs: Vec<&opentelemetry::KeyValue>| -> i64 {
            let keys: Vec<&str> = attrs.iter().map(|kv| kv.key.as_str()).collect();
            assert_eq!(keys, family.labels, "{}: its catalog labels", m.name());
            attrs
                .first()
                .map_or(-1, |kv| kv.value.to_string().parse().expect("a step"))
        };
        let mut points: Vec<(i64, f64)> = match m.data() {
            AggregatedMetrics::I64(MetricData::Gauge(g)) => g
                .data_points()
                .map(|p| (label(p.attributes().collect()), p.value() as f64))
                .collect(),
            AggregatedMetrics::F64(MetricData::Gauge(g)) => g
                .data_points()
                .map(|p| (label(p.attributes().collect()), p.value()))
                .collect(),
            other => panic!("{} is not a gauge: {other:?}", m.name()),
        };
        points.sort_by_key(|p| p.0);
        if family.labels.is_empty() {
            assert!(points.len() <= 1, "{}: {points:?}", m.name());
        }
        if !points.is_empty() {
            out.insert(m.name().to_owned(), points);
        }
    }
    out
}

/// The activity seconds of one export: (state, operation) → seconds.
fn activity(rm: &ResourceMetrics) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for m in rm.scope_metrics().flat_map(|sm| sm.metrics()) {
        if m.name() != WORKER_ACTIVITY_TIME.name {
            continue;
        }
        let AggregatedMetrics::F64(MetricData::Sum(sum)) = m.data() else {
            panic!("f64 sum")
        };
        for p in sum.data_points() {
            let label = |key: &str| {
                p.attributes()
                    .find(|kv| kv.key.as_str() == key)
                    .map(|kv| kv.value.to_string())
                    .unwrap_or_default()
            };
            out.insert((label("state"), label("operation")), p.value());
        }
    }
    out
}

fn gauges(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// Flushes and returns the last export.
fn export(telemetry: &Telemetry, exporter: &InMemoryMetricExporter) -> ResourceMetrics {
    telemetry.force_flush();
    exporter.get_finished_metrics().unwrap().pop().unwrap()
}

#[test]
fn marks_are_exported_as_the_job_gauges_once_set() {
    let (tracker, clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        let rm = export(&telemetry, &exporter);
        assert_eq!(job_gauges(&rm), gauges(&[]), "no mark set: no job gauge");
        assert!(!activity(&rm).is_empty(), "the export itself happened");

        {
            let _restore = tracker.checkpoint_restore(1200);
            clock.advance(ms(300));
            // Recorded when the restore finishes, not when it opens.
            assert_eq!(tracker.job_marks().restored_step, None);
            assert!(
                !job_gauges(&export(&telemetry, &exporter)).contains_key(JOB_RESTORED_STEP.name)
            );
        }
        assert_eq!(
            job_gauges(&export(&telemetry, &exporter)),
            gauges(&[(JOB_RESTORED_STEP.name, 1200.0)])
        );

        for step in 1201..=1203 {
            {
                let _gpu = tracker.scope(AppState::Gpu, "train_step");
                clock.advance(ms(500));
            }
            tracker.record_step(step);
        }
        assert_eq!(
            job_gauges(&export(&telemetry, &exporter)),
            gauges(&[(JOB_RESTORED_STEP.name, 1200.0), (JOB_STEP.name, 1203.0)])
        );

        {
            let _save = tracker.checkpoint_save(1203);
            clock.advance(ms(250));
        }
        tracker.record_step(1204);
        assert_eq!(
            job_gauges(&export(&telemetry, &exporter)),
            gauges(&[
                (JOB_RESTORED_STEP.name, 1200.0),
                (JOB_STEP.name, 1204.0),
                (JOB_CHECKPOINT_STEP.name, 1203.0),
                (JOB_CHECKPOINT_PRODUCTIVE.name, 1.5),
            ])
        );
    });
    // A step beyond what OTLP's signed integers hold is exported as the largest.
    tracker.record_step(u64::MAX);
    assert_eq!(tracker.job_marks().step, Some(job::MAX_STEP));
    assert_eq!(
        job_gauges(&export(&telemetry, &exporter))[JOB_STEP.name],
        i64::MAX as f64
    );
    drop(telemetry);
}

/// `higgsmeter_job_checkpoint_productive_seconds` is the tracker's `gpu` seconds when
/// the save finished, exactly: the gpu seconds exported at that moment, summed over the
/// gpu operations; later gpu time does not move it until the next save.
#[test]
fn checkpoint_productive_seconds_equal_the_gpu_seconds_at_the_save() {
    let (tracker, clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        tracker.set_state(AppState::Io, "data_loading");
        clock.advance(ms(2_000));
        {
            let _fwd = tracker.scope(AppState::Gpu, "forward");
            clock.advance(ms(20_000));
        }
        {
            let _bwd = tracker.scope(AppState::Gpu, "backward");
            clock.advance(ms(10_000));
            // A save while the gpu scope is open: the save's time is io, not gpu.
            let _save = tracker.checkpoint_save(40);
            clock.advance(ms(4_000));
        }
        let rm = export(&telemetry, &exporter);
        let exported_gpu: f64 = activity(&rm)
            .iter()
            .filter(|((state, _), _)| state == "gpu")
            .map(|(_, s)| *s)
            .sum();
        let marks = tracker.job_marks();
        assert_eq!(marks.checkpoint_productive, Some(Duration::from_secs(30)));
        assert_eq!(
            marks.checkpoint_productive,
            Some(tracker.snapshot().total(AppState::Gpu))
        );
        let g = job_gauges(&rm);
        assert_eq!(g[JOB_CHECKPOINT_PRODUCTIVE.name], 30.0);
        assert_eq!(g[JOB_CHECKPOINT_PRODUCTIVE.name], exported_gpu);
        assert_eq!(g[JOB_CHECKPOINT_STEP.name], 40.0);

        // More gpu time: the mark stays at the save's.
        tracker.set_state(AppState::Gpu, "forward");
        clock.advance(ms(7_000));
        let g = job_gauges(&export(&telemetry, &exporter));
        assert_eq!(g[JOB_CHECKPOINT_PRODUCTIVE.name], 30.0);

        // The next save, while in gpu (the live part counts): 37 s.
        drop(tracker.checkpoint_save(41));
        assert_eq!(
            tracker.job_marks().checkpoint_productive,
            Some(Duration::from_secs(37))
        );
        let g = job_gauges(&export(&telemetry, &exporter));
        assert_eq!(g[JOB_CHECKPOINT_PRODUCTIVE.name], 37.0);
        assert_eq!(g[JOB_CHECKPOINT_STEP.name], 41.0);

        // Custom badput in gpu (an evaluation on the GPU) is not progress: 5 s of it,
        // then 1 s more of steps; the next save keeps 38 s, not 43 s.
        {
            let _eval = tracker.badput_in(AppState::Gpu, "evaluation");
            clock.advance(ms(5_000));
        }
        clock.advance(ms(1_000));
        drop(tracker.checkpoint_save(42));
        assert_eq!(
            tracker.job_marks().checkpoint_productive,
            Some(Duration::from_secs(38))
        );
        assert_eq!(
            tracker.snapshot().total(AppState::Gpu),
            Duration::from_secs(43)
        );
    });
    drop(telemetry);
}

/// The checkpoint scopes are `io` under their operations, custom badput is
/// `badput.<cause>` in its state, and each restores what was current beneath it.
#[test]
fn checkpoint_and_badput_scopes_count_under_their_operations() {
    let (tracker, clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        tracker.set_state(AppState::Gpu, "train_step");
        {
            let _restore = tracker.checkpoint_restore(7);
            assert_eq!(
                tracker.current(),
                (AppState::Io, CHECKPOINT_RESTORE_OPERATION.into())
            );
            clock.advance(ms(3_000));
        }
        assert_eq!(tracker.current(), (AppState::Gpu, "train_step".into()));
        clock.advance(ms(1_000));
        {
            let _save = tracker.checkpoint_save(8);
            clock.advance(ms(4_000));
        }
        {
            let _eval = tracker.badput("evaluation");
            assert_eq!(
                tracker.current(),
                (AppState::Cpu, "badput.evaluation".into())
            );
            clock.advance(ms(500));
        }
        {
            let _eval = tracker.badput_in(AppState::Gpu, "evaluation");
            clock.advance(ms(1_500));
        }
        {
            // A cause given with the prefix is not prefixed twice.
            let _p = tracker.badput_in(AppState::Idle, "badput.profiling");
            clock.advance(ms(250));
        }
        let a = activity(&export(&telemetry, &exporter));
        let s = |state: &str, op: &str| a.get(&(state.to_owned(), op.to_owned())).copied();
        assert_eq!(s("io", CHECKPOINT_RESTORE_OPERATION), Some(3.0));
        assert_eq!(s("io", CHECKPOINT_SAVE_OPERATION), Some(4.0));
        assert_eq!(s("gpu", "train_step"), Some(1.0));
        assert_eq!(s("cpu", "badput.evaluation"), Some(0.5));
        assert_eq!(s("gpu", "badput.evaluation"), Some(1.5));
        assert_eq!(s("idle", "badput.profiling"), Some(0.25));
        assert_eq!(s("idle", "badput.badput.profiling"), None);
        let snap = tracker.snapshot();
        crate::support::assert_exact(&snap);
        assert_eq!(snap.get(AppState::Io, "checkpoint_save"), Some(ms(4_000)));
    });
    drop(telemetry);
}

/// A save or restore that fails records no mark (a panic inside it, or `discard`);
/// its time stays counted.
#[test]
fn a_failed_checkpoint_records_no_mark() {
    let (tracker, clock, dispatch) = manual();
    tracing::dispatcher::with_default(&dispatch, || {
        tracker.set_state(AppState::Gpu, "train_step");
        clock.advance(ms(1_000));
        drop(tracker.checkpoint_save(10));
        drop(tracker.checkpoint_restore(3));
        let before = tracker.job_marks();
        assert_eq!(before.checkpoint_step, Some(10));
        assert_eq!(before.restored_step, Some(3));

        let save = tracker.checkpoint_save(20);
        assert_eq!(save.step(), 20);
        clock.advance(ms(200));
        save.discard();
        assert_eq!(tracker.current(), (AppState::Gpu, "train_step".into()));
        let restore = tracker.checkpoint_restore(19);
        restore.discard();

        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _save = tracker.checkpoint_save(30);
            clock.advance(ms(300));
            panic!("disk full");
        }));
        assert!(caught.is_err());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _restore = tracker.checkpoint_restore(29);
            panic!("corrupt checkpoint");
        }));
        assert!(caught.is_err());

        assert_eq!(
            tracker.job_marks(),
            before,
            "no mark for a failed save or restore"
        );
        let snap = tracker.snapshot();
        crate::support::assert_exact(&snap);
        assert_eq!(
            snap.get(AppState::Io, CHECKPOINT_SAVE_OPERATION),
            Some(ms(500))
        );
        assert_eq!(tracker.current(), (AppState::Gpu, "train_step".into()));
    });
}

/// A tracker that is off (another rank in the seed's rank-0 mode) exports no mark.
#[test]
fn a_disabled_tracker_exports_no_marks() {
    let (tracker, _clock, dispatch) = manual();
    tracker.set_enabled(false);
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        tracker.record_step(5);
        drop(tracker.checkpoint_save(5));
        drop(tracker.checkpoint_restore(4));
        telemetry.force_flush();
        // Nothing observed at all: an export, if the SDK makes one, without them.
        let exported = exporter.get_finished_metrics().unwrap();
        assert!(
            exported.iter().all(|rm| job_gauges(rm).is_empty()),
            "{exported:?}"
        );
        // The marks were kept: a tracker turned on exports them.
        tracker.set_enabled(true);
        assert_eq!(
            job_gauges(&export(&telemetry, &exporter)),
            gauges(&[
                (JOB_STEP.name, 5.0),
                (JOB_CHECKPOINT_STEP.name, 5.0),
                (JOB_CHECKPOINT_PRODUCTIVE.name, 0.0),
                (JOB_RESTORED_STEP.name, 4.0),
            ])
        );
    });
    drop(telemetry);
}

/// The `job` functions work on the process-wide tracker.
#[test]
fn the_job_functions_mark_the_process_wide_tracker() {
    // Other tests of this binary may mark it too: only these values are checked, on
    // marks no other test sets.
    {
        let _restore = job::checkpoint_restore(424_242);
    }
    assert_eq!(job::marks().restored_step, Some(424_242));
    assert_eq!(
        higgsmeter::state_tracker().job_marks().restored_step,
        Some(424_242)
    );
}

// ---- the job's identity in the resource, from the environment ----

/// Set in the child process this binary runs of itself.
const CHILD_ENV: &str = "HIGGSMETER_TEST_JOB_RESOURCE_CHILD";

/// In a child process (a no-op otherwise): `init()` with the environment read and an
/// in-memory exporter; prints the exported resource's job attributes, or the error.
#[test]
fn child_reports_its_job_resource() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let exporter = InMemoryMetricExporter::default();
    let telemetry = Telemetry::builder()
        .with_subscriber(false)
        .with_global_meter_provider(false)
        .with_tracker(Tracker::new())
        .with_periodic_exporter(exporter.clone(), Duration::from_secs(3600))
        .init();
    let telemetry = match telemetry {
        Ok(t) => t,
        Err(e) => {
            println!("ERROR {e}");
            return;
        }
    };
    let rm = export(&telemetry, &exporter);
    for key in ["job.id", "job.incarnation"] {
        let value = rm
            .resource()
            .get(&opentelemetry::Key::from_static_str(key))
            .map(|v| format!("{v:?}"));
        println!("ATTR {key}={value:?}");
    }
    drop(telemetry);
}

/// Runs [`child_reports_its_job_resource`] with `vars` as its whole environment (and
/// PATH); returns its `ATTR` and `ERROR` lines.
fn child(vars: &[(&str, &str)]) -> Vec<String> {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "job::child_reports_its_job_resource",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(CHILD_ENV, "1")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness's `test NAME ... ` may precede the first line on the same line.
    let lines: Vec<String> = stdout
        .lines()
        .filter_map(|l| {
            let at = l.find("ATTR ").or_else(|| l.find("ERROR "))?;
            Some(l[at..].to_owned())
        })
        .collect();
    assert!(!lines.is_empty(), "the child ran nothing:\n{stdout}");
    lines
}

fn attrs(id: Option<&str>, incarnation: Option<i64>) -> Vec<String> {
    vec![
        format!(
            "ATTR job.id={:?}",
            id.map(|v| format!("{:?}", opentelemetry::Value::from(v.to_owned())))
        ),
        format!(
            "ATTR job.incarnation={:?}",
            incarnation.map(|v| format!("{:?}", opentelemetry::Value::from(v)))
        ),
    ]
}

#[test]
fn the_job_identity_reaches_the_resource_from_each_source_in_order() {
    let torch = [
        ("TORCHELASTIC_RUN_ID", "run-7f3a"),
        ("TORCHELASTIC_RESTART_COUNT", "2"),
    ];
    let ours = [
        ("HIGGSMETER_JOB_ID", "llama-pretrain"),
        ("HIGGSMETER_JOB_INCARNATION", "5"),
    ];
    assert_eq!(
        child(&[]),
        attrs(None, None),
        "absent when nothing names the job"
    );
    assert_eq!(child(&ours), attrs(Some("llama-pretrain"), Some(5)));
    assert_eq!(child(&torch), attrs(Some("run-7f3a"), Some(2)));
    let both: Vec<_> = torch.iter().chain(&ours).copied().collect();
    assert_eq!(
        child(&both),
        attrs(Some("run-7f3a"), Some(2)),
        "torchrun's first"
    );
    let mut all = both.clone();
    all.push((
        "OTEL_RESOURCE_ATTRIBUTES",
        "job.id=from-otel,job.incarnation=9,team=ml",
    ));
    assert_eq!(
        child(&all),
        attrs(Some("from-otel"), Some(9)),
        "OTEL_RESOURCE_ATTRIBUTES first"
    );
    // torchrun without --rdzv-id says `none`: no identity, the next source's.
    let unnamed = [
        ("TORCHELASTIC_RUN_ID", "none"),
        ("TORCHELASTIC_RESTART_COUNT", "0"),
        ("HIGGSMETER_JOB_ID", "named"),
    ];
    assert_eq!(child(&unnamed), attrs(Some("named"), Some(0)));
}

#[test]
fn a_bad_incarnation_fails_init_naming_the_variable() {
    for (vars, name) in [
        (
            &[("TORCHELASTIC_RESTART_COUNT", "-1")][..],
            "TORCHELASTIC_RESTART_COUNT",
        ),
        (
            &[("HIGGSMETER_JOB_INCARNATION", "first")][..],
            "HIGGSMETER_JOB_INCARNATION",
        ),
        (
            &[("OTEL_RESOURCE_ATTRIBUTES", "job.incarnation=1.5")][..],
            "OTEL_RESOURCE_ATTRIBUTES",
        ),
    ] {
        let lines = child(vars);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("ERROR invalid ") && lines[0].contains(name),
            "{lines:?}"
        );
    }
}

/// Every export carries the last eight checkpoints, each labelled with its step: a
/// reader that sees only every other export still sees every checkpoint.
#[test]
fn every_export_carries_the_last_eight_checkpoints() {
    let (tracker, clock, dispatch) = manual();
    let (telemetry, exporter) = crate::support::memory_pipeline(&tracker);
    tracing::dispatcher::with_default(&dispatch, || {
        tracker.set_state(AppState::Gpu, "train_step");
        for step in 1..=10u64 {
            clock.advance(ms(1_000));
            drop(tracker.checkpoint_save(step * 10));
        }
    });
    let points = job_points(&export(&telemetry, &exporter));
    let want: Vec<(i64, f64)> = (3..=10).map(|k| (k * 10, k as f64)).collect();
    assert_eq!(points[JOB_CHECKPOINT_PRODUCTIVE.name], want);
    assert_eq!(
        job_gauges(&export(&telemetry, &exporter))[JOB_CHECKPOINT_STEP.name],
        100.0
    );
    drop(telemetry);
}
