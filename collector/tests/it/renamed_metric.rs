//! A fleet that renames a metric is not locked out of its Prometheus name (ADR 0013),
//! against the real binary with its state on disk: `train_busy` (unit `s`) claims
//! `train_busy_seconds_total`; its only source goes silent and is forgotten; after a
//! restart a client that sends `train_busy_seconds_total` itself is accepted in full,
//! its time adds to the old name's in one fleet series, and the same holds after a
//! second restart.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

/// One cumulative counter point of `name` (with `unit`) from source `id`, as OTLP/JSON.
fn body(id: &str, name: &str, unit: &str, start: u128, value: f64) -> String {
    let now = now_ns();
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
        {{"key":"service.name","value":{{"stringValue":"renamer"}}}},
        {{"key":"service.instance.id","value":{{"stringValue":"{id}"}}}}]}},
        "scopeMetrics":[{{"metrics":[
        {{"name":"{name}","unit":"{unit}","sum":{{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[
          {{"attributes":[{{"key":"state","value":{{"stringValue":"gpu"}}}}],"startTimeUnixNano":"{start}","timeUnixNano":"{now}","asDouble":{value}}}]}}}}
        ]}}]}}]}}"#
    )
}

/// Posts `body`; panics unless every point was accepted.
fn post_accepted(collector: &CollectorProcess, body: String) {
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/v1/metrics", collector.http_url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("POST /v1/metrics");
    let status = resp.status().as_u16();
    let text = resp.text().expect("body");
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("rejected"), "points refused: {text}");
}

fn fleet_busy(collector: &CollectorProcess) -> (usize, f64) {
    let fleet = collector.fleet();
    let busy: Vec<_> = fleet
        .iter()
        .filter(|s| s.name == "train_busy_seconds_total")
        .collect();
    (busy.len(), busy.iter().map(|s| s.value).sum())
}

#[test]
fn a_renamed_metric_is_accepted_after_its_old_series_are_gone_across_restarts() {
    let state = temp_dir("renamed-metric-state");
    let state_arg = state.to_string_lossy().into_owned();
    let yaml = "processors:\n  higgsmeter:\n    stale_after: 1s\n    forget_after: 1s\n";
    let args = ["--storage", state_arg.as_str()];

    let collector = CollectorProcess::start(Some(yaml), &args);
    let start = now_ns();
    post_accepted(&collector, body("old-0", "train_busy", "s", start, 10.0));
    wait_for(Duration::from_secs(30), "the old name's 10 s", || {
        (fleet_busy(&collector) == (1, 10.0)).then_some(())
    });
    // The old name's only source goes silent: its series is forgotten (forget_after),
    // the fleet keeps its time.
    wait_for(Duration::from_secs(60), "the old series forgotten", || {
        (sum(
            &collector.fleet(),
            "higgsmeter_collector_series",
            &[("view", "source")],
        ) == 0.0)
            .then_some(())
    });
    assert_eq!(fleet_busy(&collector), (1, 10.0));
    assert!(collector.terminate().success());

    // Restarted from its state: the new name is accepted and adds to the same series.
    let collector = CollectorProcess::start(Some(yaml), &args);
    let start = now_ns();
    post_accepted(
        &collector,
        body("new-0", "train_busy_seconds_total", "", start, 5.0),
    );
    wait_for(Duration::from_secs(30), "10 s + 5 s in one series", || {
        (fleet_busy(&collector) == (1, 15.0)).then_some(())
    });
    assert!(collector.terminate().success());

    // And again: the merge and the series come back; the new name goes on counting.
    let collector = CollectorProcess::start(Some(yaml), &args);
    post_accepted(
        &collector,
        body("new-0", "train_busy_seconds_total", "", start, 8.0),
    );
    wait_for(Duration::from_secs(30), "10 s + 8 s in one series", || {
        (fleet_busy(&collector) == (1, 18.0)).then_some(())
    });
    assert!(collector.terminate().success());
}
