use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;

use super::store::{Outcome, StateFile, Store};
use super::*;
use crate::views::exposition::Format;

const SEC: u64 = 1_000_000_000;

mod formats;
mod overflow;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn request(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn worker(rank: u32) -> Vec<KeyValue> {
    vec![
        kv("service.name", "w"),
        kv("service.instance.id", &format!("id-{rank}")),
        kv("rank", &rank.to_string()),
    ]
}

fn point(attrs: Vec<KeyValue>, start: u64, time: u64, v: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    }
}

fn counter(name: &str, delta: bool, points: Vec<NumberDataPoint>) -> Metric {
    let temporality = if delta {
        AggregationTemporality::Delta
    } else {
        AggregationTemporality::Cumulative
    };
    Metric {
        name: name.into(),
        data: Some(Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: temporality as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

fn gauge(name: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        data: Some(Data::Gauge(Gauge {
            data_points: points,
        })),
        ..Default::default()
    }
}

fn histogram(
    name: &str,
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
    start: u64,
    time: u64,
) -> Metric {
    Metric {
        name: name.into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                start_time_unix_nano: start,
                time_unix_nano: time,
                count: counts.iter().sum(),
                sum: Some(sum),
                bucket_counts: counts.to_vec(),
                explicit_bounds: bounds.to_vec(),
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

fn ingest(store: &mut Store, req: &ExportMetricsServiceRequest, now: u64) -> Outcome {
    use prost::Message as _;
    let bytes = req.encode_to_vec();
    super::wire::walk(&bytes, &mut super::wire::Count::default()).expect("valid");
    let mut out = Outcome::default();
    // The aggregator's lock around the store for the request, as in `Aggregator`.
    let lock = std::sync::RwLock::new(std::mem::replace(
        store,
        Store::new(AggregateConfig::default()),
    ));
    super::wire::apply(&lock, &bytes, now, &mut out).expect("valid");
    *store = lock.into_inner().expect("not poisoned");
    out
}

fn fleet_counter(store: &Store, name: &str) -> f64 {
    store.fleet_counter(name)
}

/// The default config with a 5 s `stale_after`, and queue depths summed (a rule of the
/// config: they are not catalog families).
fn config() -> AggregateConfig {
    AggregateConfig {
        stale_after: Some(std::time::Duration::from_secs(5)),
        gauges: vec![GaugeRule {
            pattern: "queue*".into(),
            aggregation: GaugeAggregation::Sum,
        }],
        ..AggregateConfig::default()
    }
}

fn render_as(store: &Store, view: View, now: u64, format: Format) -> String {
    let rows = super::store::rows(
        store,
        view,
        now,
        &crate::self_metrics::SelfMetrics::default(),
    );
    crate::views::exposition::encode(rows, format)
}

fn render(store: &Store, view: View, now: u64) -> String {
    render_as(store, view, now, Format::Text)
}

#[test]
fn cumulative_counters_sum_over_ranks_and_survive_restarts() {
    let mut s = Store::new(config());
    let attrs = || vec![kv("state", "gpu")];
    for rank in 0..3 {
        ingest(
            &mut s,
            &request(
                worker(rank),
                vec![counter("busy", false, vec![point(attrs(), 10, 20, 5.0)])],
            ),
            SEC,
        );
    }
    assert_eq!(fleet_counter(&s, "busy"), 15.0);
    ingest(
        &mut s,
        &request(
            worker(0),
            vec![counter("busy", false, vec![point(attrs(), 10, 30, 7.0)])],
        ),
        2 * SEC,
    );
    assert_eq!(fleet_counter(&s, "busy"), 17.0);
    // Rank 0 restarts: new start time, value from zero.
    ingest(
        &mut s,
        &request(
            worker(0),
            vec![counter("busy", false, vec![point(attrs(), 40, 50, 1.0)])],
        ),
        3 * SEC,
    );
    assert_eq!(fleet_counter(&s, "busy"), 18.0);
    // A value drop without a start time is a reset too.
    ingest(
        &mut s,
        &request(
            worker(1),
            vec![counter("busy", false, vec![point(attrs(), 0, 60, 2.0)])],
        ),
        3 * SEC,
    );
    assert_eq!(fleet_counter(&s, "busy"), 20.0);
    // A retried older export changes nothing.
    ingest(
        &mut s,
        &request(
            worker(0),
            vec![counter("busy", false, vec![point(attrs(), 10, 30, 7.0)])],
        ),
        3 * SEC,
    );
    assert_eq!(fleet_counter(&s, "busy"), 20.0);
    let text = render(&s, View::Fleet, 3 * SEC);
    assert!(
        text.contains("# TYPE busy_total counter\nbusy_total{job=\"w\",state=\"gpu\"} 20\n"),
        "{text}"
    );
    let sources = render(&s, View::Sources, 3 * SEC);
    assert!(
        sources.contains("busy_total{instance=\"id-0\",job=\"w\",rank=\"0\",state=\"gpu\"} 1\n"),
        "{sources}"
    );
}

#[test]
fn dead_sources_keep_their_contribution_but_leave_gauges() {
    let mut s = Store::new(config());
    for rank in 0..2 {
        let req = request(
            worker(rank),
            vec![
                counter("busy", true, vec![point(vec![], 10, 20, 3.0)]),
                gauge("queue", vec![point(vec![], 0, 20, 4.0)]),
                gauge(
                    higgsmeter_catalog::WORKER_CURRENT_STATE.name,
                    vec![point(vec![], 0, 20, 3.0)],
                ),
            ],
        );
        ingest(&mut s, &req, rank as u64 * 4 * SEC);
    }
    let text = render(&s, View::Fleet, 4 * SEC);
    assert!(text.contains("queue{job=\"w\"} 8\n"), "{text}");
    assert!(
        text.contains("worker_sources_in_state{state=\"gpu\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("worker_current_state{instance=\"id-0\",job=\"w\",rank=\"0\"} 3\n"),
        "{text}"
    );
    // Rank 0 went silent at 0 s; at 8 s it is stale.
    let text = render(&s, View::Fleet, 8 * SEC);
    assert!(text.contains("busy_total{job=\"w\"} 6\n"), "{text}");
    assert!(text.contains("queue{job=\"w\"} 4\n"), "{text}");
    assert!(
        text.contains("worker_sources_in_state{state=\"gpu\"} 1\n"),
        "{text}"
    );
    assert!(!text.contains("rank=\"0\""), "{text}");
    // Forgotten after forget_after: the contribution stays.
    assert!(s.attr_sets_held() > 0);
    s.sweep(2 * 3600 * SEC);
    assert_eq!(s.series_held(), 0);
    assert_eq!(
        s.attr_sets_held(),
        0,
        "no attribute set outlives its series"
    );
    assert_eq!(fleet_counter(&s, "busy"), 6.0);
}

#[test]
fn dotted_gpu_instrument_names_export_under_their_catalog_name() {
    let mut s = Store::new(config());
    for rank in 0..2 {
        let m = Metric {
            name: "hw.gpu.utilization".into(),
            unit: "1".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![point(vec![kv("hw.id", "gpu0")], 0, 1, 0.5)],
            })),
            ..Default::default()
        };
        ingest(&mut s, &request(worker(rank), vec![m]), SEC);
    }
    let text = render(&s, View::Fleet, SEC);
    let name = higgsmeter_catalog::HW_GPU_UTILIZATION.name;
    assert!(
        text.contains(&format!(
            "# HELP {name} {}",
            higgsmeter_catalog::HW_GPU_UTILIZATION.help
        )),
        "{text}"
    );
    // Per device, per source: never summed.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .count(),
        2,
        "{text}"
    );
}

#[test]
fn gauge_rules() {
    let mut cfg = config();
    cfg.gauges = vec![
        GaugeRule {
            pattern: "temp*".into(),
            aggregation: GaugeAggregation::Max,
        },
        GaugeRule {
            pattern: "free".into(),
            aggregation: GaugeAggregation::Min,
        },
        GaugeRule {
            pattern: "ver".into(),
            aggregation: GaugeAggregation::Last,
        },
    ];
    let mut s = Store::new(cfg);
    for (rank, v) in [(0, 5.0), (1, 9.0), (2, 7.0)] {
        let req = request(
            worker(rank),
            vec![
                gauge("temp_c", vec![point(vec![], 0, 1, v)]),
                gauge("free", vec![point(vec![], 0, 1, v)]),
                gauge("ver", vec![point(vec![], 0, 1, v)]),
            ],
        );
        ingest(&mut s, &req, SEC + rank as u64);
    }
    let text = render(&s, View::Fleet, 2 * SEC);
    assert!(text.contains("temp_c{job=\"w\"} 9\n"), "{text}");
    assert!(text.contains("free{job=\"w\"} 5\n"), "{text}");
    assert!(text.contains("ver{job=\"w\"} 7\n"), "{text}");
}

/// A gauge nobody gave a rule (a temperature) is never combined: two sources at 60 and
/// 61 never show as 121; it is served per source in `/metrics/sources` only. A catalog
/// gauge is combined by the catalog's rule, a configured one by its rule.
#[test]
fn gauges_without_a_rule_stay_per_source_and_out_of_the_fleet() {
    let mut cfg = config();
    cfg.gauges.push(GaugeRule {
        pattern: "kv_usage_ratio".into(),
        aggregation: GaugeAggregation::Mean,
    });
    let mut s = Store::new(cfg);
    let pages = higgsmeter_catalog::MSTAR_KV_PAGES_USED.name;
    for (rank, v, ratio) in [(0, 60.0, 0.5), (1, 61.0, 0.75)] {
        let req = request(
            worker(rank),
            vec![
                gauge("temperature", vec![point(vec![], 0, 1, v)]),
                gauge(pages, vec![point(vec![], 0, 1, v)]),
                gauge("kv_usage_ratio", vec![point(vec![], 0, 1, ratio)]),
            ],
        );
        ingest(&mut s, &req, SEC + rank as u64);
    }
    let fleet = render(&s, View::Fleet, 2 * SEC);
    // No temperature at all: not 121, nor any other combination.
    assert!(!fleet.contains("temperature"), "{fleet}");
    assert!(
        fleet.contains(&format!("{pages}{{job=\"w\"}} 121\n")),
        "{fleet}"
    );
    assert!(
        fleet.contains("kv_usage_ratio{job=\"w\"} 0.625\n"),
        "{fleet}"
    );
    let sources = render(&s, View::Sources, 2 * SEC);
    for v in ["60", "61"] {
        assert!(
            sources
                .lines()
                .any(|l| l.starts_with("temperature{") && l.ends_with(&format!(" {v}"))),
            "{sources}"
        );
    }
    // The OTLP push carries no fleet temperature either.
    let rows = super::store::otlp_rows(&s, 2 * SEC, false);
    let temperature = rows
        .metrics
        .iter()
        .position(|m| m.name == "temperature")
        .map(|i| i as u32);
    assert!(
        temperature.is_none_or(|t| rows.fleet.iter().all(|p| p.metric != t)),
        "a fleet temperature was pushed"
    );
}

#[test]
fn histograms_merge_with_equal_bounds_and_refuse_others() {
    let mut s = Store::new(config());
    let b = [1.0, 5.0];
    ingest(
        &mut s,
        &request(
            worker(0),
            vec![histogram("lat", &b, &[1, 2, 3], 20.0, 1, 2)],
        ),
        SEC,
    );
    ingest(
        &mut s,
        &request(worker(1), vec![histogram("lat", &b, &[1, 0, 0], 0.5, 1, 2)]),
        SEC,
    );
    ingest(
        &mut s,
        &request(
            worker(0),
            vec![histogram("lat", &b, &[2, 2, 3], 20.5, 1, 3)],
        ),
        SEC,
    );
    let out = ingest(
        &mut s,
        &request(
            worker(2),
            vec![histogram("lat", &[1.0, 10.0], &[1, 0, 0], 0.5, 1, 2)],
        ),
        SEC,
    );
    assert_eq!(out.refused[RefusalReason::HistogramBounds as usize], 1);
    assert!(out.first_message.unwrap_or_default().contains("bounds"));
    let text = render(&s, View::Fleet, SEC);
    for line in [
        "lat_bucket{job=\"w\",le=\"1\"} 3\n",
        "lat_bucket{job=\"w\",le=\"5\"} 5\n",
        "lat_bucket{job=\"w\",le=\"+Inf\"} 8\n",
        "lat_sum{job=\"w\"} 21\n",
        "lat_count{job=\"w\"} 8\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    // Rank 0 restarts (new start): its whole new histogram counts.
    ingest(
        &mut s,
        &request(
            worker(0),
            vec![histogram("lat", &b, &[0, 1, 0], 2.0, 9, 10)],
        ),
        SEC,
    );
    let text = render(&s, View::Fleet, SEC);
    assert!(text.contains("lat_count{job=\"w\"} 9\n"), "{text}");
}

#[test]
fn bad_points_are_refused_with_reasons() {
    let mut s = Store::new(config());
    let req = request(
        worker(0),
        vec![
            counter(
                "c",
                false,
                vec![
                    point(vec![], 1, 2, f64::NAN),
                    point(vec![kv("a", "b")], 1, 2, -1.0),
                    point(vec![kv("a", "c")], 1, 2, 2.0),
                ],
            ),
            gauge("c", vec![point(vec![], 1, 2, 1.0)]),
            gauge("target_info", vec![point(vec![], 1, 2, 1.0)]),
            counter(
                higgsmeter_catalog::WORKER_CURRENT_STATE.name,
                false,
                vec![point(vec![], 1, 2, 1.0)],
            ),
        ],
    );
    let out = ingest(&mut s, &req, SEC);
    assert_eq!(out.received, 6);
    assert_eq!(out.refused[RefusalReason::NonFinite as usize], 1);
    assert_eq!(out.refused[RefusalReason::NegativeCounter as usize], 1);
    assert_eq!(out.refused[RefusalReason::TypeConflict as usize], 3);
    assert_eq!(fleet_counter(&s, "c"), 2.0);
}

#[test]
fn two_writers_sharing_a_resource_are_never_counted_twice() {
    let mut s = Store::new(config());
    let a = |v: f64, t: u64| {
        request(
            worker(0),
            vec![counter("c", false, vec![point(vec![], 100, t, v)])],
        )
    };
    let b = |v: f64, t: u64| {
        request(
            worker(0),
            vec![counter("c", false, vec![point(vec![], 200, t, v)])],
        )
    };
    ingest(&mut s, &a(10.0, 300), SEC);
    ingest(&mut s, &b(1.0, 301), SEC); // looks like a restart: counted in full
    let out = ingest(&mut s, &a(11.0, 302), SEC);
    assert_eq!(out.refused[RefusalReason::OutOfOrder as usize], 1);
    assert!(
        out.first_message
            .unwrap_or_default()
            .contains("service.instance.id")
    );
    ingest(&mut s, &b(3.0, 303), SEC);
    assert_eq!(fleet_counter(&s, "c"), 13.0);
}

#[test]
fn late_deltas_count_and_repeated_deltas_do_not() {
    let mut s = Store::new(config());
    let d = |v: f64, start: u64, t: u64| {
        request(
            worker(0),
            vec![counter("d", true, vec![point(vec![], start, t, v)])],
        )
    };
    ingest(&mut s, &d(1.0, 10, 20), SEC);
    ingest(&mut s, &d(2.0, 20, 30), SEC);
    ingest(&mut s, &d(2.0, 20, 30), SEC); // a retry of the last export
    ingest(&mut s, &d(4.0, 0, 5), SEC); // late, but new data
    assert_eq!(fleet_counter(&s, "d"), 7.0);
}

#[test]
fn static_labels_and_sanitising() {
    let mut cfg = config();
    cfg.static_labels
        .insert("model_name".into(), "llama".into());
    cfg.gauges.push(GaugeRule {
        pattern: "http.*".into(),
        aggregation: GaugeAggregation::Last,
    });
    let mut s = Store::new(cfg);
    let m = Metric {
        name: "http.server.duration".into(),
        unit: "ms".into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![point(
                vec![kv("http.method", "GET"), kv("job", "x")],
                0,
                1,
                3.0,
            )],
        })),
        ..Default::default()
    };
    ingest(&mut s, &request(worker(0), vec![m]), SEC);
    let text = render(&s, View::Fleet, SEC);
    assert!(
        text.contains("http_server_duration_milliseconds{exported_job=\"x\",http_method=\"GET\",job=\"w\",model_name=\"llama\"} 3\n"),
        "{text}"
    );
    assert!(text.contains("target_info{"), "{text}");
    assert!(text.contains("model_name=\"llama\""));
}

#[derive(Debug, Clone)]
enum Step {
    Add { source: usize, amount: u32 },
    Export { source: usize },
    Restart { source: usize },
    Retry { source: usize },
    Wait { secs: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..4usize, 0..1000u32).prop_map(|(source, amount)| Step::Add { source, amount }),
        4 => (0..4usize).prop_map(|source| Step::Export { source }),
        1 => (0..4usize).prop_map(|source| Step::Restart { source }),
        1 => (0..4usize).prop_map(|source| Step::Retry { source }),
        1 => (0..20u64).prop_map(|secs| Step::Wait { secs }),
    ]
}

#[derive(Default, Clone)]
struct Sim {
    incarnation: u64,
    value: u64,
    pending: u64,
    last_sent: Option<(u64, u64, u64)>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random interleavings of sources (two cumulative, two delta) with restarts,
    /// retried exports and staleness: the fleet counter always equals the true sum of
    /// every increment reported, and never decreases.
    #[test]
    fn fleet_counter_is_the_true_sum_and_monotonic(steps in prop::collection::vec(step(), 1..120)) {
        let mut s = Store::new(config());
        let mut sims = vec![Sim::default(); 4];
        let mut now = SEC;
        let mut clock = 100u64;
        let mut truth = 0u64;
        let mut last = 0.0f64;
        for step in steps {
            clock += 1;
            match step {
                Step::Add { source, amount } => {
                    sims[source].value += u64::from(amount);
                    sims[source].pending += u64::from(amount);
                }
                Step::Export { source } => {
                    let delta = source >= 2;
                    let sim = &mut sims[source];
                    let start = 1 + sim.incarnation * 1_000_000;
                    let v = if delta { sim.pending } else { sim.value };
                    let p_start = if delta { clock - 1 } else { start };
                    let req = request(worker(source as u32), vec![counter("work", delta, vec![point(vec![kv("k", "v")], p_start, clock, v as f64)])]);
                    let out = ingest(&mut s, &req, now);
                    prop_assert_eq!(out.refused_total(), 0);
                    truth += sim.pending;
                    sim.pending = 0;
                    sim.last_sent = Some((p_start, clock, v));
                }
                Step::Retry { source } => {
                    let delta = source >= 2;
                    if let Some((start, time, v)) = sims[source].last_sent {
                        let req = request(worker(source as u32), vec![counter("work", delta, vec![point(vec![kv("k", "v")], start, time, v as f64)])]);
                        ingest(&mut s, &req, now);
                    }
                }
                Step::Restart { source } => {
                    let sim = &mut sims[source];
                    sim.incarnation += 1;
                    sim.value = 0;
                    sim.pending = 0;
                }
                Step::Wait { secs } => {
                    now += secs * SEC;
                    s.sweep(now);
                }
            }
            let total = fleet_counter(&s, "work");
            prop_assert!(total >= last, "fleet counter decreased: {} -> {}", last, total);
            prop_assert_eq!(total, truth as f64);
            last = total;
        }
    }

    /// Whatever arrives, both views render as well-formed exposition text.
    #[test]
    fn render_never_breaks(names in prop::collection::vec("[a-z.]{1,8}", 1..5), values in prop::collection::vec(-1e6f64..1e6, 1..5)) {
        let mut s = Store::new(config());
        for (i, (n, v)) in names.iter().zip(values.iter().cycle()).enumerate() {
            let req = request(worker(i as u32), vec![gauge(n, vec![point(vec![kv("x\"y", "a\nb\\")], 0, 1, *v)])]);
            ingest(&mut s, &req, SEC);
        }
        for view in [View::Fleet, View::Sources] {
            let text = render(&s, view, SEC);
            for line in text.lines() {
                prop_assert!(line.starts_with('#') || line.split(' ').count() >= 2, "{}", line);
                prop_assert!(!line.contains("\n"));
            }
        }
    }
}

/// A store with every kind of series and awkward values: counters (cumulative and
/// delta), gauges under each fleet rule, histograms with odd bounds, label values
/// that need escaping, static labels, `worker_current_state`.
fn golden_store() -> Store {
    let mut s = Store::new(golden_config());
    fill_golden(&mut s);
    s
}

fn golden_config() -> AggregateConfig {
    let mut cfg = config();
    cfg.static_labels
        .insert("model_name".into(), "llama".into());
    cfg.gauges = vec![
        GaugeRule {
            pattern: "g.sum".into(),
            aggregation: GaugeAggregation::Sum,
        },
        GaugeRule {
            pattern: "g.max".into(),
            aggregation: GaugeAggregation::Max,
        },
        GaugeRule {
            pattern: "g.min".into(),
            aggregation: GaugeAggregation::Min,
        },
        GaugeRule {
            pattern: "g.last".into(),
            aggregation: GaugeAggregation::Last,
        },
        GaugeRule {
            pattern: "g.each".into(),
            aggregation: GaugeAggregation::PerSource,
        },
    ];
    cfg
}

fn fill_golden(s: &mut Store) {
    let odd = [
        0.1,
        1e-7,
        1e21,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        -1.5,
        0.1 + 0.2,
        123_456_789_012_345_680.0,
        4_503_599_627_370_497.0,
        999_999_999_999_999.0,
        1e15,
        1e16,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        2.5e-300,
        1.0 / 3.0,
        -7.0,
        1e-5,
        123.456,
    ];
    let bounds = [1e-7, 0.005, 0.1, 0.3, 1.0, 2.5, 1e3, 1e21];
    for rank in 0..3u32 {
        let mut res = worker(rank);
        res.push(kv("host.name", &format!("node \"{rank}\"\\x\ny")));
        let mut metrics = Vec::new();
        let pts = |name_salt: usize| -> Vec<NumberDataPoint> {
            odd.iter()
                .enumerate()
                .map(|(i, v)| {
                    let v = if name_salt == 0 { v.abs() } else { *v };
                    point(
                        vec![kv("op", &format!("op{i}")), kv("path", "a\"b\\c\nd é")],
                        1,
                        10 + u64::from(rank),
                        v * f64::from(rank + 1),
                    )
                })
                .collect()
        };
        metrics.push(counter("c.cumulative", false, pts(0)));
        metrics.push(counter("c.delta", true, pts(0)));
        for g in ["g.sum", "g.max", "g.min", "g.last", "g.each"] {
            metrics.push(gauge(g, pts(1)));
        }
        metrics.push(gauge(
            higgsmeter_catalog::WORKER_CURRENT_STATE.name,
            vec![point(vec![], 0, 1, f64::from(rank))],
        ));
        let counts: Vec<u64> = (0..=bounds.len() as u64)
            .map(|i| i * 1_000_000_007 + u64::from(rank))
            .collect();
        metrics.push(histogram("h.odd", &bounds, &counts, 0.1 + 0.2, 1, 10));
        metrics.push(histogram(
            "h.plain",
            &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
            &[1; 11],
            1e21 * f64::from(rank),
            1,
            10,
        ));
        metrics.push(histogram("h.nobounds", &[], &[5], 1.5, 1, 10));
        ingest(s, &request(res, metrics), SEC);
    }
}

/// The rendered text of both views, in both formats, is byte-for-byte what it was
/// (`HIGGSMETER_BLESS=1` rewrites the files under `testdata/`).
#[test]
fn render_matches_golden_files() {
    let s = golden_store();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/aggregate/testdata");
    let cases = [
        ("fleet.prom", render(&s, View::Fleet, SEC)),
        ("sources.prom", render(&s, View::Sources, SEC)),
        (
            "fleet.openmetrics",
            render_as(&s, View::Fleet, SEC, Format::OpenMetrics),
        ),
        (
            "sources.openmetrics",
            render_as(&s, View::Sources, SEC, Format::OpenMetrics),
        ),
    ];
    for (file, text) in cases {
        let path = dir.join(file);
        if std::env::var_os("HIGGSMETER_BLESS").is_some() {
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(&path, &text).expect("write golden");
        }
        let want = std::fs::read_to_string(&path).expect("golden file");
        assert!(text == want, "{file} differs from {}", path.display());
    }
}

/// The render order kept between scrapes follows series as they come and go: every
/// render equals one from an empty cache.
#[test]
fn kept_render_order_follows_new_and_forgotten_series() {
    fn check(s: &Store, now: u64) {
        let views = [View::Fleet, View::Sources];
        let kept = views.map(|view| render(s, view, now));
        s.reset_render_cache();
        for (view, kept) in views.into_iter().zip(kept) {
            assert_eq!(kept, render(s, view, now));
            assert_eq!(kept, render(s, view, now));
        }
    }
    let mut s = golden_store();
    check(&s, SEC);
    for (rank, now) in [(7u32, 2 * SEC), (1, 3 * SEC)] {
        let req = request(
            worker(rank),
            vec![
                counter(
                    "a.first",
                    false,
                    vec![point(vec![kv("op", "z")], 1, 5, 2.5)],
                ),
                counter(
                    "c.cumulative",
                    false,
                    vec![point(vec![kv("op", "new")], 1, 5, 0.5)],
                ),
                gauge("g.each", vec![point(vec![kv("op", "a")], 1, 5, 1.0)]),
            ],
        );
        ingest(&mut s, &req, now);
        check(&s, now);
    }
    // Most sources go stale, then are forgotten.
    check(&s, 7 * SEC);
    s.sweep(10_000 * SEC);
    check(&s, 10_000 * SEC);
    ingest(
        &mut s,
        &request(
            worker(9),
            vec![gauge("g.each", vec![point(vec![], 1, 5, 3.0)])],
        ),
        10_001 * SEC,
    );
    check(&s, 10_001 * SEC);
}

/// Encodes the store's checkpoint to file bytes, decodes them, and restores them into
/// a fresh store with `config` (as a restarted collector does, `elapsed` ns later).
fn restart(s: &Store, config: AggregateConfig, now: u64, elapsed: u64) -> Store {
    let bytes = s.checkpoint(now).to_state().encode();
    let state = StateFile::decode(&bytes).expect("decode");
    let mut restored = Store::new(config);
    restored
        .restore(&state, now + elapsed, elapsed)
        .expect("restore");
    restored
}

/// Every kind of series (counters, delta counters, gauges under each rule, histograms,
/// escapes, static labels) comes back rendering byte-for-byte as before, in both views.
#[test]
fn checkpoint_restores_both_views_exactly() {
    let s = golden_store();
    let r = restart(&s, golden_config(), SEC, 0);
    for view in [View::Fleet, View::Sources] {
        assert_eq!(render(&r, view, SEC), render(&s, view, SEC), "{view:?}");
    }
    // Later: ages carried over, so the same sources are stale at the same moment.
    let later = 4 * SEC;
    let r = restart(&s, golden_config(), SEC, later - SEC);
    assert_eq!(
        render(&r, View::Sources, later),
        render(&s, View::Sources, later)
    );
}

#[test]
fn corrupt_truncated_and_newer_state_files_are_refused() {
    let bytes = golden_store().checkpoint(SEC).to_state().encode();
    assert!(StateFile::decode(&bytes).is_ok());
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x55;
    let err = StateFile::decode(&flipped).unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
    let err = StateFile::decode(&bytes[..bytes.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(err.contains("length"), "{err}");
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&99u32.to_le_bytes());
    let err = StateFile::decode(&newer).unwrap_err().to_string();
    assert!(err.contains("newer") && err.contains("99"), "{err}");
    assert!(StateFile::decode(b"").is_err());
    assert!(StateFile::decode(b"not a state file at all, really").is_err());
}

/// A checkpoint's file is written straight from the copy, without building the
/// protobuf message: byte for byte what prost writes for that message (the format of
/// ADR 7), for every kind of series, for an empty store, and after sources were
/// forgotten (their indices are gaps in the store, none in the file).
#[test]
fn checkpoint_files_are_what_prost_writes() {
    let by_prost = |copy: &super::store::StoreCopy, id: &str, origin: u64, written: u64| {
        let mut state = copy.to_state();
        state.instance_id = id.into();
        state.origin_unix_nanos = origin;
        state.written_unix_nanos = written;
        state.encode()
    };
    let empty = Store::new(golden_config()).checkpoint(SEC);
    assert_eq!(empty.encode("", 0, 0), by_prost(&empty, "", 0, 0));
    let mut s = golden_store();
    for now in [SEC, 4 * SEC] {
        let copy = s.checkpoint(now);
        let bytes = copy.encode("higgsmeter-collector-00ff", 7, u64::MAX);
        assert_eq!(
            bytes,
            by_prost(&copy, "higgsmeter-collector-00ff", 7, u64::MAX)
        );
        assert!(StateFile::decode(&bytes).is_ok());
    }
    s.sweep(10_000 * SEC);
    fill_golden(&mut s);
    let req = request(
        worker(1),
        vec![counter("c.later", false, vec![point(vec![], 1, 5, 2.5)])],
    );
    ingest(&mut s, &req, 10_001 * SEC);
    let copy = s.checkpoint(10_001 * SEC);
    assert_eq!(copy.encode("x", 1, 2), by_prost(&copy, "x", 1, 2));
}

/// The collector keeps one copy and refills it at every checkpoint: a copy that held
/// another, larger state writes exactly what a fresh one does (nothing of the old state
/// stays), and the file written a chunk at a time through `write_to` (here after other
/// bytes, as a seekable writer may hold) is the same file.
#[test]
fn a_reused_checkpoint_copy_writes_what_a_fresh_one_does() {
    let mut s = golden_store();
    let mut reused = s.checkpoint(SEC);
    // The state shrinks (every source forgotten), then grows back differently.
    s.sweep(10_000 * SEC);
    let req = request(
        worker(1),
        vec![counter("c.later", false, vec![point(vec![], 1, 5, 2.5)])],
    );
    ingest(&mut s, &req, 10_001 * SEC);
    // Enough series that the payload spans several of `write_to`'s chunks (256 KiB).
    let many = (0..8_000)
        .map(|i| {
            point(
                vec![kv("op", &format!("operation-{i}"))],
                1,
                5,
                f64::from(i),
            )
        })
        .collect();
    ingest(
        &mut s,
        &request(worker(2), vec![counter("c.many", false, many)]),
        10_001 * SEC,
    );
    s.checkpoint_into(10_001 * SEC, &mut reused);
    let fresh = s.checkpoint(10_001 * SEC);
    let bytes = fresh.encode("x", 1, 2);
    assert!(bytes.len() > 2 * 256 * 1024, "{} bytes", bytes.len());
    assert_eq!(reused.encode("x", 1, 2), bytes);
    let mut by_prost = fresh.to_state();
    by_prost.instance_id = "x".into();
    by_prost.origin_unix_nanos = 1;
    by_prost.written_unix_nanos = 2;
    assert_eq!(by_prost.encode(), bytes, "the bytes prost writes");
    let state = StateFile::decode(&bytes).expect("decode");
    assert_eq!(state.instance_id, "x");
    let mut file = std::io::Cursor::new(b"before".to_vec());
    file.set_position(6);
    reused.write_to(&mut file, "x", 1, 2).expect("write");
    assert_eq!(&file.get_ref()[..6], b"before");
    assert_eq!(&file.get_ref()[6..], bytes.as_slice());
    // Emptied, it holds nothing (the labels it shared are let go) but keeps its room.
    reused.clear();
    assert_eq!(
        reused.encode("", 0, 0),
        Store::new(golden_config()).checkpoint(SEC).encode("", 0, 0)
    );
}

/// Without state, a source that started before the state's origin counts only what
/// it adds after its first point; one that started after counts everything; a new
/// series of a source already known counts everything.
#[test]
fn sources_older_than_the_state_start_from_a_baseline() {
    let origin = 1_000;
    let mut s = Store::new(config());
    s.set_baseline_before(origin);
    let old = |v: f64, t: u64| {
        request(
            worker(0),
            vec![counter("work", false, vec![point(vec![], 10, t, v)])],
        )
    };
    ingest(&mut s, &old(500.0, 2_000), SEC);
    assert_eq!(
        fleet_counter(&s, "work"),
        0.0,
        "the first point is a baseline"
    );
    ingest(&mut s, &old(530.0, 3_000), 2 * SEC);
    assert_eq!(fleet_counter(&s, "work"), 30.0);
    let young = request(
        worker(1),
        vec![counter(
            "work",
            false,
            vec![point(vec![], 1_500, 2_000, 7.0)],
        )],
    );
    ingest(&mut s, &young, 2 * SEC);
    assert_eq!(fleet_counter(&s, "work"), 37.0, "started after the origin");
    let new_series = request(
        worker(0),
        vec![counter(
            "work",
            false,
            vec![point(vec![kv("k", "v")], 10, 4_000, 4.0)],
        )],
    );
    ingest(&mut s, &new_series, 5 * SEC);
    assert_eq!(
        fleet_counter(&s, "work"),
        41.0,
        "a new series of a known source"
    );
    // A restart of the old source (a new start time) counts everything it reports.
    let restarted = request(
        worker(0),
        vec![counter(
            "work",
            false,
            vec![point(vec![], 5_000, 6_000, 3.0)],
        )],
    );
    ingest(&mut s, &restarted, 6 * SEC);
    assert_eq!(fleet_counter(&s, "work"), 44.0);
}

/// After a restore the views wait for the sources that were live to report again (a
/// restored value can lag what a scraper last read), at most `stale_after`; dead
/// sources are not waited for, and their counted time stays.
#[test]
fn a_restored_store_waits_for_live_sources_and_keeps_dead_ones() {
    let mut s = Store::new(config());
    let push = |rank: u32, v: f64, t: u64| {
        request(
            worker(rank),
            vec![counter("work", false, vec![point(vec![], 10, t, v)])],
        )
    };
    ingest(&mut s, &push(0, 10.0, 100), SEC);
    ingest(&mut s, &push(1, 20.0, 100), SEC);
    ingest(&mut s, &push(2, 5.0, 100), SEC);
    // Rank 2 dies; the others go on.
    let now = 10 * SEC;
    ingest(&mut s, &push(0, 18.0, 200), now);
    ingest(&mut s, &push(1, 29.0, 200), now);
    assert_eq!(fleet_counter(&s, "work"), 52.0);
    let mut r = restart(&s, config(), now, 2 * SEC);
    let now = now + 2 * SEC;
    assert_eq!(
        fleet_counter(&r, "work"),
        52.0,
        "the dead rank's time stays"
    );
    assert!(!r.ready(now), "waits for ranks 0 and 1");
    assert_eq!(r.awaiting(), 2);
    ingest(&mut r, &push(0, 20.0, 300), now);
    assert!(!r.ready(now));
    ingest(&mut r, &push(1, 33.0, 300), now);
    assert!(r.ready(now));
    assert_eq!(fleet_counter(&r, "work"), 58.0, "only the increments since");
    // A source that never comes back holds the views for stale_after at most.
    let mut r = restart(&s, config(), 10 * SEC, 0);
    assert!(!r.ready(10 * SEC + SEC));
    assert!(r.ready(10 * SEC + 5 * SEC));
    ingest(&mut r, &push(1, 29.0, 200), 11 * SEC);
    assert_eq!(
        fleet_counter(&r, "work"),
        52.0,
        "a retried point adds nothing"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// Random stores (sources with restarts, retries, deltas, staleness) survive a
    /// checkpoint round trip: both views render identically, and the same later
    /// traffic moves the original and the restored fleet counter alike.
    #[test]
    fn checkpoint_round_trip_is_exact(steps in prop::collection::vec(step(), 1..80), later in prop::collection::vec(step(), 0..40)) {
        let mut s = Store::new(config());
        let mut sims = vec![Sim::default(); 4];
        let mut now = SEC;
        let mut clock = 100u64;
        let mut restored: Option<Store> = None;
        for (i, step) in steps.iter().chain(later.iter()).enumerate() {
            if i == steps.len() {
                let r = restart(&s, config(), now, 0);
                for view in [View::Fleet, View::Sources] {
                    prop_assert_eq!(render(&r, view, now), render(&s, view, now));
                }
                restored = Some(r);
            }
            clock += 1;
            let mut reqs = Vec::new();
            match step {
                Step::Add { source, amount } => {
                    sims[*source].value += u64::from(*amount);
                    sims[*source].pending += u64::from(*amount);
                }
                Step::Export { source } => {
                    let delta = *source >= 2;
                    let sim = &mut sims[*source];
                    let start = 1 + sim.incarnation * 1_000_000;
                    let v = if delta { sim.pending } else { sim.value };
                    let p_start = if delta { clock - 1 } else { start };
                    reqs.push(request(worker(*source as u32), vec![counter("work", delta, vec![point(vec![kv("k", "v")], p_start, clock, v as f64)])]));
                    sim.pending = 0;
                }
                Step::Restart { source } => {
                    let sim = &mut sims[*source];
                    sim.incarnation += 1;
                    sim.value = 0;
                    sim.pending = 0;
                }
                Step::Retry { .. } => {}
                Step::Wait { secs } => now += secs * SEC,
            }
            for req in &reqs {
                ingest(&mut s, req, now);
                if let Some(r) = restored.as_mut() {
                    ingest(r, req, now);
                }
            }
            if let Some(r) = restored.as_ref() {
                prop_assert_eq!(fleet_counter(r, "work"), fleet_counter(&s, "work"));
            }
        }
    }
}

/// Agent → gateway (ADR 0009): the gateway's fleet equals the agent's, whether or not
/// the agent forwards its sources (`include_sources`); the points keep their own `job`
/// (no `exported_job`); the per-source view keeps the agent and the forwarded ranks.
#[test]
fn a_gateway_sums_agents_once_with_or_without_forwarded_sources() {
    for include_sources in [false, true] {
        let mut agent = Store::new(config());
        for rank in 0..3u32 {
            ingest(
                &mut agent,
                &request(
                    worker(rank),
                    vec![
                        counter(
                            "busy",
                            false,
                            vec![point(vec![kv("state", "gpu")], 10, 20, f64::from(rank + 1))],
                        ),
                        gauge(
                            "worker_current_state",
                            vec![point(vec![], 10, 20, f64::from(rank))],
                        ),
                        gauge("queue_depth", vec![point(vec![], 10, 20, 2.0)]),
                    ],
                ),
                SEC,
            );
        }
        assert_eq!(fleet_counter(&agent, "busy"), 6.0);
        let rows = super::store::otlp_rows(&agent, SEC, include_sources);
        let (req, _) = crate::views::otlp::encode(&rows, 5, 25, "agent-a");
        let mut gateway = Store::new(config());
        // Twice: a repeated cumulative push changes nothing.
        ingest(&mut gateway, &req, 2 * SEC);
        ingest(&mut gateway, &req, 3 * SEC);
        assert_eq!(
            fleet_counter(&gateway, "busy"),
            6.0,
            "include_sources={include_sources}"
        );
        let fleet = render(&gateway, View::Fleet, 3 * SEC);
        assert!(
            fleet.contains("busy_total{job=\"w\",state=\"gpu\"} 6"),
            "{fleet}"
        );
        assert!(fleet.contains("queue_depth{job=\"w\"} 6"), "{fleet}");
        assert!(
            !fleet.contains("exported_job") && !fleet.contains("exported_instance"),
            "{fleet}"
        );
        // The ranks' states: per source at the agent, carried through per rank.
        for rank in 0..3 {
            assert!(
                fleet.contains(&format!("rank=\"{rank}\"")),
                "no rank {rank} state in: {fleet}"
            );
        }
        let sources = render(&gateway, View::Sources, 3 * SEC);
        assert!(
            sources
                .contains("busy_total{higgsmeter_collector=\"agent-a\",job=\"w\",state=\"gpu\"} 6"),
            "{sources}"
        );
        let forwarded =
            sources.contains("busy_total{instance=\"id-1\",job=\"w\",rank=\"1\",state=\"gpu\"} 2");
        assert_eq!(forwarded, include_sources, "{sources}");
        assert!(
            !sources.contains("exported_job") && !sources.contains("exported_instance"),
            "{sources}"
        );
    }
}

/// Requests applied at the same moment by several threads (ingest holds the store's
/// read lock; a new source, metric or series takes the write lock) sum exactly: new and
/// known sources, cumulative and delta counters, histograms, series that appear while
/// others are being applied, and one source whose requests every thread sends (so they
/// arrive out of order: the older ones are stale). Views and checkpoints are taken
/// meanwhile, and the fleet counter read by them never decreases.
#[test]
fn parallel_ingest_is_exact() {
    const THREADS: usize = 4;
    const SOURCES: u32 = 12;
    const ROUNDS: u64 = 200;
    let aggregator = Aggregator::standalone(config()).expect("config");
    // After the aggregator's origin: no first point is a baseline.
    let start = unix_nanos() + 1_000;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (aggregator, done) = (&aggregator, &done);
        let reader = scope.spawn(move || {
            let mut last = 0.0;
            let mut reads = 0;
            while !done.load(Ordering::SeqCst) {
                let now = aggregator.read().fleet_counter("c");
                assert!(now >= last, "the fleet counter went from {last} to {now}");
                last = now;
                let _ = aggregator.rows(View::Fleet);
                let _ = aggregator.snapshot_state();
                reads += 1;
            }
            reads
        });
        let senders: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    for round in 1..=ROUNDS {
                        // Source 0 is sent by every thread; the others by one each.
                        let mine = (0..SOURCES).filter(|s| *s == 0 || *s as usize % THREADS == t);
                        for source in mine {
                            let time = start + round;
                            let phase = (round / 50).to_string();
                            let mut metrics = vec![
                                counter(
                                    "c",
                                    false,
                                    vec![point(
                                        vec![kv("phase", &phase)],
                                        start,
                                        time,
                                        round as f64,
                                    )],
                                ),
                                histogram("h", &[1.0], &[round, round], round as f64, start, time),
                            ];
                            if source != 0 {
                                metrics.push(counter(
                                    "d",
                                    true,
                                    vec![point(vec![], time - 1, time, 1.0)],
                                ));
                            }
                            let r = aggregator
                                .ingest(&request(worker(source), metrics), Transport::Grpc);
                            assert_eq!(r.rejected, 0, "{}", r.message);
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().expect("sender");
        }
        done.store(true, Ordering::SeqCst);
        assert!(reader.join().expect("reader") > 0);
    });
    let store = aggregator.read();
    // Each source's `c` series end at the last round of their phase: 49, 99, 149, 199, 200.
    assert_eq!(fleet_counter(&store, "c"), f64::from(SOURCES) * 696.0);
    assert_eq!(
        fleet_counter(&store, "d"),
        f64::from(SOURCES - 1) * ROUNDS as f64
    );
    let rows = super::store::rows(&store, View::Fleet, aggregator.now(), &aggregator.stats);
    let h = rows
        .families
        .iter()
        .find(|f| &*f.name == "h")
        .expect("the histogram family");
    match &h.rows[..] {
        [
            crate::views::rows::Row {
                value: crate::views::rows::RowValue::Hist { count, sum, at, .. },
                ..
            },
        ] => {
            assert_eq!(*count, u64::from(SOURCES) * 2 * ROUNDS);
            assert_eq!(*sum, f64::from(SOURCES) * ROUNDS as f64);
            assert_eq!(rows.counts(*at, 2), [u64::from(SOURCES) * ROUNDS; 2]);
        }
        _ => panic!("one fleet histogram"),
    }
    assert_eq!(store.series_held(), SOURCES as usize * 7 - 1);
}

/// A counter under `name` with `unit`, cumulative, one point per `(attrs, value)`.
fn counter_with_unit(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        unit: unit.into(),
        ..counter(name, false, points)
    }
}

/// ADR 0013: a fleet that renames a metric (here from `train_busy` with unit `s` to a
/// client that writes the Prometheus name `train_busy_seconds_total` itself) is never
/// locked out of its own Prometheus name: the new name joins the family, the old
/// name's counted time stays in the fleet sum, and all of it survives restarts.
#[test]
fn a_renamed_metric_is_accepted_after_its_old_series_are_gone_across_restarts() {
    let attrs = || vec![kv("state", "gpu")];
    let mut s = Store::new(config());
    let out = ingest(
        &mut s,
        &request(
            worker(0),
            vec![counter_with_unit(
                "train_busy",
                "s",
                vec![point(attrs(), 10, 20, 10.0)],
            )],
        ),
        SEC,
    );
    assert_eq!(out.refused_total(), 0);
    // The old name's source goes silent and its series are forgotten (forget_after).
    s.sweep(2 * 3600 * SEC);
    let now = 2 * 3600 * SEC;
    let mut r = restart(&s, config(), now, SEC);
    let renamed = |value: f64, time: u64| {
        request(
            worker(1),
            vec![counter_with_unit(
                "train_busy_seconds_total",
                "",
                vec![point(attrs(), 100, time, value)],
            )],
        )
    };
    let out = ingest(&mut r, &renamed(5.0, 200), now + 2 * SEC);
    assert_eq!(out.received, 1);
    assert_eq!(out.refused_total(), 0, "{:?}", out.first_message);
    // One family, one fleet series: the old name's 10 s stay counted, the new 5 s add.
    assert_eq!(fleet_counter(&r, "train_busy"), 15.0);
    let fleet = render(&r, View::Fleet, now + 2 * SEC);
    let lines: Vec<_> = fleet
        .lines()
        .filter(|l| l.starts_with("train_busy"))
        .collect();
    assert_eq!(lines.len(), 1, "{fleet}");
    assert!(lines[0].ends_with(" 15"), "{fleet}");
    assert_eq!(
        fleet
            .matches("# TYPE train_busy_seconds_total counter")
            .count(),
        1
    );

    // Another restart: the merge and the series' name come back; the renamed metric
    // goes on being accepted and counted from where it was.
    let now = now + 3 * SEC;
    let mut r2 = restart(&r, config(), now, SEC);
    let out = ingest(&mut r2, &renamed(8.0, 300), now + 2 * SEC);
    assert_eq!(out.refused_total(), 0, "{:?}", out.first_message);
    assert_eq!(fleet_counter(&r2, "train_busy"), 18.0);
    assert_eq!(
        render(&r2, View::Fleet, now + 2 * SEC)
            .lines()
            .filter(|l| l.starts_with("train_busy"))
            .count(),
        1
    );
}

/// ADR 0013: what is not merged. One source sending the same series under both names
/// (two cumulative streams in one series would count twice), and two names of one
/// Prometheus name with different kinds or units, are refused as before.
#[test]
fn names_of_one_prometheus_name_merge_only_when_they_can() {
    let attrs = || vec![kv("state", "gpu")];
    let mut s = Store::new(config());
    let out = ingest(
        &mut s,
        &request(
            worker(0),
            vec![
                counter_with_unit("busy", "s", vec![point(attrs(), 10, 20, 10.0)]),
                counter_with_unit(
                    "busy_seconds_total",
                    "s",
                    vec![
                        point(attrs(), 10, 20, 4.0),
                        point(vec![kv("state", "io")], 10, 20, 1.0),
                    ],
                ),
            ],
        ),
        SEC,
    );
    // The same series (source, attributes) under the second name: refused; another
    // series of the same source under it: accepted.
    assert_eq!(out.refused[RefusalReason::TypeConflict as usize], 1);
    assert!(
        out.first_message
            .as_deref()
            .is_some_and(|m| m.contains("busy_seconds_total") && m.contains("same attributes")),
        "{:?}",
        out.first_message
    );
    assert_eq!(fleet_counter(&s, "busy"), 11.0);
    // Another source may use either name for that series.
    let out = ingest(
        &mut s,
        &request(
            worker(1),
            vec![counter_with_unit(
                "busy_seconds_total",
                "s",
                vec![point(attrs(), 10, 20, 2.0)],
            )],
        ),
        SEC,
    );
    assert_eq!(out.refused_total(), 0);
    assert_eq!(fleet_counter(&s, "busy"), 13.0);

    // Units that differ (both given): refused.
    let out = ingest(
        &mut s,
        &request(
            worker(0),
            vec![
                counter_with_unit("jobs", "{job}", vec![point(vec![], 1, 2, 1.0)]),
                counter_with_unit("jobs_total", "{batch}", vec![point(vec![], 1, 2, 1.0)]),
            ],
        ),
        SEC,
    );
    assert_eq!(out.refused[RefusalReason::TypeConflict as usize], 1);
    assert!(
        out.first_message
            .as_deref()
            .is_some_and(|m| m.contains("already uses")),
        "{:?}",
        out.first_message
    );
    // A gauge whose Prometheus name a counter has: refused.
    let out = ingest(
        &mut s,
        &request(
            worker(0),
            vec![gauge("jobs_total", vec![point(vec![], 1, 2, 1.0)])],
        ),
        SEC,
    );
    assert_eq!(out.refused[RefusalReason::TypeConflict as usize], 1);
}
