//! OTLP/HTTP receiver (axum): `POST /v1/metrics` with `application/x-protobuf` or
//! `application/json` bodies, optionally gzip-compressed.

use std::io::Read as _;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{SIGNAL_NOT_SUPPORTED, response};
use crate::aggregate::Aggregator;
use crate::self_metrics::{RequestRefusal, SelfMetrics, Transport};

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

async fn metrics(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    state.stats.request(Transport::Http);
    let encoding = match request_encoding(&headers) {
        Ok(e) => e,
        Err(message) => {
            return refuse(
                &state,
                Encoding::Protobuf,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                RequestRefusal::ContentType,
                message,
            );
        }
    };
    let max = state.max_body;
    let raw: Bytes = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            let message = format!(
                "request body is over the {max}-byte limit (receivers.otlp.protocols.http.max_request_body_size)"
            );
            return refuse(
                &state,
                encoding,
                StatusCode::PAYLOAD_TOO_LARGE,
                RequestRefusal::TooLarge,
                message,
            );
        }
        Err(e) => {
            return refuse(
                &state,
                encoding,
                StatusCode::BAD_REQUEST,
                RequestRefusal::Other,
                format!("cannot read the request body: {e}"),
            );
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
                    return refuse(
                        &state,
                        encoding,
                        StatusCode::PAYLOAD_TOO_LARGE,
                        RequestRefusal::TooLarge,
                        message,
                    );
                }
                Ok(_) => Bytes::from(out),
                Err(e) => {
                    let message = format!("gzip body is truncated or corrupt: {e}");
                    return refuse(
                        &state,
                        encoding,
                        StatusCode::BAD_REQUEST,
                        RequestRefusal::Decompress,
                        message,
                    );
                }
            }
        }
        other => {
            let message = format!("unsupported Content-Encoding `{other}`: send gzip or identity");
            return refuse(
                &state,
                encoding,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                RequestRefusal::Decompress,
                message,
            );
        }
    };
    let result = match encoding {
        Encoding::Protobuf => state
            .aggregator
            .ingest_protobuf(&bytes, Transport::Http)
            .map_err(|e| format!("body is not an OTLP ExportMetricsServiceRequest: {e}")),
        Encoding::Json => serde_json::from_slice::<ExportMetricsServiceRequest>(&bytes)
            .map(|request| state.aggregator.ingest(&request, Transport::Http))
            .map_err(|e| format!("body is not OTLP/JSON ExportMetricsServiceRequest: {e}")),
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

async fn healthz() -> &'static str {
    "ok\n"
}

/// Serves OTLP/HTTP on `listener` until `cancel`.
pub(crate) async fn serve(
    listener: TcpListener,
    max_body: usize,
    aggregator: Arc<Aggregator>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let state = AppState {
        aggregator,
        stats,
        max_body,
    };
    let app = Router::new()
        .route("/v1/metrics", post(metrics))
        .route("/v1/traces", post(unsupported))
        .route("/v1/logs", post(unsupported))
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz))
        .layer(DefaultBodyLimit::disable())
        .with_state(state);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "the OTLP/HTTP receiver stopped");
    }
}
