//! OTLP/gRPC receiver (tonic): its settings (`receivers.otlp.protocols.grpc`), and
//! the listener: metrics in, traces to the traces pipeline when there is one, logs
//! refused as unimplemented.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tokio_util::sync::CancellationToken;
use tonic::codec::{CompressionEncoding, EnabledCompressionEncodings};
use tonic::codegen::{Body as HttpBody, BoxFuture, Context, Poll, Service, StdError};
use tonic::{Request, Response, Status};

use serde::Deserialize;

use super::{
    Bound, ReceiverPlan, SHUTTING_DOWN, SIGNAL_NOT_SUPPORTED, authenticator, check_per_peer,
    response,
};
use crate::aggregate::Aggregator;
use crate::auth::{AuthSettings, BearerAuth};
use crate::component::{ComponentId, PlanEnv};
use crate::duration as duration_serde;
use crate::error::Error;
use crate::forward::{Refused, TraceForwarder, count_spans};
use crate::net::{ConnLimits, LimitedListener, TrackRequests};
use crate::self_metrics::{RequestRefusal, SelfMetrics, Transport};
use crate::tls::TlsServerSettings;

/// `receivers.otlp.protocols.grpc`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcReceiver {
    /// `host:port` to listen on (default `127.0.0.1:4317`; port 0 picks a free port).
    pub endpoint: String,
    /// Largest accepted message, MiB, after decompression (default 16).
    pub max_recv_msg_size_mib: u64,
    /// Most connections open at once (default 1024). When all are taken, a new
    /// connection takes the place of the newest one that has not finished its opening,
    /// or else of the newest idle one; when every one is busy it is closed at once,
    /// logged and counted (`higgsmeter_collector_connections_refused_total`).
    pub max_connections: usize,
    /// Most connections open at once from one peer address (1 to `max_connections`;
    /// default 128, or `max_connections` when that is lower); past it the peer's newest
    /// unfinished or idle connection makes room, or the new one is refused.
    pub max_connections_per_peer: Option<usize>,
    /// Longest from accept to a finished opening: the TLS handshake (with `tls`), then
    /// the HTTP/2 preface and SETTINGS (default 10 s); then the connection is closed and
    /// counted (`higgsmeter_collector_connections_closed_total{reason="opening_timeout"}`).
    #[serde(with = "duration_serde")]
    pub handshake_timeout: Duration,
    /// Longest a connection may stay open with no request in flight (default 2 m);
    /// then it is closed and counted (`reason="idle_timeout"`).
    #[serde(with = "duration_serde")]
    pub max_connection_idle: Duration,
    /// Longest a request may take to arrive and be answered (default 30 s).
    #[serde(with = "duration_serde")]
    pub read_timeout: Duration,
    /// TLS (the port is then TLS-only; `client_ca_file`: mutual TLS).
    pub tls: Option<TlsServerSettings>,
    /// `auth.authenticator: bearertokenauth`: requests without the token are refused
    /// (`UNAUTHENTICATED`).
    pub auth: Option<AuthSettings>,
}

impl Default for GrpcReceiver {
    fn default() -> Self {
        GrpcReceiver {
            endpoint: "127.0.0.1:4317".into(),
            max_recv_msg_size_mib: 16,
            max_connections: 1024,
            max_connections_per_peer: None,
            handshake_timeout: Duration::from_secs(10),
            max_connection_idle: Duration::from_secs(120),
            read_timeout: Duration::from_secs(30),
            tls: None,
            auth: None,
        }
    }
}

impl GrpcReceiver {
    /// Checks the settings of receiver `id`'s gRPC listener.
    pub(crate) fn plan(&self, id: &ComponentId, env: PlanEnv<'_>) -> Result<ReceiverPlan, Error> {
        let key = format!("receivers.{id}.protocols.grpc");
        let error = |path: String, message: &str| Error::Config {
            path,
            message: message.into(),
        };
        let addr = crate::net::resolve(&format!("{key}.endpoint"), &self.endpoint)?;
        if self.max_recv_msg_size_mib == 0 || self.max_recv_msg_size_mib > 4096 {
            return Err(error(
                format!("{key}.max_recv_msg_size_mib"),
                "must be 1 to 4096",
            ));
        }
        if self.max_connections == 0
            || self.read_timeout.is_zero()
            || self.handshake_timeout.is_zero()
            || self.max_connection_idle.is_zero()
        {
            return Err(error(
                key,
                "max_connections, handshake_timeout, max_connection_idle and read_timeout must be more than 0",
            ));
        }
        let per_peer = check_per_peer(
            &format!("{key}.max_connections_per_peer"),
            self.max_connections_per_peer,
            self.max_connections,
        )?;
        crate::tls::check_server(&format!("{key}.tls"), &self.tls)?;
        Ok(ReceiverPlan {
            id: id.clone(),
            transport: Transport::Grpc,
            addr,
            max_size: (self.max_recv_msg_size_mib * 1024 * 1024) as usize,
            limits: ConnLimits {
                max: self.max_connections,
                per_peer,
                opening: self.handshake_timeout,
                idle: self.max_connection_idle,
            },
            read_timeout: self.read_timeout,
            tls: self.tls.clone(),
            auth: authenticator(&format!("{key}.auth"), &self.auth, env)?,
        })
    }
}

/// The metrics service, by hand rather than generated: tonic hands it the request's
/// raw (decompressed) bytes, which the aggregator reads without decoding them into
/// owned structs (see `aggregate::wire`).
#[derive(Clone)]
struct Metrics {
    aggregator: Arc<Aggregator>,
    max_message: usize,
}

/// Passes request bytes through; encodes responses (`R`) with prost.
struct BytesCodec<R>(std::marker::PhantomData<R>);
struct ResponseEncoder<R>(std::marker::PhantomData<R>);
struct BytesDecoder;

impl<R> BytesCodec<R> {
    fn new() -> Self {
        BytesCodec(std::marker::PhantomData)
    }
}

impl<R: prost::Message + Send + 'static> tonic::codec::Codec for BytesCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = ResponseEncoder<R>;
    type Decoder = BytesDecoder;
    fn encoder(&mut self) -> ResponseEncoder<R> {
        ResponseEncoder(std::marker::PhantomData)
    }
    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

impl<R: prost::Message> tonic::codec::Encoder for ResponseEncoder<R> {
    type Item = R;
    type Error = Status;
    fn encode(
        &mut self,
        item: Self::Item,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl tonic::codec::Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let len = src.remaining();
        Ok(Some(src.copy_to_bytes(len)))
    }
}

struct Export(Arc<Aggregator>);

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = ExportMetricsServiceResponse;
    type Future = BoxFuture<Response<Self::Response>, Status>;
    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let aggregator = self.0.clone();
        Box::pin(async move {
            if !aggregator.accepting() {
                return Err(Status::unavailable(SHUTTING_DOWN));
            }
            match aggregator.ingest_protobuf(request.get_ref(), Transport::Grpc) {
                Ok(result) => Ok(Response::new(response(&result))),
                Err(e) => Err(Status::invalid_argument(format!(
                    "not an OTLP ExportMetricsServiceRequest: {e}"
                ))),
            }
        })
    }
}

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

impl<B> Service<http::Request<B>> for Metrics
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != EXPORT_PATH {
            return Box::pin(async move {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(
                    Status::GRPC_STATUS,
                    (tonic::Code::Unimplemented as i32).into(),
                );
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            });
        }
        let aggregator = self.aggregator.clone();
        let max = self.max_message;
        Box::pin(async move {
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut send = EnabledCompressionEncodings::default();
            send.enable(CompressionEncoding::Gzip);
            let mut grpc =
                tonic::server::Grpc::new(BytesCodec::<ExportMetricsServiceResponse>::new())
                    .apply_compression_config(accept, send)
                    .apply_max_message_size_config(Some(max), None);
            Ok(grpc.unary(Export(aggregator), req).await)
        })
    }
}

impl tonic::server::NamedService for Metrics {
    const NAME: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
}

/// Refuses every request without the bearer token (`UNAUTHENTICATED`) before any
/// service sees it.
#[derive(Clone)]
struct Authenticate<S> {
    inner: S,
    auth: Arc<BearerAuth>,
}

impl<S, B> Service<http::Request<B>> for Authenticate<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        futures_util::future::Either<std::future::Ready<Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if self
            .auth
            .check(req.headers().get(http::header::AUTHORIZATION))
        {
            futures_util::future::Either::Right(self.inner.call(req))
        } else {
            futures_util::future::Either::Left(std::future::ready(Ok(Status::unauthenticated(
                super::UNAUTHENTICATED,
            )
            .into_http())))
        }
    }
}

/// The trace service: with a traces pipeline, requests are checked, counted and
/// queued for the exporters unchanged; without one, refused as today.
#[derive(Clone)]
struct Traces {
    forwarder: Option<Arc<TraceForwarder>>,
    aggregator: Arc<Aggregator>,
    max_message: usize,
}

struct ExportTraces(Option<Arc<TraceForwarder>>, Arc<Aggregator>);

impl tonic::server::UnaryService<Bytes> for ExportTraces {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<Response<Self::Response>, Status>;
    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let forwarder = self.0.clone();
        let accepting = self.1.accepting();
        Box::pin(async move {
            let Some(forwarder) = forwarder else {
                return Err(Status::unimplemented(SIGNAL_NOT_SUPPORTED));
            };
            if !accepting {
                return Err(Status::unavailable(SHUTTING_DOWN));
            }
            let bytes = request.into_inner();
            let spans = count_spans(&bytes).map_err(|e| Status::invalid_argument(e.to_string()))?;
            forwarder.received(Transport::Grpc, spans);
            match forwarder.submit(bytes, spans) {
                Ok(()) => Ok(Response::new(ExportTraceServiceResponse::default())),
                Err(Refused::Full(exporter)) => {
                    Err(Status::unavailable(super::queue_full(&exporter)))
                }
                Err(Refused::Closed) => Err(Status::unavailable(SHUTTING_DOWN)),
            }
        })
    }
}

const TRACE_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl<B> Service<http::Request<B>> for Traces
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != TRACE_EXPORT_PATH {
            return Box::pin(
                async move { Ok(Status::unimplemented("unknown method").into_http()) },
            );
        }
        let export = ExportTraces(self.forwarder.clone(), self.aggregator.clone());
        let max = self.max_message;
        Box::pin(async move {
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut send = EnabledCompressionEncodings::default();
            send.enable(CompressionEncoding::Gzip);
            let mut grpc =
                tonic::server::Grpc::new(BytesCodec::<ExportTraceServiceResponse>::new())
                    .apply_compression_config(accept, send)
                    .apply_max_message_size_config(Some(max), None);
            Ok(grpc.unary(export, req).await)
        })
    }
}

impl tonic::server::NamedService for Traces {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

struct Refuse;

#[tonic::async_trait]
impl LogsService for Refuse {
    async fn export(
        &self,
        _: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        Err(Status::unimplemented(SIGNAL_NOT_SUPPORTED))
    }
}

/// Counts every request, and every request tonic or we refused (a trailers-only
/// response: its `grpc-status` is in the headers). tonic reports undecodable protobuf
/// as INTERNAL; OTLP says INVALID_ARGUMENT, so that is what the sender gets.
fn account(
    stats: &SelfMetrics,
    mut resp: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    stats.request(Transport::Grpc);
    let Some(code) = resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return resp;
    };
    let message = resp
        .headers()
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let reason = match tonic::Code::from(code) {
        tonic::Code::Ok => return resp,
        // The sender went away mid-request (killed, or its own deadline passed): nothing
        // was refused, and an alert on refusals must not fire for a rank's crash.
        tonic::Code::Cancelled => return resp,
        tonic::Code::Internal if message.contains("decompress") => RequestRefusal::Decompress,
        tonic::Code::Internal | tonic::Code::InvalidArgument | tonic::Code::DataLoss => {
            resp.headers_mut()
                .insert("grpc-status", http::HeaderValue::from_static("3"));
            RequestRefusal::Malformed
        }
        tonic::Code::ResourceExhausted | tonic::Code::OutOfRange => RequestRefusal::TooLarge,
        tonic::Code::Unauthenticated => RequestRefusal::Unauthenticated,
        tonic::Code::Unavailable if message.contains("traces queue") => RequestRefusal::QueueFull,
        tonic::Code::Unimplemented if message.contains("metrics only") => {
            RequestRefusal::UnsupportedSignal
        }
        tonic::Code::Unimplemented
            if message.contains("compress") || message.contains("encoding") =>
        {
            RequestRefusal::Decompress
        }
        _ => RequestRefusal::Other,
    };
    stats.refuse_request(Transport::Grpc, reason);
    resp
}

/// `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Serves OTLP/gRPC on `b`'s listener until `cancel`: at most `limits.max`
/// connections (`limits.per_peer` from one address), each closed when its TLS
/// handshake and HTTP/2 preface take longer than `limits.opening` or it has no request
/// for `limits.idle` (see `net`); each request bounded by `read_timeout`, idle
/// connections probed with HTTP/2 pings. On `cancel` it stops accepting, closes
/// unfinished and idle connections at once and lets requests in flight finish; the
/// caller bounds that wait (`service.shutdown_timeout`). With `tls` the port is
/// TLS-only; with `auth` every request needs the bearer token.
pub(crate) async fn serve(b: Bound, cancel: CancellationToken) {
    let Bound {
        key,
        listener,
        max_size: max_message,
        limits,
        read_timeout,
        tls,
        auth,
        traces: traces_forwarder,
        aggregator,
        stats,
    } = b;
    let traces = Traces {
        forwarder: traces_forwarder,
        aggregator: aggregator.clone(),
        max_message,
    };
    let metrics = Metrics {
        aggregator,
        max_message,
    };
    let logs = LogsServiceServer::new(Refuse).accept_compressed(CompressionEncoding::Gzip);
    let listener = LimitedListener::new(
        listener,
        limits,
        (Transport::Grpc, key),
        stats.clone(),
        cancel.clone(),
    );
    let incoming = crate::net::incoming(listener, tls, cancel.clone());
    let layer = tower::ServiceBuilder::new()
        .layer_fn(TrackRequests::from_extensions)
        .map_response(move |resp| account(&stats, resp))
        .option_layer(auth.map(|auth| {
            tower::layer::layer_fn(move |inner| Authenticate {
                inner,
                auth: auth.clone(),
            })
        }));
    // Larger HTTP/2 windows: a 1,000-point request is ~130 KiB, over the 64 KiB default.
    let result = tonic::transport::Server::builder()
        .initial_stream_window_size(Some(2 * 1024 * 1024))
        .initial_connection_window_size(Some(8 * 1024 * 1024))
        .timeout(read_timeout)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .layer(layer)
        .add_service(metrics)
        .add_service(traces)
        .add_service(logs)
        .serve_with_incoming_shutdown(incoming, cancel.cancelled())
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "the OTLP/gRPC receiver stopped");
    }
}
