//! Pre-encoded OTLP `ExportMetricsServiceRequest`s whose values are patched in place.
//!
//! Every value that changes from one round to the next in an OTLP metrics request is a
//! fixed-width field: `time_unix_nano` (fixed64), `as_double` (double), `as_int`
//! (sfixed64), a histogram's `count` (fixed64), `sum` (double) and `bucket_counts`
//! (packed fixed64). So a request is encoded once with prost, with a unique 8-byte
//! sentinel in each of those fields; the sentinels are then located in the encoded
//! bytes and remembered as offsets. Sending round `r` copies the template and writes
//! `(r + 1) × increment` (and the current time) at those offsets: no protobuf encoding
//! happens while the load runs, and every round is valid cumulative data (each series
//! only grows, start time fixed).

use std::ops::Range;

use anyhow::{Context as _, bail, ensure};
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

/// Marker in the low four bytes of every sentinel. Bytes 0xF5..=0xFF never occur in
/// UTF-8, so strings in the request cannot contain it; the scan also checks that each
/// sentinel is found exactly once.
const MAGIC: [u8; 4] = [0xF7, 0xF8, 0xF9, 0xFA];

/// Upper bounds of the histograms' explicit buckets (seconds, a latency-like layout).
const BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// The shape of the simulated fleet and of its requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Number of workers; each is a distinct OTLP resource.
    pub(crate) workers: usize,
    /// Series per worker: cumulative monotonic sums first, then histograms.
    pub(crate) series: usize,
    /// Data points per request (the last request of a round may carry fewer).
    pub(crate) points_per_request: usize,
    /// Series per metric name (they differ by the `op` attribute).
    pub(crate) series_per_metric: usize,
    /// Percent of each worker's series that are histograms (the rest are sums).
    pub(crate) histogram_percent: u8,
    /// Add a per-worker `shard` data-point attribute, so that series stay distinct
    /// after a collector sums over the worker identity (for exposition-size tests).
    pub(crate) unique_per_worker: bool,
}

impl Shape {
    /// Data points in one round (one point per series per worker).
    pub(crate) fn points_per_round(&self) -> usize {
        self.workers * self.series
    }

    fn sums(&self) -> usize {
        self.series - self.series * usize::from(self.histogram_percent.min(100)) / 100
    }

    fn validate(&self) -> anyhow::Result<()> {
        ensure!(self.workers > 0, "--workers must be at least 1");
        ensure!(self.series > 0, "--series must be at least 1");
        ensure!(
            self.points_per_request > 0,
            "--points-per-request must be at least 1"
        );
        ensure!(
            self.series_per_metric > 0,
            "--series-per-metric must be at least 1"
        );
        ensure!(
            self.points_per_round() <= 100_000_000,
            "{} workers x {} series is more than 100 M points per round; choose a smaller fleet",
            self.workers,
            self.series
        );
        Ok(())
    }
}

/// How one patched 8-byte field evolves: the value written for round `r` is
/// `(r + 1) × increment`, or the send time for timestamps.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Time,
    F64(f64),
    U64(u64),
    I64(i64),
}

/// One pre-encoded request and where its values live.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    bytes: Vec<u8>,
    points: u32,
    patches: Vec<(usize, Slot)>,
}

impl Template {
    /// Data points in this request.
    pub(crate) fn points(&self) -> u32 {
        self.points
    }

    /// Encoded size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The encoded request for `round` (0-based), stamped with `now_ns`.
    pub(crate) fn render(&self, round: u64, now_ns: u64) -> Bytes {
        let mut buf = self.bytes.clone();
        let m = round.saturating_add(1);
        for &(off, slot) in &self.patches {
            let v = match slot {
                Slot::Time => now_ns.to_le_bytes(),
                Slot::F64(x) => (x * m as f64).to_le_bytes(),
                Slot::U64(x) => x.saturating_mul(m).to_le_bytes(),
                Slot::I64(x) => x.saturating_mul(m as i64).to_le_bytes(),
            };
            if let Some(dst) = buf.get_mut(off..off + 8) {
                dst.copy_from_slice(&v);
            }
        }
        Bytes::from(buf)
    }
}

/// Builds the templates of one round: the fleet's points in worker order, cut into
/// requests of `points_per_request`.
pub(crate) fn build(shape: &Shape, start_ns: u64) -> anyhow::Result<Vec<Template>> {
    shape.validate()?;
    let total = shape.points_per_round();
    let mut out = Vec::with_capacity(total.div_ceil(shape.points_per_request));
    let mut first = 0;
    while first < total {
        let end = (first + shape.points_per_request).min(total);
        out.push(
            build_one(shape, first..end, start_ns)
                .with_context(|| format!("encoding the request for points {first}..{end}"))?,
        );
        first = end;
    }
    Ok(out)
}

/// Hands out sentinels and remembers what each one stands for.
#[derive(Default)]
struct Sentinels {
    slots: Vec<Slot>,
}

impl Sentinels {
    fn bytes(&mut self, slot: Slot) -> [u8; 8] {
        let idx = self.slots.len() as u32;
        self.slots.push(slot);
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&MAGIC);
        b[4..].copy_from_slice(&idx.to_le_bytes());
        b
    }
    fn u64(&mut self, slot: Slot) -> u64 {
        u64::from_le_bytes(self.bytes(slot))
    }
    fn f64(&mut self, slot: Slot) -> f64 {
        f64::from_le_bytes(self.bytes(slot))
    }
    fn i64(&mut self, slot: Slot) -> i64 {
        i64::from_le_bytes(self.bytes(slot))
    }
}

fn build_one(shape: &Shape, range: Range<usize>, start_ns: u64) -> anyhow::Result<Template> {
    let mut sent = Sentinels::default();
    let mut resource_metrics = Vec::new();
    let series = shape.series;
    let sums = shape.sums();
    let hists = series - sums;
    let spm = shape.series_per_metric;
    let mut g = range.start;
    while g < range.end {
        let worker = g / series;
        let s0 = g % series;
        let s1 = series.min(s0 + (range.end - g));
        let mut metrics = Vec::new();
        let mut s = s0;
        while s < s1 {
            let (is_hist, m, k0) = if s < sums {
                (false, s / spm, s % spm)
            } else {
                (true, (s - sums) / spm, (s - sums) % spm)
            };
            let metric_end = if is_hist {
                sums + hists.min((m + 1) * spm)
            } else {
                sums.min((m + 1) * spm)
            };
            let e = s1.min(metric_end);
            let ks = k0..k0 + (e - s);
            metrics.push(if is_hist {
                hist_metric(shape, worker, m, ks, start_ns, &mut sent)
            } else {
                sum_metric(shape, worker, m, ks, start_ns, &mut sent)
            });
            s = e;
        }
        resource_metrics.push(ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv_str("service.name", "loadgen-worker"),
                    kv_str("service.instance.id", &format!("loadgen-worker-{worker}")),
                    kv_int("rank", worker as i64),
                    kv_str("host.name", "loadgen"),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "higgsmeter-loadgen".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
        g += s1 - s0;
    }
    let req = ExportMetricsServiceRequest { resource_metrics };
    let bytes = req.encode_to_vec();
    let patches = locate(&bytes, &sent.slots)?;
    Ok(Template {
        bytes,
        points: (range.end - range.start) as u32,
        patches,
    })
}

/// Finds every sentinel in `bytes`; each must occur exactly once.
fn locate(bytes: &[u8], slots: &[Slot]) -> anyhow::Result<Vec<(usize, Slot)>> {
    let mut offsets: Vec<Option<usize>> = vec![None; slots.len()];
    let mut i = 0;
    while i + 8 <= bytes.len() {
        if bytes[i..i + 4] == MAGIC {
            let mut idx = [0u8; 4];
            idx.copy_from_slice(&bytes[i + 4..i + 8]);
            let idx = u32::from_le_bytes(idx) as usize;
            match offsets.get_mut(idx) {
                Some(o @ None) => *o = Some(i),
                _ => bail!("sentinel scan found an unexpected marker at byte {i}"),
            }
            i += 8;
        } else {
            i += 1;
        }
    }
    offsets
        .into_iter()
        .zip(slots)
        .map(|(o, &slot)| {
            o.map(|o| (o, slot))
                .context("sentinel scan missed a value field")
        })
        .collect()
}

fn kv_str(key: &str, v: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        }),
        ..Default::default()
    }
}

fn kv_int(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

fn point_attrs(shape: &Shape, worker: usize, k: usize) -> Vec<KeyValue> {
    let mut attrs = vec![kv_str("op", &format!("op{k}"))];
    if shape.unique_per_worker {
        attrs.push(kv_str("shard", &format!("w{worker}")));
    }
    attrs
}

fn sum_metric(
    shape: &Shape,
    worker: usize,
    m: usize,
    ks: Range<usize>,
    start_ns: u64,
    sent: &mut Sentinels,
) -> Metric {
    // Even metrics carry doubles (like activity seconds), odd ones integers.
    let double = m.is_multiple_of(2);
    let data_points = ks
        .map(|k| NumberDataPoint {
            attributes: point_attrs(shape, worker, k),
            start_time_unix_nano: start_ns,
            time_unix_nano: sent.u64(Slot::Time),
            value: Some(if double {
                let inc = 0.5 + (k % 7) as f64 * 0.25;
                number_data_point::Value::AsDouble(sent.f64(Slot::F64(inc)))
            } else {
                let inc = 1 + (k % 5) as i64;
                number_data_point::Value::AsInt(sent.i64(Slot::I64(inc)))
            }),
            ..Default::default()
        })
        .collect();
    Metric {
        name: format!("loadgen_work_{m}"),
        description: "Load generator cumulative sum.".to_owned(),
        unit: if double { "s" } else { "1" }.to_owned(),
        data: Some(metric::Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

fn hist_metric(
    shape: &Shape,
    worker: usize,
    m: usize,
    ks: Range<usize>,
    start_ns: u64,
    sent: &mut Sentinels,
) -> Metric {
    let data_points = ks
        .map(|k| {
            // Per round: 1..=3 observations in each bucket, at the bucket's midpoint.
            let per_bucket: Vec<u64> = (0..=BOUNDS.len())
                .map(|b| 1 + ((b + k) % 3) as u64)
                .collect();
            let count: u64 = per_bucket.iter().sum();
            let sum: f64 = per_bucket
                .iter()
                .enumerate()
                .map(|(b, &n)| {
                    let lo = if b == 0 { 0.0 } else { BOUNDS[b - 1] };
                    let hi = BOUNDS.get(b).copied().unwrap_or(2.0 * lo);
                    n as f64 * (lo + hi) / 2.0
                })
                .sum();
            HistogramDataPoint {
                attributes: point_attrs(shape, worker, k),
                start_time_unix_nano: start_ns,
                time_unix_nano: sent.u64(Slot::Time),
                count: sent.u64(Slot::U64(count)),
                sum: Some(sent.f64(Slot::F64(sum))),
                bucket_counts: per_bucket.iter().map(|&n| sent.u64(Slot::U64(n))).collect(),
                explicit_bounds: BOUNDS.to_vec(),
                ..Default::default()
            }
        })
        .collect();
    Metric {
        name: format!("loadgen_latency_{m}"),
        description: "Load generator latency histogram.".to_owned(),
        unit: "s".to_owned(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

/// Counts the data points of a decoded request (used by the sink and the tests).
pub(crate) fn count_points(req: &ExportMetricsServiceRequest) -> u64 {
    let mut n = 0u64;
    for rm in &req.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                n += match &m.data {
                    Some(metric::Data::Gauge(g)) => g.data_points.len(),
                    Some(metric::Data::Sum(s)) => s.data_points.len(),
                    Some(metric::Data::Histogram(h)) => h.data_points.len(),
                    Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
                    Some(metric::Data::Summary(s)) => s.data_points.len(),
                    None => 0,
                } as u64;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            workers: 7,
            series: 30,
            points_per_request: 47,
            series_per_metric: 4,
            histogram_percent: 50,
            unique_per_worker: false,
        }
    }

    #[test]
    fn rounds_decode_and_grow() {
        let shape = shape();
        let templates = build(&shape, 1_000).unwrap();
        assert_eq!(templates.len(), (7 * 30usize).div_ceil(47));
        let total: u32 = templates.iter().map(Template::points).sum();
        assert_eq!(total as usize, shape.points_per_round());
        for t in &templates {
            let r0 = ExportMetricsServiceRequest::decode(t.render(0, 5_000)).unwrap();
            let r4 = ExportMetricsServiceRequest::decode(t.render(4, 9_000)).unwrap();
            assert_eq!(count_points(&r0), u64::from(t.points()));
            for (a, b) in r0.resource_metrics.iter().zip(&r4.resource_metrics) {
                assert_eq!(a.resource, b.resource);
                for (ma, mb) in a.scope_metrics[0]
                    .metrics
                    .iter()
                    .zip(&b.scope_metrics[0].metrics)
                {
                    match (&ma.data, &mb.data) {
                        (Some(metric::Data::Sum(x)), Some(metric::Data::Sum(y))) => {
                            for (p, q) in x.data_points.iter().zip(&y.data_points) {
                                assert_eq!(
                                    (p.start_time_unix_nano, p.time_unix_nano),
                                    (1_000, 5_000)
                                );
                                assert_eq!(q.time_unix_nano, 9_000);
                                match (p.value, q.value) {
                                    (
                                        Some(number_data_point::Value::AsDouble(u)),
                                        Some(number_data_point::Value::AsDouble(v)),
                                    ) => assert!((v - 5.0 * u).abs() < 1e-9 && u > 0.0),
                                    (
                                        Some(number_data_point::Value::AsInt(u)),
                                        Some(number_data_point::Value::AsInt(v)),
                                    ) => assert!(v == 5 * u && u > 0),
                                    other => panic!("unexpected values {other:?}"),
                                }
                            }
                        }
                        (Some(metric::Data::Histogram(x)), Some(metric::Data::Histogram(y))) => {
                            for (p, q) in x.data_points.iter().zip(&y.data_points) {
                                assert_eq!(p.bucket_counts.len(), BOUNDS.len() + 1);
                                assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count);
                                assert_eq!(q.count, 5 * p.count);
                                assert_eq!(p.explicit_bounds, BOUNDS.to_vec());
                                assert!(q.sum.unwrap() > p.sum.unwrap());
                            }
                        }
                        other => panic!("unexpected metric pair {other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn half_sums_half_histograms_and_distinct_resources() {
        let shape = Shape {
            points_per_request: 1_000_000,
            ..shape()
        };
        let t = build(&shape, 1).unwrap();
        assert_eq!(t.len(), 1);
        let req = ExportMetricsServiceRequest::decode(t[0].render(0, 2)).unwrap();
        assert_eq!(req.resource_metrics.len(), 7);
        let (mut sums, mut hists) = (0, 0);
        for m in &req.resource_metrics[0].scope_metrics[0].metrics {
            match &m.data {
                Some(metric::Data::Sum(s)) => {
                    assert!(s.is_monotonic);
                    sums += s.data_points.len();
                }
                Some(metric::Data::Histogram(h)) => hists += h.data_points.len(),
                _ => panic!("unexpected kind"),
            }
        }
        assert_eq!((sums, hists), (15, 15));
        let only_sums = Shape {
            histogram_percent: 0,
            ..shape
        };
        let req =
            ExportMetricsServiceRequest::decode(build(&only_sums, 1).unwrap()[0].render(0, 2))
                .unwrap();
        assert_eq!(count_points(&req), 7 * 30);
        assert!(
            req.resource_metrics[0].scope_metrics[0]
                .metrics
                .iter()
                .all(|m| matches!(m.data, Some(metric::Data::Sum(_))))
        );
        let ids: std::collections::BTreeSet<_> = req
            .resource_metrics
            .iter()
            .map(|rm| format!("{:?}", rm.resource.as_ref().unwrap().attributes))
            .collect();
        assert_eq!(ids.len(), 7);
    }
}
