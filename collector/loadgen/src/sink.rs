//! A decode-only OTLP sink: the floor any collector can be compared with.
//!
//! It decodes every `ExportMetricsServiceRequest` (gRPC through tonic's prost codec,
//! HTTP through prost; gzip accepted on both), counts its data points and drops it.

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
use prost::Message as _;

use crate::payload::count_points;

/// Largest request the sink decodes (the collector's default limit).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Totals of what the sink has taken in.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    points: AtomicU64,
}

impl Counters {
    fn add(&self, req: &ExportMetricsServiceRequest) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.points.fetch_add(count_points(req), Ordering::Relaxed);
    }
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
        http.map(|h| format!(", HTTP on {h}/v1/metrics"))
            .unwrap_or_default(),
        run_for.as_secs()
    );
    let (requests, points) = serve(grpc_listener, http_listener, stop).await?;
    eprintln!("sink: received {requests} requests, {points} points");
    Ok(())
}

/// Serves on already-bound listeners until `stop` completes; returns the requests and
/// points received.
async fn serve(
    grpc: tokio::net::TcpListener,
    http: Option<tokio::net::TcpListener>,
    stop: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<(u64, u64)> {
    let counters = Arc::new(Counters::default());
    let svc = MetricsServiceServer::new(GrpcSink(counters.clone()))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_MESSAGE);
    let incoming = tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true));
    let http_task = http.map(|l| tokio::spawn(http_accept_loop(l, counters.clone())));
    let result = tonic::transport::Server::builder()
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, stop)
        .await;
    if let Some(t) = http_task {
        t.abort();
    }
    result.context("running the gRPC sink")?;
    Ok((
        counters.requests.load(Ordering::Relaxed),
        counters.points.load(Ordering::Relaxed),
    ))
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
    if req.uri().path() != "/v1/metrics" || req.method() != hyper::Method::POST {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            Bytes::from_static(b"POST /v1/metrics"),
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
    match ExportMetricsServiceRequest::decode(body) {
        Ok(msg) => {
            counters.add(&msg);
            let out = ExportMetricsServiceResponse::default().encode_to_vec();
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
        let (requests, points) = server.await.unwrap().unwrap();
        assert_eq!(points, sent);
        assert_eq!(requests, 4 * 2 * templates.len() as u64);
    }
}
