//! Python OpenTelemetry SDK workers (cumulative and delta, gRPC and HTTP) side by side
//! with higgsmeter SDK workers: the fleet view has the right sums.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use higgsmeter_catalog::WORKER_ACTIVITY_TIME;

#[test]
fn python_and_rust_workers_sum_correctly() {
    let collector = CollectorProcess::start(
        Some("processors:\n  higgsmeter:\n    expected_interval: 200ms\n    stale_after: 60s\n"),
        &[],
    );
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/otel_worker.py");
    let python = python();
    let combos = [
        ("grpc", "cumulative"),
        ("grpc", "delta"),
        ("http", "cumulative"),
        ("http", "delta"),
    ];
    let py: Vec<_> = combos
        .iter()
        .enumerate()
        .map(|(i, (protocol, temporality))| {
            let endpoint = if *protocol == "grpc" {
                collector.grpc_url()
            } else {
                collector.http_url()
            };
            Command::new(&python)
                .arg(&script)
                .args([
                    "--endpoint",
                    &endpoint,
                    "--protocol",
                    protocol,
                    "--temporality",
                    temporality,
                ])
                .args(["--rank", &(10 + i).to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a Python worker")
        })
        .collect();
    let rust: Vec<_> = (0..2u32)
        .map(|rank| {
            spawn_worker(
                rank,
                &if rank == 1 {
                    collector.http_url()
                } else {
                    collector.grpc_url()
                },
                rank == 1,
                &["--duration", "1", "--print-totals"],
            )
        })
        .collect();
    for (child, combo) in py.into_iter().zip(combos) {
        let out = child.wait_with_output().expect("Python worker");
        assert!(
            out.status.success(),
            "Python worker {combo:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rust_totals: Vec<BTreeMap<String, f64>> = rust.into_iter().map(worker_totals).collect();

    let py_job = [("job", "py-worker")];
    let last_text = std::cell::RefCell::new(String::new());
    let fleet = wait_for_or(
        Duration::from_secs(30),
        || {
            format!(
                "every worker's final export; last /metrics:\n{}",
                last_text.borrow()
            )
        },
        || {
            *last_text.borrow_mut() = collector.scrape("/metrics");
            let f = exposition::parse(&last_text.borrow());
            let done = sum(&f, "py_requests_total", &py_job) >= 40.0
                && sum(&f, "py_latency_seconds_count", &py_job) >= 16.0
                && sum(&f, WORKER_ACTIVITY_TIME.name, &[("job", "py-worker")]) >= 8.0
                && sum(&f, "worker_sources_in_state", &[("state", "shutdown")]) >= 2.0;
            done.then_some(f)
        },
    );
    assert_eq!(
        sum(
            &fleet,
            "py_requests_total",
            &[("job", "py-worker"), ("route", "/generate")]
        ),
        40.0
    );
    assert_eq!(
        sum(
            &fleet,
            WORKER_ACTIVITY_TIME.name,
            &[
                ("job", "py-worker"),
                ("state", "gpu"),
                ("operation", "py_step")
            ]
        ),
        8.0
    );
    assert_eq!(sum(&fleet, "py_latency_seconds_count", &py_job), 16.0);
    assert!((sum(&fleet, "py_latency_seconds_sum", &py_job) - 4.0 * 33.6).abs() < 1e-9);
    let bucket = |le: &str| {
        sum(
            &fleet,
            "py_latency_seconds_bucket",
            &[("job", "py-worker"), ("le", le)],
        )
    };
    assert_eq!(bucket("+Inf"), 16.0);
    assert_eq!(bucket("0.005"), 0.0);
    // One series per label set in the fleet view, whatever the temporality or transport.
    assert_eq!(
        fleet
            .iter()
            .filter(|s| s.name == "py_requests_total")
            .count(),
        1
    );

    // The Rust workers: fleet = sum of their own totals (all but the final state exactly).
    let mut expected: BTreeMap<String, f64> = BTreeMap::new();
    for totals in &rust_totals {
        for (k, v) in totals {
            *expected.entry(k.clone()).or_default() += v;
        }
    }
    for (key, want) in expected {
        let (state, op) = key.split_once('/').unwrap_or((&key, ""));
        let got = sum(
            &fleet,
            WORKER_ACTIVITY_TIME.name,
            &[("job", "demo-worker"), ("state", state), ("operation", op)],
        );
        if state == "shutdown" {
            assert!(got >= want - 1e-9, "{key}: {got} < {want}");
        } else {
            assert!(
                (got - want).abs() < 1e-9,
                "{key}: fleet {got}, workers {want}"
            );
        }
    }
    // Per state across both languages: the gpu sum is Python's 8 s plus Rust's gpu time.
    let rust_gpu: f64 = rust_totals
        .iter()
        .flat_map(|t| t.iter())
        .filter(|(k, _)| k.starts_with("gpu/"))
        .map(|(_, v)| v)
        .sum();
    let gpu = sum(&fleet, WORKER_ACTIVITY_TIME.name, &[("state", "gpu")]);
    assert!(
        (gpu - (8.0 + rust_gpu)).abs() < 1e-9,
        "gpu {gpu} vs {}",
        8.0 + rust_gpu
    );
    assert_eq!(
        sum(&fleet, "higgsmeter_collector_points_refused_total", &[]),
        0.0
    );
}
