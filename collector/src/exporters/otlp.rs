//! OTLP push of the aggregate to an upstream, with a bounded queue, retries with
//! exponential backoff, and a final flush on shutdown; over TLS (rustls) when the
//! endpoint is `https://`, with the configured headers (e.g. a bearer token).

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use prost::Message as _;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};

use super::connect::Connector;
use crate::aggregate::Aggregator;
use crate::config::{Compression, OtlpExporter, PushProtocol};
use crate::self_metrics::{ExporterKind, SelfMetrics};

enum Sender {
    Grpc {
        client: MetricsServiceClient<Channel>,
        metadata: tonic::metadata::MetadataMap,
    },
    Http {
        client: Box<Client<Connector, Full<Bytes>>>,
        url: http::Uri,
        gzip: bool,
        headers: http::HeaderMap,
    },
}

/// The exporter's connector: TLS when its endpoint is `https://`.
pub(crate) fn connector(protocol: PushProtocol, cfg: &OtlpExporter) -> Result<Connector, String> {
    if !cfg.endpoint.starts_with("https://") {
        return Ok(Connector::new(cfg.timeout, None));
    }
    let (name, alpn) = match protocol {
        PushProtocol::Grpc => ("otlp", crate::tls::ALPN_H2),
        PushProtocol::Http => ("otlphttp", crate::tls::ALPN_HTTP1),
    };
    let settings = cfg.tls.clone().unwrap_or_default();
    let config = crate::tls::client_config(&format!("exporters.{name}.tls"), &settings, &[alpn])
        .map_err(|e| e.to_string())?;
    let server_name = settings
        .server_name_override
        .map(|n| {
            rustls_pki_types::ServerName::try_from(n.clone())
                .map_err(|e| format!("server_name_override `{n}`: {e}"))
        })
        .transpose()?;
    Ok(Connector::new(cfg.timeout, Some((config, server_name))))
}

/// The gRPC endpoint of an exporter (its own URI plaintext: TLS is the connector's)
/// and the headers as gRPC metadata.
pub(crate) fn grpc_endpoint(
    cfg: &OtlpExporter,
) -> Result<(Endpoint, tonic::metadata::MetadataMap), String> {
    let origin = cfg
        .endpoint
        .parse::<http::Uri>()
        .map_err(|e| format!("bad endpoint {}: {e}", cfg.endpoint))?;
    let authority = origin.authority().map(|a| a.as_str()).unwrap_or_default();
    let endpoint = Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| format!("bad endpoint {}: {e}", cfg.endpoint))?
        .origin(origin)
        .connect_timeout(cfg.timeout)
        .timeout(cfg.timeout);
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (k, v) in &cfg.headers.0 {
        let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
            .map_err(|e| format!("header `{k}`: {e}"))?;
        let value = v
            .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
            .map_err(|e| format!("header `{k}`: {e}"))?;
        metadata.insert(key, value);
    }
    Ok((endpoint, metadata))
}

/// An OTLP/HTTP URL: `endpoint` as written when it has a path (other than the other
/// signal's `/v1/metrics`), else with `/v1/<signal>` appended.
pub(crate) fn signal_url(endpoint: &str, signal: &str) -> Result<http::Uri, String> {
    let trimmed = endpoint.trim_end_matches('/');
    let base = if signal == "metrics" {
        trimmed
    } else {
        trimmed.strip_suffix("/v1/metrics").unwrap_or(trimmed)
    };
    let after_scheme = base.split_once("://").map_or(base, |(_, r)| r);
    let url = if after_scheme.contains('/') && base == trimmed {
        base.to_owned()
    } else {
        format!("{base}/v1/{signal}")
    };
    url.parse::<http::Uri>()
        .map_err(|e| format!("bad endpoint {url}: {e}"))
}

/// A protobuf POST to `url` with `headers`, gzip-compressed when `gzip`.
pub(crate) fn protobuf_post(
    url: &http::Uri,
    headers: &http::HeaderMap,
    gzip: bool,
    body: Bytes,
) -> Result<http::Request<Full<Bytes>>, String> {
    let mut builder = http::Request::post(url.clone());
    if let Some(h) = builder.headers_mut() {
        h.extend(headers.clone());
    }
    builder = builder.header(http::header::CONTENT_TYPE, "application/x-protobuf");
    let body = if gzip {
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(body.len() / 4),
            flate2::Compression::fast(),
        );
        enc.write_all(&body).map_err(|e| e.to_string())?;
        builder = builder.header(http::header::CONTENT_ENCODING, "gzip");
        Bytes::from(enc.finish().map_err(|e| e.to_string())?)
    } else {
        body
    };
    builder.body(Full::new(body)).map_err(|e| e.to_string())
}

/// The exporter's headers, for HTTP.
pub(crate) fn header_map(cfg: &OtlpExporter) -> Result<http::HeaderMap, String> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &cfg.headers.0 {
        let name =
            http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header `{k}`: {e}"))?;
        let value = http::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

impl Sender {
    fn new(protocol: PushProtocol, cfg: &OtlpExporter) -> Result<Sender, String> {
        let connector = connector(protocol, cfg)?;
        match protocol {
            PushProtocol::Grpc => {
                let (endpoint, metadata) = grpc_endpoint(cfg)?;
                let mut client =
                    MetricsServiceClient::new(endpoint.connect_with_connector_lazy(connector));
                if cfg.compression == Compression::Gzip {
                    client = client.send_compressed(CompressionEncoding::Gzip);
                }
                Ok(Sender::Grpc {
                    client: client.accept_compressed(CompressionEncoding::Gzip),
                    metadata,
                })
            }
            PushProtocol::Http => {
                let url = signal_url(&cfg.endpoint, "metrics")?;
                let client = Client::builder(TokioExecutor::new()).build(connector);
                Ok(Sender::Http {
                    client: Box::new(client),
                    url,
                    gzip: cfg.compression == Compression::Gzip,
                    headers: header_map(cfg)?,
                })
            }
        }
    }

    async fn send(
        &mut self,
        request: &ExportMetricsServiceRequest,
        timeout: Duration,
    ) -> Result<(), String> {
        match self {
            Sender::Grpc { client, metadata } => {
                let mut request = tonic::Request::new(request.clone());
                *request.metadata_mut() = metadata.clone();
                let response = tokio::time::timeout(timeout, client.export(request))
                    .await
                    .map_err(|_| "timed out".to_owned())?
                    .map_err(|s| format!("{}: {}", s.code(), s.message()))?;
                if let Some(p) = &response.get_ref().partial_success
                    && p.rejected_data_points > 0
                {
                    tracing::warn!(rejected = p.rejected_data_points, message = %p.error_message, "the upstream refused some points");
                }
                Ok(())
            }
            Sender::Http {
                client,
                url,
                gzip,
                headers,
            } => {
                let body = Bytes::from(request.encode_to_vec());
                let req = protobuf_post(url, headers, *gzip, body)?;
                let response = tokio::time::timeout(timeout, client.request(req))
                    .await
                    .map_err(|_| "timed out".to_owned())?
                    .map_err(|e| format!("{e}"))?;
                let status = response.status();
                if status.is_success() {
                    return Ok(());
                }
                let body = tokio::time::timeout(timeout, response.into_body().collect())
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                    .unwrap_or_default();
                Err(format!(
                    "HTTP {status}: {}",
                    body.chars().take(200).collect::<String>()
                ))
            }
        }
    }
}

/// Pushes the aggregate every `cfg.interval` until `cancel`, then flushes once.
pub(crate) async fn run(
    protocol: PushProtocol,
    cfg: OtlpExporter,
    aggregator: Arc<Aggregator>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let kind = match protocol {
        PushProtocol::Grpc => ExporterKind::Grpc,
        PushProtocol::Http => ExporterKind::Http,
    };
    let mut sender = match Sender::new(protocol, &cfg) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(exporter = kind.as_str(), error = %e, "cannot start the OTLP exporter");
            return;
        }
    };
    let i = kind as usize;
    let mut queue: VecDeque<(ExportMetricsServiceRequest, u64)> = VecDeque::new();
    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    ticker.tick().await;
    let mut backoff = cfg.retry_on_failure.initial_interval;
    let mut next_attempt = Instant::now();
    let mut logged_failure = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {
                if queue.len() >= cfg.sending_queue.queue_size
                    && let Some((_, points)) = queue.pop_front() {
                        stats.export_dropped[i].fetch_add(points, Ordering::Relaxed);
                    }
                // Right after a restore the fleet may lag what the upstream last got
                // (it would see a counter reset): push once the sources reported again.
                if aggregator.ready() {
                    queue.push_back(aggregator.export_request(cfg.include_sources));
                }
                stats.queue_depth[i].store(queue.len() as u64, Ordering::Relaxed);
            }
            _ = tokio::time::sleep_until(next_attempt), if !queue.is_empty() => {
                let Some((request, _)) = queue.front() else { continue };
                match sender.send(request, cfg.timeout).await {
                    Ok(()) => {
                        stats.exports_ok[i].fetch_add(1, Ordering::Relaxed);
                        queue.pop_front();
                        backoff = cfg.retry_on_failure.initial_interval;
                        next_attempt = Instant::now();
                        if logged_failure {
                            tracing::info!(exporter = kind.as_str(), "the OTLP upstream is reachable again");
                            logged_failure = false;
                        }
                    }
                    Err(e) => {
                        stats.exports_failed[i].fetch_add(1, Ordering::Relaxed);
                        if !logged_failure {
                            tracing::warn!(exporter = kind.as_str(), endpoint = %cfg.endpoint, error = %e, "OTLP push failed; retrying with backoff");
                            logged_failure = true;
                        }
                        next_attempt = Instant::now() + backoff;
                        backoff = (backoff * 2).min(cfg.retry_on_failure.max_interval);
                    }
                }
                stats.queue_depth[i].store(queue.len() as u64, Ordering::Relaxed);
            }
        }
    }
    if !aggregator.ready() {
        stats.queue_depth[i].store(0, Ordering::Relaxed);
        return;
    }
    // Flush: the newest snapshot holds everything older ones did (cumulative).
    let (request, points) = aggregator.export_request(cfg.include_sources);
    queue.clear();
    match sender.send(&request, cfg.timeout).await {
        Ok(()) => {
            stats.exports_ok[i].fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            stats.exports_failed[i].fetch_add(1, Ordering::Relaxed);
            stats.export_dropped[i].fetch_add(points, Ordering::Relaxed);
            tracing::warn!(exporter = kind.as_str(), error = %e, "final OTLP flush failed");
        }
    }
    stats.queue_depth[i].store(0, Ordering::Relaxed);
}
