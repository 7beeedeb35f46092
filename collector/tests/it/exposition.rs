//! Both views as Prometheus text (checked by `promtool check metrics`) and as
//! OpenMetrics when the scraper asks for it (checked by prometheus_client's strict
//! OpenMetrics parser).

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::support::*;

const BODY: &str = r#"{"resourceMetrics":[{"resource":{"attributes":[
  {"key":"service.name","value":{"stringValue":"expo"}},{"key":"service.instance.id","value":{"stringValue":"i-1"}},
  {"key":"rank","value":{"intValue":"0"}},{"key":"host.name","value":{"stringValue":"node-a"}},{"key":"k8s.pod.name","value":{"stringValue":"pod \"x\""}}]},
  "scopeMetrics":[{"metrics":[
    {"name":"steps","unit":"{step}","description":"Steps \"done\"\nso far","sum":{"aggregationTemporality":2,"isMonotonic":true,
      "dataPoints":[{"attributes":[{"key":"phase","value":{"stringValue":"a\"b\\c\nd"}}],"startTimeUnixNano":"1","timeUnixNano":"2","asInt":"3"}]}},
    {"name":"hw.energy","unit":"J","sum":{"aggregationTemporality":2,"isMonotonic":true,
      "dataPoints":[{"attributes":[{"key":"hw.id","value":{"stringValue":"gpu0"}}],"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":12.5}]}},
    {"name":"queue.depth","gauge":{"dataPoints":[{"timeUnixNano":"2","asDouble":2.5}]}},
    {"name":"worker_current_state","gauge":{"dataPoints":[{"timeUnixNano":"2","asInt":"3"}]}},
    {"name":"rpc.latency","unit":"s","histogram":{"aggregationTemporality":2,
      "dataPoints":[{"startTimeUnixNano":"1","timeUnixNano":"2","count":"3","sum":12.0,"bucketCounts":["1","1","1"],"explicitBounds":[1.0,5.0]}]}}
  ]}]}]}"#;

fn openmetrics_check(text: &str) {
    let code = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
                fams = list(text_string_to_metric_families(sys.stdin.read()))\nprint(' '.join(sorted(f.name + ':' + f.type for f in fams)))\n";
    let mut child = Command::new(python())
        .args(["-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python output");
    assert!(
        out.status.success(),
        "OpenMetrics parser refused:\n{}\n--- text ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families = String::from_utf8_lossy(&out.stdout);
    for want in [
        "steps:counter",
        "hw_energy:counter",
        "target:info",
        "rpc_latency_seconds:histogram",
    ] {
        assert!(families.contains(want), "{want} not in {families}");
    }
}

#[test]
fn both_views_are_valid_text_and_openmetrics() {
    let collector = CollectorProcess::start(
        Some("processors:\n  higgsmeter:\n    static_labels:\n      model_name: m\n"),
        &[],
    );
    let client = reqwest::blocking::Client::new();
    let resp = client
        .post(format!("{}/v1/metrics", collector.http_url()))
        .header("content-type", "application/json")
        .body(started_json(BODY))
        .send()
        .expect("POST");
    assert_eq!(resp.status().as_u16(), 200);
    let resp: serde_json::Value =
        serde_json::from_str(&resp.text().expect("body")).expect("JSON response");
    assert!(
        resp.get("partialSuccess").is_none_or(|p| p.is_null()),
        "{resp}"
    );

    for path in ["/metrics", "/metrics/sources"] {
        let text = collector.scrape(path);
        promtool_check(&text);
        let samples = exposition::parse(&text);
        assert_eq!(
            sum(
                &samples,
                "steps_total",
                &[("phase", "a\"b\\c\nd"), ("model_name", "m")]
            ),
            3.0,
            "{text}"
        );
        assert_eq!(
            sum(&samples, "hw_energy_total", &[("hw_id", "gpu0")]),
            12.5,
            "the NVML meter's dotted name gets its catalog name: {text}"
        );
        assert_eq!(
            sum(&samples, "rpc_latency_seconds_bucket", &[("le", "5")]),
            2.0
        );
        let info: Vec<_> = samples.iter().filter(|s| s.name == "target_info").collect();
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].label("k8s_pod_name"), Some("pod \"x\""));
        assert_eq!(info[0].label("instance"), Some("i-1"));
        // Deterministic: the same state renders the same bytes.
        if path == "/metrics/sources" {
            assert_eq!(text, collector.scrape(path));
        }

        let resp = client
            .get(format!("http://{}{path}", collector.prometheus))
            .header(
                "accept",
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
            )
            .send()
            .expect("GET");
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        let om = resp.text().expect("body");
        assert!(om.ends_with("# EOF\n"));
        openmetrics_check(&om);
    }
    // The fleet view: summed labels gone, per-source gauge with identity labels.
    let fleet = collector.fleet();
    assert!(
        fleet
            .iter()
            .filter(|s| s.name == "steps_total")
            .all(|s| s.label("rank").is_none() && s.label("instance").is_none())
    );
    let state: Vec<_> = fleet
        .iter()
        .filter(|s| s.name == "worker_current_state")
        .collect();
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].label("rank"), Some("0"));
    assert_eq!(state[0].label("host_name"), Some("node-a"));
    assert_eq!(
        sum(&fleet, "worker_sources_in_state", &[("state", "gpu")]),
        1.0
    );
}

/// Two ranks reporting a temperature (a gauge no rule and no catalog family covers) at
/// 60 and 61: `/metrics` never shows 121, nor any combined temperature; each source's
/// reading is on `/metrics/sources`. A rule in the config combines it as it says.
#[test]
fn a_gauge_without_a_rule_is_never_summed_in_the_fleet_view() {
    let body = |rank: u32, value: f64| {
        format!(
            r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
            {{"key":"service.name","value":{{"stringValue":"temps"}}}},
            {{"key":"rank","value":{{"intValue":"{rank}"}}}}]}},
            "scopeMetrics":[{{"metrics":[
            {{"name":"board_temperature","unit":"Cel","gauge":{{"dataPoints":[{{"timeUnixNano":"2","asDouble":{value}}}]}}}}]}}]}}]}}"#
        )
    };
    let post = |collector: &CollectorProcess, text: String| {
        let resp = reqwest::blocking::Client::new()
            .post(format!("{}/v1/metrics", collector.http_url()))
            .header("content-type", "application/json")
            .body(text)
            .send()
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 200);
    };
    let max_rule = "processors:\n  higgsmeter:\n    gauges:\n      - match: board_temperature*\n        aggregation: max\n";
    for config in [None, Some(max_rule)] {
        let collector = CollectorProcess::start(config, &[]);
        post(&collector, body(0, 60.0));
        post(&collector, body(1, 61.0));
        let fleet = collector.scrape("/metrics");
        assert!(
            !fleet
                .lines()
                .any(|l| !l.starts_with('#') && l.ends_with(" 121")),
            "{fleet}"
        );
        let temps: Vec<f64> = exposition::parse(&fleet)
            .iter()
            .filter(|s| s.name.starts_with("board_temperature"))
            .map(|s| s.value)
            .collect();
        match config {
            None => assert!(temps.is_empty(), "{fleet}"),
            Some(_) => assert_eq!(temps, [61.0], "{fleet}"),
        }
        let mut per_source: Vec<f64> = exposition::parse(&collector.scrape("/metrics/sources"))
            .iter()
            .filter(|s| s.name.starts_with("board_temperature"))
            .map(|s| s.value)
            .collect();
        per_source.sort_by(f64::total_cmp);
        assert_eq!(per_source, [60.0, 61.0]);
    }
}
