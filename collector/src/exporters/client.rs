//! The one client setup of the pushing exporters (OTLP gRPC and HTTP, remote write,
//! traces): the connector (TCP, then rustls when the endpoint is `https://`), the
//! configured headers, gzip, the per-request timeout, and what an answer means as a
//! [`SendResult`]. An exporter only says where to send and what content type it
//! encodes; sending, timing out and reading the answer happen here.

use std::io::Write as _;
use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prost::Message as _;
use tonic::codec::CompressionEncoding;

use super::connect::Connector;
use super::push::{Accepted, Failure, SendResult};
use super::settings::{Compression, Headers};
use crate::tls::TlsClientSettings;

/// The longest `Retry-After` (or gRPC `RetryInfo`) delay honoured.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// How to reach one upstream, as an exporter's config says it.
pub(crate) struct ClientSettings<'a> {
    /// The exporter's key (`exporters.otlp`), for errors.
    pub(crate) key: &'a str,
    /// The configured endpoint; `https://` turns TLS on.
    pub(crate) endpoint: &'a str,
    /// `tls` (default: the system's roots).
    pub(crate) tls: &'a Option<TlsClientSettings>,
    /// `headers`, sent with every request.
    pub(crate) headers: &'a Headers,
    /// `compression`.
    pub(crate) compression: Compression,
    /// Per-request timeout: connecting, sending and reading the answer.
    pub(crate) timeout: Duration,
}

impl ClientSettings<'_> {
    /// The connector, offering `alpn` over TLS.
    fn connector(&self, alpn: &[u8]) -> Result<Connector, String> {
        if !self.endpoint.starts_with("https://") {
            return Ok(Connector::new(self.timeout, None));
        }
        let settings = self.tls.clone().unwrap_or_default();
        let config = crate::tls::client_config(&format!("{}.tls", self.key), &settings, &[alpn])
            .map_err(|e| e.to_string())?;
        let server_name = settings
            .server_name_override
            .map(|n| {
                rustls_pki_types::ServerName::try_from(n.clone())
                    .map_err(|e| format!("server_name_override `{n}`: {e}"))
            })
            .transpose()?;
        Ok(Connector::new(self.timeout, Some((config, server_name))))
    }

    /// The configured headers as an HTTP header map.
    fn header_map(&self) -> Result<http::HeaderMap, String> {
        let mut headers = http::HeaderMap::new();
        for (k, v) in &self.headers.0 {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| format!("header `{k}`: {e}"))?;
            let value = http::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
            headers.insert(name, value);
        }
        Ok(headers)
    }
}

/// POSTs bodies to one HTTP upstream (OTLP/HTTP, remote write).
pub(crate) struct HttpClient {
    client: Client<Connector, Full<Bytes>>,
    url: http::Uri,
    headers: http::HeaderMap,
    gzip: bool,
    timeout: Duration,
}

impl HttpClient {
    /// A client POSTing to `url` with the configured headers and then `fixed` (the
    /// exporter's content type and the like, which win).
    pub(crate) fn new(
        s: &ClientSettings<'_>,
        url: http::Uri,
        fixed: http::HeaderMap,
    ) -> Result<HttpClient, String> {
        let connector = s.connector(crate::tls::ALPN_HTTP1)?;
        let mut headers = s.header_map()?;
        headers.extend(fixed);
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!(
                "higgsmeter-collector/",
                env!("CARGO_PKG_VERSION")
            )),
        );
        Ok(HttpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            url,
            headers,
            gzip: s.compression == Compression::Gzip,
            timeout: s.timeout,
        })
    }

    /// One POST of `body` (gzipped when configured) within the timeout: the
    /// response's body on a 2xx, else what the status means.
    pub(crate) async fn post(&self, body: Bytes) -> Result<Bytes, Failure> {
        let mut request = http::Request::post(self.url.clone());
        if let Some(h) = request.headers_mut() {
            h.extend(self.headers.clone());
        }
        let body = if self.gzip {
            request = request.header(http::header::CONTENT_ENCODING, "gzip");
            gzip(&body).map_err(|e| Failure::Refused {
                error: format!("compressing the request: {e}"),
            })?
        } else {
            body
        };
        let request = request
            .body(Full::new(body))
            .map_err(|e| Failure::Refused {
                error: format!("building the request: {e}"),
            })?;
        let call = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| Failure::Retry {
                    error: error_chain(&e),
                    after: None,
                })?;
            let status = response.status();
            let after = retry_after(response.headers());
            // Read the body whole (bounded by the timeout): the connection is reused.
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, Failure>((status, after, body))
        };
        let (status, after, body) =
            tokio::time::timeout(self.timeout, call)
                .await
                .map_err(|_| Failure::Retry {
                    error: format!("no answer within {:?} (timeout)", self.timeout),
                    after: None,
                })??;
        if status.is_success() {
            return Ok(body);
        }
        Err(http_failure(status, after, &body))
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Bytes> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    enc.write_all(body)?;
    Ok(Bytes::from(enc.finish()?))
}

/// An error with its sources (hyper's own message is often just "client error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// What a non-2xx HTTP answer means: 5xx, 429 and 408 are retried (after
/// `Retry-After` when given); any other status is a refusal.
pub(crate) fn http_failure(
    status: http::StatusCode,
    after: Option<Duration>,
    body: &[u8],
) -> Failure {
    let error = format!("HTTP {status}: {}", body_text(body));
    if status.is_server_error()
        || status == http::StatusCode::TOO_MANY_REQUESTS
        || status == http::StatusCode::REQUEST_TIMEOUT
    {
        Failure::Retry { error, after }
    } else {
        Failure::Refused { error }
    }
}

/// An error body as text: an OTLP `google.rpc.Status`'s message, else the text itself
/// (at most 200 characters).
fn body_text(body: &[u8]) -> String {
    if let Ok(status) = RpcStatus::decode(body)
        && !status.message.is_empty()
        && status.message.chars().all(|c| !c.is_control())
    {
        return status.message.chars().take(200).collect();
    }
    String::from_utf8_lossy(body)
        .trim()
        .chars()
        .take(200)
        .collect()
}

/// `Retry-After`: seconds, or an HTTP date; at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let delay = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = http_date(value)?;
            at.duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
        }
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form RFC 9110 says senders
/// use.
fn http_date(text: &str) -> Option<std::time::SystemTime> {
    let (_, rest) = text.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + s;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// `google.rpc.Status`: an OTLP/HTTP error body, and gRPC's `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// An OTLP export response (metrics, traces and logs share its shape):
/// `partial_success` = 1 holding the rejected count = 1 and `error_message` = 2.
#[derive(Clone, PartialEq, prost::Message)]
struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PartialSuccess {
    #[prost(int64, tag = "1")]
    rejected: i64,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// An OTLP success answer's partial success (an undecodable or empty answer: all
/// accepted).
pub(crate) fn otlp_accepted(body: &[u8]) -> Accepted {
    match ExportResponse::decode(body)
        .ok()
        .and_then(|r| r.partial_success)
    {
        Some(p) if p.rejected > 0 => Accepted {
            rejected: u64::try_from(p.rejected).unwrap_or(0),
            message: p.error_message,
        },
        _ => Accepted::default(),
    }
}

/// What a gRPC status means, as the OTLP specification's table says: `CANCELLED`,
/// `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS` and
/// `RESOURCE_EXHAUSTED` are retried (after the status' `RetryInfo` delay when it has
/// one). `UNKNOWN` and `INTERNAL` are retried too: tonic reports a connection cut
/// mid-request with them, and dropping data on a transport hiccup is worse than one
/// more attempt. Every other code (`INVALID_ARGUMENT`, `UNAUTHENTICATED`,
/// `PERMISSION_DENIED`, `UNIMPLEMENTED`, ...) is a refusal.
pub(crate) fn grpc_failure(status: &tonic::Status) -> Failure {
    use tonic::Code;
    let error = format!("gRPC {:?}: {}", status.code(), status.message());
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss
        | Code::ResourceExhausted
        | Code::Unknown
        | Code::Internal => Failure::Retry {
            error,
            after: grpc_retry_delay(status.details()),
        },
        _ => Failure::Refused { error },
    }
}

/// The `RetryInfo` delay in a status' details, at most [`MAX_RETRY_AFTER`].
fn grpc_retry_delay(details: &[u8]) -> Option<Duration> {
    const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";
    let status = RpcStatus::decode(details).ok()?;
    let info = status.details.iter().find(|d| d.type_url == RETRY_INFO)?;
    let delay = RetryInfo::decode(info.value.as_slice()).ok()?.retry_delay?;
    let secs = u64::try_from(delay.seconds).ok()?;
    let nanos = u32::try_from(delay.nanos).ok()?;
    Some(Duration::new(secs, nanos.min(999_999_999)).min(MAX_RETRY_AFTER))
}

/// Unary OTLP/gRPC calls of request bytes already encoded (metrics or traces).
pub(crate) struct GrpcClient {
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
    metadata: tonic::metadata::MetadataMap,
    path: http::uri::PathAndQuery,
    timeout: Duration,
}

impl GrpcClient {
    /// A lazily connecting client calling `path` (e.g.
    /// `/opentelemetry.proto.collector.metrics.v1.MetricsService/Export`).
    pub(crate) fn new(s: &ClientSettings<'_>, path: &'static str) -> Result<GrpcClient, String> {
        let connector = s.connector(crate::tls::ALPN_H2)?;
        let origin = s
            .endpoint
            .parse::<http::Uri>()
            .map_err(|e| format!("bad endpoint {}: {e}", s.endpoint))?;
        let authority = origin.authority().map(|a| a.as_str()).unwrap_or_default();
        // Its own URI plaintext: TLS is the connector's.
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
            .map_err(|e| format!("bad endpoint {}: {e}", s.endpoint))?
            .origin(origin)
            .connect_timeout(s.timeout)
            .timeout(s.timeout);
        let mut metadata = tonic::metadata::MetadataMap::new();
        for (k, v) in &s.headers.0 {
            let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|e| format!("header `{k}`: {e}"))?;
            let value = v
                .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
                .map_err(|e| format!("header `{k}`: {e}"))?;
            metadata.insert(key, value);
        }
        let grpc = tonic::client::Grpc::new(endpoint.connect_with_connector_lazy(connector));
        let grpc = if s.compression == Compression::Gzip {
            grpc.send_compressed(CompressionEncoding::Gzip)
        } else {
            grpc
        }
        .accept_compressed(CompressionEncoding::Gzip);
        Ok(GrpcClient {
            grpc,
            metadata,
            path: http::uri::PathAndQuery::from_static(path),
            timeout: s.timeout,
        })
    }

    /// One call with `request` (an encoded OTLP export request) within the timeout.
    pub(crate) async fn export(&self, request: Bytes) -> SendResult {
        let mut grpc = self.grpc.clone();
        let call = async {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(error_chain(&e)))?;
            let mut request = tonic::Request::new(request);
            *request.metadata_mut() = self.metadata.clone();
            grpc.unary(request, self.path.clone(), RawCodec).await
        };
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(Failure::Retry {
                error: format!("no answer within {:?} (timeout)", self.timeout),
                after: None,
            }),
            Ok(Ok(response)) => Ok(otlp_accepted(&response.into_inner())),
            Ok(Err(status)) => Err(grpc_failure(&status)),
        }
    }
}

/// Passes request bytes through and hands the response's bytes back.
#[derive(Clone, Copy)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// An OTLP upstream over gRPC or HTTP (metrics and traces alike).
// One per exporter, built once: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum OtlpClient {
    /// `exporters.otlp`.
    Grpc(GrpcClient),
    /// `exporters.otlphttp`.
    Http(HttpClient),
}

impl OtlpClient {
    /// Sends one encoded export request.
    pub(crate) async fn export(&self, request: Bytes) -> SendResult {
        match self {
            OtlpClient::Grpc(c) => c.export(request).await,
            OtlpClient::Http(c) => c.post(request).await.map(|body| otlp_accepted(&body)),
        }
    }
}

/// The fixed headers of an OTLP/HTTP protobuf POST.
pub(crate) fn protobuf_headers() -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_retried_or_refused() {
        let retry = |f: Failure| matches!(f, Failure::Retry { .. });
        for code in [500, 502, 503, 504, 429, 408] {
            let s = http::StatusCode::from_u16(code).unwrap();
            assert!(retry(http_failure(s, None, b"")), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 415] {
            let s = http::StatusCode::from_u16(code).unwrap();
            assert!(!retry(http_failure(s, None, b"")), "{code}");
        }
        assert!(!retry(grpc_failure(&tonic::Status::invalid_argument("x"))));
        assert!(!retry(grpc_failure(&tonic::Status::unauthenticated("x"))));
        assert!(retry(grpc_failure(&tonic::Status::unavailable("x"))));
        assert!(retry(grpc_failure(&tonic::Status::resource_exhausted("x"))));
    }

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(http::header::RETRY_AFTER, "99999".parse().unwrap());
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(
            http::header::RETRY_AFTER,
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO), "a past date: now");
        assert_eq!(
            http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(std::time::UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        h.insert(http::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn grpc_retry_info_sets_the_delay() {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: 3,
                nanos: 0,
            }),
        };
        let details = RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: vec![ProtoAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        let status = tonic::Status::with_details(
            tonic::Code::ResourceExhausted,
            "slow down",
            Bytes::from(details.encode_to_vec()),
        );
        match grpc_failure(&status) {
            Failure::Retry { after, .. } => assert_eq!(after, Some(Duration::from_secs(3))),
            Failure::Refused { error } => panic!("refused: {error}"),
        }
    }

    #[test]
    fn partial_success_is_read_from_metrics_and_traces_answers() {
        use opentelemetry_proto::tonic::collector::metrics::v1::{
            ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
        };
        use opentelemetry_proto::tonic::collector::trace::v1::{
            ExportTracePartialSuccess, ExportTraceServiceResponse,
        };
        let m = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: 4,
                error_message: "bad".into(),
            }),
        };
        let a = otlp_accepted(&m.encode_to_vec());
        assert_eq!((a.rejected, a.message.as_str()), (4, "bad"));
        let t = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 2,
                error_message: "no".into(),
            }),
        };
        assert_eq!(otlp_accepted(&t.encode_to_vec()).rejected, 2);
        assert_eq!(otlp_accepted(b"").rejected, 0);
    }
}
