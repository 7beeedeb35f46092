//! A simulated engine step loop (no GPU) through step and transfer spans and the typed
//! recorders: exact families, labels, buckets, counts and sums, through an in-memory
//! reader and through the Prometheus endpoint (`promtool check metrics` clean).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::ms;
use higgsmeter::catalog::{self, Family};
use higgsmeter::{ActivityLayer, EngineRecorders, ManualClock, Tracker, step_span, transfer_span};
use higgsmeter_testkit::tools::promtool_check;
use higgsmeter_testkit::{exposition, http};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::InMemoryMetricExporter;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use tracing_subscriber::layer::SubscriberExt;

type Labels = Vec<(String, String)>;

#[derive(Debug, Default)]
struct Hist {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

fn labels_of<'a>(attrs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Labels {
    let mut v: Labels = attrs
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    v.sort();
    v
}

fn histograms(rm: &ResourceMetrics, family: &Family) -> BTreeMap<Labels, Hist> {
    let mut out = BTreeMap::new();
    for m in rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .filter(|m| m.name() == family.name)
    {
        assert_eq!(m.description(), family.help);
        assert_eq!(m.unit(), family.unit);
        let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() else {
            panic!("{} is an f64 histogram", family.name)
        };
        for p in h.data_points() {
            out.insert(
                labels_of(p.attributes()),
                Hist {
                    bounds: p.bounds().collect(),
                    counts: p.bucket_counts().collect(),
                    count: p.count(),
                    sum: p.sum(),
                },
            );
        }
    }
    out
}

fn u64_sums(rm: &ResourceMetrics, family: &Family) -> BTreeMap<Labels, u64> {
    let mut out = BTreeMap::new();
    for m in rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .filter(|m| m.name() == family.name)
    {
        let AggregatedMetrics::U64(MetricData::Sum(s)) = m.data() else {
            panic!("{} is a u64 sum", family.name)
        };
        assert!(s.is_monotonic());
        for p in s.data_points() {
            out.insert(labels_of(p.attributes()), p.value());
        }
    }
    out
}

fn gauges(rm: &ResourceMetrics, family: &Family) -> BTreeMap<Labels, i64> {
    let mut out = BTreeMap::new();
    for m in rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .filter(|m| m.name() == family.name)
    {
        let AggregatedMetrics::I64(MetricData::Gauge(g)) = m.data() else {
            panic!("{} is an i64 gauge", family.name)
        };
        for p in g.data_points() {
            out.insert(labels_of(p.attributes()), p.value());
        }
    }
    out
}

fn l(pairs: &[(&str, &str)]) -> Labels {
    let mut v: Labels = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

/// 10 decode steps of 2 ms (batch 4) and 3 prefill steps of 40 ms (batch 64) on the
/// decoder, each decode step reading one 1 MiB edge from the API server in 100 µs.
fn run_engine(clock: &ManualClock, engine: &EngineRecorders) {
    for _ in 0..3 {
        let step = step_span("decoder", "prefill", None);
        clock.advance(ms(40));
        step.record("batch_size", 64u64);
    }
    for _ in 0..10 {
        let _step = step_span("decoder", "decode", Some(4));
        let read = transfer_span(
            catalog::TRANSFER_API_SERVER,
            "decoder",
            "shm",
            Some(1 << 20),
        );
        clock.advance(Duration::from_micros(100));
        drop(read);
        clock.advance(Duration::from_micros(1900));
    }
    let kv = engine.kv_pages("decoder", "gpu0").unwrap();
    kv.set(4096, 1500, 700);
    engine
        .prefix_cache("decoder")
        .unwrap()
        .record_lookup(1000, 250);
    engine
        .prefix_cache("decoder")
        .unwrap()
        .record_lookup(200, 200);
    engine.pending_steps("decoder").unwrap().set(3);
    engine.in_flight("decoder").unwrap().set(7);
    engine.conductor_requests().unwrap().set(2, 7, 1);
}

#[test]
fn a_simulated_step_loop_records_the_catalog_families_exactly() {
    let clock = ManualClock::new();
    let tracker = Tracker::with_clock(clock.clone());
    let exporter = InMemoryMetricExporter::default();
    let telemetry = crate::support::with_memory_exporter(&tracker, exporter.clone())
        .with_prometheus_addr("127.0.0.1:0".parse().unwrap())
        .init()
        .unwrap();
    let meter = telemetry.meter_provider().unwrap().meter("engine");
    let engine = EngineRecorders::new(&meter);
    let subscriber = tracing_subscriber::registry().with(telemetry.activity_layer());
    tracing::subscriber::with_default(subscriber, || run_engine(&clock, &engine));
    telemetry.force_flush();
    let exported = exporter.get_finished_metrics().unwrap();
    let rm = exported.last().unwrap();

    let steps = histograms(rm, &catalog::MSTAR_STEP_SECONDS);
    let prefill = &steps[&l(&[("component", "decoder"), ("graph_walk", "prefill")])];
    assert_eq!(prefill.bounds, catalog::MSTAR_STEP_SECONDS.buckets);
    assert_eq!(prefill.count, 3);
    assert!((prefill.sum - 0.120).abs() < 1e-12);
    let le_005 = catalog::MSTAR_STEP_SECONDS
        .buckets
        .iter()
        .position(|b| *b == 0.05)
        .unwrap();
    assert_eq!(
        prefill.counts[le_005], 3,
        "40 ms steps land in the (0.03, 0.05] bucket"
    );
    let decode = &steps[&l(&[("component", "decoder"), ("graph_walk", "decode")])];
    assert_eq!(decode.count, 10);
    assert!((decode.sum - 0.020).abs() < 1e-12);
    let le_0002 = catalog::MSTAR_STEP_SECONDS
        .buckets
        .iter()
        .position(|b| *b == 0.002)
        .unwrap();
    assert_eq!(
        decode.counts[le_0002], 10,
        "2 ms steps land in the (0.001, 0.002] bucket"
    );

    let batches = histograms(rm, &catalog::MSTAR_BATCH_SIZE);
    let b = &batches[&l(&[("component", "decoder"), ("graph_walk", "prefill")])];
    assert_eq!(
        (b.bounds.as_slice(), b.count, b.sum),
        (catalog::MSTAR_BATCH_SIZE.buckets, 3, 192.0)
    );
    assert_eq!(
        batches[&l(&[("component", "decoder"), ("graph_walk", "decode")])].sum,
        40.0
    );

    let edge = l(&[
        ("src", "api_server"),
        ("dst", "decoder"),
        ("transport", "shm"),
    ]);
    let t = &histograms(rm, &catalog::MSTAR_TRANSFER_SECONDS)[&edge];
    assert_eq!(t.bounds, catalog::MSTAR_TRANSFER_SECONDS.buckets);
    assert_eq!(t.count, 10);
    assert!((t.sum - 0.001).abs() < 1e-12);
    assert_eq!(u64_sums(rm, &catalog::MSTAR_TRANSFERS_TOTAL)[&edge], 10);
    assert_eq!(
        u64_sums(rm, &catalog::MSTAR_TRANSFER_BYTES_TOTAL)[&edge],
        10 << 20
    );

    let dec = l(&[("component", "decoder")]);
    assert_eq!(
        u64_sums(rm, &catalog::MSTAR_PREFIX_CACHE_QUERY_TOKENS_TOTAL)[&dec],
        1200
    );
    assert_eq!(
        u64_sums(rm, &catalog::MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL)[&dec],
        450
    );
    let kv = l(&[("component", "decoder"), ("resource", "gpu0")]);
    assert_eq!(gauges(rm, &catalog::MSTAR_KV_PAGES_TOTAL)[&kv], 4096);
    assert_eq!(gauges(rm, &catalog::MSTAR_KV_PAGES_USED)[&kv], 1500);
    assert_eq!(gauges(rm, &catalog::MSTAR_KV_PAGES_CACHED)[&kv], 700);
    assert_eq!(gauges(rm, &catalog::MSTAR_COMPONENT_PENDING_STEPS)[&dec], 3);
    assert_eq!(gauges(rm, &catalog::MSTAR_COMPONENT_IN_FLIGHT)[&dec], 7);
    let req = gauges(rm, &catalog::MSTAR_CONDUCTOR_REQUESTS);
    assert_eq!(req.len(), 3);
    for (state, n) in [("waiting", 2), ("running", 7), ("draining", 1)] {
        assert_eq!(req[&l(&[("state", state)])], n);
    }

    // The same through the Prometheus endpoint.
    let (status, text) = http::get(telemetry.prometheus_addr().unwrap(), "/metrics").unwrap();
    assert_eq!(status, 200);
    promtool_check(&text);
    let expo = exposition::families(&text);
    for family in catalog::STATUS_FAMILIES {
        let f = expo
            .get(family.name)
            .unwrap_or_else(|| panic!("{} exported", family.name));
        assert_eq!(f.kind, family.kind.as_str(), "{}", family.name);
        assert_eq!(f.help, family.help, "{}", family.name);
    }
    let step = &expo[catalog::MSTAR_STEP_SECONDS.name];
    let les: Vec<String> = step
        .samples
        .keys()
        .filter(|(n, ls)| {
            n.ends_with("_bucket") && ls.contains(&("graph_walk".into(), "decode".into()))
        })
        .map(|(_, ls)| ls.iter().find(|(k, _)| k == "le").unwrap().1.clone())
        .collect();
    assert_eq!(
        les.len(),
        catalog::MSTAR_STEP_SECONDS.buckets.len() + 1,
        "every catalog bucket and +Inf: {les:?}"
    );
    drop(telemetry);
}

#[test]
fn wrong_or_missing_labels_are_errors_at_construction() {
    let meter = opentelemetry::global::meter("t");
    let engine = EngineRecorders::new(&meter);
    let err = |r: Result<(), higgsmeter::Error>| r.unwrap_err().to_string();
    let missing = err(engine
        .counter(
            &catalog::MSTAR_TRANSFERS_TOTAL,
            &[("src", "a"), ("dst", "b")],
        )
        .map(drop));
    assert!(
        missing.contains("transport") && missing.contains("src, dst, transport"),
        "{missing}"
    );
    let extra = err(engine
        .gauge(
            &catalog::MSTAR_KV_PAGES_USED,
            &[("component", "c"), ("resource", "r"), ("model", "m")],
        )
        .map(drop));
    assert!(
        extra.contains("`model` is not one of its labels"),
        "{extra}"
    );
    let empty = err(engine.step("", "decode").map(drop));
    assert!(empty.contains("component"), "{empty}");
    let kind = err(engine
        .gauge(
            &catalog::MSTAR_STEP_SECONDS,
            &[("component", "c"), ("graph_walk", "g")],
        )
        .map(drop));
    assert!(kind.contains("is a histogram"), "{kind}");
    let state = err(engine
        .gauge(&catalog::MSTAR_CONDUCTOR_REQUESTS, &[("state", "queued")])
        .map(drop));
    assert!(state.contains("waiting"), "{state}");
    let not_engine = err(engine
        .counter(&catalog::WORKER_ACTIVITY_TIME, &[])
        .map(drop));
    assert!(
        not_engine.contains("not a serving-engine family"),
        "{not_engine}"
    );
}

#[test]
fn step_spans_without_a_meter_use_the_global_one_and_never_panic() {
    // No meter given and no global provider set: the no-op meter; nothing panics.
    let tracker = Tracker::new();
    let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(tracker));
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..3 {
            let _s = step_span("decoder", "decode", Some(8));
            let _t = transfer_span("a", "b", "nccl", None);
        }
        let _bad = step_span("", "decode", None); // invalid labels: warned, not recorded
    });
}
