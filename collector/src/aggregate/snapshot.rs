//! The fleet view (and optionally the per-source view) as an OTLP export request.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::MetricKind;
use super::config::GaugeAggregation;
use super::store::{FleetValue, Hist, Store, Value};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        }),
        ..Default::default()
    }
}

fn number(attrs: Vec<KeyValue>, start: u64, time: u64, v: f64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    }
}

fn hist_point(attrs: Vec<KeyValue>, start: u64, time: u64, h: &Hist) -> HistogramDataPoint {
    HistogramDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: time,
        count: h.count,
        sum: Some(h.sum),
        bucket_counts: h.counts.clone(),
        explicit_bounds: h.bounds.to_vec(),
        ..Default::default()
    }
}

enum Points {
    Numbers(Vec<NumberDataPoint>),
    Hists(Vec<HistogramDataPoint>),
}

fn metric(store: &Store, id: usize, points: Points) -> Metric {
    let m = &store.metrics[id];
    let data = match (points, m.kind) {
        (Points::Numbers(data_points), MetricKind::Counter) => Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        (Points::Numbers(data_points), _) => Data::Gauge(Gauge { data_points }),
        (Points::Hists(data_points), _) => Data::Histogram(Histogram {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
    };
    Metric {
        name: m.otel_name.clone(),
        description: m.help.clone(),
        unit: m.unit.clone(),
        data: Some(data),
        ..Default::default()
    }
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "higgsmeter-collector".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..Default::default()
    })
}

pub(crate) fn export_request(
    store: &Store,
    now: u64,
    include_sources: bool,
    start_unix: u64,
    now_unix: u64,
    instance_id: &str,
) -> (ExportMetricsServiceRequest, u64) {
    let mut points = 0u64;
    let n = store.metrics.len();
    let mut numbers: Vec<Vec<NumberDataPoint>> = (0..n).map(|_| Vec::new()).collect();
    let mut hists: Vec<Vec<HistogramDataPoint>> = (0..n).map(|_| Vec::new()).collect();
    let pairs_to_kv =
        |pairs: &[(String, String)]| pairs.iter().map(|(k, v)| kv(k, v)).collect::<Vec<_>>();

    // Fleet: counters and histograms, combined gauges, per-source gauges.
    let mut gauge_acc: Vec<Option<(f64, u64)>> = vec![None; store.fleet.len()];
    for s in store.series.iter().flatten() {
        if !store.is_live(s.last_seen, now) {
            continue;
        }
        let m = &store.metrics[s.metric as usize];
        let Value::Gauge { value, updated } = s.value else {
            continue;
        };
        if m.gauge_agg == GaugeAggregation::PerSource {
            let mut attrs = store.sources[s.source as usize]
                .as_ref()
                .map(|src| pairs_to_kv(&src.labels))
                .unwrap_or_default();
            attrs.extend(s.attrs().iter().map(|(k, v)| kv(k, v)));
            attrs.extend(store.static_labels.iter().map(|(k, v)| kv(k, v)));
            numbers[s.metric as usize].push(number(attrs, start_unix, now_unix, value));
            continue;
        }
        let acc = &mut gauge_acc[s.fleet as usize];
        *acc = Some(m.gauge_agg.fold(*acc, value, updated));
    }
    for (i, f) in store.fleet.iter().enumerate() {
        let attrs = pairs_to_kv(&f.label_pairs);
        match &f.value {
            FleetValue::Counter(v) => {
                numbers[f.metric as usize].push(number(attrs, start_unix, now_unix, *v))
            }
            FleetValue::Histogram(h) => {
                hists[f.metric as usize].push(hist_point(attrs, start_unix, now_unix, h))
            }
            FleetValue::Gauge => {
                if let Some((v, _)) = gauge_acc[i] {
                    numbers[f.metric as usize].push(number(attrs, start_unix, now_unix, v));
                }
            }
        }
    }
    let mut metrics = Vec::new();
    for id in 0..n {
        let nums = std::mem::take(&mut numbers[id]);
        let hs = std::mem::take(&mut hists[id]);
        points += (nums.len() + hs.len()) as u64;
        if !nums.is_empty() {
            metrics.push(metric(store, id, Points::Numbers(nums)));
        }
        if !hs.is_empty() {
            metrics.push(metric(store, id, Points::Hists(hs)));
        }
    }
    let mut resource_attrs = vec![
        kv("service.name", "higgsmeter-collector"),
        kv("service.instance.id", instance_id),
    ];
    resource_attrs.extend(store.static_labels.iter().map(|(k, v)| kv(k, v)));
    let mut resource_metrics = vec![ResourceMetrics {
        resource: Some(Resource {
            attributes: resource_attrs,
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: scope(),
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }];

    if include_sources {
        let mut per_source: std::collections::BTreeMap<u32, Vec<Metric>> = Default::default();
        for s in store.series.iter().flatten() {
            if !store.is_live(s.last_seen, now) {
                continue;
            }
            let attrs: Vec<KeyValue> = s.attrs().iter().map(|(k, v)| kv(k, v)).collect();
            let points_of = match &s.value {
                Value::Counter { value } | Value::Gauge { value, .. } => {
                    Points::Numbers(vec![number(attrs, start_unix, now_unix, *value)])
                }
                Value::Histogram(h) => {
                    Points::Hists(vec![hist_point(attrs, start_unix, now_unix, h)])
                }
            };
            points += 1;
            per_source.entry(s.source).or_default().push(metric(
                store,
                s.metric as usize,
                points_of,
            ));
        }
        for (source, metrics) in per_source {
            let Some(src) = store.sources[source as usize].as_ref() else {
                continue;
            };
            resource_metrics.push(ResourceMetrics {
                resource: Some(Resource {
                    attributes: src.resource.clone(),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: scope(),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
    }
    (ExportMetricsServiceRequest { resource_metrics }, points)
}
