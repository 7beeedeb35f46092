//! A decode-only OTLP sink: the floor any collector can be compared with.
//!
//! It decodes every `ExportMetricsServiceRequest` and `ExportTraceServiceRequest` (gRPC
//! through tonic's prost codec, HTTP through prost; gzip accepted on both), counts its
//! data points or spans and drops it: also the upstream of a collector's traces
//! pipeline in benchmarks.

use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;

use crate::payload::count_points;

/// Largest request the sink decodes (the collector's default limit).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Totals of what the sink has taken in.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    points: AtomicU64,
    trace_requests: AtomicU64,
    spans: AtomicU64,
}

impl Counters {
    fn add(&self, req: &ExportMetricsServiceRequest) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.points.fetch_add(count_points(req), Ordering::Relaxed);
    }

    fn add_traces(&self, req: &ExportTraceServiceRequest) {
        let spans: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.trace_requests.fetch_add(1, Ordering::Relaxed);
        self.spans.fetch_add(spans as u64, Ordering::Relaxed);
    }

    fn totals(&self) -> Totals {
        Totals {
            requests: self.requests.load(Ordering::Relaxed),
            points: self.points.load(Ordering::Relaxed),
            trace_requests: self.trace_requests.load(Ordering::Relaxed),
            spans: self.spans.load(Ordering::Relaxed),
        }
    }
}

/// What the sink received in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Totals {
    requests: u64,
    points: u64,
    trace_requests: u64,
    spans: u64,
}

#[derive(Debug)]
struct GrpcSink(Arc<Counters>);

#[tonic::codegen::async_trait]
impl MetricsService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.add(request.get_ref());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::codegen::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.add_traces(request.get_ref());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Serves OTLP/gRPC on `grpc` and, if given, OTLP/HTTP on `http`, for at most `run_for`
/// or until ctrl-c or SIGTERM, then prints what it received.
pub(crate) async fn run(
    grpc: SocketAddr,
    http: Option<SocketAddr>,
    run_for: Duration,
) -> anyhow::Result<()> {
    let grpc_listener = tokio::net::TcpListener::bind(grpc)
        .await
        .with_context(|| format!("binding the gRPC sink to {grpc}"))?;
    let http_listener = match http {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the HTTP sink to {addr}"))?,
        ),
        None => None,
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let stop = async move {
        tokio::select! {
            _ = tokio::time::sleep(run_for) => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    eprintln!(
        "sink: gRPC on {grpc}{}; stops after {} s",
        http.map(|h| format!(", HTTP on {h}/v1/metrics and /v1/traces"))
            .unwrap_or_default(),
        run_for.as_secs()
    );
    let t = serve(grpc_listener, http_listener, stop).await?;
    eprintln!(
        "sink: received {} requests, {} points; {} trace requests, {} spans",
        t.requests, t.points, t.trace_requests, t.spans
    );
    Ok(())
}

/// Serves on already-bound listeners until `stop` completes; returns what was received.
async fn serve(
    grpc: tokio::net::TcpListener,
    http: Option<tokio::net::TcpListener>,
    stop: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<Totals> {
    let counters = Arc::new(Counters::default());
    let svc = MetricsServiceServer::new(GrpcSink(counters.clone()))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_MESSAGE);
    let traces = TraceServiceServer::new(GrpcSink(counters.clone()))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_MESSAGE);
    let incoming = tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true));
    let http_task = http.map(|l| tokio::spawn(http_accept_loop(l, counters.clone())));
    let result = tonic::transport::Server::builder()
        .add_service(svc)
        .add_service(traces)
        .serve_with_incoming_shutdown(incoming, stop)
        .await;
    if let Some(t) = http_task {
        t.abort();
    }
    result.context("running the gRPC sink")?;
    Ok(counters.totals())
}

async fn http_accept_loop(listener: tokio::net::TcpListener, counters: Arc<Counters>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let counters = counters.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle_http(req, counters.clone()));
            // A client that goes away mid-request is not the sink's problem.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn handle_http(
    req: Request<hyper::body::Incoming>,
    counters: Arc<Counters>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let reply = |code: StatusCode, body: Bytes| {
        let mut r = Response::new(Full::new(body));
        *r.status_mut() = code;
        r
    };
    let traces = match req.uri().path() {
        "/v1/metrics" => false,
        "/v1/traces" => true,
        _ => {
            return Ok(reply(
                StatusCode::NOT_FOUND,
                Bytes::from_static(b"POST /v1/metrics or /v1/traces"),
            ));
        }
    };
    if req.method() != hyper::Method::POST {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            Bytes::from_static(b"POST only"),
        ));
    }
    let gzip = req
        .headers()
        .get(hyper::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let mut body = req.into_body().collect().await?.to_bytes();
    if body.len() > MAX_MESSAGE {
        return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, Bytes::new()));
    }
    if gzip {
        let mut out = Vec::new();
        let mut dec = flate2::read::GzDecoder::new(&body[..]).take(MAX_MESSAGE as u64 + 1);
        if let Err(e) = dec.read_to_end(&mut out) {
            return Ok(reply(
                StatusCode::BAD_REQUEST,
                Bytes::from(format!("bad gzip body: {e}")),
            ));
        }
        if out.len() > MAX_MESSAGE {
            return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, Bytes::new()));
        }
        body = Bytes::from(out);
    }
    let decoded = if traces {
        ExportTraceServiceRequest::decode(body).map(|msg| {
            counters.add_traces(&msg);
            ExportTraceServiceResponse::default().encode_to_vec()
        })
    } else {
        ExportMetricsServiceRequest::decode(body).map(|msg| {
            counters.add(&msg);
            ExportMetricsServiceResponse::default().encode_to_vec()
        })
    };
    match decoded {
        Ok(out) => {
            let mut r = reply(StatusCode::OK, Bytes::from(out));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/x-protobuf"),
            );
            Ok(r)
        }
        Err(e) => Ok(reply(
            StatusCode::BAD_REQUEST,
            Bytes::from(format!("malformed OTLP protobuf: {e}")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::payload::{Shape, build};
    use crate::send::{Protocol, SendConfig, run as send};

    /// The generator against the sink over both protocols: every request succeeds, every
    /// point is accepted, and the sink decodes exactly the points that were sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn generator_and_sink_agree_over_grpc_and_http_plain_and_gzip() {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (g, h) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(grpc, Some(http), async move {
            let _ = stop_rx.await;
        }));
        let shape = Shape {
            workers: 5,
            series: 40,
            points_per_request: 64,
            series_per_metric: 10,
            histogram_percent: 50,
            unique_per_worker: false,
        };
        let templates = Arc::new(build(&shape, 1).unwrap());
        let mut sent = 0u64;
        let runs = [
            (Protocol::Grpc, format!("http://{g}"), false),
            (Protocol::Http, format!("http://{h}/v1/metrics"), false),
            (Protocol::Grpc, format!("http://{g}"), true),
            (Protocol::Http, format!("http://{h}/v1/metrics"), true),
        ];
        for (protocol, endpoint, gzip) in runs {
            let cfg = SendConfig {
                protocol,
                endpoint,
                concurrency: 3,
                rate: None,
                stop_after: Duration::from_secs(30),
                rounds: Some(2),
                timeout: Duration::from_secs(10),
                gzip,
            };
            let tasks = send(&cfg, templates.clone(), Instant::now()).await.unwrap();
            assert_eq!(tasks.len(), 3);
            let records: Vec<_> = tasks.iter().flat_map(|t| t.records.iter()).collect();
            assert_eq!(records.len(), 2 * templates.len(), "{protocol:?}");
            assert!(
                records.iter().all(|r| r.ok && r.accepted == r.points),
                "{protocol:?}"
            );
            let points: u64 = records.iter().map(|r| u64::from(r.points)).sum();
            assert_eq!(points, 2 * 5 * 40);
            sent += points;
        }
        stop_tx.send(()).unwrap();
        let totals = server.await.unwrap().unwrap();
        assert_eq!(totals.points, sent);
        assert_eq!(totals.requests, 4 * 2 * templates.len() as u64);
        assert_eq!((totals.trace_requests, totals.spans), (0, 0));
    }

    /// The traces sender against the sink over both protocols: every span it counts as
    /// accepted is one the sink decoded, at about the rate asked for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn traces_sender_and_sink_agree_over_grpc_and_http() {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (g, h) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(grpc, Some(http), async move {
            let _ = stop_rx.await;
        }));
        let shape = crate::traces::SpanShape {
            spans_per_request: 20,
            attributes: 6,
        };
        let requests = crate::traces::build(&shape, 1_000_000_000_000).unwrap();
        let mut accepted = 0;
        for (protocol, endpoint) in [
            (Protocol::Grpc, format!("http://{g}")),
            (Protocol::Http, format!("http://{h}/v1/traces")),
        ] {
            let cfg = crate::traces::TracesConfig {
                protocol,
                endpoint,
                rate: 4_000.0,
                concurrency: 2,
                stop_after: Duration::from_millis(500),
                timeout: Duration::from_secs(10),
            };
            let handle =
                crate::traces::spawn(cfg.clone(), requests.clone(), 20, Instant::now()).unwrap();
            let result = tokio::task::spawn_blocking(move || handle.join())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let rep = result.report(&cfg, Duration::ZERO, Duration::from_secs(60));
            assert_eq!(rep.requests_failed, 0, "{protocol:?}: {:?}", rep.errors);
            assert_eq!(rep.spans_refused, 0);
            assert_eq!(rep.spans_accepted, rep.spans_sent);
            // 4,000 spans/s for 0.5 s: 2,000 spans, 100 requests (the last ones may be cut).
            assert!(
                (1_800..=2_000).contains(&rep.spans_accepted),
                "{protocol:?}: {}",
                rep.spans_accepted
            );
            accepted += rep.spans_accepted_total;
        }
        stop_tx.send(()).unwrap();
        let totals = server.await.unwrap().unwrap();
        assert_eq!(totals.spans, accepted);
        assert_eq!(totals.trace_requests, accepted / 20);
        assert_eq!((totals.requests, totals.points), (0, 0));
    }
}
