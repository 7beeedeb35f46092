//! The OTLP readers: protobuf (the hand-written wire reader every receiver uses, ADR 3)
//! and JSON (serde into the vendored OTLP types, then the same path).

use std::collections::BTreeMap;
use std::time::Duration;

use higgsmeter_collector::{AggregateConfig, Aggregator, IngestResult, Transport, View};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
    Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    Summary, SummaryDataPoint, exemplar, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use prost::Message as _;

use super::harness::{Tally, corpus, fuzz};
use super::mutate::{self, Mutation};
use crate::support::{Sample, exposition, kv, started};

/// An aggregator for one case: sources never go stale while a case runs, however
/// slow the machine (no timing is asserted).
pub(crate) fn aggregator() -> Aggregator {
    Aggregator::standalone(AggregateConfig {
        stale_after: Some(Duration::from_secs(50 * 60)),
        ..AggregateConfig::default()
    })
    .expect("a valid aggregation config")
}

/// The lines only in `a` (`-`) and only in `b` (`+`) of two pairs of views.
pub(crate) fn diff(a: &(String, String), b: &(String, String)) -> String {
    let mut out = String::new();
    for (x, y) in [(&a.0, &b.0), (&a.1, &b.1)] {
        let xs: std::collections::BTreeSet<&str> = x.lines().collect();
        let ys: std::collections::BTreeSet<&str> = y.lines().collect();
        for l in xs.difference(&ys) {
            out.push_str(&format!("- {l}\n"));
        }
        for l in ys.difference(&xs) {
            out.push_str(&format!("+ {l}\n"));
        }
    }
    out
}

/// Both views, as a scrape reads them.
pub(crate) fn views(a: &Aggregator) -> (String, String) {
    (a.render(View::Fleet), a.render(View::Sources))
}

fn attr(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn resource(attrs: Vec<KeyValue>) -> Option<Resource> {
    Some(Resource {
        attributes: attrs,
        ..Default::default()
    })
}

/// A generated fleet whose sums are known: per source, counters and histograms of
/// a few metrics and label values, each series once.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    sources: Vec<SourceModel>,
}

#[derive(Debug, Clone)]
struct SourceModel {
    /// (metric, label value) -> (value, sent as an integer).
    counters: BTreeMap<(u8, u8), (f64, bool)>,
    /// (metric, label value) -> (bucket counts for bounds 0.5, 1, 10; sum).
    hists: BTreeMap<(u8, u8), ([u64; 4], f64)>,
    /// metric -> value.
    gauges: BTreeMap<u8, f64>,
}

/// The histograms' bounds.
const BOUNDS: [f64; 3] = [0.5, 1.0, 10.0];

pub(crate) fn model() -> impl Strategy<Value = Model> {
    let value = prop_oneof![
        (0u32..1_000_000).prop_map(|v| (f64::from(v), true)),
        (0.0f64..1e9).prop_map(|v| (v, false)),
    ];
    let source = (
        prop::collection::btree_map((0u8..4, 0u8..3), value, 0..8),
        prop::collection::btree_map(
            (0u8..2, 0u8..3),
            (prop::array::uniform4(0u64..1000), 0.0f64..1e6),
            0..4,
        ),
        prop::collection::btree_map(0u8..2, -1e6f64..1e6, 0..2),
    )
        .prop_map(|(counters, hists, gauges)| SourceModel {
            counters,
            hists,
            gauges,
        });
    prop::collection::vec(source, 1..6).prop_map(|sources| Model { sources })
}

impl Model {
    /// A fixed fleet of `n` sources: counters, a histogram and a gauge each.
    pub(crate) fn fixed(n: u32) -> Model {
        Model {
            sources: (0..n)
                .map(|r| SourceModel {
                    counters: [
                        ((0, 0), (1.5 * f64::from(r + 1), false)),
                        ((1, 2), (7.0, true)),
                    ]
                    .into(),
                    hists: [((0, 1), ([1, 0, 2, 1], 3.25))].into(),
                    gauges: [(0, 0.5)].into(),
                })
                .collect(),
        }
    }

    /// The request every source sends once, as one request: start times after the
    /// aggregator's start, so every value counts whole.
    pub(crate) fn request(&self) -> ExportMetricsServiceRequest {
        let start = started();
        let time = start + 1_000_000_000;
        let resource_metrics = self
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
                for (&(m, a), &(v, int)) in &s.counters {
                    let value = if int {
                        number_data_point::Value::AsInt(v as i64)
                    } else {
                        number_data_point::Value::AsDouble(v)
                    };
                    let metric = metrics.entry(format!("fz_c{m}")).or_insert_with(|| Metric {
                        name: format!("fz_c{m}"),
                        data: Some(Data::Sum(Sum {
                            data_points: Vec::new(),
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    });
                    if let Some(Data::Sum(sum)) = &mut metric.data {
                        sum.data_points.push(NumberDataPoint {
                            attributes: vec![kv("a", &format!("v{a}"))],
                            start_time_unix_nano: start,
                            time_unix_nano: time,
                            value: Some(value),
                            ..Default::default()
                        });
                    }
                }
                for (&(m, a), &(counts, sum)) in &s.hists {
                    let metric = metrics.entry(format!("fz_h{m}")).or_insert_with(|| Metric {
                        name: format!("fz_h{m}"),
                        data: Some(Data::Histogram(Histogram {
                            data_points: Vec::new(),
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        })),
                        ..Default::default()
                    });
                    if let Some(Data::Histogram(h)) = &mut metric.data {
                        h.data_points.push(HistogramDataPoint {
                            attributes: vec![kv("a", &format!("v{a}"))],
                            start_time_unix_nano: start,
                            time_unix_nano: time,
                            count: counts.iter().sum(),
                            sum: Some(sum),
                            bucket_counts: counts.to_vec(),
                            explicit_bounds: BOUNDS.to_vec(),
                            ..Default::default()
                        });
                    }
                }
                for (&m, &v) in &s.gauges {
                    metrics.insert(
                        format!("fz_g{m}"),
                        Metric {
                            name: format!("fz_g{m}"),
                            data: Some(Data::Gauge(Gauge {
                                data_points: vec![NumberDataPoint {
                                    time_unix_nano: time,
                                    value: Some(number_data_point::Value::AsDouble(v)),
                                    ..Default::default()
                                }],
                            })),
                            ..Default::default()
                        },
                    );
                }
                ResourceMetrics {
                    resource: resource(vec![
                        kv("service.instance.id", &format!("fuzz-{i}")),
                        attr("rank", any_value::Value::IntValue(i as i64)),
                    ]),
                    scope_metrics: vec![ScopeMetrics {
                        metrics: metrics.into_values().collect(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }
            })
            .collect();
        ExportMetricsServiceRequest { resource_metrics }
    }

    /// The fleet samples the model implies: (sample name, label value) -> value.
    fn expected(&self) -> BTreeMap<(String, String), f64> {
        let mut out = BTreeMap::new();
        for s in &self.sources {
            for (&(m, a), &(v, _)) in &s.counters {
                *out.entry((format!("fz_c{m}_total"), format!("v{a}")))
                    .or_insert(0.0) += v;
            }
            for (&(m, a), &(counts, sum)) in &s.hists {
                let n: u64 = counts.iter().sum();
                *out.entry((format!("fz_h{m}_count"), format!("v{a}")))
                    .or_insert(0.0) += n as f64;
                *out.entry((format!("fz_h{m}_sum"), format!("v{a}")))
                    .or_insert(0.0) += sum;
                let mut cumulative = 0;
                for (i, le) in ["0.5", "1", "10", "+Inf"].iter().enumerate() {
                    cumulative += counts[i];
                    *out.entry((format!("fz_h{m}_bucket{le}"), format!("v{a}")))
                        .or_insert(0.0) += cumulative as f64;
                }
            }
        }
        out
    }
}

/// The fleet samples of `fz_*` families, keyed as [`Model::expected`] keys them.
fn fleet_samples(samples: &[Sample]) -> BTreeMap<(String, String), f64> {
    samples
        .iter()
        .filter(|s| s.name.starts_with("fz_c") || s.name.starts_with("fz_h"))
        .map(|s| {
            let name = match s.label("le") {
                Some(le) => format!("{}{le}", s.name),
                None => s.name.clone(),
            };
            ((name, s.label("a").unwrap_or("").to_owned()), s.value)
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// A request with everything a hostile or careless sender can put in one: any
/// strings, any floats, every temporality, exemplars, complex attributes, the
/// types the collector refuses.
pub(crate) fn wild_request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    let name = prop_oneof![
        Just(String::new()),
        Just("worker_activity_time".to_owned()),
        Just("worker_activity_time_seconds_total".to_owned()),
        Just("__name__".to_owned()),
        Just("a.b".to_owned()),
        Just("a_b".to_owned()),
        Just("9lives".to_owned()),
        "[a-z_.:]{1,12}",
        "\\PC{0,16}",
    ];
    let key = prop_oneof![
        Just("a".to_owned()),
        Just("a.b".to_owned()),
        Just("a_b".to_owned()),
        Just("le".to_owned()),
        Just("__name__".to_owned()),
        Just("rank".to_owned()),
        Just("job".to_owned()),
        Just(String::new()),
        "\\PC{0,10}",
    ];
    let text = prop_oneof![
        Just(String::new()),
        Just("a\"b\\c\nd é,=\"".to_owned()),
        Just("}".to_owned()),
        "\\PC{0,12}",
    ];
    let float = prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        -1e12f64..1e12,
        any::<u64>().prop_map(f64::from_bits),
    ];
    let value = prop_oneof![
        text.clone().prop_map(any_value::Value::StringValue),
        any::<bool>().prop_map(any_value::Value::BoolValue),
        any::<i64>().prop_map(any_value::Value::IntValue),
        float.clone().prop_map(any_value::Value::DoubleValue),
        prop::collection::vec(any::<u8>(), 0..4).prop_map(any_value::Value::BytesValue),
        text.clone()
            .prop_map(|s| any_value::Value::ArrayValue(ArrayValue {
                values: vec![AnyValue {
                    value: Some(any_value::Value::StringValue(s)),
                }],
            })),
        text.clone()
            .prop_map(|s| any_value::Value::KvlistValue(KeyValueList {
                values: vec![kv("k", &s)],
            })),
    ];
    let attrs = prop::collection::vec((key, value).prop_map(|(k, v)| attr(&k, v)), 0..4);
    let time = prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
        Just(started()),
        Just(started() + 1_000_000_000),
        any::<u64>(),
    ];
    let number = (
        attrs.clone(),
        time.clone(),
        time.clone(),
        float.clone(),
        any::<i64>(),
        0u8..3,
    )
        .prop_map(|(attributes, start, time, d, i, which)| NumberDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: time,
            value: match which {
                0 => Some(number_data_point::Value::AsDouble(d)),
                1 => Some(number_data_point::Value::AsInt(i)),
                _ => None,
            },
            exemplars: vec![Exemplar {
                value: Some(exemplar::Value::AsDouble(d)),
                span_id: vec![1; 8],
                trace_id: vec![2; 16],
                ..Default::default()
            }],
            flags: which.into(),
        });
    let bounds = prop_oneof![
        Just(BOUNDS.to_vec()),
        Just(Vec::new()),
        Just(vec![1.0, 0.5]),
        Just(vec![f64::NAN]),
        Just(vec![1.0, 1.0]),
        Just(vec![f64::NEG_INFINITY, f64::INFINITY]),
        prop::collection::vec(float.clone(), 0..5),
    ];
    let hist = (
        attrs.clone(),
        time.clone(),
        time.clone(),
        bounds,
        prop::collection::vec(prop_oneof![0u64..100, Just(u64::MAX)], 0..6),
        prop_oneof![0u64..1000, Just(u64::MAX)],
        prop::option::of(float.clone()),
        prop::option::of(float.clone()),
    )
        .prop_map(
            |(attributes, start, time, explicit_bounds, bucket_counts, count, sum, min)| {
                HistogramDataPoint {
                    attributes,
                    start_time_unix_nano: start,
                    time_unix_nano: time,
                    count,
                    sum,
                    bucket_counts,
                    explicit_bounds,
                    min,
                    max: sum,
                    ..Default::default()
                }
            },
        );
    let temporality = prop_oneof![Just(0i32), Just(1), Just(2), Just(7), Just(-1)];
    let data = prop_oneof![
        prop::collection::vec(number.clone(), 0..3)
            .prop_map(|data_points| Data::Gauge(Gauge { data_points })),
        (
            prop::collection::vec(number.clone(), 0..3),
            temporality.clone(),
            any::<bool>()
        )
            .prop_map(|(data_points, t, is_monotonic)| Data::Sum(Sum {
                data_points,
                aggregation_temporality: t,
                is_monotonic,
            })),
        (prop::collection::vec(hist, 0..3), temporality.clone()).prop_map(|(data_points, t)| {
            Data::Histogram(Histogram {
                data_points,
                aggregation_temporality: t,
            })
        }),
        Just(Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![ExponentialHistogramDataPoint {
                count: 1,
                ..Default::default()
            }],
            aggregation_temporality: 2,
        })),
        Just(Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                count: 1,
                ..Default::default()
            }],
        })),
    ];
    let metric =
        (name, "\\PC{0,4}", prop::option::of(data)).prop_map(|(name, unit, data)| Metric {
            name,
            unit,
            data,
            description: "help \\ with \" odd\ntext".into(),
            ..Default::default()
        });
    let scope = prop::collection::vec(metric, 0..5).prop_map(|metrics| ScopeMetrics {
        scope: Some(InstrumentationScope {
            name: "fuzz".into(),
            ..Default::default()
        }),
        metrics,
        ..Default::default()
    });
    let rm = (
        attrs,
        prop::collection::vec(scope, 0..3),
        prop::option::of(0u8..4),
    )
        .prop_map(|(mut attrs, scope_metrics, id)| {
            if let Some(id) = id {
                attrs.push(kv("service.instance.id", &format!("wild-{id}")));
            }
            ResourceMetrics {
                resource: resource(attrs),
                scope_metrics,
                ..Default::default()
            }
        });
    prop::collection::vec(rm, 0..4)
        .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
}

/// The state each case starts from (so that "nothing changed" means something).
fn base_request() -> Vec<u8> {
    let model = Model {
        sources: vec![SourceModel {
            counters: [((0, 0), (5.0, true)), ((1, 1), (2.5, false))].into(),
            hists: [((0, 0), ([1, 2, 3, 4], 7.5))].into(),
            gauges: [(0, 1.0)].into(),
        }],
    };
    model.request().encode_to_vec()
}

/// An input: a base (a generated request or a corpus seed) and mutations.
#[derive(Debug, Clone)]
pub(crate) enum Base {
    /// A request with known sums.
    Model(Model),
    /// A request with anything in it.
    Wild(ExportMetricsServiceRequest),
    /// A corpus file.
    Corpus(Index),
}

fn base() -> impl Strategy<Value = Base> {
    prop_oneof![
        2 => model().prop_map(Base::Model),
        3 => wild_request().prop_map(Base::Wild),
        2 => any::<Index>().prop_map(Base::Corpus),
    ]
}

/// Ingests `bytes` into an aggregator holding the base state and checks the reader's
/// contract; returns the result.
fn check_protobuf(bytes: &[u8], tally: &Tally) -> Result<Option<IngestResult>, TestCaseError> {
    let base = base_request();
    let a = aggregator();
    a.ingest_protobuf(&base, Transport::Grpc)
        .map_err(|e| TestCaseError::fail(format!("the base request: {e}")))?;
    let before = views(&a);
    let got = a.ingest_protobuf(bytes, Transport::Grpc);
    let prost = ExportMetricsServiceRequest::decode(bytes);
    match got {
        Err(e) => {
            tally.add("refused whole");
            prop_assert!(!e.to_string().is_empty());
            prop_assert_eq!(
                &before,
                &views(&a),
                "a refused request changed the store ({})",
                e
            );
            Ok(None)
        }
        Ok(result) => {
            prop_assert!(
                result.rejected == 0 || !result.message.is_empty(),
                "points refused without a message: {:?}",
                result
            );
            prop_assert!(result.rejected <= result.received, "{:?}", result);
            tally.add(if result.rejected > 0 {
                "accepted, points refused"
            } else {
                "accepted"
            });
            // The same request as prost reads it, re-encoded canonically, aggregates
            // to the same views: no field the reader misreads, no sum it gets wrong.
            if let Ok(request) = prost {
                let b = aggregator();
                b.ingest_protobuf(&base, Transport::Grpc)
                    .map_err(|e| TestCaseError::fail(format!("the base request: {e}")))?;
                let again = b
                    .ingest_protobuf(&request.encode_to_vec(), Transport::Grpc)
                    .map_err(|e| {
                        TestCaseError::fail(format!(
                            "accepted as sent, refused once re-encoded by prost: {e}"
                        ))
                    })?;
                tally.add("accepted, prost agrees");
                prop_assert_eq!(&result, &again);
                let (va, vb) = (views(&a), views(&b));
                prop_assert!(
                    va == vb,
                    "the bytes and prost's re-encoding differ:\n{}",
                    diff(&va, &vb)
                );
            }
            Ok(Some(result))
        }
    }
}

/// The reference check: a valid generated request's fleet sums are the model's.
fn check_model(model: &Model) -> Result<(), TestCaseError> {
    let a = aggregator();
    let result = a
        .ingest_protobuf(&model.request().encode_to_vec(), Transport::Http)
        .map_err(|e| TestCaseError::fail(format!("a valid request was refused: {e}")))?;
    prop_assert_eq!(result.rejected, 0, "{:?}", result);
    let got = fleet_samples(&exposition::parse(&a.render(View::Fleet)));
    let want = model.expected();
    prop_assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "fleet series"
    );
    for (k, w) in &want {
        prop_assert!(
            close(got[k], *w),
            "{:?}: fleet {} != reference {}",
            k,
            got[k],
            w
        );
    }
    Ok(())
}

fn encoded_bases(base: &Base, seeds: &[(String, Vec<u8>)]) -> Vec<u8> {
    match base {
        Base::Model(m) => m.request().encode_to_vec(),
        Base::Wild(r) => r.encode_to_vec(),
        Base::Corpus(i) => seeds[i.index(seeds.len())].1.clone(),
    }
}

#[test]
fn otlp_protobuf() {
    let seeds = corpus(".pb");
    assert!(!seeds.is_empty(), "no .pb seeds in tests/it/fuzz/corpus");
    let donors: Vec<&[u8]> = seeds.iter().map(|(_, b)| b.as_slice()).collect();
    let tally = Tally::default();
    fuzz(
        "otlp_protobuf",
        800,
        (base(), mutate::mutations(6)),
        |(base, muts): (Base, Vec<Mutation>)| {
            if let Base::Model(m) = &base {
                check_model(m)?;
            }
            let seed = encoded_bases(&base, &seeds);
            let bytes = mutate::mutated(&seed, &muts, &donors, &mutate::PROTOBUF);
            check_protobuf(&bytes, &tally)?;
            Ok(())
        },
    );
    tally.report("otlp_protobuf");
}

/// Ingests parsed OTLP/JSON the way the HTTP receiver does.
fn check_json(bytes: &[u8], tally: &Tally) -> Result<(), TestCaseError> {
    let request = match serde_json::from_slice::<ExportMetricsServiceRequest>(bytes) {
        Err(e) => {
            tally.add("not OTLP/JSON");
            prop_assert!(!e.to_string().is_empty());
            return Ok(());
        }
        Ok(request) => request,
    };
    // What the receiver ingests: a prost encoding, which must be well-formed (the
    // receiver would otherwise answer 200 and count nothing).
    let pb = request.encode_to_vec();
    let a = aggregator();
    let result = a
        .ingest_protobuf(&pb, Transport::Http)
        .map_err(|e| TestCaseError::fail(format!("a decoded JSON request is refused: {e}")))?;
    prop_assert!(
        result.rejected == 0 || !result.message.is_empty(),
        "{:?}",
        result
    );
    tally.add("ingested");
    // JSON out and in again reads the same request.
    if let Ok(text) = serde_json::to_vec(&request)
        && let Ok(again) = serde_json::from_slice::<ExportMetricsServiceRequest>(&text)
    {
        let b = aggregator();
        let r2 = b
            .ingest_protobuf(&again.encode_to_vec(), Transport::Http)
            .map_err(|e| TestCaseError::fail(format!("the JSON round trip is refused: {e}")))?;
        tally.add("ingested, round trip agrees");
        prop_assert_eq!(&result, &r2);
        let (va, vb) = (views(&a), views(&b));
        prop_assert!(
            va == vb,
            "the JSON round trip aggregates differently:\n{}",
            diff(&va, &vb)
        );
    }
    Ok(())
}

#[test]
fn otlp_json() {
    let seeds = corpus(".json");
    assert!(!seeds.is_empty(), "no .json seeds in tests/it/fuzz/corpus");
    let donors: Vec<&[u8]> = seeds.iter().map(|(_, b)| b.as_slice()).collect();
    let tally = Tally::default();
    fuzz(
        "otlp_json",
        1000,
        (base(), mutate::mutations(5)),
        |(base, muts): (Base, Vec<Mutation>)| {
            let seed = match &base {
                Base::Model(m) => serde_json::to_vec(&m.request()).expect("JSON"),
                Base::Wild(r) => serde_json::to_vec(r).unwrap_or_default(),
                Base::Corpus(i) => seeds[i.index(seeds.len())].1.clone(),
            };
            let bytes = mutate::mutated(&seed, &muts, &donors, &mutate::JSON);
            check_json(&bytes, &tally)
        },
    );
    tally.report("otlp_json");
}

/// Regenerates the OTLP seeds from the builders (`HIGGSMETER_FUZZ_WRITE_CORPUS=1`):
/// what the SDK's exporters send, as protobuf and as JSON.
#[test]
fn write_otlp_corpus() {
    if std::env::var_os("HIGGSMETER_FUZZ_WRITE_CORPUS").is_none() {
        return;
    }
    let dir = super::harness::corpus_dir();
    let request = Model::fixed(3).request();
    std::fs::write(dir.join("otlp-fleet.pb"), request.encode_to_vec()).expect("write");
    std::fs::write(
        dir.join("otlp-fleet.json"),
        serde_json::to_vec_pretty(&request).expect("JSON"),
    )
    .expect("write");
    // The protobuf of every other JSON seed (the OTLP specification's example, a
    // worker's body as the SDKs send it).
    for (name, json) in corpus(".json") {
        if name == "otlp-fleet.json" {
            continue;
        }
        let request: ExportMetricsServiceRequest =
            serde_json::from_slice(&json).unwrap_or_else(|e| panic!("{name}: {e}"));
        let pb = dir.join(name.replace(".json", ".pb"));
        std::fs::write(pb, request.encode_to_vec()).expect("write");
    }
}

/// A request whose one attribute value repeats its `array_value` field `n` times
/// (each empty): valid protobuf, the last occurrence wins.
fn repeated_complex_attribute(n: usize) -> Vec<u8> {
    fn len_field(tag: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(tag);
        let mut v = body.len() as u64;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out.extend_from_slice(body);
    }
    // AnyValue { array_value: {} } n times.
    let any: Vec<u8> = std::iter::repeat_n([0x2a, 0x00], n).flatten().collect();
    let mut kv = Vec::new();
    len_field(0x0a, b"k", &mut kv);
    len_field(0x12, &any, &mut kv);
    // NumberDataPoint { attributes: [kv], as_double: 1 }
    let mut point = Vec::new();
    len_field(0x3a, &kv, &mut point);
    point.push(0x21);
    point.extend_from_slice(&1f64.to_le_bytes());
    let mut gauge = Vec::new();
    len_field(0x0a, &point, &mut gauge);
    let mut metric = Vec::new();
    len_field(0x0a, b"fz_gauge", &mut metric);
    len_field(0x2a, &gauge, &mut metric);
    let mut scope = Vec::new();
    len_field(0x12, &metric, &mut scope);
    let mut rm = Vec::new();
    len_field(0x12, &scope, &mut rm);
    let mut request = Vec::new();
    len_field(0x0a, &rm, &mut request);
    request
}

/// Found by this harness: an attribute value that repeats its array (or key-value
/// list) field was decoded whole once per occurrence, quadratic in its size: 40 kB
/// took 89 s (debug build) and one 16 MiB request would hold an ingest thread for
/// days. Now linear; the input is read as before (the last occurrence wins).
#[test]
fn regression_repeated_complex_attribute_is_read_once() {
    let bytes = repeated_complex_attribute(200_000);
    let prost = ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("valid protobuf");
    let a = aggregator();
    let result = a
        .ingest_protobuf(&bytes, Transport::Grpc)
        .expect("a valid request");
    assert_eq!((result.received, result.rejected), (1, 0), "{result:?}");
    let b = aggregator();
    b.ingest_protobuf(&prost.encode_to_vec(), Transport::Grpc)
        .expect("prost's encoding");
    assert_eq!(views(&a), views(&b));
    // The last occurrence malformed inside (its bytes are no array): still refused,
    // and the store unchanged.
    let mut bad = repeated_complex_attribute(1_000);
    let end = bad.len() - 9; // the point's double follows the attribute
    bad[end - 4..end].copy_from_slice(&[0x2a, 0x02, 0xff, 0xff]);
    let before = views(&a);
    let err = a
        .ingest_protobuf(&bad, Transport::Grpc)
        .expect_err("malformed");
    assert!(err.to_string().contains("array or key-value list"), "{err}");
    assert_eq!(before, views(&a));
}

/// Found by `otlp_json` (a JSON round trip moved a double attribute, and with it a
/// label value): serde_json's default float parser is off by one ulp for some
/// doubles, and a build of the collector alone did not turn on `float_roundtrip`.
/// OTLP/JSON doubles are now read correctly rounded.
#[test]
fn regression_json_doubles_are_read_exactly() {
    for text in [
        "6.633371452556832e59",
        "1.0715660391465826e-75",
        "-1.81996730402717e-179",
        "-1.603964615428183e143",
        "1.5860846119992697e-265",
        "0.1",
        "1.7976931348623157e308",
        "5e-324",
    ] {
        let json = format!(
            r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"fz_g","gauge":{{"dataPoints":[{{"asDouble":{text},"attributes":[{{"key":"d","value":{{"doubleValue":{text}}}}}]}}]}}}}]}}]}}]}}"#
        );
        let request: ExportMetricsServiceRequest = serde_json::from_str(&json).expect(text);
        let Some(Data::Gauge(g)) = &request.resource_metrics[0].scope_metrics[0].metrics[0].data
        else {
            panic!("{text}: not a gauge");
        };
        let want = text.parse::<f64>().expect("a double").to_bits();
        let point = &g.data_points[0];
        assert_eq!(
            point.value,
            Some(number_data_point::Value::AsDouble(f64::from_bits(want))),
            "{text}"
        );
        assert_eq!(
            point.attributes[0].value,
            Some(AnyValue {
                value: Some(any_value::Value::DoubleValue(f64::from_bits(want)))
            }),
            "{text}"
        );
    }
}
