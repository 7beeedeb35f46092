//! Ingest (the zero-copy reader + aggregation, against a plain prost decode),
//! Prometheus rendering and scrapes (text, gzip, protobuf), gzip levels, checkpoints.
//! `cargo bench -p higgsmeter-collector --bench ingest`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use higgsmeter_collector::{
    AggregateConfig, Aggregator, Collector, Config, Overrides, Transport, View,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

const BOUNDS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// One worker's request: 1,000 points, half cumulative sums, half 10-bucket histograms,
/// 10 series per metric (an `op` attribute), the load generator's shape.
fn request(worker: usize, round: u64, shard: bool) -> ExportMetricsServiceRequest {
    request_scaled(worker, round, shard, 1.0)
}

/// [`request`] with counter values and histogram sums `round × scale` (a fractional
/// `scale` makes rendering format floats, as the load generator's values do).
fn request_scaled(
    worker: usize,
    round: u64,
    shard: bool,
    scale: f64,
) -> ExportMetricsServiceRequest {
    let attrs = |i: usize| {
        let mut a = vec![kv("op", &format!("op{i}"))];
        if shard {
            a.push(kv("shard", &worker.to_string()));
        }
        a
    };
    let mut metrics = Vec::new();
    for m in 0..50 {
        let data_points = (0..10)
            .map(|i| NumberDataPoint {
                attributes: attrs(i),
                start_time_unix_nano: 1,
                time_unix_nano: 10 + round,
                value: Some(number_data_point::Value::AsDouble(
                    round as f64 * scale * (1.0 + i as f64),
                )),
                ..Default::default()
            })
            .collect();
        metrics.push(Metric {
            name: format!("sum_{m}"),
            data: Some(Data::Sum(Sum {
                data_points,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        });
    }
    for m in 0..50 {
        let data_points = (0..10)
            .map(|i| HistogramDataPoint {
                attributes: attrs(i),
                start_time_unix_nano: 1,
                time_unix_nano: 10 + round,
                count: 11 * round,
                sum: Some(round as f64 * scale * (1.0 + i as f64)),
                bucket_counts: vec![round; 11],
                explicit_bounds: BOUNDS.to_vec(),
                ..Default::default()
            })
            .collect();
        metrics.push(Metric {
            name: format!("hist_{m}"),
            unit: "s".into(),
            data: Some(Data::Histogram(Histogram {
                data_points,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            })),
            ..Default::default()
        });
    }
    let resource = vec![
        kv("service.name", "bench"),
        kv(
            "service.instance.id",
            &format!("00000000-0000-4000-8000-{worker:012}"),
        ),
        kv("host.name", "node-1"),
        kv("rank", &worker.to_string()),
    ];
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

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(1000));
    let bytes: Vec<Vec<u8>> = (0..64)
        .map(|w| request(w, 1, false).encode_to_vec())
        .collect();
    group.bench_function("prost_decode_only_1000_points", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % bytes.len();
            black_box(
                ExportMetricsServiceRequest::decode(&bytes[i][..])
                    .map(|r| r.resource_metrics.len()),
            )
        })
    });
    let aggregator = Aggregator::standalone(AggregateConfig::default()).expect("config");
    for b in &bytes {
        let _ = aggregator.ingest_protobuf(b, Transport::Grpc);
    }
    group.bench_function("ingest_1000_points_64_workers", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % bytes.len();
            black_box(
                aggregator
                    .ingest_protobuf(&bytes[i], Transport::Grpc)
                    .map(|r| r.received),
            )
        })
    });
    // OTLP/JSON as the HTTP receiver takes it: serde_json into prost's message, then
    // `Aggregator::ingest` (re-encoded to protobuf and read by the same validating
    // walker). The parse and the re-encode alone show what each step costs (ADR 0019).
    let json: Vec<Vec<u8>> = (0..64)
        .map(|w| serde_json::to_vec(&request(w, 1, false)).expect("serializable"))
        .collect();
    group.bench_function("json_parse_only_1000_points", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % json.len();
            black_box(
                serde_json::from_slice::<ExportMetricsServiceRequest>(&json[i])
                    .map(|r| r.resource_metrics.len()),
            )
        })
    });
    let parsed: Vec<ExportMetricsServiceRequest> = json
        .iter()
        .map(|j| serde_json::from_slice(j).expect("parses"))
        .collect();
    group.bench_function("json_reencode_only_1000_points", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % parsed.len();
            black_box(parsed[i].encode_to_vec().len())
        })
    });
    group.bench_function("json_ingest_1000_points_64_workers", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % json.len();
            black_box(
                aggregator
                    .ingest_json(&json[i], Transport::Http)
                    .map(|r| r.received),
            )
        })
    });
    group.finish();
}

/// Ingest from several threads into one aggregator: 64 workers' requests split between
/// the threads (as the collector's runtime workers take connections), 64,000 points a
/// round. What the store's read lock buys: on a machine with cores to spare, 2 threads
/// apply about twice the points per second of 1.
fn parallel_ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("parallel_ingest");
    group.throughput(Throughput::Elements(64 * 1000));
    let bytes: Vec<Vec<u8>> = (0..64)
        .map(|w| request(w, 1, false).encode_to_vec())
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, 2, 4, 8, 16].into_iter().filter(|t| *t <= cores) {
        let aggregator = Aggregator::standalone(AggregateConfig::default()).expect("config");
        for b in &bytes {
            let _ = aggregator.ingest_protobuf(b, Transport::Grpc);
        }
        group.bench_function(format!("64_workers_{threads}_threads"), |b| {
            b.iter_custom(|rounds| {
                let start = std::time::Instant::now();
                std::thread::scope(|scope| {
                    for t in 0..threads {
                        let (aggregator, bytes) = (&aggregator, &bytes);
                        scope.spawn(move || {
                            for _ in 0..rounds {
                                for req in bytes.iter().skip(t).step_by(threads) {
                                    let _ = black_box(
                                        aggregator
                                            .ingest_protobuf(req, Transport::Grpc)
                                            .map(|r| r.received),
                                    );
                                }
                            }
                        });
                    }
                });
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn render(c: &mut Criterion) {
    let mut group = c.benchmark_group("render");
    group.sample_size(20);
    // 100 workers x 1,000 distinct series (a `shard` label survives the fleet sum):
    // 100k series, half 10-bound histograms, 700k samples. Integral values (the fast
    // path) and fractional ones (float formatting).
    for (tag, scale) in [("", 1.0), ("_fractional", 0.37)] {
        let config = AggregateConfig {
            // Nothing goes stale while the benchmark runs.
            stale_after: Some(Duration::from_secs(3600)),
            ..AggregateConfig::default()
        };
        let aggregator = Aggregator::standalone(config).expect("config");
        for w in 0..100 {
            let req = request_scaled(w, 1, true, scale).encode_to_vec();
            let _ = aggregator.ingest_protobuf(&req, Transport::Grpc);
        }
        group.bench_function(format!("fleet_100k_series{tag}"), |b| {
            b.iter(|| black_box(aggregator.render(View::Fleet).len()))
        });
        group.bench_function(format!("sources_100k_series{tag}"), |b| {
            b.iter(|| black_box(aggregator.render(View::Sources).len()))
        });
        group.bench_function(format!("fleet_openmetrics_100k_series{tag}"), |b| {
            b.iter(|| black_box(aggregator.render_openmetrics(View::Fleet).len()))
        });
        scrape_over_loopback(&mut group, tag, scale);
    }
    group.finish();
}

/// The render benchmark's store in a real collector (`Collector::start` on
/// 127.0.0.1, filled through OTLP/HTTP), and `GET /metrics` timed end to end over
/// loopback on one kept-alive connection, as Prometheus scrapes: the request, the rows
/// read under the lock, the encoding and the transfer, until the last byte is read.
/// `…_first_byte` stops at the response's head (sent once the rows are read).
fn scrape_over_loopback(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    tag: &str,
    scale: f64,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut config = Config::default();
    config.apply(&Overrides {
        grpc: Some("127.0.0.1:0".into()),
        http: Some("127.0.0.1:0".into()),
        prometheus: Some("127.0.0.1:0".into()),
        storage: Some("none".into()),
        ..Default::default()
    });
    let mut plan = config.plan().expect("plan");
    plan.aggregate.stale_after = Some(Duration::from_secs(3600));
    let running = rt
        .block_on(Collector::start(plan))
        .expect("the collector starts");
    let addresses = running.addresses();
    let (Some(http), Some(prometheus)) = (addresses.http, addresses.prometheus) else {
        panic!("no OTLP/HTTP or Prometheus listener: {addresses}");
    };
    let client = reqwest::blocking::Client::new();
    for w in 0..100 {
        let status = client
            .post(format!("http://{http}/v1/metrics"))
            .header("content-type", "application/x-protobuf")
            .body(request_scaled(w, 1, true, scale).encode_to_vec())
            .send()
            .expect("OTLP/HTTP export")
            .status();
        assert!(status.is_success(), "OTLP/HTTP export: {status}");
    }
    let url = format!("http://{prometheus}/metrics");
    let mut body = Vec::new();
    group.bench_function(format!("fleet_100k_series{tag}_http_loopback"), |b| {
        b.iter(|| {
            body.clear();
            let mut resp = client.get(&url).send().expect("GET /metrics");
            resp.copy_to(&mut body).expect("the body");
            black_box(body.len())
        })
    });
    if !body.is_empty() {
        println!("GET /metrics: {} bytes", body.len());
    }
    group.bench_function(
        format!("fleet_100k_series{tag}_http_loopback_first_byte"),
        |b| {
            b.iter_custom(|rounds| {
                let mut spent = Duration::ZERO;
                for _ in 0..rounds {
                    let start = std::time::Instant::now();
                    let mut resp = client.get(&url).send().expect("GET /metrics");
                    spent += start.elapsed();
                    body.clear();
                    resp.copy_to(&mut body).expect("the body");
                }
                spent
            })
        },
    );
    // The same scrape with `Accept-Encoding: gzip` (what Prometheus sends): request to
    // the last compressed byte read (not inflated: the scraper's work).
    let mut gz_bytes = 0;
    group.bench_function(format!("fleet_100k_series{tag}_http_loopback_gzip"), |b| {
        b.iter(|| {
            body.clear();
            let mut resp = client
                .get(&url)
                .header("accept-encoding", "gzip")
                .send()
                .expect("GET /metrics");
            assert_eq!(
                resp.headers().get("content-encoding").map(|v| v.as_bytes()),
                Some(&b"gzip"[..])
            );
            resp.copy_to(&mut body).expect("the body");
            gz_bytes = body.len();
            black_box(body.len())
        })
    });
    if gz_bytes > 0 {
        println!("GET /metrics, gzip: {gz_bytes} bytes");
    }
    // The protobuf exposition (what Prometheus asks for first with native histograms),
    // uncompressed.
    let mut proto_bytes = 0;
    group.bench_function(format!("fleet_100k_series{tag}_http_loopback_protobuf"), |b| {
        b.iter(|| {
            body.clear();
            let mut resp = client
                .get(&url)
                .header(
                    "accept",
                    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
                )
                .send()
                .expect("GET /metrics");
            resp.copy_to(&mut body).expect("the body");
            proto_bytes = body.len();
            black_box(body.len())
        })
    });
    if proto_bytes > 0 {
        let mut rest = body.as_slice();
        let (mut families, mut series) = (0, 0);
        while !rest.is_empty() {
            let family =
                opentelemetry_proto::prometheus_client::MetricFamily::decode_length_delimited(
                    &mut rest,
                )
                .expect("a MetricFamily");
            families += 1;
            series += family.metric.len();
        }
        println!(
            "GET /metrics, protobuf: {proto_bytes} bytes, {families} families, {series} series"
        );
    }
    // The same scrape, timed in CPU (this process's, the collector's threads and the
    // client's together): steadier than wall time on a shared machine.
    group.bench_function(format!("fleet_100k_series{tag}_http_loopback_cpu"), |b| {
        b.iter_custom(|rounds| {
            let start = process_cpu();
            for _ in 0..rounds {
                body.clear();
                let mut resp = client.get(&url).send().expect("GET /metrics");
                resp.copy_to(&mut body).expect("the body");
            }
            process_cpu().saturating_sub(start)
        })
    });
    rt.block_on(running.shutdown());
}

/// What each gzip level costs on the render benchmark's fleet view (44.9 MB of text),
/// compressed in the scrape's 64 KiB writes: the time, and the size it prints. How
/// `views::scrape::GZIP_LEVEL` was chosen.
fn gzip_levels(c: &mut Criterion) {
    use std::io::Write as _;
    let mut group = c.benchmark_group("gzip");
    group.sample_size(10);
    let config = AggregateConfig {
        stale_after: Some(Duration::from_secs(3600)),
        ..AggregateConfig::default()
    };
    let aggregator = Aggregator::standalone(config).expect("config");
    for w in 0..100 {
        let req = request_scaled(w, 1, true, 1.0).encode_to_vec();
        let _ = aggregator.ingest_protobuf(&req, Transport::Grpc);
    }
    let text = aggregator.render(View::Fleet);
    group.throughput(Throughput::Bytes(text.len() as u64));
    for level in [1, 2, 3, 6] {
        let compress = || {
            let mut gz = flate2::write::GzEncoder::new(
                Vec::with_capacity(text.len() / 8),
                flate2::Compression::new(level),
            );
            for chunk in text.as_bytes().chunks(64 * 1024) {
                gz.write_all(chunk).expect("compress");
            }
            gz.finish().expect("compress")
        };
        let mut size = 0;
        group.bench_function(format!("fleet_100k_series_level_{level}"), |b| {
            b.iter(|| {
                size = compress().len();
                black_box(size)
            })
        });
        if size > 0 {
            println!("gzip level {level}: {} -> {size} bytes", text.len());
        }
    }
    group.finish();
}

/// The CPU time this process has used (`CLOCK_PROCESS_CPUTIME_ID`), all threads.
fn process_cpu() -> Duration {
    cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`): what a checkpoint
/// costs its core, whatever the other processes on the machine do.
fn thread_cpu() -> Duration {
    cpu_time(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// A CPU-time clock's reading.
fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    #[allow(
        unsafe_code,
        reason = "clock_gettime writes only `ts`, valid for the call"
    )]
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime({clock})");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What the collector's checkpointer does with a snapshot (`storage.rs`): a temporary
/// file written a chunk at a time and fsynced, renamed over the state file, the
/// directory fsynced.
fn write_atomically(dir: &std::path::Path, snapshot: &higgsmeter_collector::StateSnapshot) {
    let temp = dir.join(".state.tmp");
    let mut file = std::fs::File::create(&temp).expect("create the temporary file");
    snapshot.write_to(&mut file).expect("write");
    file.sync_all().expect("fsync");
    std::fs::rename(&temp, dir.join("state")).expect("rename");
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("fsync the directory");
}

/// A checkpoint of `workers` x 1,000 series (half histograms), each with a per-worker
/// attribute, so as many fleet series again: 100 workers make the "100k" state (100 k
/// per-source + 100 k fleet series), 250 the "500k" one (250 k + 250 k). Measured: the
/// copy taken under the store's lock (what ingest waits for), the encoding done after it
/// is released, and the whole checkpoint as the collector runs it (copy, encode and
/// atomic write with fsyncs to a directory under the temporary directory, the copy
/// emptied for the next one): its
/// wall time and its thread's CPU time (the share of a core it takes every
/// `checkpoint_interval`).
fn checkpoint(c: &mut Criterion) {
    let mut group = c.benchmark_group("checkpoint");
    group.sample_size(10);
    let dir = std::env::temp_dir().join(format!("checkpoint-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the state file");
    for (tag, workers) in [("100k", 100), ("500k", 250)] {
        let config = AggregateConfig {
            stale_after: Some(Duration::from_secs(3600)),
            ..AggregateConfig::default()
        };
        let aggregator = Aggregator::standalone(config).expect("config");
        for w in 0..workers {
            let req = request_scaled(w, 1, true, 0.37).encode_to_vec();
            let _ = aggregator.ingest_protobuf(&req, Transport::Grpc);
        }
        group.bench_function(format!("copy_under_lock_{tag}_series"), |b| {
            b.iter_with_large_drop(|| aggregator.snapshot_state())
        });
        let snapshot = aggregator.snapshot_state();
        println!("checkpoint file ({tag}): {} bytes", snapshot.encode().len());
        group.bench_function(format!("encode_{tag}_series"), |b| {
            b.iter(|| black_box(snapshot.encode().len()))
        });
        drop(snapshot);
        let whole = || write_atomically(&dir, &aggregator.snapshot_state());
        group.bench_function(format!("whole_{tag}_series"), |b| b.iter(whole));
        group.bench_function(format!("whole_cpu_{tag}_series"), |b| {
            b.iter_custom(|rounds| {
                let start = thread_cpu();
                for _ in 0..rounds {
                    whole();
                }
                thread_cpu() - start
            })
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    group.finish();
}

criterion_group!(
    benches,
    ingest,
    parallel_ingest,
    render,
    gzip_levels,
    checkpoint
);
criterion_main!(benches);
