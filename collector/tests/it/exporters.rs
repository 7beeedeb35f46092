//! The OTLP exporter (a collector pushing to another collector), its bounded queue
//! when the upstream is down, the shutdown flush, and the command line.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

fn feed(collector: &CollectorProcess, value: f64) {
    let body = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"feeder"}}}},{{"key":"rank","value":{{"intValue":"3"}}}}]}},
        "scopeMetrics":[{{"metrics":[{{"name":"steps","unit":"{{step}}","sum":{{"aggregationTemporality":2,"isMonotonic":true,
        "dataPoints":[{{"attributes":[{{"key":"kind","value":{{"stringValue":"train"}}}}],"startTimeUnixNano":"{}","timeUnixNano":"{}","asDouble":{value}}}]}}}},
        {{"name":"queue","gauge":{{"dataPoints":[{{"timeUnixNano":"2","asInt":"4"}}]}}}}]}}]}}]}}"#,
        started(),
        started() + (value as u64) + 2
    );
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/v1/metrics", collector.http_url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 200);
}

/// The `queue` gauge is summed over sources (a rule: without one a gauge stays per
/// source, out of the fleet view).
const QUEUE_SUMS: &str =
    "processors:\n  higgsmeter:\n    gauges:\n      - match: queue\n        aggregation: sum\n";

#[test]
fn pushes_the_aggregate_upstream_over_grpc_and_http() {
    let upstream = CollectorProcess::start(Some(QUEUE_SUMS), &[]);
    for (i, flag) in ["--otlp-endpoint", "--otlphttp-endpoint"]
        .into_iter()
        .enumerate()
    {
        let url = if flag == "--otlp-endpoint" {
            upstream.grpc_url()
        } else {
            upstream.http_url()
        };
        let config = "processors:\n  higgsmeter:\n    gauges:\n      - match: queue\n        aggregation: sum\nexporters:\n  prometheus:\n  otlp:\n    endpoint: http://127.0.0.1:1\n    interval: 100ms\n  otlphttp:\n    endpoint: http://127.0.0.1:1\n    interval: 100ms\nservice:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [prometheus]\n";
        let edge = CollectorProcess::start(Some(config), &[flag, &url]);
        feed(&edge, 10.0);
        // The edge's points keep their own `job` upstream (ADR 0009).
        let service = [("job", "feeder")];
        wait_for(
            Duration::from_secs(20),
            "the upstream to receive the aggregate",
            || {
                let f = upstream.fleet();
                let want = 10.0 * (i + 1) as f64;
                (sum(&f, "steps_total", &[("job", "feeder"), ("kind", "train")]) == want)
                    .then_some(())
            },
        );
        // The upstream sums what it receives: one source per edge collector.
        assert_eq!(
            sum(&upstream.fleet(), "queue", &service),
            4.0 * (i + 1) as f64
        );
        let exporter = if flag == "--otlp-endpoint" {
            "otlp"
        } else {
            "otlphttp"
        };
        let edge_fleet = edge.fleet();
        assert!(
            sum(
                &edge_fleet,
                "higgsmeter_collector_exports_total",
                &[("exporter", exporter), ("outcome", "ok")]
            ) >= 1.0
        );
    }
    // Both edges are distinct sources upstream (each has its own service.instance.id).
    let targets = upstream
        .fleet()
        .into_iter()
        .filter(|s| s.name == "target_info")
        .count();
    assert_eq!(targets, 2);
}

#[test]
fn a_down_upstream_is_retried_with_a_bounded_queue_and_serving_continues() {
    // Nothing listens on the upstream port (bound and dropped to find a free one).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let config = format!(
        "exporters:\n  prometheus:\n  otlp:\n    endpoint: http://127.0.0.1:{port}\n    interval: 50ms\n    timeout: 200ms\n    sending_queue:\n      queue_size: 2\n    retry_on_failure:\n      initial_interval: 2s\n"
    );
    let edge = CollectorProcess::start(Some(&config), &[]);
    feed(&edge, 5.0);
    let fleet = wait_for(
        Duration::from_secs(20),
        "failed pushes and dropped points",
        || {
            let f = edge.fleet();
            let failed = sum(
                &f,
                "higgsmeter_collector_exports_total",
                &[("exporter", "otlp"), ("outcome", "failed")],
            );
            let dropped = sum(
                &f,
                "higgsmeter_collector_export_dropped_points_total",
                &[("exporter", "otlp")],
            );
            (failed >= 1.0 && dropped > 0.0).then_some(f)
        },
    );
    assert!(
        sum(
            &fleet,
            "higgsmeter_collector_export_queue_depth",
            &[("exporter", "otlp")]
        ) <= 2.0
    );
    assert_eq!(
        sum(
            &fleet,
            "higgsmeter_collector_exports_total",
            &[("exporter", "otlp"), ("outcome", "ok")]
        ),
        0.0
    );
    assert_eq!(
        sum(&fleet, "steps_total", &[]),
        5.0,
        "/metrics keeps serving"
    );
    promtool_check(&edge.scrape("/metrics"));
}

#[test]
fn sigterm_flushes_the_otlp_exporter() {
    let upstream = CollectorProcess::start(None, &[]);
    // A one-hour interval: only the shutdown flush can deliver anything.
    let config = format!(
        "exporters:\n  prometheus:\n  otlp:\n    endpoint: {}\n    interval: 1h\n",
        upstream.grpc_url()
    );
    let edge = CollectorProcess::start(Some(&config), &[]);
    feed(&edge, 7.0);
    let status = edge.terminate();
    assert!(status.success(), "{status:?}");
    let f = upstream.fleet();
    assert_eq!(sum(&f, "steps_total", &[("job", "feeder")]), 7.0);
}

#[test]
fn check_config_validates_and_explains() {
    let shipped = repo_root().join("otel-config/collector.yaml");
    let out = Command::new(bins::collector())
        .arg("--config")
        .arg(&shipped)
        .arg("--check-config")
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("config OK"));

    let bad = temp_dir("badconfig").join("bad.yaml");
    std::fs::write(
        &bad,
        "exporters:\n  prometheus:\n    endpoint: 127.0.0.1:9464\n    sources_veiw: true\n",
    )
    .expect("write");
    let out = Command::new(bins::collector())
        .arg("--config")
        .arg(&bad)
        .arg("--check-config")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exporters.prometheus") && err.contains("sources_veiw"),
        "{err}"
    );

    let out = Command::new(bins::collector())
        .arg("--help")
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["--config", "--grpc", "--check-config", "/metrics/sources"] {
        assert!(help.contains(word), "--help lacks {word}:\n{help}");
    }

    // A taken port is a clear startup error, not a panic.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(bins::collector())
        .args([
            "--storage",
            "none",
            "--grpc",
            &addr,
            "--http",
            "127.0.0.1:0",
            "--prometheus",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr) && err.contains("OTLP/gRPC"), "{err}");
}

#[test]
fn include_sources_pushes_each_source_under_its_own_resource() {
    let upstream = CollectorProcess::start(None, &[]);
    let config = format!(
        "exporters:\n  prometheus:\n  otlphttp:\n    endpoint: {}\n    interval: 100ms\n    compression: none\n    include_sources: true\n",
        upstream.http_url()
    );
    let edge = CollectorProcess::start(Some(&config), &[]);
    feed(&edge, 9.0);
    let sources = wait_for(
        Duration::from_secs(20),
        "the feeder's own series upstream",
        || {
            let s = upstream.sources();
            (sum(&s, "steps_total", &[("job", "feeder"), ("rank", "3")]) == 9.0).then_some(s)
        },
    );
    // The edge's fleet view arrives too, as the edge's own source (labelled with its
    // instance id), its points keeping their `job`.
    let edge_source: f64 = sources
        .iter()
        .filter(|s| s.name == "steps_total" && s.label("higgsmeter_collector").is_some())
        .map(|s| s.value)
        .sum();
    assert_eq!(edge_source, 9.0);
    assert!(!sources.iter().any(|s| s.label("exported_job").is_some()));
    // The upstream's fleet counts the feeder once: the forwarded series are not summed
    // again (ADR 0009).
    assert_eq!(
        sum(&upstream.fleet(), "steps_total", &[("job", "feeder")]),
        9.0
    );
}
