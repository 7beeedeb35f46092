//! TLS and bearer-token auth, against real clients: the Python OpenTelemetry SDK's
//! gRPC and HTTP exporters and grpcio's stub, reqwest (rustls) for HTTP and `/metrics`,
//! a worker built on the higgsmeter SDK configured by the standard `OTEL_*` variables,
//! and a second collector upstream. Certificates are made per test with rcgen: a CA, a
//! server certificate for `localhost` and `127.0.0.1`, client certificates, an expired
//! one and one from an untrusted CA.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use higgsmeter_testkit::pki::{Ca, Pki};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, metric,
    number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

const TOKEN: &str = "t0k3n-for-tests";

/// The kit's throw-away PKI (a CA, `server` for `localhost` and `127.0.0.1`, `client`)
/// with what these tests add: `other-server` for `localhost`, `stranger` from an
/// untrusted CA, and an `expired` server certificate.
fn pki() -> Pki {
    let pki = Pki::new("higgsmeter test CA");
    let untrusted = Ca::new("an untrusted CA");
    pki.add(
        "other-server",
        &pki.ca().leaf("other-server", &["localhost"]),
    );
    pki.add("stranger", &untrusted.leaf("stranger", &["worker-9"]));
    pki.add(
        "expired",
        &pki.ca()
            .expired_leaf("expired", &["localhost", "127.0.0.1"]),
    );
    pki
}

/// A reqwest client trusting only the test CA (and presenting `identity` if given).
fn https_client(pki: &Pki, identity: Option<&str>) -> reqwest::blocking::Client {
    let certs = reqwest::Certificate::from_pem_bundle(&pki.ca_pem()).expect("CA PEM");
    let mut b = reqwest::blocking::Client::builder()
        .tls_certs_only(certs)
        .timeout(Duration::from_secs(10));
    if let Some(name) = identity {
        let mut pem = std::fs::read(pki.dir().join(format!("{name}.pem"))).expect("cert");
        pem.extend(std::fs::read(pki.dir().join(format!("{name}.key"))).expect("key"));
        b = b.identity(reqwest::Identity::from_pem(&pem).expect("identity"));
    }
    b.build().expect("client")
}

/// A GET over https verified against the test CA.
fn https_get(pki: &Pki, url: &str) -> String {
    let resp = https_client(pki, None)
        .get(url)
        .send()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    resp.text().expect("body")
}

fn metrics(pki: &Pki, c: &CollectorProcess, path: &str) -> Vec<Sample> {
    exposition::parse(&https_get(
        pki,
        &format!("https://localhost:{}{path}", c.prometheus.port()),
    ))
}

/// One OTLP request: counter `tls_probe` = `value` from a source with `rank`.
fn probe(rank: &str, value: f64) -> Vec<u8> {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "probe"), kv("rank", rank)],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "tls_probe".into(),
                    data: Some(metric::Data::Sum(Sum {
                        data_points: vec![NumberDataPoint {
                            start_time_unix_nano: started(),
                            time_unix_nano: started() + 1_000_000_000,
                            value: Some(number_data_point::Value::AsDouble(value)),
                            ..Default::default()
                        }],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// POSTs `body` to the HTTP receiver over https with an optional `Authorization`.
fn post(
    client: &reqwest::blocking::Client,
    c: &CollectorProcess,
    auth: Option<&str>,
    body: Vec<u8>,
) -> Result<reqwest::blocking::Response, reqwest::Error> {
    let mut req = client
        .post(format!("https://localhost:{}/v1/metrics", c.http.port()))
        .header("content-type", "application/x-protobuf")
        .body(body);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    req.send()
}

/// Runs `collector/tests/python/tls_client.py` and returns what it printed.
fn python_client(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/tls_client.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        // requests lets these override the exporter's certificate_file.
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .stderr(Stdio::piped())
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "Python client {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A collector config with TLS everywhere and the token on the receivers. Sources stay
/// live for 10 minutes: a probe pushed once must not leave the per-source view while a
/// slow machine builds the next client.
fn secured_config(pki: &Pki, token_line: &str, client_ca: bool) -> String {
    let client_ca = if client_ca {
        format!(", client_ca_file: {}", pki.path("ca.pem"))
    } else {
        String::new()
    };
    let tls = format!(
        "{{cert_file: {}, key_file: {}{client_ca}}}",
        pki.path("server.pem"),
        pki.path("server.key")
    );
    format!(
        "extensions:\n  bearertokenauth:\n    {token_line}\n\
         receivers:\n  otlp:\n    protocols:\n\
         \x20     grpc:\n        endpoint: 127.0.0.1:0\n        tls: {tls}\n        auth: {{authenticator: bearertokenauth}}\n\
         \x20     http:\n        endpoint: 127.0.0.1:0\n        tls: {tls}\n        auth: {{authenticator: bearertokenauth}}\n\
         exporters:\n  prometheus:\n    endpoint: 127.0.0.1:0\n    tls: {{cert_file: {}, key_file: {}}}\n\
         processors:\n  higgsmeter:\n    stale_after: 10m\n\
         service:\n  extensions: [bearertokenauth]\n",
        pki.path("server.pem"),
        pki.path("server.key"),
    )
}

/// Starts a collector from YAML (without state). Its log is errors only: these tests
/// fail handshakes on purpose, and each would log a warning.
fn start(yaml: &str) -> CollectorProcess {
    CollectorProcess::start_with_env(Some(yaml), &["--storage", "none"], &[("RUST_LOG", "error")])
}

#[test]
fn receivers_take_real_clients_over_tls_with_the_token_and_refuse_the_rest() {
    let pki = pki();
    let c = start(&secured_config(&pki, &format!("token: {TOKEN}"), false));
    let grpc = format!("localhost:{}", c.grpc.port());
    let http = format!("https://localhost:{}", c.http.port());
    let ca = pki.path("ca.pem");

    // The Python SDK's exporters, with the CA and the token: accepted.
    let ok = |protocol: &str, endpoint: &str, rank: &str| {
        python_client(&[
            "--mode",
            "exporter",
            "--protocol",
            protocol,
            "--endpoint",
            endpoint,
            "--ca",
            &ca,
            "--token",
            TOKEN,
            "--rank",
            rank,
        ])
    };
    assert_eq!(ok("grpc", &grpc, "1"), "SUCCESS");
    assert_eq!(ok("http", &http, "2"), "SUCCESS");

    // grpcio's stub: the status codes.
    let raw = |extra: &[&str]| {
        let mut args = vec!["--mode", "raw", "--endpoint", &grpc, "--rank", "66"];
        args.extend_from_slice(extra);
        python_client(&args)
    };
    assert_eq!(raw(&["--ca", &ca, "--token", "wrong"]), "UNAUTHENTICATED");
    assert_eq!(raw(&["--ca", &ca]), "UNAUTHENTICATED");
    // Plaintext on the TLS port: the handshake fails, the channel is unavailable.
    assert_eq!(raw(&["--token", TOKEN]), "UNAVAILABLE");
    // The exporters with a wrong token fail too.
    let refused = python_client(&[
        "--mode",
        "exporter",
        "--protocol",
        "http",
        "--endpoint",
        &http,
        "--ca",
        &ca,
        "--token",
        "wrong",
        "--rank",
        "67",
    ]);
    assert_eq!(refused, "FAILURE");

    // HTTP: 401 with an OTLP status (code 16) and WWW-Authenticate.
    let client = https_client(&pki, None);
    for auth in [None, Some("Bearer wrong"), Some(&*format!("Basic {TOKEN}"))] {
        let resp = post(&client, &c, auth, probe("68", 5.0)).expect("an https answer");
        assert_eq!(resp.status(), 401, "{auth:?}");
        assert_eq!(
            resp.headers().get("www-authenticate").map(|v| v.as_bytes()),
            Some(&b"Bearer"[..])
        );
        let status = resp.bytes().expect("body");
        assert!(
            String::from_utf8_lossy(&status).contains("bearer token"),
            "{status:?}"
        );
    }
    // The scheme is case-insensitive; the token is not.
    let resp = post(
        &client,
        &c,
        Some(&format!("bearer {TOKEN}")),
        probe("3", 7.0),
    )
    .expect("post");
    assert_eq!(resp.status(), 200);
    let resp = post(
        &client,
        &c,
        Some(&format!("Bearer {}", TOKEN.to_uppercase())),
        probe("69", 1.0),
    )
    .expect("post");
    assert_eq!(resp.status(), 401);
    // Plaintext HTTP to the TLS port fails.
    let plain = reqwest::blocking::Client::new()
        .post(format!("http://127.0.0.1:{}/v1/metrics", c.http.port()))
        .header("content-type", "application/x-protobuf")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(probe("70", 1.0))
        .send();
    assert!(plain.is_err(), "plaintext was answered: {plain:?}");
    // A client that does not trust the CA refuses the collector.
    let untrusting = reqwest::blocking::Client::builder()
        .tls_certs_only(Vec::new())
        .build()
        .expect("client")
        .get(format!("https://localhost:{}/metrics", c.prometheus.port()))
        .send();
    assert!(untrusting.is_err(), "an untrusted server was accepted");

    // `/metrics` over https, verified against the CA: what was accepted and only that.
    let sources = metrics(&pki, &c, "/metrics/sources");
    assert_eq!(
        sum(&sources, "py_tls_requests_total", &[("rank", "1")]),
        3.0
    );
    assert_eq!(
        sum(&sources, "py_tls_requests_total", &[("rank", "2")]),
        3.0
    );
    assert_eq!(sum(&sources, "tls_probe_total", &[("rank", "3")]), 7.0);
    for refused_rank in ["66", "67", "68", "69", "70"] {
        assert!(
            !sources
                .iter()
                .any(|s| s.label("rank") == Some(refused_rank)),
            "rank {refused_rank} was refused but is in the aggregate"
        );
    }
    let fleet = metrics(&pki, &c, "/metrics");
    let refused = |t: &str| {
        sum(
            &fleet,
            "higgsmeter_collector_requests_refused_total",
            &[("transport", t), ("reason", "unauthenticated")],
        )
    };
    assert_eq!(refused("grpc"), 2.0);
    assert_eq!(refused("http"), 5.0);
    let handshakes = |l: &str| {
        sum(
            &fleet,
            "higgsmeter_collector_tls_handshakes_failed_total",
            &[("listener", l)],
        )
    };
    assert!(handshakes("grpc") >= 1.0, "plaintext gRPC was not counted");
    assert!(handshakes("http") >= 1.0, "plaintext HTTP was not counted");
    assert!(
        handshakes("prometheus") >= 1.0,
        "the untrusting client was not counted"
    );
    // Still healthy after all that.
    assert_eq!(ok("grpc", &grpc, "4"), "SUCCESS");
    assert_eq!(c.terminate().code(), Some(0));
}

#[test]
fn mutual_tls_refuses_clients_without_a_trusted_certificate() {
    let pki = pki();
    let c = start(&secured_config(&pki, &format!("token: {TOKEN}"), true));
    let auth = format!("Bearer {TOKEN}");
    // No client certificate, or one from another CA: no handshake.
    for identity in [None, Some("stranger")] {
        let client = https_client(&pki, identity);
        let result = post(&client, &c, Some(&auth), probe("80", 1.0));
        assert!(
            result.is_err(),
            "{identity:?}: answered {:?}",
            result.map(|r| r.status())
        );
    }
    // A certificate from the CA: accepted.
    let client = https_client(&pki, Some("client"));
    let resp = post(&client, &c, Some(&auth), probe("81", 2.0)).expect("post");
    assert_eq!(resp.status(), 200);

    // The SDK with the standard client-certificate variables, over gRPC.
    let worker = lifecycle_worker(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://localhost:{}", c.grpc.port()),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.path("ca.pem")),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            pki.path("client.pem"),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", pki.path("client.key")),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization=Bearer%20{TOKEN}"),
        ),
        ("OTEL_SERVICE_NAME", "mtls-worker".into()),
    ]);
    assert!(worker > 0.0);
    let sources = metrics(&pki, &c, "/metrics/sources");
    assert_eq!(sum(&sources, "tls_probe_total", &[("rank", "81")]), 2.0);
    assert!(!sources.iter().any(|s| s.label("rank") == Some("80")));
    let seen = sum(
        &sources,
        "worker_activity_time_seconds_total",
        &[("job", "mtls-worker")],
    );
    // Exactly what the worker printed, to the 3 decimals it prints: finalize() stopped
    // its clock before the final export.
    assert!(
        (seen - worker).abs() <= 0.0005 + 1e-9,
        "the worker accounted {worker} s, the collector has {seen} s"
    );
}

/// Runs the SDK's `lifecycle-worker` example (rank 0: it keeps the seed's rank-0-only
/// mode) with `env` and returns the seconds it accounted (its `sum:` line).
fn lifecycle_worker(env: &[(&str, String)]) -> f64 {
    let mut cmd = Command::new(bins::example("lifecycle-worker"));
    cmd.args(["--jobs", "5"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("RANK", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .output()
        .expect("run lifecycle-worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lifecycle-worker failed: {stderr}");
    assert!(
        !stderr.to_ascii_lowercase().contains("error"),
        "lifecycle-worker logged errors: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("sum:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sum line in {stdout}"))
}

#[test]
fn sdk_workers_export_over_tls_with_a_token_from_the_standard_variables() {
    let pki = pki();
    let token_file = pki.dir().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write the token");
    let c = start(&secured_config(
        &pki,
        &format!("filename: {}", token_file.display()),
        false,
    ));
    // gRPC with the generic variables; HTTP with the _METRICS_ forms.
    let grpc = lifecycle_worker(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://localhost:{}", c.grpc.port()),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.path("ca.pem")),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization=Bearer%20{TOKEN}"),
        ),
        ("OTEL_SERVICE_NAME", "grpc-worker".into()),
    ]);
    let http = lifecycle_worker(&[
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            format!("https://localhost:{}/v1/metrics", c.http.port()),
        ),
        (
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            "http/protobuf".into(),
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", pki.path("ca.pem")),
        (
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            format!("authorization=Bearer%20{TOKEN}"),
        ),
        ("OTEL_SERVICE_NAME", "http-worker".into()),
    ]);
    let sources = metrics(&pki, &c, "/metrics/sources");
    for (job, total) in [("grpc-worker", grpc), ("http-worker", http)] {
        let seen = sum(
            &sources,
            "worker_activity_time_seconds_total",
            &[("job", job)],
        );
        // Exactly the printed sum, to the 3 decimals it is printed with: finalize()
        // stopped the worker's clock before the final export.
        assert!(
            total > 0.0 && (seen - total).abs() <= 0.0005 + 1e-9,
            "{job}: the worker accounted {total} s, the collector has {seen} s"
        );
    }

    // The token file is re-read when it changes: the old token stops working.
    std::fs::write(&token_file, "rotated-token\n").expect("rotate the token");
    let client = https_client(&pki, None);
    wait_for(Duration::from_secs(10), "the rotated token", || {
        let resp = post(&client, &c, Some("Bearer rotated-token"), probe("5", 1.0)).ok()?;
        (resp.status() == 200).then_some(())
    });
    let old = post(
        &client,
        &c,
        Some(&format!("Bearer {TOKEN}")),
        probe("6", 1.0),
    )
    .expect("post");
    assert_eq!(old.status(), 401);
}

#[test]
fn a_collector_exports_upstream_over_tls_with_a_token() {
    let pki = pki();
    let gateway = start(&secured_config(&pki, &format!("token: {TOKEN}"), false));
    let agent_yaml = format!(
        "receivers:\n  otlp:\n    protocols:\n      http: {{endpoint: 127.0.0.1:0}}\n      grpc: {{endpoint: 127.0.0.1:0}}\n\
         exporters:\n  prometheus: {{endpoint: 127.0.0.1:0}}\n\
         \x20 otlp:\n    endpoint: https://localhost:{}\n    interval: 200ms\n    tls: {{ca_file: {}}}\n    headers: {{authorization: \"Bearer {TOKEN}\"}}\n\
         \x20 otlphttp:\n    endpoint: https://127.0.0.1:{}\n    interval: 200ms\n    tls: {{ca_file: {}}}\n    headers: {{authorization: \"Bearer {TOKEN}\"}}\n",
        gateway.grpc.port(),
        pki.path("ca.pem"),
        gateway.http.port(),
        pki.path("ca.pem"),
    );
    let agent = start(&agent_yaml);
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/v1/metrics", agent.http_url()))
        .header("content-type", "application/x-protobuf")
        .body(probe("7", 11.0))
        .send()
        .expect("post to the agent");
    assert_eq!(resp.status(), 200);
    // The gateway sees the agent's fleet sum as one source per exporter.
    wait_for(Duration::from_secs(20), "the agent's pushes", || {
        let fleet = metrics(&pki, &gateway, "/metrics");
        let requests = |t| {
            sum(
                &fleet,
                "higgsmeter_collector_requests_total",
                &[("transport", t)],
            )
        };
        let refused = sum(&fleet, "higgsmeter_collector_requests_refused_total", &[]);
        assert_eq!(refused, 0.0, "the gateway refused the agent's pushes");
        let probe = sum(&fleet, "tls_probe_total", &[]);
        (requests("grpc") > 0.0 && requests("http") > 0.0 && probe > 0.0).then_some(())
    });
    let agent_fleet = agent.fleet();
    let exports = |e: &str, o: &str| {
        sum(
            &agent_fleet,
            "higgsmeter_collector_exports_total",
            &[("exporter", e), ("outcome", o)],
        )
    };
    assert!(exports("otlp", "ok") > 0.0 && exports("otlphttp", "ok") > 0.0);
    assert_eq!(
        exports("otlp", "failed") + exports("otlphttp", "failed"),
        0.0
    );
}

#[test]
fn a_collector_refuses_an_upstream_it_cannot_verify() {
    let pki = pki();
    // The upstream presents a certificate for `localhost` only; the agent dials its IP.
    let yaml = secured_config(&pki, &format!("token: {TOKEN}"), false)
        .replace(&pki.path("server.pem"), &pki.path("other-server.pem"))
        .replace(&pki.path("server.key"), &pki.path("other-server.key"));
    let gateway = start(&yaml);
    let agent_yaml = format!(
        "receivers:\n  otlp:\n    protocols:\n      http: {{endpoint: 127.0.0.1:0}}\n\
         exporters:\n  prometheus: {{endpoint: 127.0.0.1:0}}\n\
         \x20 otlphttp:\n    endpoint: https://127.0.0.1:{}\n    interval: 200ms\n    tls: {{ca_file: {}}}\n    headers: {{authorization: \"Bearer {TOKEN}\"}}\n",
        gateway.http.port(),
        pki.path("ca.pem"),
    );
    let agent = start(&agent_yaml);
    wait_for(Duration::from_secs(20), "failed pushes", || {
        let fleet = agent.fleet();
        (sum(
            &fleet,
            "higgsmeter_collector_exports_total",
            &[("exporter", "otlphttp"), ("outcome", "failed")],
        ) > 0.0)
            .then_some(())
    });
    let fleet = agent.fleet();
    assert_eq!(
        sum(
            &fleet,
            "higgsmeter_collector_exports_total",
            &[("exporter", "otlphttp"), ("outcome", "ok")],
        ),
        0.0
    );
}

/// `--check-config` names the key and the file for each kind of bad TLS or auth
/// setting, and passes a good one.
#[test]
fn check_config_rejects_bad_certificates_keys_and_authenticators() {
    let pki = pki();
    let good = secured_config(&pki, &format!("token: {TOKEN}"), true);
    let check = |yaml: &str| {
        let path = temp_dir("check").join("collector.yaml");
        std::fs::write(&path, yaml).expect("write");
        let out = Command::new(bins::collector())
            .arg("--config")
            .arg(&path)
            .arg("--check-config")
            .args(["--storage", "none"])
            .output()
            .expect("run --check-config");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, text) = check(&good);
    assert!(ok, "{text}");
    assert!(
        text.contains("OTLP/gRPC receiver otlp: mutual TLS, bearer token required"),
        "{text}"
    );
    assert!(
        text.contains("Prometheus endpoint prometheus: TLS"),
        "{text}"
    );
    assert!(
        !text.contains(TOKEN),
        "--check-config printed the token: {text}"
    );

    let cases: Vec<(String, &str, &str)> = vec![
        (
            good.replacen(&pki.path("server.pem"), &pki.path("missing.pem"), 1),
            "receivers.otlp.protocols.grpc.tls.cert_file",
            "missing.pem",
        ),
        (
            good.replacen(&pki.path("server.key"), &pki.path("client.key"), 1),
            "receivers.otlp.protocols.grpc.tls.key_file",
            "does not match",
        ),
        (
            good.replacen(&pki.path("server.pem"), &pki.path("expired.pem"), 1)
                .replacen(&pki.path("server.key"), &pki.path("expired.key"), 1),
            "receivers.otlp.protocols.grpc.tls.cert_file",
            "expired on",
        ),
        (
            good.replacen(&pki.path("ca.pem"), &pki.path("server.key"), 1),
            "receivers.otlp.protocols.grpc.tls.client_ca_file",
            "no PEM certificate",
        ),
        (
            good.replace("authenticator: bearertokenauth", "authenticator: oidc"),
            "receivers.otlp.protocols.grpc.auth.authenticator",
            "`oidc` is not defined",
        ),
        (
            good.replace(
                &format!("token: {TOKEN}"),
                &format!("filename: {}", pki.path("no-such-token")),
            ),
            "extensions.bearertokenauth.filename",
            "no-such-token",
        ),
        (
            good.replace("  extensions: [bearertokenauth]\n", "  extensions: []\n"),
            "receivers.otlp.protocols.grpc.auth.authenticator",
            "not listed in service.extensions",
        ),
    ];
    for (yaml, key, what) in cases {
        let (ok, text) = check(&yaml);
        assert!(!ok, "accepted a config with a bad {key}");
        assert!(
            text.contains(key) && text.contains(what),
            "expected `{key}` and `{what}` in: {text}"
        );
    }
}

/// The shipped `otel-config/tls.yaml`, with its paths pointed at a test PKI, passes
/// `--check-config` and describes every listener as secured.
#[test]
fn the_shipped_tls_example_checks() {
    let pki = pki();
    std::fs::write(pki.dir().join("token"), "example-token\n").expect("write the token");
    let yaml = std::fs::read_to_string(repo_root().join("otel-config/tls.yaml"))
        .expect("read otel-config/tls.yaml")
        .replace(
            "/etc/higgsmeter/tls/collector.",
            &format!("{}/server.", pki.dir().display()),
        )
        .replace("/etc/higgsmeter/tls/ca.pem", &pki.path("ca.pem"))
        .replace("/etc/higgsmeter/token", &pki.path("token"))
        .replace(
            "/var/lib/higgsmeter",
            &temp_dir("state").display().to_string(),
        );
    assert!(!yaml.contains("/etc/higgsmeter"), "a path was left: {yaml}");
    let path = pki.dir().join("tls.yaml");
    std::fs::write(&path, yaml).expect("write");
    let out = Command::new(bins::collector())
        .arg("--config")
        .arg(&path)
        .arg("--check-config")
        .output()
        .expect("run --check-config");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "OTLP/gRPC receiver otlp: TLS, bearer token required",
        "OTLP/HTTP receiver otlp: TLS, bearer token required",
        "Prometheus endpoint prometheus: TLS",
    ] {
        assert!(text.contains(line), "no `{line}` in: {text}");
    }
    assert!(!text.contains("example-token") && !text.contains("replace-with-the-gateway-token"));
}
