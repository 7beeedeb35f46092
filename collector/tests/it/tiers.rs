//! Agent → gateway tiers (ADR 0009), with real processes: two agents (one forwarding
//! its sources with `include_sources`, one not) push to a gateway; SDK ranks and a
//! Python OpenTelemetry SDK rank push to the agents; one real Prometheus scrapes the
//! gateway and another receives its remote write. Through a rank ending, an agent
//! SIGKILLed and restarted on its state, and the gateway restarted, the gateway's fleet
//! series never decreases or overshoots and ends equal to the sum of what every rank
//! accounted, and both Prometheus servers hold that sum with `resets()` 0 and no
//! `exported_exported_job`. Also: the shipped Kubernetes manifests parse and their collector configs
//! pass `Config::plan`.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const ACTIVITY: &str = "worker_activity_time_seconds_total";

fn agent_yaml(gateway_grpc: std::net::SocketAddr, include_sources: bool) -> String {
    format!(
        "processors:\n  higgsmeter:\n    expected_interval: 200ms\n    stale_after: 30s\n    checkpoint_interval: 200ms\n\
         exporters:\n  prometheus: {{endpoint: 127.0.0.1:0}}\n\
         \x20 otlp:\n    endpoint: http://{gateway_grpc}\n    interval: 200ms\n    include_sources: {include_sources}\n"
    )
}

fn gateway_yaml(remote_write: &str) -> String {
    format!(
        "processors:\n  higgsmeter:\n    expected_interval: 200ms\n    stale_after: 30s\n    checkpoint_interval: 200ms\n\
         exporters:\n  prometheus: {{endpoint: 127.0.0.1:0}}\n\
         \x20 prometheusremotewrite:\n    endpoint: {remote_write}\n    interval: 500ms\n"
    )
}

/// The value of a one-series instant query (`None` when it has no result yet).
fn scalar(prom: &Prometheus, expr: &str) -> Option<f64> {
    let result = prom.query(expr);
    assert!(result.len() <= 1, "{expr}: {result:?}");
    result.first().map(|s| s.value)
}

/// Starts a collector with `yaml`, state in `state`, on `ports` when given (to take its
/// addresses again after a restart).
fn collector(
    yaml: &str,
    state: &std::path::Path,
    ports: Option<[SocketAddr; 3]>,
) -> CollectorProcess {
    let state = state.display().to_string();
    let mut extra = vec!["--storage".to_owned(), state];
    if let Some([grpc, http, prometheus]) = ports {
        for (flag, addr) in [
            ("--grpc", grpc),
            ("--http", http),
            ("--prometheus", prometheus),
        ] {
            extra.push(flag.to_owned());
            extra.push(addr.to_string());
        }
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    CollectorProcess::start_with_env(Some(yaml), &extra, &[("RUST_LOG", "error")])
}

fn ports_of(c: &CollectorProcess) -> [SocketAddr; 3] {
    [c.grpc, c.http, c.prometheus]
}

/// The gateway's fleet total of worker activity, when it answers (not while it
/// restores or restarts).
fn gateway_total(gateway: &CollectorProcess) -> Option<f64> {
    let url = format!("http://{}/metrics", gateway.prometheus);
    let resp = reqwest::blocking::Client::new()
        .get(&url)
        .timeout(Duration::from_secs(2))
        .send()
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let samples = exposition::parse(&resp.text().ok()?);
    // The shutdown state is left out: a worker's exporter reads it a moment after the
    // worker prints its totals, so it may end a little above them.
    Some(
        samples
            .iter()
            .filter(|s| s.name == ACTIVITY && s.label("state") != Some("shutdown"))
            .map(|s| s.value)
            .sum(),
    )
}

#[test]
fn a_gateways_fleet_is_the_sum_of_every_rank_through_agent_and_gateway_restarts() {
    let receiving = Prometheus::receiver(&temp_dir("prom-rw"));
    let gateway_yaml = gateway_yaml(&receiving.url("/api/v1/write"));
    let gw_state = temp_dir("gateway");
    let mut gateway = collector(&gateway_yaml, &gw_state, None);
    let scraping = Prometheus::start(
        &temp_dir("prom-scrape"),
        &prometheus::config(&format!(
            "  - job_name: gateway\n    static_configs: [{{targets: [\"{}\"]}}]\n",
            gateway.prometheus
        )),
    );
    let a_state = temp_dir("agent-a");
    let b_state = temp_dir("agent-b");
    let a_yaml = agent_yaml(gateway.grpc, true);
    let b_yaml = agent_yaml(gateway.grpc, false);
    let mut agent_a = collector(&a_yaml, &a_state, None);
    let agent_b = collector(&b_yaml, &b_state, None);

    // Ranks: 0 and 1 on agent A (1 ends early: a rank dying), 2 and 3 on agent B
    // (3 over HTTP), and a Python OpenTelemetry SDK rank on agent B.
    let ranks = [
        (0, agent_a.grpc_url(), false, "9"),
        (1, agent_a.grpc_url(), false, "2"),
        (2, agent_b.grpc_url(), false, "9"),
        (3, agent_b.http_url(), true, "8"),
    ];
    let workers: Vec<_> = ranks
        .iter()
        .map(|(rank, endpoint, http, secs)| {
            spawn_worker(
                *rank,
                endpoint,
                *http,
                &["--duration", secs, "--print-totals"],
            )
        })
        .collect();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/otel_worker.py");
    let python_rank = Command::new(python())
        .arg(&script)
        .args(["--endpoint", &agent_b.grpc_url(), "--protocol", "grpc"])
        .args(["--temporality", "cumulative", "--rank", "40"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python rank");

    // What the gateway shows, sampled all along.
    let mut seen: Vec<f64> = Vec::new();
    let sample = |gateway: &CollectorProcess, seen: &mut Vec<f64>| {
        if let Some(v) = gateway_total(gateway) {
            seen.push(v);
        }
    };
    let started = Instant::now();
    let run_until = |t: f64, gateway: &CollectorProcess, seen: &mut Vec<f64>| {
        while started.elapsed().as_secs_f64() < t {
            sample(gateway, seen);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    run_until(3.0, &gateway, &mut seen);
    // Agent A dies without a word, and comes back on its state and its ports.
    agent_a.process.kill();
    run_until(4.0, &gateway, &mut seen);
    let restarted_a = collector(&a_yaml, &a_state, Some(ports_of(&agent_a)));
    drop(agent_a);
    run_until(5.5, &gateway, &mut seen);
    // The gateway restarts (SIGTERM: final checkpoint) on its state and ports.
    let ports = ports_of(&gateway);
    assert_eq!(gateway.terminate().code(), Some(0));
    gateway = collector(&gateway_yaml, &gw_state, Some(ports));

    // Ground truth: what every rank accounted.
    let mut truth = 0.0;
    for child in workers {
        truth += worker_totals(child)
            .iter()
            .filter(|(k, _)| !k.starts_with("shutdown/"))
            .map(|(_, v)| v)
            .sum::<f64>();
    }
    let out = python_rank.wait_with_output().expect("the Python rank");
    assert!(
        out.status.success(),
        "Python rank failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    truth += 2.0; // otel_worker.py: 8 × 0.25 s of gpu
    let deadline = Instant::now() + Duration::from_secs(30);
    let final_total = loop {
        if let Some(v) = gateway_total(&gateway) {
            seen.push(v);
            if (v - truth).abs() < 1e-6 {
                break v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the gateway's fleet never reached the ranks' sum {truth}: last {:?}",
            seen.last()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Never a reset, never a spike.
    for pair in seen.windows(2) {
        assert!(
            pair[1] >= pair[0] - 1e-9,
            "the fleet series decreased: {pair:?} in {seen:?}"
        );
    }
    assert!(
        seen.iter().all(|v| *v <= final_total + 1e-6),
        "the fleet series overshot {final_total}: {seen:?}"
    );
    // Each agent is a source at the gateway; A's forwarded ranks are there too, and
    // nothing is labelled exported_job.
    let url = format!("http://{}/metrics/sources", gateway.prometheus);
    let sources = reqwest::blocking::get(&url)
        .and_then(|r| r.text())
        .expect("sources");
    let parsed = exposition::parse(&sources);
    let agents: std::collections::BTreeSet<_> = parsed
        .iter()
        .filter(|s| s.name == ACTIVITY)
        .filter_map(|s| s.label("higgsmeter_collector"))
        .collect();
    assert_eq!(agents.len(), 2, "{agents:?}");
    assert!(
        parsed
            .iter()
            .any(|s| s.name == ACTIVITY && s.label("rank") == Some("0")),
        "agent A's forwarded rank 0 is missing"
    );
    assert!(!sources.contains("exported_job"), "{sources}");

    // Both Prometheus servers hold the sum (once the scrape and the remote write after
    // the gateway's convergence landed), and saw no counter reset.
    let total = r#"sum(worker_activity_time_seconds_total{state!="shutdown"})"#;
    for (name, prom) in [("scraping", &scraping), ("remote-write", &receiving)] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if scalar(prom, total).is_some_and(|v| (v - truth).abs() < 1e-6) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} Prometheus never held {truth}: {:?}\n{}",
                scalar(prom, total),
                prom.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let resets = scalar(
            prom,
            r#"sum(resets(worker_activity_time_seconds_total{state!="shutdown"}[10m]))"#,
        );
        assert_eq!(resets, Some(0.0), "{name} Prometheus saw a counter reset");
        assert!(
            prom.query(r#"{exported_exported_job!=""}"#).is_empty(),
            "{name}: labels piled up through the tiers"
        );
    }
    // Scraped, the ranks' job becomes exported_job once (the scrape job is `gateway`);
    // remote-written, it stays `job`.
    let jobs = |prom: &Prometheus, label: &str| -> std::collections::BTreeSet<String> {
        prom.query(&format!(
            "count by ({label}) (worker_activity_time_seconds_total)"
        ))
        .into_iter()
        .filter_map(|s| s.labels.get(label).cloned())
        .collect()
    };
    let want: std::collections::BTreeSet<String> =
        ["demo-worker", "py-worker"].map(String::from).into();
    assert_eq!(jobs(&scraping, "exported_job"), want);
    assert_eq!(jobs(&receiving, "job"), want);
    drop(restarted_a);
    drop(agent_b);
}

/// The Kubernetes manifests in `otel-config/kubernetes/` parse, hold the kinds the
/// topology needs, and their embedded collector configs pass `Config::plan`.
#[test]
fn the_kubernetes_manifests_parse_and_their_configs_plan() {
    let dir = repo_root().join("otel-config/kubernetes");
    let mut kinds = Vec::new();
    let mut configs = 0;
    for entry in std::fs::read_dir(&dir).expect("otel-config/kubernetes") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
        for doc in docs {
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("no kind in {}", path.display()));
            kinds.push(kind.to_owned());
            if kind == "ConfigMap" {
                let yaml = doc["data"]["collector.yaml"].as_str().unwrap_or_else(|| {
                    panic!("a ConfigMap in {} has no collector.yaml", path.display())
                });
                let config = higgsmeter_collector::Config::from_yaml(yaml)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                config
                    .plan()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                configs += 1;
            }
        }
    }
    for kind in ["DaemonSet", "Deployment", "Service", "ConfigMap"] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
    }
    assert_eq!(configs, 2, "one agent and one gateway config");
}

/// Rank `rank`'s cumulative step counter at `value`, as OTLP/JSON.
fn steps_body(rank: u32, value: u32) -> String {
    let start = started();
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
        {{"key":"service.name","value":{{"stringValue":"named"}}}},
        {{"key":"rank","value":{{"intValue":"{rank}"}}}}]}},
        "scopeMetrics":[{{"metrics":[{{"name":"steps","sum":{{"aggregationTemporality":2,"isMonotonic":true,
        "dataPoints":[{{"startTimeUnixNano":"{start}","timeUnixNano":"{start}","asInt":"{value}"}}]}}}}]}}]}}]}}"#
    )
}

/// Named exporters (`otlp/primary`, `otlp/backup`): an agent pushes to two upstreams
/// at once, each with its own queue, retries and `exporter` label; with the backup
/// down, the primary's gateway holds the exact sum, round after round, and the
/// agent's own metrics tell the two apart.
#[test]
fn an_agent_pushes_to_two_named_upstreams_and_one_down_holds_up_nothing() {
    let gateway =
        CollectorProcess::start(Some("processors:\n  higgsmeter:\n    storage: none\n"), &[]);
    // A port nothing listens on: bound, noted, closed.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let agent = CollectorProcess::start(
        Some(&format!(
            "processors:\n  higgsmeter:\n    storage: none\n\
             exporters:\n  prometheus: {{endpoint: 127.0.0.1:0}}\n\
             \x20 otlp/primary:\n    endpoint: http://{}\n    interval: 200ms\n\
             \x20 otlp/backup:\n    endpoint: http://{down}\n    interval: 200ms\n    timeout: 300ms\n    \
             sending_queue: {{queue_size: 2}}\n    retry_on_failure: {{initial_interval: 50ms, max_interval: 200ms}}\n\
             service:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [prometheus, otlp/primary, otlp/backup]\n",
            gateway.grpc
        )),
        &[],
    );
    let client = reqwest::blocking::Client::new();
    let post = |rank: u32, value: u32| {
        let resp = client
            .post(format!("{}/v1/metrics", agent.http_url()))
            .header("content-type", "application/json")
            .body(steps_body(rank, value))
            .send()
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 200);
    };
    let gateway_total = |want: f64| {
        wait_for(
            Duration::from_secs(30),
            "the gateway holds the exact sum",
            || (sum(&gateway.fleet(), "steps_total", &[]) == want).then_some(()),
        )
    };
    post(0, 3);
    post(1, 7);
    gateway_total(10.0);
    post(0, 30);
    post(1, 70);
    gateway_total(100.0);
    let own = |exporter: &str, outcome: &str| {
        sum(
            &agent.fleet(),
            "higgsmeter_collector_exports_total",
            &[("exporter", exporter), ("outcome", outcome)],
        )
    };
    wait_for(
        Duration::from_secs(30),
        "the backup's failures counted",
        || (own("otlp/backup", "failed") > 0.0).then_some(()),
    );
    assert!(own("otlp/primary", "ok") > 0.0);
    assert_eq!(own("otlp/backup", "ok"), 0.0);
    assert_eq!(
        own("otlp", "ok") + own("otlp", "failed"),
        0.0,
        "no unnamed otlp"
    );
    // The backup's bounded queue drops its oldest readings, counted under its name.
    wait_for(
        Duration::from_secs(30),
        "the backup's queue drops counted",
        || {
            let dropped = sum(
                &agent.fleet(),
                "higgsmeter_collector_export_dropped_points_total",
                &[("exporter", "otlp/backup"), ("reason", "queue_full")],
            );
            (dropped > 0.0).then_some(())
        },
    );
    // Another round: the primary keeps up, exactly.
    post(0, 50);
    post(1, 90);
    gateway_total(140.0);
    assert!(agent.terminate().success());
}

/// The activity counter of one source (`service.instance.id` = `instance`) over
/// `ops` operations of `gpu`, each at `value` (cumulative), as OTLP/HTTP protobuf.
fn activity_body(instance: &str, ops: u32, value: f64) -> Vec<u8> {
    use prost::Message as _;
    let points: Vec<(&str, String)> = (0..ops).map(|op| ("gpu", format!("req-{op}"))).collect();
    let resource = vec![
        kv("service.name", "tiers-overflow"),
        kv("service.instance.id", instance),
    ];
    activity_request([resource], &points, value, started() + (value * 1e6) as u64).encode_to_vec()
}

/// Overflow across tiers: an agent (quota 4 series a metric) forwards its sources to a
/// gateway (quota 2) that remote-writes into Prometheus. The agent's overflow reaches the
/// gateway with its marker and is folded there, the gateway's own quota folds the rest,
/// and at every hop the total is what the ranks counted; remote write carries the
/// overflow series.
#[test]
fn overflow_crosses_tiers_with_exact_totals() {
    let receiving = Prometheus::receiver(&temp_dir("prom-rw-overflow"));
    let gateway_yaml = gateway_yaml(&receiving.url("/api/v1/write")).replace(
        "    checkpoint_interval: 200ms\n",
        "    checkpoint_interval: 200ms\n    max_series_per_source_metric: 2\n",
    );
    let gateway = collector(&gateway_yaml, &temp_dir("gateway-overflow"), None);
    let agent_yaml = agent_yaml(gateway.grpc, true).replace(
        "    checkpoint_interval: 200ms\n",
        "    checkpoint_interval: 200ms\n    max_series_per_source_metric: 4\n",
    );
    let agent = collector(&agent_yaml, &temp_dir("agent-overflow"), None);
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/v1/metrics", agent.http_url());
    for value in [1.0, 2.0, 3.0] {
        for (instance, ops) in [("runaway", 10), ("healthy", 2)] {
            let resp = client
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(activity_body(instance, ops, value))
                .send()
                .expect("POST");
            assert!(resp.status().is_success(), "{}", resp.status());
        }
    }
    let want = 12.0 * 3.0;
    let total = |c: &CollectorProcess| sum(&c.fleet(), ACTIVITY, &[]);
    wait_for(Duration::from_secs(30), "the agent's total", || {
        (total(&agent) == want).then_some(())
    });
    let marked = [("otel_metric_overflow", "true")];
    assert_eq!(sum(&agent.fleet(), ACTIVITY, &marked), 6.0 * 3.0);
    wait_for(Duration::from_secs(30), "the gateway's total", || {
        (total(&gateway) == want).then_some(())
    });
    assert_eq!(sum(&gateway.fleet(), ACTIVITY, &marked), 6.0 * 3.0);
    // The forwarded runaway source at the gateway: its quota of 2 series and its
    // overflow, which holds the rest (the agent's overflow among it).
    let forwarded: Vec<Sample> = gateway
        .sources()
        .into_iter()
        .filter(|s| s.name == ACTIVITY && s.label("instance") == Some("runaway"))
        .collect();
    assert_eq!(forwarded.len(), 3, "{forwarded:?}");
    assert_eq!(sum(&forwarded, ACTIVITY, &[]), 10.0 * 3.0);
    assert_eq!(sum(&forwarded, ACTIVITY, &marked), 8.0 * 3.0);
    let named = [("instance", "runaway")];
    assert!(
        sum(
            &gateway.fleet(),
            "higgsmeter_collector_overflow_points_total",
            &named
        ) > 0.0
    );
    // Remote write: the same total, and the overflow series with its label.
    wait_for(Duration::from_secs(60), "the remote-written total", || {
        let r = receiving.query(&format!("sum({ACTIVITY})"));
        (r.first().map(|s| s.value) == Some(want)).then_some(())
    });
    let overflow = receiving.query(&format!("{ACTIVITY}{{otel_metric_overflow=\"true\"}}"));
    assert_eq!(
        overflow.iter().map(|s| s.value).sum::<f64>(),
        6.0 * 3.0,
        "{overflow:?}"
    );
}
