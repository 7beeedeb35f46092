//! Traces end to end: the SDK's `trace-worker` (a real `higgsmeter::init()` from the
//! environment) exports spans over real OTLP, gRPC and HTTP/protobuf, to a receiver
//! written in Python for the test (grpcio + opentelemetry-proto,
//! `tests/python/otlp_trace_receiver.py`) on 127.0.0.1. The test checks the names, the
//! nesting and trace ids, the attributes, the resource, and each span's duration
//! against what the worker measured around and inside it. With the sampler off, or
//! `OTEL_TRACES_EXPORTER` unset, no span arrives while the metrics still do. The same
//! checks run with the spans going through the collector's traces pipeline (worker →
//! `higgsmeter-collector` → receiver), over gRPC and over HTTP.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use higgsmeter_testkit::collector::CollectorProcess;
use higgsmeter_testkit::process::ChildGuard;
use higgsmeter_testkit::repo_root;
use higgsmeter_testkit::tools::python;
use serde_json::Value;

/// The spans the worker makes, with their parent (`None`: a root).
const NESTING: [(&str, Option<&str>); 8] = [
    ("warmup", None),
    ("handle_request", None),
    ("gpu", Some("handle_request")),
    ("mstar_step", Some("gpu")),
    ("cpu", Some("gpu")),
    ("mstar_transfer", Some("handle_request")),
    ("io", Some("handle_request")),
    ("s3_get", Some("io")),
];

/// How far the span clock (the system clock) may drift from the worker's monotonic
/// clock over one span: far above what NTP slewing does in 100 ms.
const CLOCK_SLACK_NS: i64 = 1_000_000;

struct Run {
    /// What the receiver got: `spans`, `metric_requests`, `trace_requests`.
    received: Value,
    /// What the worker printed: `spans` (measured), `activity`, `traces_on`, `spans_ended`.
    worker: Value,
}

/// Starts the receiver, runs the worker with `env` (the endpoint's `{grpc}` and
/// `{http}` replaced by the receiver's ports), then stops the receiver and returns
/// what both reported. Everything is bounded: the worker gets 60 s, the receiver stops
/// by itself after 90 s.
fn run(env: &[(&str, &str)]) -> anyhow::Result<Run> {
    run_via(env, None)
}

/// Which collector exporter forwards to the receiver: `otlp` (to its gRPC port) or
/// `otlphttp` (to its HTTP port).
#[derive(Clone, Copy)]
enum Via {
    Otlp,
    OtlpHttp,
}

/// [`run`], optionally through a collector with a traces pipeline whose one exporter
/// (`via`) points at the receiver; `{grpc}` and `{http}` in `env` are then the
/// collector's ports. The collector is stopped with SIGTERM (flushing its queue)
/// before the receiver reports.
fn run_via(env: &[(&str, &str)], via: Option<Via>) -> anyhow::Result<Run> {
    let script = repo_root().join("tests/tests/python/otlp_trace_receiver.py");
    let mut receiver = ChildGuard::spawn(
        "trace receiver",
        Command::new(python())
            .arg(&script)
            .args(["--deadline", "90"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let stdout = receiver.child().stdout.take().context("receiver stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ports: Value = serde_json::from_str(&lines.next().context("receiver ports")??)?;
    let (mut grpc, mut http) = (ports["grpc"].to_string(), ports["http"].to_string());
    let mut collector = None;
    if let Some(via) = via {
        let (name, endpoint) = match via {
            Via::Otlp => ("otlp", format!("http://127.0.0.1:{grpc}")),
            Via::OtlpHttp => ("otlphttp", format!("http://127.0.0.1:{http}")),
        };
        let config = format!(
            "exporters:\n  prometheus: {{endpoint: 127.0.0.1:0}}\n  {name}: {{endpoint: \"{endpoint}\"}}\n\
             service:\n  pipelines:\n    metrics: {{receivers: [otlp], exporters: [prometheus]}}\n\
             \x20   traces: {{receivers: [otlp], processors: [batch], exporters: [{name}]}}\n"
        );
        let c = CollectorProcess::start(Some(&config), &["--storage", "none"]);
        grpc = c.grpc.port().to_string();
        http = c.http.port().to_string();
        collector = Some(c);
    }

    let mut worker = Command::new(env!("CARGO_BIN_EXE_trace-worker"));
    worker
        .env_clear()
        .env("OTEL_SERVICE_NAME", "trace-worker")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("RANK", "3")
        .env("WORLD_SIZE", "4")
        .env("LOCAL_RANK", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        worker.env(k, v.replace("{grpc}", &grpc).replace("{http}", &http));
    }
    let mut worker = ChildGuard::spawn("trace worker", &mut worker);
    let status = worker.wait_exit(Duration::from_secs(60));
    let mut out = String::new();
    std::io::Read::read_to_string(
        worker.child().stdout.as_mut().context("worker stdout")?,
        &mut out,
    )?;
    if !status.success() {
        bail!("trace worker failed ({status}): {out}");
    }
    if let Some(mut c) = collector {
        // SIGTERM: the collector sends what it queued before it exits.
        let status = c.process.terminate(Duration::from_secs(30));
        if !status.success() {
            bail!("the collector did not stop cleanly: {status}");
        }
    }
    // The worker has exited: its guard flushed every export, and each was answered.
    drop(receiver.child().stdin.take());
    let received: Value = serde_json::from_str(&lines.next().context("receiver report")??)?;
    receiver.wait_exit(Duration::from_secs(30));
    Ok(Run {
        received,
        worker: serde_json::from_str(out.trim())?,
    })
}

/// The received spans by name (each name must be there exactly once).
fn by_name(run: &Run) -> BTreeMap<String, Value> {
    let spans = run.received["spans"].as_array().unwrap();
    let mut map = BTreeMap::new();
    for s in spans {
        let name = s["name"].as_str().unwrap().to_owned();
        assert!(
            map.insert(name.clone(), s.clone()).is_none(),
            "span {name} arrived twice: {spans:#?}"
        );
    }
    map
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn duration_ns(span: &Value) -> i64 {
    span["end_unix_nano"].as_i64().unwrap() - span["start_unix_nano"].as_i64().unwrap()
}

const FULL: [(&str, &str); 5] = [
    ("OTEL_TRACES_EXPORTER", "otlp"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:{grpc}"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-trace-token=t0k3n"),
    ("OTEL_TRACES_SAMPLER", "always_on"),
];

#[test]
fn a_workers_spans_reach_an_otlp_grpc_receiver_nested_timed_and_attributed() {
    let run = run(&FULL).unwrap();
    let spans = by_name(&run);
    assert_eq!(
        spans.keys().map(String::as_str).collect::<Vec<_>>(),
        {
            let mut names = NESTING.map(|(n, _)| n).to_vec();
            names.sort_unstable();
            names
        },
        "exactly the worker's spans, once each"
    );
    assert_eq!(run.worker["spans_ended"], 8, "{}", run.worker);

    // Nesting and trace ids: children point at their parents and share their trace;
    // the two roots are two traces.
    for (name, parent) in NESTING {
        let span = &spans[name];
        assert_eq!(span["span_id"].as_str().unwrap().len(), 16, "{span}");
        assert_ne!(span["trace_id"], "0".repeat(32));
        match parent {
            None => assert_eq!(span["parent_span_id"], "", "{name} is a root: {span}"),
            Some(p) => {
                assert_eq!(
                    span["parent_span_id"], spans[p]["span_id"],
                    "{name} nests under {p}"
                );
                assert_eq!(
                    span["trace_id"], spans[p]["trace_id"],
                    "{name} in {p}'s trace"
                );
            }
        }
    }
    assert_ne!(
        spans["warmup"]["trace_id"],
        spans["handle_request"]["trace_id"]
    );

    // Attributes: states carry state and operation; step and transfer spans their
    // catalog labels; the user's spans their fields.
    for (name, state, op) in [
        ("warmup", "warmup", "model_loading"),
        ("gpu", "gpu", "inference"),
        ("cpu", "cpu", "tokenize"),
        ("io", "io", "download"),
    ] {
        assert_eq!(attr(&spans[name], "state"), state, "{}", spans[name]);
        assert_eq!(attr(&spans[name], "operation"), op, "{}", spans[name]);
    }
    let step = &spans["mstar_step"];
    assert_eq!(attr(step, "component"), "decoder");
    assert_eq!(attr(step, "graph_walk"), "decode");
    assert_eq!(attr(step, "batch_size"), 32);
    let transfer = &spans["mstar_transfer"];
    assert_eq!(attr(transfer, "src"), "api_server");
    assert_eq!(attr(transfer, "dst"), "decoder");
    assert_eq!(attr(transfer, "transport"), "shm");
    assert_eq!(attr(transfer, "bytes"), 4096);
    // tracing-opentelemetry records a u64 field as text, an i64 as a number (step and
    // transfer spans record their amounts as i64).
    assert_eq!(attr(&spans["handle_request"], "request_id"), "7");
    assert_eq!(attr(&spans["s3_get"], "bucket"), "weights");

    // The resource is the metrics': service, rank, world size, local rank.
    for span in spans.values() {
        let r = &span["resource"];
        assert_eq!(r["service.name"], "trace-worker", "{r}");
        assert_eq!(
            (&r["rank"], &r["world_size"], &r["local_rank"]),
            (&3.into(), &4.into(), &1.into())
        );
        assert_eq!(r["telemetry.sdk.name"], "higgsmeter");
        assert!(
            r["service.instance.id"]
                .as_str()
                .is_some_and(|id| id.len() == 36)
        );
        assert_eq!(span["scope"], "higgsmeter");
    }

    // Durations: each span lasted at least what its body took and at most the time
    // from before its creation to after its close.
    for (name, _) in NESTING {
        let m = &run.worker["spans"][name];
        let (outer, inner) = (m["outer"].as_i64().unwrap(), m["inner"].as_i64().unwrap());
        let d = duration_ns(&spans[name]);
        assert!(
            inner - CLOCK_SLACK_NS <= d && d <= outer + CLOCK_SLACK_NS,
            "{name}: exported {d} ns, measured body {inner} ns within {outer} ns"
        );
    }
    // The state spans and the metrics saw the same scopes: the tracker's exclusive time
    // in gpu/inference plus that in the cpu scope nested in it lies within the gpu
    // span's bounds.
    let activity = &run.worker["activity"];
    let gpu =
        activity["gpu/inference"].as_i64().unwrap() + activity["cpu/tokenize"].as_i64().unwrap();
    let m = &run.worker["spans"]["gpu"];
    assert!(
        gpu >= m["inner"].as_i64().unwrap() && gpu <= m["outer"].as_i64().unwrap(),
        "activity {gpu} ns vs the gpu scope's {m}"
    );

    // The metrics went out beside them, and the trace headers came with the spans.
    assert!(run.received["metric_requests"].as_u64().unwrap() >= 1);
    for request in run.received["trace_requests"].as_array().unwrap() {
        assert_eq!(request["transport"], "grpc");
        assert_eq!(request["headers"]["x-trace-token"], "t0k3n", "{request}");
    }
}

#[test]
fn spans_go_over_http_protobuf_with_the_default_sampler() {
    let run = run(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:{http}/v1/traces",
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-trace-token=h77p"),
    ])
    .unwrap();
    let spans = by_name(&run);
    assert_eq!(spans.len(), NESTING.len(), "{:#?}", spans.keys());
    assert_eq!(spans["cpu"]["parent_span_id"], spans["gpu"]["span_id"]);
    assert_eq!(attr(&spans["gpu"], "operation"), "inference");
    assert_eq!(spans["gpu"]["resource"]["rank"], 3);
    let requests = run.received["trace_requests"].as_array().unwrap();
    assert!(!requests.is_empty());
    for request in requests {
        assert_eq!(request["transport"], "http");
        assert_eq!(request["headers"]["x-trace-token"], "h77p", "{request}");
    }
    // Only OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set: metrics stay off.
    assert_eq!(run.received["metric_requests"], 0);
}

/// No span arrives, while the same worker's metrics do (the receiver was reached).
fn assert_no_spans(run: &Run) {
    assert_eq!(
        run.received["spans"],
        Value::Array(vec![]),
        "{}",
        run.received
    );
    assert_eq!(run.received["trace_requests"], Value::Array(vec![]));
    assert!(
        run.received["metric_requests"].as_u64().unwrap() >= 1,
        "the metrics reached the receiver: {}",
        run.received
    );
    // The tracker counted as usual.
    assert!(run.worker["activity"]["gpu/inference"].as_u64().unwrap() > 0);
}

#[test]
fn no_spans_with_the_sampler_off_or_the_exporter_unset() {
    let with = |overrides: &[(&'static str, &'static str)]| {
        let mut env: BTreeMap<&str, &str> = FULL.into_iter().collect();
        for (k, v) in overrides {
            match *v {
                "" => env.remove(k),
                v => env.insert(*k, v),
            };
        }
        env.into_iter().collect::<Vec<_>>()
    };

    // always_off: no trace layer at all.
    let off = run(&with(&[("OTEL_TRACES_SAMPLER", "always_off")])).unwrap();
    assert_no_spans(&off);
    assert_eq!(off.worker["traces_on"], false);

    // A ratio of 0: the layer runs, the sampler drops every span.
    let ratio0 = run(&with(&[
        ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0"),
    ]))
    .unwrap();
    assert_no_spans(&ratio0);
    assert_eq!(ratio0.worker["traces_on"], true);
    assert_eq!(ratio0.worker["spans_ended"], 0);

    // OTEL_TRACES_EXPORTER unset (and `none`): traces off.
    for exporter in ["", "none"] {
        let unset = run(&with(&[("OTEL_TRACES_EXPORTER", exporter)])).unwrap();
        assert_no_spans(&unset);
        assert_eq!(unset.worker["traces_on"], false);
    }
}

/// The same spans, names, nesting, ids and attributes, through the collector's traces
/// pipeline: gRPC in and out, then HTTP in and out.
#[test]
fn spans_pass_through_the_collectors_traces_pipeline_unchanged() {
    let direct = run(&FULL).unwrap();
    let direct = by_name(&direct);
    for (via, protocol, endpoint) in [
        (Via::Otlp, "grpc", "http://127.0.0.1:{grpc}"),
        (Via::OtlpHttp, "http/protobuf", "http://127.0.0.1:{http}"),
    ] {
        let mut env: BTreeMap<&str, &str> = FULL.into_iter().collect();
        env.insert("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
        env.insert("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
        let env: Vec<_> = env.into_iter().collect();
        let run = run_via(&env, Some(via)).unwrap();
        let spans = by_name(&run);
        assert_eq!(
            spans.keys().collect::<Vec<_>>(),
            direct.keys().collect::<Vec<_>>(),
            "{protocol}"
        );
        for (name, parent) in NESTING {
            match parent {
                Some(p) => {
                    assert_eq!(spans[name]["parent_span_id"], spans[p]["span_id"], "{name}");
                    assert_eq!(spans[name]["trace_id"], spans[p]["trace_id"], "{name}");
                }
                None => assert_eq!(spans[name]["parent_span_id"], "", "{name}"),
            }
            // Unchanged: the attributes and the resource are what the worker sent.
            assert_eq!(
                spans[name]["attributes"], direct[name]["attributes"],
                "{name} via {protocol}"
            );
            assert_eq!(spans[name]["resource"]["rank"], 3);
            assert_eq!(spans[name]["resource"]["service.name"], "trace-worker");
        }
        // Each span arrived once: what the collector forwarded is what it took in.
        assert_eq!(spans.len(), NESTING.len());
    }
}
