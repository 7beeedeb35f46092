//! The binary as a real process: `higgsmeter-session run` with GPU readings from a fake
//! `libnvidia-ml.so.1` (the NVML meter's fake, built with gcc), a real SLEAP-named
//! process to see, OTLP to an in-process collector, the allocator push to a real HTTP
//! server; stopped with SIGTERM, after which the final push must arrive.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::support::{Server, wait_until};
use higgsmeter_collector::{Collector, Config, Overrides};
use serde_json::Value;

/// Builds the NVML meter's fake library (sdk/nvml/tests/fake_nvml) into this test's
/// temporary directory.
fn fake_nvml() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nvml/tests/fake_nvml/fake_nvml.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("session-fake-nvml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libnvidia-ml.so.1");
    let output = Command::new(std::env::var("CC").unwrap_or_else(|_| "gcc".to_owned()))
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&source)
        .output()
        .expect("run gcc (this test builds the fake NVML library)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    lib
}

/// Kills and reaps a child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of the first series of `name` with all `labels` in Prometheus text.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn run_exports_otlp_pushes_and_pushes_once_more_on_sigterm() {
    let lib = fake_nvml();
    let server = Server::start(Vec::new());

    // The collector, in process, on free ports.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut config = Config::default();
    config.apply(&Overrides {
        grpc: Some("127.0.0.1:0".into()),
        prometheus: Some("127.0.0.1:0".into()),
        storage: Some("none".into()),
        ..Overrides::default()
    });
    let collector = runtime
        .block_on(Collector::start(config.plan().unwrap()))
        .unwrap();
    let addresses = collector.addresses();
    let grpc = addresses.grpc.unwrap();
    let prometheus = addresses.prometheus.unwrap();

    // A SLEAP labeling process, running before the agent starts.
    let dir = std::env::temp_dir().join(format!("hm-session-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("sleap-label");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let _label = Reaped(Command::new(&exe).arg("60").spawn().unwrap());
    let log = dir.join("training_log.csv");
    std::fs::write(&log, "epoch,loss,val_loss\n0,0.5,0.6\n1,0.25,0.3\n").unwrap();

    let mut agent = Reaped(
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
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = agent.0.stderr.take().unwrap();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    let ticks = || {
        lines
            .lock()
            .unwrap()
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
                &["sleap-label"],
            )
            .is_some()
    });
    let text = scrape();
    assert!(
        sample(
            &text,
            "session_window_time_total",
            &["session_window_bucket=\"other\""]
        )
        .is_some_and(|v| v > 0.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "session_window_time_total",
            &["session_window_bucket=\"browser\""]
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
    let status = Command::new("kill")
        .args(["-TERM", &agent.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = {
        let mut exit = None;
        wait_until("the agent exits after SIGTERM", || {
            exit = agent.0.try_wait().unwrap();
            exit.is_some()
        });
        exit.unwrap()
    };
    reader.join().unwrap();
    let stderr = lines.lock().unwrap().join("\n");
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

    runtime.block_on(collector.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}
