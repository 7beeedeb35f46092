//! Bad input over real sockets: each gets its documented status and is counted,
//! nothing accepted is lost, and the collector keeps serving.

use std::io::Write as _;
use std::time::Duration;

use crate::support::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

const CONFIG: &str = "
receivers:
  otlp:
    protocols:
      grpc:
        max_recv_msg_size_mib: 1
      http:
        max_request_body_size: 65536
";

/// `google.rpc.Status`, the body of OTLP/HTTP errors.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn request(source: &str, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "bad-input"),
                    kv("service.instance.id", source),
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
}

fn counter(name: &str, values: &[f64]) -> Metric {
    let data_points = values
        .iter()
        .enumerate()
        .map(|(i, v)| NumberDataPoint {
            attributes: vec![kv("i", &i.to_string())],
            start_time_unix_nano: started(),
            time_unix_nano: 2,
            value: Some(number_data_point::Value::AsDouble(*v)),
            ..Default::default()
        })
        .collect();
    Metric {
        name: name.into(),
        data: Some(Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

fn histogram(name: &str, bounds: &[f64]) -> Metric {
    Metric {
        name: name.into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                start_time_unix_nano: started(),
                time_unix_nano: 2,
                count: 1,
                sum: Some(0.5),
                bucket_counts: vec![1; 1]
                    .into_iter()
                    .chain(vec![0; bounds.len()])
                    .collect(),
                explicit_bounds: bounds.to_vec(),
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

struct Http {
    client: reqwest::blocking::Client,
    url: String,
}

impl Http {
    fn post(&self, content_type: &str, encoding: Option<&str>, body: Vec<u8>) -> (u16, Vec<u8>) {
        let mut req = self
            .client
            .post(&self.url)
            .header("content-type", content_type)
            .body(body);
        if let Some(e) = encoding {
            req = req.header("content-encoding", e);
        }
        let resp = req.send().expect("POST");
        (resp.status().as_u16(), resp.bytes().expect("body").to_vec())
    }

    fn proto(&self, req: &ExportMetricsServiceRequest) -> ExportMetricsServiceResponse {
        let (status, body) = self.post("application/x-protobuf", None, req.encode_to_vec());
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        ExportMetricsServiceResponse::decode(&body[..]).expect("an OTLP response")
    }

    fn refused(
        &self,
        content_type: &str,
        encoding: Option<&str>,
        body: Vec<u8>,
        want: u16,
    ) -> String {
        let (status, body) = self.post(content_type, encoding, body);
        assert_eq!(status, want, "{}", String::from_utf8_lossy(&body));
        let status = RpcStatus::decode(&body[..]).expect("a google.rpc.Status body");
        assert!(!status.message.is_empty());
        status.message
    }
}

#[test]
fn bad_http_input_is_refused_counted_and_nothing_accepted_is_lost() {
    let collector = CollectorProcess::start(Some(CONFIG), &[]);
    let http = Http {
        client: reqwest::blocking::Client::new(),
        url: format!("{}/v1/metrics", collector.http_url()),
    };

    let ok = http.proto(&request("a", vec![counter("good", &[5.0])]));
    assert_eq!(ok.partial_success, None);

    let msg = http.refused(
        "application/x-protobuf",
        None,
        b"\x0a\xff\xff\xff\x0f".to_vec(),
        400,
    );
    assert!(msg.contains("ExportMetricsServiceRequest"), "{msg}");
    let msg = http.refused("text/plain", None, b"hello".to_vec(), 415);
    assert!(msg.contains("application/x-protobuf"), "{msg}");
    // A well-formed gzip body is accepted.
    let (status, _) = http.post(
        "application/x-protobuf",
        Some("gzip"),
        gzip(&request("gz", vec![counter("zipped", &[2.0])]).encode_to_vec()),
    );
    assert_eq!(status, 200);
    let gz = gzip(&request("a", vec![counter("good", &[50.0])]).encode_to_vec());
    let msg = http.refused(
        "application/x-protobuf",
        Some("gzip"),
        gz[..gz.len() / 2].to_vec(),
        400,
    );
    assert!(msg.contains("gzip"), "{msg}");
    let msg = http.refused("application/x-protobuf", Some("br"), gz.clone(), 415);
    assert!(msg.contains("Content-Encoding"), "{msg}");
    let big = request(&"x".repeat(100_000), vec![counter("good", &[50.0])]).encode_to_vec();
    let msg = http.refused("application/x-protobuf", None, big.clone(), 413);
    assert!(msg.contains("65536"), "{msg}");
    // A small gzip body that inflates past the limit is refused the same way.
    http.refused("application/x-protobuf", Some("gzip"), gzip(&big), 413);

    // OTLP/JSON, well-formed and not.
    let json = r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"bad-input"}},{"key":"service.instance.id","value":{"stringValue":"json"}}]},
      "scopeMetrics":[{"metrics":[{"name":"good","sum":{"aggregationTemporality":2,"isMonotonic":true,
      "dataPoints":[{"attributes":[{"key":"i","value":{"stringValue":"0"}}],"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":2.0}]}}]}]}]}"#;
    let (status, body) = http.post("application/json", None, started_json(json).into_bytes());
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, body) = http.post(
        "application/json",
        None,
        b"{\"resourceMetrics\": [".to_vec(),
    );
    assert_eq!(status, 400);
    let err: serde_json::Value = serde_json::from_slice(&body).expect("a JSON status");
    assert_eq!(err["code"], 3);
    assert!(
        err["message"].as_str().unwrap_or("").contains("JSON"),
        "{err}"
    );

    // NaN and negative counter values: partial success; the good point is kept.
    let resp = http.proto(&request(
        "a",
        vec![counter("mixed", &[f64::NAN, -1.0, 1.0])],
    ));
    let partial = resp.partial_success.expect("partial success");
    assert_eq!(partial.rejected_data_points, 2);
    assert!(
        partial.error_message.contains("mixed"),
        "{}",
        partial.error_message
    );

    // Histogram bounds that differ from the series' bounds: refused, not mixed.
    assert_eq!(
        http.proto(&request("a", vec![histogram("lat", &[1.0, 2.0])]))
            .partial_success,
        None
    );
    let resp = http.proto(&request("b", vec![histogram("lat", &[1.0, 3.0])]));
    let partial = resp.partial_success.expect("partial success");
    assert_eq!(partial.rejected_data_points, 1);
    assert!(
        partial.error_message.contains("bounds"),
        "{}",
        partial.error_message
    );

    // Traces are not silently dropped.
    let (status, _) = {
        let r = http
            .client
            .post(format!("{}/v1/traces", collector.http_url()))
            .header("content-type", "application/x-protobuf")
            .body(Vec::new())
            .send()
            .expect("POST");
        (r.status().as_u16(), ())
    };
    assert_eq!(status, 501);

    let fleet = collector.fleet();
    assert_eq!(
        sum(&fleet, "good_total", &[]),
        7.0,
        "accepted data survives bad requests"
    );
    assert_eq!(sum(&fleet, "mixed_total", &[]), 1.0);
    assert_eq!(sum(&fleet, "zipped_total", &[]), 2.0);
    assert_eq!(sum(&fleet, "lat_count", &[]), 1.0);
    let refused = |reason: &str| {
        sum(
            &fleet,
            "higgsmeter_collector_requests_refused_total",
            &[("transport", "http"), ("reason", reason)],
        )
    };
    assert_eq!(refused("malformed"), 2.0);
    assert_eq!(refused("content_type"), 1.0);
    assert_eq!(refused("decompress"), 2.0);
    assert_eq!(refused("too_large"), 2.0);
    assert_eq!(refused("unsupported_signal"), 1.0);
    let points = |reason: &str| {
        sum(
            &fleet,
            "higgsmeter_collector_points_refused_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(points("non_finite"), 1.0);
    assert_eq!(points("negative_counter"), 1.0);
    assert_eq!(points("histogram_bounds"), 1.0);
    assert_eq!(
        sum(
            &fleet,
            "higgsmeter_collector_requests_total",
            &[("transport", "http")]
        ),
        14.0
    );
    promtool_check(&collector.scrape("/metrics"));
    promtool_check(&collector.scrape("/metrics/sources"));
    assert_eq!(collector.scrape("/healthz"), "ok\n");
}

/// Sends raw bytes as a gRPC message (tonic encodes only valid messages).
#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;
struct ResponseDecoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for ResponseDecoder {
    type Item = ExportMetricsServiceResponse;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, tonic::Status> {
        let bytes = bytes::Buf::copy_to_bytes(src, bytes::Buf::remaining(src));
        ExportMetricsServiceResponse::decode(bytes)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ExportMetricsServiceResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

#[test]
fn bad_grpc_input_gets_its_status_and_is_counted() {
    let collector = CollectorProcess::start(Some(CONFIG), &[]);
    let url = collector.grpc_url();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(url)
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut client = MetricsServiceClient::new(channel.clone());
        let ok = client
            .export(request("a", vec![counter("good", &[3.0])]))
            .await
            .expect("export");
        assert_eq!(ok.get_ref().partial_success, None);

        let mut gz = MetricsServiceClient::new(channel.clone())
            .send_compressed(tonic::codec::CompressionEncoding::Gzip);
        gz.export(request("gz", vec![counter("good", &[4.0])]))
            .await
            .expect("gzip export");

        let mut raw = tonic::client::Grpc::new(channel.clone());
        raw.ready().await.expect("ready");
        let path = http::uri::PathAndQuery::from_static(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        );
        let err = raw
            .unary(
                tonic::Request::new(b"\x0a\xff\xff\xff\x0f".to_vec()),
                path.clone(),
                RawCodec,
            )
            .await
            .expect_err("malformed protobuf is refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

        let big = request(&"x".repeat(2 * 1024 * 1024), vec![counter("good", &[50.0])]);
        let err = client.export(big).await.expect_err("oversized is refused");
        assert!(
            matches!(
                err.code(),
                tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
            ),
            "{err:?}"
        );

        let resp = client
            .export(request("a", vec![counter("nan", &[f64::NAN, 1.0])]))
            .await
            .expect("export");
        assert_eq!(
            resp.get_ref()
                .partial_success
                .as_ref()
                .map(|p| p.rejected_data_points),
            Some(1)
        );

        let err = TraceServiceClient::new(channel)
            .export(ExportTraceServiceRequest::default())
            .await
            .expect_err("traces are refused");
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        assert!(err.message().contains("metrics only"), "{err:?}");
    });
    let fleet = collector.fleet();
    assert_eq!(sum(&fleet, "good_total", &[]), 7.0);
    assert_eq!(sum(&fleet, "nan_total", &[]), 1.0);
    let refused = |reason: &str| {
        sum(
            &fleet,
            "higgsmeter_collector_requests_refused_total",
            &[("transport", "grpc"), ("reason", reason)],
        )
    };
    assert_eq!(refused("malformed"), 1.0);
    assert_eq!(refused("too_large"), 1.0);
    assert_eq!(refused("unsupported_signal"), 1.0);
    assert_eq!(
        sum(
            &fleet,
            "higgsmeter_collector_points_refused_total",
            &[("reason", "non_finite")]
        ),
        1.0
    );
    assert_eq!(collector.scrape("/healthz"), "ok\n");
}

/// The activity counter of `sources` sources (`service.instance.id` = `{prefix}{n}`),
/// one `ResourceMetrics` each, over `ops` operations of each of 7 states, every point
/// at `value` (cumulative, started when the test began).
fn activity(
    prefix: &str,
    sources: std::ops::Range<u32>,
    ops: u32,
    value: f64,
    time: u64,
) -> ExportMetricsServiceRequest {
    const STATES: [&str; 7] = ["idle", "io", "cpu", "gpu", "warmup", "startup", "shutdown"];
    let points: Vec<(&str, String)> = (0..ops)
        .flat_map(|op| STATES.iter().map(move |state| (*state, format!("op-{op}"))))
        .collect();
    let resources = sources.map(|n| {
        vec![
            kv("service.name", "ranks"),
            kv("service.instance.id", &format!("{prefix}{n}")),
        ]
    });
    activity_request(resources, &points, value, time)
}

const ACTIVITY: &str = "worker_activity_time_seconds_total";

/// 1,200 ranks of 49 series each (7 states x 7 operations) on the default config:
/// nothing refused, and the fleet's activity total is every rank's.
#[test]
fn twelve_hundred_ranks_fit_the_defaults_and_sum_exactly() {
    let collector = CollectorProcess::start(None, &[]);
    let http = Http {
        client: reqwest::blocking::Client::new(),
        url: format!("{}/v1/metrics", collector.http_url()),
    };
    for (round, value) in [(0u64, 1.0), (1, 3.0)] {
        for first in (0..1200).step_by(100) {
            let resp = http.proto(&activity("rank-", first..first + 100, 7, value, 2 + round));
            assert_eq!(
                resp.partial_success, None,
                "round {round}, ranks from {first}"
            );
        }
        let want = 1200.0 * 49.0 * value;
        wait_for(Duration::from_secs(10), "the fleet total", || {
            (sum(&collector.fleet(), ACTIVITY, &[]) == want).then_some(())
        });
    }
    let fleet = collector.fleet();
    assert_eq!(
        sum(&fleet, "higgsmeter_collector_points_refused_total", &[]),
        0.0
    );
    assert_eq!(
        sum(&fleet, "higgsmeter_collector_overflow_points_total", &[]),
        0.0
    );
}

/// One rank puts a request id into `operation` (60,000 distinct values): it keeps its
/// quota (4,096 series of the metric) and folds the rest into its overflow series; a
/// healthy rank's new series are all accepted after it; the fleet total equals the
/// ranks' own totals; the collector's own metric names the rank that overflowed.
#[test]
fn a_runaway_rank_folds_into_its_overflow_and_never_locks_the_others_out() {
    let collector = CollectorProcess::start(None, &[]);
    let http = Http {
        client: reqwest::blocking::Client::new(),
        url: format!("{}/v1/metrics", collector.http_url()),
    };
    let runaway = |value: f64, time: u64| {
        let points: Vec<(&str, String)> =
            (0..60_000).map(|i| ("gpu", format!("req-{i:x}"))).collect();
        let resource = vec![
            kv("service.name", "ranks"),
            kv("service.instance.id", "runaway0"),
        ];
        activity_request([resource], &points, value, time)
    };
    for (value, time) in [(1.0, 2), (2.5, 3)] {
        let resp = http.proto(&runaway(value, time));
        assert_eq!(resp.partial_success, None);
        let resp = http.proto(&activity("healthy", 0..1, 7, value, time));
        assert_eq!(resp.partial_success, None);
        let want = (60_000.0 + 49.0) * value;
        wait_for(Duration::from_secs(10), "the fleet total", || {
            (sum(&collector.fleet(), ACTIVITY, &[]) == want).then_some(())
        });
    }
    let sources = collector.sources();
    let healthy = [("instance", "healthy0")];
    assert_eq!(
        sources
            .iter()
            .filter(|s| s.name == ACTIVITY && s.label("instance") == Some("healthy0"))
            .count(),
        49,
        "every series of the healthy rank"
    );
    assert_eq!(sum(&sources, ACTIVITY, &healthy), 49.0 * 2.5);
    let overflow = [("instance", "runaway0"), ("otel_metric_overflow", "true")];
    assert_eq!(
        sum(&sources, ACTIVITY, &overflow),
        (60_000.0 - 4096.0) * 2.5
    );
    let fleet = collector.fleet();
    let named = [("instance", "runaway0"), ("metric", ACTIVITY)];
    assert_eq!(
        sum(&fleet, "higgsmeter_collector_overflow_points_total", &named),
        2.0 * (60_000.0 - 4096.0)
    );
    assert_eq!(
        sum(&fleet, "higgsmeter_collector_points_refused_total", &[]),
        0.0
    );
}

/// 200,000 distinct new sources, a thousand a request, at a collector with an 8 MiB
/// budget (8,192 series: 128 sources' reserves): those past the budget are refused with
/// a message that says what to raise, the memory stays bounded, and a live source keeps
/// its series and gets new ones.
#[test]
fn a_flood_of_new_sources_is_refused_past_the_budget_and_live_sources_go_on() {
    const BUDGET_MIB: u64 = 8;
    let collector = CollectorProcess::start(
        Some(&format!(
            "processors:\n  higgsmeter:\n    memory_limit_mib: {BUDGET_MIB}\n    stale_after: 1h\n    forget_after: 1h\n"
        )),
        &[],
    );
    let http = Http {
        client: reqwest::blocking::Client::new(),
        url: format!("{}/v1/metrics", collector.http_url()),
    };
    let steady = |ops: u32, value: f64, time: u64| {
        let resp = http.proto(&activity("steady", 0..1, ops, value, time));
        assert_eq!(resp.partial_success, None);
    };
    steady(2, 1.0, 2);
    let before = collector.rss_mib();
    let mut refused = 0;
    let mut message = String::new();
    for n in 0..200u32 {
        let first = 1_000_000 + n * 1000;
        // One counter point a source.
        let mut req = activity("flood-", first..first + 1000, 1, 1.0, 2);
        for rm in &mut req.resource_metrics {
            if let Some(Data::Sum(sum)) = &mut rm.scope_metrics[0].metrics[0].data {
                sum.data_points.truncate(1);
            }
        }
        if let Some(p) = http.proto(&req).partial_success {
            refused += p.rejected_data_points;
            if message.is_empty() {
                message = p.error_message;
            }
        }
    }
    let after = collector.rss_mib();
    assert!(refused > 190_000, "most of the flood is refused: {refused}");
    assert!(
        message.contains("new source refused") && message.contains("memory_limit_mib"),
        "{message}"
    );
    let fleet = collector.fleet();
    let held = sum(&fleet, "higgsmeter_collector_series", &[]);
    assert!(held <= (BUDGET_MIB * 1024) as f64, "{held} series held");
    assert!(
        after - before < 2.0 * BUDGET_MIB as f64 + 16.0,
        "RSS {before:.1} MiB before the flood, {after:.1} after"
    );
    // The live source goes on: its series, and 5 new ones (within its reserve).
    steady(3, 2.0, 3);
    wait_for(Duration::from_secs(10), "the steady source's total", || {
        let sources = collector.sources();
        let mine = [("instance", "steady0")];
        (sum(&sources, ACTIVITY, &mine) == 21.0 * 2.0).then_some(())
    });
    eprintln!(
        "flood: RSS {before:.1} MiB before, {after:.1} MiB after; {held} series held; {refused} points refused"
    );
}
