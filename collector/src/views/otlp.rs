//! The OTLP encoder: the fleet view (and with `include_sources` every live source's
//! series) as an `ExportMetricsServiceRequest`, built from the rows read under the
//! aggregator's lock (`Aggregator::otlp_rows`) after it is released.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::rows::{Attrs, OtlpPoint, OtlpRows, RowValue};
use crate::labels::{FORWARDED_BY, MetricKind, ROLE, ROLE_AGGREGATE};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        }),
        ..Default::default()
    }
}

/// A point's data, before it is grouped into its metric.
enum Points {
    Numbers(Vec<NumberDataPoint>),
    Hists(Vec<HistogramDataPoint>),
}

/// Encodes the rows with `start` as every point's start time and `now` as its time.
struct Encoder<'a> {
    rows: &'a OtlpRows,
    start: u64,
    now: u64,
}

impl Encoder<'_> {
    fn attrs(&self, attrs: &Attrs) -> Vec<KeyValue> {
        match attrs {
            Attrs::Shared(pairs) => pairs.iter().map(|(k, v)| kv(k, v)).collect(),
            Attrs::SourceGauge { source, point } => source
                .iter()
                .chain(point.iter())
                .chain(self.rows.static_labels.iter())
                .map(|(k, v)| kv(k, v))
                .collect(),
        }
    }

    fn points(&self, p: &OtlpPoint) -> Points {
        let attributes = self.attrs(&p.attrs);
        match &p.value {
            RowValue::Number(v) => Points::Numbers(vec![NumberDataPoint {
                attributes,
                start_time_unix_nano: self.start,
                time_unix_nano: self.now,
                value: Some(number_data_point::Value::AsDouble(*v)),
                ..Default::default()
            }]),
            RowValue::Hist {
                bounds,
                at,
                count,
                sum,
            } => Points::Hists(vec![HistogramDataPoint {
                attributes,
                start_time_unix_nano: self.start,
                time_unix_nano: self.now,
                count: *count,
                sum: Some(*sum),
                bucket_counts: self.rows.counts(*at, bounds.len() + 1).to_vec(),
                explicit_bounds: bounds.to_vec(),
                ..Default::default()
            }]),
        }
    }

    fn metric(&self, id: usize, points: Points) -> Option<Metric> {
        let m = self.rows.metrics.get(id)?;
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
        Some(Metric {
            name: m.name.clone(),
            description: m.help.clone(),
            unit: m.unit.clone(),
            data: Some(data),
            ..Default::default()
        })
    }
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "higgsmeter-collector".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..Default::default()
    })
}

fn resource_metrics(attributes: Vec<KeyValue>, metrics: Vec<Metric>) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes,
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            scope: scope(),
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The request, and how many points it carries. The fleet resource is
/// `service.name=higgsmeter-collector` with `instance_id` and the static labels; each
/// metric's points are grouped (numbers, then histograms); each source's series keep
/// their source's resource.
pub(crate) fn encode(
    rows: &OtlpRows,
    start_unix: u64,
    now_unix: u64,
    instance_id: &str,
) -> (ExportMetricsServiceRequest, u64) {
    let enc = Encoder {
        rows,
        start: start_unix,
        now: now_unix,
    };
    let n = rows.metrics.len();
    let mut numbers: Vec<Vec<NumberDataPoint>> = (0..n).map(|_| Vec::new()).collect();
    let mut hists: Vec<Vec<HistogramDataPoint>> = (0..n).map(|_| Vec::new()).collect();
    for p in &rows.fleet {
        let id = p.metric as usize;
        match enc.points(p) {
            Points::Numbers(v) => numbers.get_mut(id).map(|n| n.extend(v)),
            Points::Hists(v) => hists.get_mut(id).map(|h| h.extend(v)),
        };
    }
    let mut points = 0u64;
    let mut metrics = Vec::new();
    for (id, (nums, hs)) in numbers.into_iter().zip(hists).enumerate() {
        points += (nums.len() + hs.len()) as u64;
        if !nums.is_empty() {
            metrics.extend(enc.metric(id, Points::Numbers(nums)));
        }
        if !hs.is_empty() {
            metrics.extend(enc.metric(id, Points::Hists(hs)));
        }
    }
    let mut resource = vec![
        kv("service.name", "higgsmeter-collector"),
        kv("service.instance.id", instance_id),
        // An upstream collector keeps these points' own `job` (ADR 0009).
        kv(ROLE, ROLE_AGGREGATE),
    ];
    resource.extend(rows.static_labels.iter().map(|(k, v)| kv(k, v)));
    let mut resource_metrics_list = vec![resource_metrics(resource, metrics)];
    for (resource, series) in &rows.sources {
        points += series.len() as u64;
        let metrics = series
            .iter()
            .filter_map(|p| enc.metric(p.metric as usize, enc.points(p)))
            .collect();
        // Marked, so an upstream collector never sums it again: this fleet holds it.
        let mut resource = resource.clone();
        if !resource.iter().any(|kv| kv.key == FORWARDED_BY) {
            resource.push(kv(FORWARDED_BY, instance_id));
        }
        resource_metrics_list.push(resource_metrics(resource, metrics));
    }
    (
        ExportMetricsServiceRequest {
            resource_metrics: resource_metrics_list,
        },
        points,
    )
}
