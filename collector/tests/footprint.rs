//! What the aggregation state costs per held series, in heap bytes (issue 21, item 1):
//! a counting allocator measures the live heap of an aggregator that holds a fleet of
//! the load generator's shape (each source 50 series: 5 metrics × 10 `op` values, half
//! cumulative sums and half 10-bucket histograms; a resource of `service.name`,
//! `service.instance.id`, `rank` and `host.name`). Bytes are counted, not timed, so
//! the figure is exact on any machine; the soak in BENCHMARKS.md reports RSS.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use higgsmeter_collector::{AggregateConfig, Aggregator, Transport};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

/// The system allocator, counting the bytes it has handed out and not taken back.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is added.
#[allow(
    unsafe_code,
    reason = "a counting allocator: the only way to count heap bytes"
)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System::alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System::dealloc`'s.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `System::realloc`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn op(k: usize) -> Vec<KeyValue> {
    vec![kv("op", any_value::Value::StringValue(format!("op{k}")))]
}

/// One source's round: 50 series, as the load generator sends them.
fn request(worker: usize, round: u64) -> Vec<u8> {
    let mut metrics = Vec::new();
    for m in 0..5 {
        let name = format!("loadgen_metric_{m}");
        metrics.push(if m % 2 == 1 {
            Metric {
                name,
                unit: "s".into(),
                data: Some(Data::Histogram(Histogram {
                    data_points: (0..10)
                        .map(|k| HistogramDataPoint {
                            attributes: op(k),
                            start_time_unix_nano: 1,
                            time_unix_nano: 10 + round,
                            count: 11 * round,
                            sum: Some(round as f64 * 0.5),
                            bucket_counts: vec![round; 11],
                            explicit_bounds: BOUNDS.to_vec(),
                            ..Default::default()
                        })
                        .collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Default::default()
            }
        } else {
            Metric {
                name,
                data: Some(Data::Sum(Sum {
                    data_points: (0..10)
                        .map(|k| NumberDataPoint {
                            attributes: op(k),
                            start_time_unix_nano: 1,
                            time_unix_nano: 10 + round,
                            value: Some(number_data_point::Value::AsDouble(round as f64 * 1.5)),
                            ..Default::default()
                        })
                        .collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })),
                ..Default::default()
            }
        });
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv(
                        "service.name",
                        any_value::Value::StringValue("loadgen-worker".into()),
                    ),
                    kv(
                        "service.instance.id",
                        any_value::Value::StringValue(format!("loadgen-worker-{worker}")),
                    ),
                    kv("rank", any_value::Value::IntValue(worker as i64)),
                    kv("host.name", any_value::Value::StringValue("loadgen".into())),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// The heap an aggregator holds per series for `sources` sources, after two rounds.
fn bytes_per_series(sources: usize) -> (f64, usize) {
    let requests: Vec<Vec<Vec<u8>>> = (1..=2)
        .map(|round| (0..sources).map(|w| request(w, round)).collect())
        .collect();
    let before = LIVE.load(Ordering::Relaxed);
    let aggregator = Aggregator::standalone(AggregateConfig::default()).unwrap();
    for round in &requests {
        for r in round {
            let result = aggregator.ingest_protobuf(r, Transport::Grpc).unwrap();
            assert_eq!((result.received, result.rejected), (50, 0), "{result:?}");
        }
    }
    let held = aggregator.counts().1;
    let live = LIVE.load(Ordering::Relaxed) - before;
    drop(aggregator);
    (live as f64 / held as f64, held)
}

#[test]
fn a_held_series_costs_a_bounded_number_of_heap_bytes() {
    // Two sizes, so a fixed cost (tables, the catalog) is not mistaken for a per-series
    // one: the figure is the growth from 400 to 2,000 sources.
    let (small, held_small) = bytes_per_series(400);
    let (large, held_large) = bytes_per_series(2_000);
    assert_eq!((held_small, held_large), (20_000, 100_000));
    let marginal =
        (large * held_large as f64 - small * held_small as f64) / (held_large - held_small) as f64;
    println!(
        "heap per held series: {marginal:.0} B marginal ({small:.0} B at 20k series, {large:.0} B at 100k)"
    );
    assert!(
        marginal > 100.0,
        "the counter sees the series: {marginal:.0} B"
    );
    assert!(
        marginal <= BUDGET,
        "{marginal:.0} B per held series (budget {BUDGET} B)"
    );
}

/// Heap bytes per held series this state may cost: 423 B measured when this test was
/// written (528 B before the attribute sets were shared and the index made one `u32`
/// a series), with room for noise from the hash tables' growth steps. Issue 21 asks for
/// at most 600 B of RSS per series at 10,000 sources; RSS adds the allocator's own
/// overhead and what a checkpoint or a scrape holds while it runs.
const BUDGET: f64 = 480.0;
