//! The config loader: `Config::from_yaml`, then `Config::plan`.

use higgsmeter_collector::config::{ExporterConfig, ReceiverConfig};
use higgsmeter_collector::{Config, Error};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Value};

use super::harness::{Tally, fuzz};
use super::mutate::{self, Mutation};
use crate::support::repo_root;

/// The shipped configs and the config snippets of the docs' shape: the seeds.
fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [
        "otel-config/collector.yaml",
        "otel-config/tls.yaml",
        "otel-config/otelcol-contrib.yaml",
        "otel-config/kubernetes/agent.yaml",
        "otel-config/kubernetes/gateway.yaml",
    ]
    .iter()
    .map(|p| std::fs::read(repo_root().join(p)).expect("a shipped config"))
    .collect();
    out.extend(super::harness::corpus(".yaml").into_iter().map(|(_, b)| b));
    out
}

/// Every key path the collector knows, with values of the right shape.
const KEYS: &[(&str, &str)] = &[
    ("receivers.otlp.protocols.grpc.endpoint", "127.0.0.1:0"),
    ("receivers.otlp.protocols.grpc.max_recv_msg_size_mib", "16"),
    ("receivers.otlp.protocols.grpc.max_connections", "1024"),
    (
        "receivers.otlp.protocols.grpc.max_connections_per_peer",
        "128",
    ),
    ("receivers.otlp.protocols.grpc.handshake_timeout", "10s"),
    ("receivers.otlp.protocols.grpc.max_connection_idle", "2m"),
    ("receivers.otlp.protocols.grpc.read_timeout", "30s"),
    (
        "receivers.otlp.protocols.grpc.tls.cert_file",
        "/nonexistent/cert.pem",
    ),
    (
        "receivers.otlp.protocols.grpc.auth.authenticator",
        "bearertokenauth",
    ),
    ("receivers.otlp.protocols.http.endpoint", "127.0.0.1:0"),
    (
        "receivers.otlp.protocols.http.max_request_body_size",
        "16777216",
    ),
    ("receivers.otlp.protocols.http.max_connections", "1024"),
    (
        "receivers.otlp.protocols.http.max_connections_per_peer",
        "128",
    ),
    ("receivers.otlp.protocols.http.read_header_timeout", "10s"),
    ("receivers.otlp.protocols.http.read_timeout", "30s"),
    ("processors.higgsmeter.sum_over", "[rank, host.name]"),
    ("processors.higgsmeter.expected_interval", "1s"),
    ("processors.higgsmeter.stale_after", "5s"),
    ("processors.higgsmeter.forget_after", "1h"),
    (
        "processors.higgsmeter.gauges",
        "[{match: '*_celsius', aggregation: max}]",
    ),
    (
        "processors.higgsmeter.default_gauge_aggregation",
        "sources_only",
    ),
    ("processors.higgsmeter.static_labels", "{model_name: llama}"),
    ("processors.higgsmeter.memory_limit_mib", "1024"),
    ("processors.higgsmeter.max_series", "200000"),
    ("processors.higgsmeter.max_series_per_source", "16384"),
    ("processors.higgsmeter.max_series_per_source_metric", "4096"),
    ("processors.higgsmeter.reserved_series_per_source", "64"),
    ("processors.higgsmeter.storage", "none"),
    ("processors.higgsmeter.checkpoint_interval", "5s"),
    ("exporters.prometheus.endpoint", "127.0.0.1:0"),
    ("exporters.prometheus.sources_view", "true"),
    ("exporters.otlp.endpoint", "http://127.0.0.1:1"),
    ("exporters.otlp.interval", "10s"),
    ("exporters.otlp.timeout", "5s"),
    ("exporters.otlp.compression", "gzip"),
    ("exporters.otlp.sending_queue.queue_size", "8"),
    ("exporters.otlp.retry_on_failure.initial_interval", "200ms"),
    ("exporters.otlp.retry_on_failure.max_interval", "30s"),
    ("exporters.otlphttp.endpoint", "http://127.0.0.1:1"),
    (
        "exporters.prometheusremotewrite.endpoint",
        "http://127.0.0.1:1/api/v1/write",
    ),
    (
        "exporters.prometheusremotewrite.headers",
        "{X-Scope-OrgID: a}",
    ),
    (
        "exporters.prometheusremotewrite.external_labels",
        "{cluster: a}",
    ),
    ("exporters.prometheusremotewrite.interval", "10s"),
    (
        "exporters.prometheusremotewrite.max_batch_size_bytes",
        "3000000",
    ),
    ("extensions.file_storage.directory", "/nonexistent/state"),
    ("extensions.bearertokenauth.token", "secret"),
    ("service.pipelines.metrics.receivers", "[otlp]"),
    ("service.pipelines.metrics.exporters", "[prometheus]"),
    ("service.pipelines.traces.receivers", "[otlp]"),
    ("service.extensions", "[file_storage]"),
    ("service.shutdown_timeout", "10s"),
];

/// A value for a key: its good one, or one of another shape or out of range.
fn value(good: &'static str) -> impl Strategy<Value = Value> {
    let parsed: Value = serde_saphyr::from_str(good).unwrap_or(Value::String(good.into()));
    prop_oneof![
        4 => Just(parsed),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => prop_oneof![Just(0i64), Just(-1), Just(i64::MAX), any::<i64>()]
            .prop_map(Value::from),
        1 => prop_oneof![Just(1e300f64), Just(0.5), Just(-0.0)].prop_map(Value::from),
        1 => prop_oneof![
            Just("0s"), Just("-1s"), Just("1e9h"), Just("18446744073709551616ms"),
            Just("1.5s"), Just(""), Just("none"), Just("http://"), Just("127.0.0.1:99999"),
            Just("[::1]:0"), Just("not-an-address"), Just("*"), Just("max"),
        ]
        .prop_map(|s| Value::String(s.into())),
        1 => Just(Value::Array(vec![Value::Null, Value::from(1)])),
        1 => Just(Value::Object(Map::new())),
    ]
}

/// A config tree built from key paths (a few of them misspelt), as JSON (which is
/// YAML).
fn tree() -> impl Strategy<Value = String> {
    let entry = (any::<Index>(), any::<Index>(), 0u8..16).prop_flat_map(|(k, _, typo)| {
        let (path, good) = KEYS[k.index(KEYS.len())];
        (Just(path), value(good), Just(typo))
    });
    prop::collection::vec(entry, 0..12).prop_map(|entries| {
        let mut root = Value::Object(Map::new());
        for (path, v, typo) in entries {
            let mut parts: Vec<String> = path.split('.').map(str::to_owned).collect();
            // A misspelt key now and then: an unknown key must name its path.
            if typo == 0 {
                let last = parts.len() - 1;
                parts[last].push('x');
            }
            let mut node = &mut root;
            for (i, part) in parts.iter().enumerate() {
                if !node.is_object() {
                    *node = Value::Object(Map::new());
                }
                let Value::Object(map) = node else {
                    unreachable!()
                };
                if i + 1 == parts.len() {
                    map.insert(part.clone(), v.clone());
                    break;
                }
                node = map
                    .entry(part.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
            }
        }
        serde_json::to_string_pretty(&root).expect("JSON")
    })
}

/// Listener endpoints `plan` would resolve: a host name would be looked up in DNS
/// (these tests stay off the network), so one that is not an IP address becomes
/// an address that fails without a lookup.
fn offline(config: &mut Config) {
    let fix = |e: &mut String| {
        if e.parse::<std::net::SocketAddr>().is_err() {
            *e = "not-an-address".into();
        }
    };
    // Every instance, named or not (`otlp/a`, `prometheus/b`).
    for receiver in config.receivers.0.values_mut() {
        let ReceiverConfig::Otlp(otlp) = receiver;
        if let Some(g) = otlp.protocols.grpc.as_mut() {
            fix(&mut g.endpoint);
        }
        if let Some(h) = otlp.protocols.http.as_mut() {
            fix(&mut h.endpoint);
        }
    }
    for exporter in config.exporters.0.values_mut() {
        if let ExporterConfig::Prometheus(p) = exporter {
            fix(&mut p.endpoint);
        }
    }
}

/// The loader's contract on any text.
pub(crate) fn check_config(text: &[u8], tally: &Tally) -> Result<(), TestCaseError> {
    // A config file is read as UTF-8 (`read_to_string`): other bytes never get
    // here, so a mutation that breaks UTF-8 is read as its lossy text instead.
    let text = String::from_utf8_lossy(text);
    let mut config = match Config::from_yaml(&text) {
        Ok(config) => config,
        Err(e) => {
            tally.add("refused by from_yaml");
            return check_error(&e);
        }
    };
    offline(&mut config);
    match config.plan() {
        Ok(_) => {
            tally.add("planned");
            Ok(())
        }
        Err(e) => {
            tally.add("refused by plan");
            check_error(&e)
        }
    }
}

fn check_error(e: &Error) -> Result<(), TestCaseError> {
    match e {
        Error::Config { path, message } => {
            prop_assert!(!path.is_empty(), "a config error without a key path: {}", e);
            prop_assert!(
                !message.is_empty(),
                "a config error without a message: {}",
                e
            );
        }
        Error::Yaml { message } => {
            prop_assert!(
                message.contains("line"),
                "a YAML error without its line: {}",
                e
            );
        }
        other => prop_assert!(false, "unexpected error kind from the loader: {}", other),
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Base {
    Seed(Index),
    Tree(String),
}

#[test]
fn config() {
    let seeds = seeds();
    let donors: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    let tally = Tally::default();
    fuzz(
        "config",
        1500,
        (
            prop_oneof![
                any::<Index>().prop_map(Base::Seed),
                tree().prop_map(Base::Tree)
            ],
            mutate::mutations(4),
        ),
        |(base, muts): (Base, Vec<Mutation>)| {
            let seed = match &base {
                Base::Seed(i) => seeds[i.index(seeds.len())].clone(),
                Base::Tree(t) => {
                    // Unmutated, a tree either plans or names a key path.
                    check_config(t.as_bytes(), &tally)?;
                    t.clone().into_bytes()
                }
            };
            check_config(
                &mutate::mutated(&seed, &muts, &donors, &mutate::YAML),
                &tally,
            )
        },
    );
    tally.report("config");
}

/// The shipped configs load and plan as they are (the fuzzer's seeds are sound).
#[test]
fn shipped_configs_plan() {
    for (i, seed) in seeds().iter().enumerate().take(2) {
        let mut config = Config::from_yaml(std::str::from_utf8(seed).expect("UTF-8"))
            .unwrap_or_else(|e| panic!("seed {i}: {e}"));
        offline(&mut config);
        if let Err(e) = config.plan() {
            // tls.yaml names certificate files that exist only where it is deployed.
            assert!(matches!(e, Error::Config { .. }), "seed {i}: {e}");
        }
    }
}

/// Deep nesting and alias expansion: an error with a line, never a stack overflow
/// or a runaway allocation.
#[test]
fn deep_and_expanding_yaml() {
    let tally = Tally::default();
    for depth in [10, 1_000, 100_000] {
        let flow = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        check_config(format!("receivers: {flow}").as_bytes(), &tally).expect("flow sequences");
        let maps = format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth));
        check_config(format!("service: {maps}").as_bytes(), &tally).expect("flow maps");
        let block: String = (0..depth.min(5_000))
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .collect();
        check_config(block.as_bytes(), &tally).expect("block maps");
    }
    // A billion laughs: nine levels of nine aliases each.
    let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        laughs.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 9].join(", ")
        ));
    }
    check_config(laughs.as_bytes(), &tally).expect("alias expansion");
}

/// Found by this target: a key named "" at the top level gave a config error whose
/// path was empty (`config error at ``: unknown field ```).
#[test]
fn regression_empty_top_level_key_names_a_path() {
    let tally = Tally::default();
    for text in ["{'': 1}", "'': x\n", "\"\": {a: 1}"] {
        let err = Config::from_yaml(text).expect_err("an unknown key");
        check_error(&err).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(err.to_string().contains("(top level)"), "{text:?}: {err}");
        check_config(text.as_bytes(), &tally).expect(text);
    }
}
