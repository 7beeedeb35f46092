//! OTLP/HTTP receiver (axum): its settings (`receivers.otlp.protocols.http`), and the
//! listener: `POST /v1/metrics` with `application/x-protobuf` or `application/json`
//! bodies, optionally gzip-compressed.

use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use tokio_util::sync::CancellationToken;

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
use crate::net::{ConnLimits, LimitedListener, serve_http1};
use crate::self_metrics::{RequestRefusal, SelfMetrics, Transport};
use crate::tls::TlsServerSettings;

/// `receivers.otlp.protocols.http`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpReceiver {
    /// `host:port` to listen on (default `127.0.0.1:4318`).
    pub endpoint: String,
    /// Largest accepted body, bytes, before and after decompression (default 16 MiB).
    pub max_request_body_size: u64,
    /// Most connections open at once (default 1024). When all are taken, a new
    /// connection takes the place of the newest one that has not sent its first
    /// request's headers, or else of the newest idle one; when every one is busy it
    /// gets a 503 and is closed, logged and counted
    /// (`higgsmeter_collector_connections_refused_total`).
    pub max_connections: usize,
    /// Most connections open at once from one peer address (1 to `max_connections`;
    /// default 128, or `max_connections` when that is lower); past it the peer's newest
    /// unfinished or idle connection makes room, or the new one gets a 503.
    pub max_connections_per_peer: Option<usize>,
    /// Longest from accept to the first request's headers (the TLS handshake
    /// included), and longest wait for the next request on an idle keep-alive
    /// connection (default 10 s); then the connection is closed and counted
    /// (`higgsmeter_collector_connections_closed_total{reason}`).
    #[serde(with = "duration_serde")]
    pub read_header_timeout: Duration,
    /// Longest wait for a request's whole body (default 30 s); then 408.
    #[serde(with = "duration_serde")]
    pub read_timeout: Duration,
    /// TLS (the port is then TLS-only; `client_ca_file`: mutual TLS).
    pub tls: Option<TlsServerSettings>,
    /// `auth.authenticator: bearertokenauth`: requests without the token are refused
    /// (401).
    pub auth: Option<AuthSettings>,
}

impl Default for HttpReceiver {
    fn default() -> Self {
        HttpReceiver {
            endpoint: "127.0.0.1:4318".into(),
            max_request_body_size: 16 * 1024 * 1024,
            max_connections: 1024,
            max_connections_per_peer: None,
            read_header_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            tls: None,
            auth: None,
        }
    }
}

impl HttpReceiver {
    /// Checks the settings of receiver `id`'s HTTP listener.
    pub(crate) fn plan(&self, id: &ComponentId, env: PlanEnv<'_>) -> Result<ReceiverPlan, Error> {
        let key = format!("receivers.{id}.protocols.http");
        let error = |path: String, message: &str| Error::Config {
            path,
            message: message.into(),
        };
        let addr = crate::net::resolve(&format!("{key}.endpoint"), &self.endpoint)?;
        if self.max_request_body_size < 1024 {
            return Err(error(
                format!("{key}.max_request_body_size"),
                "must be at least 1024 bytes",
            ));
        }
        if self.max_connections == 0
            || self.read_header_timeout.is_zero()
            || self.read_timeout.is_zero()
        {
            return Err(error(
                key,
                "max_connections, read_header_timeout and read_timeout must be more than 0",
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
            transport: Transport::Http,
            addr,
            max_size: usize::try_from(self.max_request_body_size).unwrap_or(usize::MAX),
            limits: ConnLimits {
                max: self.max_connections,
                per_peer,
                opening: self.read_header_timeout,
                idle: self.read_header_timeout,
            },
            read_timeout: self.read_timeout,
            tls: self.tls.clone(),
            auth: authenticator(&format!("{key}.auth"), &self.auth, env)?,
        })
    }
}

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// `google.rpc.Status`, the body of OTLP/HTTP error responses.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

#[derive(Clone)]
struct AppState {
    aggregator: Arc<Aggregator>,
    stats: Arc<SelfMetrics>,
    max_body: usize,
    read_timeout: std::time::Duration,
    auth: Option<Arc<BearerAuth>>,
    traces: Option<Arc<TraceForwarder>>,
}

fn encode<M: prost::Message + serde::Serialize>(
    encoding: Encoding,
    status: StatusCode,
    message: &M,
) -> Response {
    let body = match encoding {
        Encoding::Protobuf => message.encode_to_vec(),
        Encoding::Json => serde_json::to_vec(message).unwrap_or_default(),
    };
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(encoding.content_type()),
        )],
        body,
    )
        .into_response()
}

/// An error response: a `google.rpc.Status` in the request's encoding, counted.
fn refuse(
    state: &AppState,
    encoding: Encoding,
    status: StatusCode,
    reason: RequestRefusal,
    message: String,
) -> Response {
    state.stats.refuse_request(Transport::Http, reason);
    tracing::debug!(%status, reason = reason.as_str(), %message, "refused an OTLP/HTTP request");
    // gRPC codes: 3 INVALID_ARGUMENT, 8 RESOURCE_EXHAUSTED, 12 UNIMPLEMENTED.
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => 8,
        StatusCode::NOT_IMPLEMENTED | StatusCode::NOT_FOUND => 12,
        StatusCode::SERVICE_UNAVAILABLE => 14,
        StatusCode::REQUEST_TIMEOUT => 4,
        StatusCode::UNAUTHORIZED => 16,
        _ => 3,
    };
    encode(encoding, status, &RpcStatus { code, message })
}

fn request_encoding(headers: &HeaderMap) -> Result<Encoding, String> {
    let raw = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = raw
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(Encoding::Protobuf),
        "application/json" => Ok(Encoding::Json),
        "" => {
            Err("missing Content-Type: send application/x-protobuf or application/json".to_owned())
        }
        other => Err(format!(
            "unsupported Content-Type `{other}`: send application/x-protobuf or application/json"
        )),
    }
}

/// Counts the request, checks its content type, reads and decompresses its body
/// (bounded in size and time); an error is the response to send.
async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Encoding, Bytes), Response> {
    state.stats.request(Transport::Http);
    let encoding = match request_encoding(headers) {
        Ok(e) => e,
        Err(message) => {
            return Err(refuse(
                state,
                Encoding::Protobuf,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                RequestRefusal::ContentType,
                message,
            ));
        }
    };
    if !state.aggregator.accepting() {
        return Err(refuse(
            state,
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            RequestRefusal::Other,
            SHUTTING_DOWN.to_owned(),
        ));
    }
    let max = state.max_body;
    let read = tokio::time::timeout(state.read_timeout, Limited::new(body, max).collect());
    let Ok(read) = read.await else {
        let message = format!(
            "the request body did not arrive within {:?} (receivers.otlp.protocols.http.read_timeout)",
            state.read_timeout
        );
        return Err(refuse(
            state,
            encoding,
            StatusCode::REQUEST_TIMEOUT,
            RequestRefusal::Other,
            message,
        ));
    };
    let raw: Bytes = match read {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            let message = format!(
                "request body is over the {max}-byte limit (receivers.otlp.protocols.http.max_request_body_size)"
            );
            return Err(refuse(
                state,
                encoding,
                StatusCode::PAYLOAD_TOO_LARGE,
                RequestRefusal::TooLarge,
                message,
            ));
        }
        Err(e) => {
            return Err(refuse(
                state,
                encoding,
                StatusCode::BAD_REQUEST,
                RequestRefusal::Other,
                format!("cannot read the request body: {e}"),
            ));
        }
    };
    let content_encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    let bytes: Bytes = match content_encoding.as_str() {
        "identity" | "" => raw,
        "gzip" => {
            let mut out = Vec::with_capacity(raw.len().saturating_mul(4).min(max));
            let mut decoder = flate2::read::GzDecoder::new(&raw[..]).take(max as u64 + 1);
            match decoder.read_to_end(&mut out) {
                Ok(_) if out.len() > max => {
                    let message = format!(
                        "decompressed body is over the {max}-byte limit (receivers.otlp.protocols.http.max_request_body_size)"
                    );
                    return Err(refuse(
                        state,
                        encoding,
                        StatusCode::PAYLOAD_TOO_LARGE,
                        RequestRefusal::TooLarge,
                        message,
                    ));
                }
                Ok(_) => Bytes::from(out),
                Err(e) => {
                    let message = format!("gzip body is truncated or corrupt: {e}");
                    return Err(refuse(
                        state,
                        encoding,
                        StatusCode::BAD_REQUEST,
                        RequestRefusal::Decompress,
                        message,
                    ));
                }
            }
        }
        other => {
            let message = format!("unsupported Content-Encoding `{other}`: send gzip or identity");
            return Err(refuse(
                state,
                encoding,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                RequestRefusal::Decompress,
                message,
            ));
        }
    };
    Ok((encoding, bytes))
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let (encoding, bytes) = match read_body(&state, &headers, body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let result = match encoding {
        Encoding::Protobuf => state
            .aggregator
            .ingest_protobuf(&bytes, Transport::Http)
            .map_err(|e| format!("body is not an OTLP ExportMetricsServiceRequest: {e}")),
        Encoding::Json => state
            .aggregator
            .ingest_json(&bytes, Transport::Http)
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(result) => encode(encoding, StatusCode::OK, &response(&result)),
        Err(message) => refuse(
            &state,
            encoding,
            StatusCode::BAD_REQUEST,
            RequestRefusal::Malformed,
            message,
        ),
    }
}

/// `POST /v1/traces` with a traces pipeline: checked, counted and queued for every
/// traces exporter, unchanged (JSON is re-encoded as protobuf).
async fn traces(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let Some(forwarder) = state.traces.clone() else {
        return unsupported(State(state), headers).await;
    };
    let (encoding, bytes) = match read_body(&state, &headers, body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let bytes = match encoding {
        Encoding::Protobuf => bytes,
        Encoding::Json => match serde_json::from_slice::<ExportTraceServiceRequest>(&bytes) {
            Ok(request) => Bytes::from(prost::Message::encode_to_vec(&request)),
            Err(e) => {
                return refuse(
                    &state,
                    encoding,
                    StatusCode::BAD_REQUEST,
                    RequestRefusal::Malformed,
                    format!("body is not OTLP/JSON ExportTraceServiceRequest: {e}"),
                );
            }
        },
    };
    let spans = match count_spans(&bytes) {
        Ok(n) => n,
        Err(e) => {
            return refuse(
                &state,
                encoding,
                StatusCode::BAD_REQUEST,
                RequestRefusal::Malformed,
                e.to_string(),
            );
        }
    };
    forwarder.received(Transport::Http, spans);
    match forwarder.submit(bytes, spans) {
        Ok(()) => encode(
            encoding,
            StatusCode::OK,
            &ExportTraceServiceResponse::default(),
        ),
        Err(Refused::Full(exporter)) => {
            let mut response = refuse(
                &state,
                encoding,
                StatusCode::SERVICE_UNAVAILABLE,
                RequestRefusal::QueueFull,
                super::queue_full(&exporter),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        Err(Refused::Closed) => refuse(
            &state,
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            RequestRefusal::Other,
            SHUTTING_DOWN.to_owned(),
        ),
    }
}

async fn unsupported(State(state): State<AppState>, headers: HeaderMap) -> Response {
    state.stats.request(Transport::Http);
    let encoding = request_encoding(&headers).unwrap_or(Encoding::Protobuf);
    refuse(
        &state,
        encoding,
        StatusCode::NOT_IMPLEMENTED,
        RequestRefusal::UnsupportedSignal,
        SIGNAL_NOT_SUPPORTED.to_owned(),
    )
}

/// Refuses an OTLP request without the bearer token (401), before its body is read.
async fn authenticate(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    if let Some(auth) = &state.auth
        && !auth.check(request.headers().get(header::AUTHORIZATION))
    {
        state.stats.request(Transport::Http);
        let encoding = request_encoding(request.headers()).unwrap_or(Encoding::Protobuf);
        let mut response = refuse(
            &state,
            encoding,
            StatusCode::UNAUTHORIZED,
            RequestRefusal::Unauthenticated,
            super::UNAUTHENTICATED.to_owned(),
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Serves OTLP/HTTP on `listener` until `cancel`: at most `limits.max` connections
/// (`limits.per_peer` from one address); a connection whose TLS handshake and first
/// request's headers, or whose next request's headers (half-sent, or idle
/// keep-alive), take longer than `limits.opening` is closed (see `net`), a body slower
/// than the read timeout gets 408. On `cancel` it stops accepting, closes unfinished
/// and idle connections at once and lets requests in flight finish; the caller bounds
/// that wait (`service.shutdown_timeout`), and dropping this future drops every
/// connection. With `tls` the port is TLS-only; with `auth` the OTLP paths need the
/// bearer token (`/healthz` and `/readyz` do not).
pub(crate) async fn serve(b: Bound, cancel: CancellationToken) {
    let Bound {
        key,
        listener,
        max_size,
        limits,
        read_timeout,
        tls,
        auth,
        traces: forwarder,
        aggregator,
        stats,
    } = b;
    let state = AppState {
        aggregator,
        stats: stats.clone(),
        max_body: max_size,
        read_timeout,
        auth,
        traces: forwarder,
    };
    let app = Router::new()
        .route("/v1/metrics", post(metrics))
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(unsupported))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz))
        .layer(DefaultBodyLimit::disable())
        .with_state(state);
    let listener = LimitedListener::new(
        listener,
        limits,
        (Transport::Http, key),
        stats,
        cancel.clone(),
    );
    serve_http1(listener, app, tls, cancel).await;
}
