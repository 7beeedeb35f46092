//! Sending pre-encoded requests over OTLP/gRPC or OTLP/HTTP, paced or at full speed.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use bytes::{Buf as _, BufMut as _, Bytes};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message as _;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use crate::payload::Template;

/// The OTLP metrics export method.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
/// The OTLP traces export method.
pub(crate) const TRACES_EXPORT_PATH: &str =
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Wire protocol of the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Protocol {
    /// OTLP/gRPC (tonic, HTTP/2).
    Grpc,
    /// OTLP/HTTP: `POST /v1/metrics`, `application/x-protobuf` (hyper, HTTP/1.1).
    Http,
}

/// What the senders do.
#[derive(Debug, Clone)]
pub(crate) struct SendConfig {
    pub(crate) protocol: Protocol,
    /// `http://host:port` for gRPC, `http://host:port/v1/metrics` for HTTP.
    pub(crate) endpoint: String,
    /// Requests in flight (one sender task and one connection each).
    pub(crate) concurrency: usize,
    /// Target accepted points per second; `None` sends as fast as responses come back.
    pub(crate) rate: Option<f64>,
    /// When sending stops, counted from the start.
    pub(crate) stop_after: Duration,
    /// Stop after this many rounds of the whole fleet.
    pub(crate) rounds: Option<u64>,
    /// Per-request deadline.
    pub(crate) timeout: Duration,
    /// Gzip every request body (level 6, tonic's and the OTel exporters' default) while
    /// sending: the generator pays for the compression.
    pub(crate) gzip: bool,
}

/// One finished request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    /// Completion time since the start of the run.
    pub(crate) done_at: Duration,
    /// Request latency.
    pub(crate) latency: Duration,
    /// Points sent in the request.
    pub(crate) points: u32,
    /// Points the receiver accepted (sent minus `rejected_data_points`; 0 on error).
    pub(crate) accepted: u32,
    /// Whether the request succeeded at the transport/status level.
    pub(crate) ok: bool,
    /// Encoded request size.
    pub(crate) bytes: u32,
}

/// What one sender task saw.
#[derive(Debug, Default)]
pub(crate) struct TaskResult {
    /// Every finished request, in order.
    pub(crate) records: Vec<Record>,
    /// The first distinct error messages (at most a few).
    pub(crate) errors: Vec<String>,
}

/// A tonic codec that sends already-encoded bytes and hands back the raw response.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

#[derive(Debug, Clone, Copy, Default)]
struct RawEncoder;

#[derive(Debug, Clone, Copy, Default)]
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// An OTLP/HTTP target: one hyper client and the URL it posts to.
pub(crate) struct HttpTarget {
    client: HttpClient<HttpConnector, Full<Bytes>>,
    uri: hyper::Uri,
    gzip: bool,
}

/// One connection to an OTLP receiver, gRPC or HTTP.
pub(crate) enum Client {
    Grpc(tonic::client::Grpc<Channel>),
    Http(Box<HttpTarget>),
}

impl Client {
    /// Connects to `endpoint` (`http://host:port` for gRPC, the whole URL for HTTP).
    pub(crate) async fn connect(
        protocol: Protocol,
        endpoint: &str,
        gzip: bool,
    ) -> anyhow::Result<Self> {
        match protocol {
            Protocol::Grpc => {
                let ep = Endpoint::from_shared(endpoint.to_owned())
                    .with_context(|| format!("invalid gRPC endpoint {endpoint:?}"))?
                    .connect_timeout(Duration::from_secs(5))
                    .tcp_nodelay(true);
                let ch = ep
                    .connect()
                    .await
                    .with_context(|| format!("connecting to {endpoint} (gRPC)"))?;
                let mut grpc = tonic::client::Grpc::new(ch);
                if gzip {
                    grpc = grpc.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                Ok(Self::Grpc(grpc))
            }
            Protocol::Http => {
                let uri: hyper::Uri = endpoint
                    .parse()
                    .with_context(|| format!("invalid HTTP endpoint {endpoint:?}"))?;
                let mut conn = HttpConnector::new();
                conn.set_nodelay(true);
                conn.set_connect_timeout(Some(Duration::from_secs(5)));
                let client = HttpClient::builder(TokioExecutor::new())
                    .pool_max_idle_per_host(1)
                    .build(conn);
                Ok(Self::Http(Box::new(HttpTarget { client, uri, gzip })))
            }
        }
    }

    /// Sends one metrics request; returns the number of points the receiver rejected.
    async fn send(&mut self, body: Bytes) -> Result<u64, String> {
        let resp = self.send_raw(EXPORT_PATH, body).await?;
        // An undecodable success response (say JSON from a lenient server) counts as
        // all accepted: the status already said so.
        Ok(ExportMetricsServiceResponse::decode(resp)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| p.rejected_data_points.max(0) as u64))
    }

    /// Sends one encoded request to the gRPC method `grpc_path` (over HTTP, to the
    /// client's URL); returns the response body, or why the request failed.
    pub(crate) async fn send_raw(
        &mut self,
        grpc_path: &'static str,
        body: Bytes,
    ) -> Result<Bytes, String> {
        let resp = match self {
            Self::Grpc(grpc) => {
                grpc.ready()
                    .await
                    .map_err(|e| format!("gRPC connection not ready: {e}"))?;
                let path = PathAndQuery::from_static(grpc_path);
                grpc.unary(tonic::Request::new(body), path, RawCodec)
                    .await
                    .map_err(|s| format!("gRPC status {:?}: {}", s.code(), s.message()))?
                    .into_inner()
            }
            Self::Http(t) => {
                let HttpTarget { client, uri, gzip } = &**t;
                let mut req = hyper::Request::post(uri.clone())
                    .header(hyper::header::CONTENT_TYPE, "application/x-protobuf");
                let body = if *gzip {
                    req = req.header(hyper::header::CONTENT_ENCODING, "gzip");
                    gzip_body(&body).map_err(|e| format!("gzip: {e}"))?
                } else {
                    body
                };
                let req = req
                    .body(Full::new(body))
                    .map_err(|e| format!("building the HTTP request: {e}"))?;
                let resp = client
                    .request(req)
                    .await
                    .map_err(|e| format!("HTTP request failed: {e}"))?;
                let status = resp.status();
                let body = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| format!("reading the HTTP response: {e}"))?
                    .to_bytes();
                if !status.is_success() {
                    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
                    return Err(format!("HTTP {status}: {text}"));
                }
                body
            }
        };
        Ok(resp)
    }
}

fn gzip_body(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 3),
        flate2::Compression::new(6),
    );
    enc.write_all(body)?;
    Ok(Bytes::from(enc.finish()?))
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs the load: one task per in-flight request, each owning a fixed subset of the
/// round's requests, which it sends in round order (so every series only grows as the
/// receiver sees it). Returns each task's records.
pub(crate) async fn run(
    cfg: &SendConfig,
    templates: Arc<Vec<Template>>,
    start: Instant,
) -> anyhow::Result<Vec<TaskResult>> {
    let tasks = cfg.concurrency.min(templates.len()).max(1);
    let points_per_round: f64 = templates.iter().map(|t| f64::from(t.points())).sum();
    let mut clients = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        clients.push(Client::connect(cfg.protocol, &cfg.endpoint, cfg.gzip).await?);
    }
    let mut handles = Vec::with_capacity(tasks);
    for (id, client) in clients.into_iter().enumerate() {
        let mine: Vec<usize> = (id..templates.len()).step_by(tasks).collect();
        let my_points: f64 = mine.iter().map(|&i| f64::from(templates[i].points())).sum();
        // Each task gets the share of the rate that its requests carry.
        let rate = cfg.rate.map(|r| r * my_points / points_per_round);
        let templates = templates.clone();
        let cfg = cfg.clone();
        handles.push(tokio::spawn(async move {
            sender(client, &templates, &mine, &cfg, rate, start).await
        }));
    }
    let mut out = Vec::with_capacity(tasks);
    for h in handles {
        out.push(h.await.context("a sender task panicked")?);
    }
    Ok(out)
}

async fn sender(
    mut client: Client,
    templates: &[Template],
    mine: &[usize],
    cfg: &SendConfig,
    rate: Option<f64>,
    start: Instant,
) -> TaskResult {
    let mut res = TaskResult::default();
    let stop_at = start + cfg.stop_after;
    let mut sent_points = 0.0f64;
    let mut round = 0u64;
    'rounds: loop {
        if cfg.rounds.is_some_and(|n| round >= n) {
            break;
        }
        for &i in mine {
            let Some(tpl) = templates.get(i) else {
                continue;
            };
            if let Some(rate) = rate {
                let due = start + Duration::from_secs_f64(sent_points / rate);
                if due >= stop_at {
                    break 'rounds;
                }
                tokio::time::sleep_until(due.into()).await;
            }
            if Instant::now() >= stop_at {
                break 'rounds;
            }
            let body = tpl.render(round, unix_nanos());
            let t0 = Instant::now();
            let outcome = tokio::time::timeout(cfg.timeout, client.send(body)).await;
            let t1 = Instant::now();
            let (ok, accepted) = match outcome {
                Ok(Ok(rejected)) => (
                    true,
                    u64::from(tpl.points()).saturating_sub(rejected) as u32,
                ),
                Ok(Err(e)) => {
                    note_error(&mut res.errors, e);
                    (false, 0)
                }
                Err(_) => {
                    note_error(
                        &mut res.errors,
                        format!("request timed out after {:?}", cfg.timeout),
                    );
                    (false, 0)
                }
            };
            res.records.push(Record {
                done_at: t1.duration_since(start),
                latency: t1.duration_since(t0),
                points: tpl.points(),
                accepted,
                ok,
                bytes: tpl.len() as u32,
            });
            sent_points += f64::from(tpl.points());
            if !ok {
                // Do not spin on a refused connection.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        round += 1;
    }
    res
}

/// Keeps the first few distinct error messages.
pub(crate) fn note_error(errors: &mut Vec<String>, e: String) {
    if errors.len() < 5 && !errors.contains(&e) {
        errors.push(e);
    }
}
