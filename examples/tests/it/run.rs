//! The examples run: the worker exits cleanly, serves a valid Prometheus endpoint while
//! it runs, and its own totals sum to its wall time.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn lifecycle_worker_runs_and_accounts_its_whole_life() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lifecycle-worker"))
        .args(["--jobs", "5"])
        .env("HIGGSMETER_PROMETHEUS_ADDR", "127.0.0.1:0")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the worker");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let lines: Vec<String> = stdout.lines().map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success(), "worker failed: {lines:?}");
    assert!(
        lines[0].starts_with("prometheus endpoint: http://127.0.0.1:"),
        "{lines:?}"
    );
    let secs = |name: &str| -> f64 {
        let line = lines
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{name}:")))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    for state in ["gpu", "io", "cpu", "idle", "warmup", "startup", "shutdown"] {
        assert!(secs(state) >= 0.0);
    }
    // 5 jobs × 8 ms of inference, at least.
    assert!(secs("gpu") >= 0.040, "{lines:?}");
    assert!(secs("warmup") >= 0.020, "{lines:?}");
    let sum_line = lines
        .iter()
        .find(|l| l.trim_start().starts_with("sum:"))
        .unwrap();
    let words: Vec<&str> = sum_line.split_whitespace().collect();
    assert_eq!(
        words[1], words[4],
        "the printed sum equals the printed wall time: {sum_line}"
    );
}

/// The README's worker command with `RANK=1` beside a running collector: every rank
/// tracks and exports by default, so rank 1's time (not only "startup") reaches the
/// collector, under its rank.
#[test]
fn lifecycle_worker_rank_1_reaches_the_collector() {
    use higgsmeter_collector::View;
    let collector = higgsmeter_testkit::collector::InProcess::start();
    let running = collector.running();
    let grpc = running.addresses().grpc.unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lifecycle-worker"))
        .args(["--jobs", "5"])
        .env("RANK", "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{grpc}"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("HIGGSMETER_PROMETHEUS_ADDR", "127.0.0.1:0")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .stdin(Stdio::null())
        .output()
        .expect("run the worker");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "worker failed: {text}");
    // The worker flushed its final totals before it exited.
    let sources = running.aggregator().render(View::Sources);
    let gpu_line = sources
        .lines()
        .find(|l| {
            l.starts_with("worker_activity_time_seconds_total{")
                && l.contains("rank=\"1\"")
                && l.contains("state=\"gpu\"")
        })
        .unwrap_or_else(|| panic!("no rank 1 gpu time in the collector:\n{sources}"));
    let gpu: f64 = gpu_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(gpu >= 0.040, "5 jobs × 8 ms of inference: {gpu_line}");
    assert!(collector.shutdown());
}

/// The README's first command, shortened: the collector with a demo cluster of two
/// instrumented ranks (on free ports) stops on its own, and its live view shows both
/// ranks working; its output is not a terminal, so it prints plain blocks. (This was
/// the collector's `demo` subcommand's test.)
#[test]
fn demo_runs_the_collector_with_a_cluster_of_instrumented_ranks() {
    let out = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--ranks", "2", "--duration", "4"]) // no --plain: stdout is a pipe
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--prometheus", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .expect("run the demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed: {text}");
    assert!(
        text.starts_with("higgsmeter-collector listening grpc=127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("Prometheus: http://"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "a pipe gets plain blocks, no terminal codes: {text:?}"
    );
    assert!(text.contains("cluster page: http://"), "{text}");
    // The last view (after the workers stopped) lists both ranks with time in states.
    let last = text.rsplit("higgsmeter demo — ").next().unwrap();
    for rank in ["0", "1"] {
        let row = last
            .lines()
            .find(|l| l.starts_with(&format!("{rank:<5} ")))
            .unwrap_or_else(|| panic!("no row for rank {rank}: {text}"));
        let gpu: f64 = row
            .split_whitespace()
            .nth(2)
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap();
        assert!(gpu > 0.0, "rank {rank} spent no time in gpu: {row}");
    }
}
