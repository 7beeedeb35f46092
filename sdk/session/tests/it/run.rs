//! The binary as a real process: `higgsmeter-session run` with GPU readings from a fake
//! `libnvidia-ml.so.1` (the NVML meter's fake, built with gcc), a real SLEAP-named
//! process to see, OTLP to an in-process collector, the allocator push to a real HTTP
//! server; stopped with SIGTERM, after which the final push must arrive.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::Server;
use higgsmeter_testkit::collector::InProcess;
use higgsmeter_testkit::exposition;
use higgsmeter_testkit::nvml::{Variant, fake_library};
use higgsmeter_testkit::process::{ChildGuard, LineLog};
use higgsmeter_testkit::wait_until;
use serde_json::Value;

/// The value of the first series of `name` whose labels include every pair of
/// `labels`, in Prometheus text.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    exposition::parse(text)
        .into_iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
}

#[test]
fn run_exports_otlp_pushes_and_pushes_once_more_on_sigterm() {
    // No other test's SLEAP-named process may be seen by this agent.
    let _sleap = crate::support::sleap_processes();
    let lib = fake_library(Variant::Complete);
    let server = Server::start(Vec::new());

    // The collector, in process, on free ports.
    let collector = InProcess::start();
    let addresses = collector.addresses();
    let grpc = addresses.grpc.unwrap();
    let prometheus = addresses.prometheus.unwrap();

    // A SLEAP labeling process, running before the agent starts.
    let dir = std::env::temp_dir().join(format!("hm-session-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("sleap-label");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let _label = ChildGuard::spawn("sleap-label", Command::new(&exe).arg("60"));
    let log = dir.join("training_log.csv");
    std::fs::write(&log, "epoch,loss,val_loss\n0,0.5,0.6\n1,0.25,0.3\n").unwrap();

    let mut agent = ChildGuard::spawn(
        "higgsmeter-session",
        Command::new(env!("CARGO_BIN_EXE_higgsmeter-session"))
            .args(["run", "--interval", "50ms", "--push-interval", "3600s"])
            .args(["--push-url", &server.url("/sessions/1/counters")])
            .arg("--training-log")
            .arg(&log)
            .env_remove("DISPLAY")
            .env("RUST_LOG", "higgsmeter_session=debug")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{grpc}"))
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "100")
            .env("OTEL_SERVICE_NAME", "lab-session")
            .env("HIGGSMETER_NVML_LIBRARY", &lib)
            .env("FAKE_NVML_DEVICE_COUNT", "1")
            .env("FAKE_NVML_UTIL", "40")
            .env("FAKE_NVML_MEM_USED", "2147483648")
            .env("FAKE_NVML_MEM_TOTAL", "85899345920")
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let log = LineLog::capture(agent.child().stderr.take().unwrap(), None);
    let ticks = || {
        log.lines()
            .iter()
            .filter(|l| l.contains("session tick"))
            .count()
    };
    wait_until("three ticks", || ticks() >= 3);

    // OTLP, through the collector: the session families under their catalog names.
    let client = reqwest::blocking::Client::new();
    let scrape = || {
        client
            .get(format!("http://{prometheus}/metrics"))
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default()
    };
    wait_until("the session families reach the collector", || {
        let text = scrape();
        sample(&text, "session_samples_total", &[]).is_some_and(|v| v >= 2.0)
            && sample(&text, "session_training_epochs_completed", &[]) == Some(2.0)
            && sample(
                &text,
                "session_process_time_to_first_seen",
                &[("session_process_name", "sleap-label")],
            )
            .is_some()
    });
    let text = scrape();
    assert!(
        sample(
            &text,
            "session_window_time_total",
            &[("session_window_bucket", "other")]
        )
        .is_some_and(|v| v > 0.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "session_window_time_total",
            &[("session_window_bucket", "browser")]
        ),
        Some(0.0)
    );
    assert_eq!(sample(&text, "session_training_loss", &[]), Some(0.25));
    // The GPU session counters come from the one NVML meter.
    assert!(
        sample(&text, "hw_gpu_session_samples_total", &[]).is_some_and(|v| v >= 1.0),
        "{text}"
    );
    // The agent is no worker: no activity series of its own.
    assert!(
        !text.contains("worker_activity_time_seconds_total{"),
        "{text}"
    );

    // Nothing pushed yet (the interval is an hour); SIGTERM pushes.
    assert!(server.received().is_empty());
    agent.sigterm();
    let exit = agent.wait_exit(Duration::from_secs(30));
    let stderr = log.to_end(Duration::from_secs(30)).join("\n");
    assert!(exit.success(), "{exit:?}\n{stderr}");

    let got = server.received();
    assert_eq!(got.len(), 1, "exactly the SIGTERM push: {got:?}");
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    // The seed's field names, in the seed's order, and nothing else.
    let raw = String::from_utf8(got[0].body.clone()).unwrap();
    let mut keys: Vec<(usize, &str)> = body
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (raw.find(&format!("\"{k}\":")).unwrap(), k.as_str()))
        .collect();
    keys.sort_unstable();
    let keys: Vec<&str> = keys.into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        keys,
        [
            "session_started_at",
            "sample_count",
            "seconds_in_subject_software",
            "seconds_in_terminal",
            "seconds_in_browser",
            "seconds_in_other",
            "gpu_active_seconds",
            "gpu_util_peak",
            "vram_used_peak_mb",
            "seconds_to_first_sleap_label",
            "seconds_to_first_sleap_train",
            "seconds_to_first_sleap_track",
            "max_labeled_frames",
            "training_epochs_completed",
            "training_final_loss",
        ]
    );
    let number = |k: &str| body[k].as_f64().unwrap();
    assert!(number("sample_count") >= 3.0, "{body}");
    // No display: every second is `other`.
    assert!(number("seconds_in_other") > 0.0);
    assert_eq!(
        number("seconds_in_subject_software") + number("seconds_in_browser"),
        0.0
    );
    // The fake GPU at 40 % with 2 GiB used, read through the NVML meter.
    assert_eq!(number("gpu_util_peak"), 40.0);
    assert_eq!(number("vram_used_peak_mb"), 2048.0);
    assert_eq!(number("gpu_active_seconds"), number("seconds_in_other"));
    assert!(
        body["seconds_to_first_sleap_label"]
            .as_i64()
            .is_some_and(|s| s >= 0),
        "{body}"
    );
    assert!(body["seconds_to_first_sleap_train"].is_null());
    assert_eq!(number("training_epochs_completed"), 2.0);
    assert_eq!(number("training_final_loss"), 0.25);
    let started = body["session_started_at"].as_str().unwrap();
    assert!(
        higgsmeter_session::parse_timestamp(started).is_some(),
        "{started}"
    );
    assert!(started.ends_with("+00:00"), "{started}");

    collector.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
