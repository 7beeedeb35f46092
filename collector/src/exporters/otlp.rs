//! OTLP push of the aggregate to an upstream (`exporters.otlp`, `exporters.otlphttp`):
//! what it reads (the fleet view, and with `include_sources` every live source's
//! series) and how it encodes it (an `ExportMetricsServiceRequest`). Queue, retries,
//! counting and the final flush are the push driver's (`push.rs`); TLS, headers,
//! compression and timeouts the client's (`client.rs`).

use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;
use tokio_util::sync::CancellationToken;

use super::client::{ClientSettings, GrpcClient, HttpClient, OtlpClient, protobuf_headers};
use super::push::{self, Batch, Outcomes, Push, Reading, Schedule, SendResult, Signal};
use crate::aggregate::Aggregator;
use crate::config::{OtlpExporter, PushProtocol};
use crate::self_metrics::{ExporterKind, SelfMetrics};

const METRICS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// The client settings of an OTLP exporter (`name`: its key under `exporters`).
pub(crate) fn settings<'a>(name: &'a str, cfg: &'a OtlpExporter) -> ClientSettings<'a> {
    ClientSettings {
        key: name,
        endpoint: &cfg.endpoint,
        tls: &cfg.tls,
        headers: &cfg.headers,
        compression: cfg.compression,
        timeout: cfg.timeout,
    }
}

/// The client of an OTLP exporter for one signal: gRPC calls `grpc_path`; HTTP posts
/// to `http_url`.
pub(crate) fn client(
    protocol: PushProtocol,
    cfg: &OtlpExporter,
    grpc_path: &'static str,
    http_url: impl FnOnce() -> Result<http::Uri, String>,
) -> Result<OtlpClient, String> {
    let key = format!("exporters.{}", kind(protocol).as_str());
    let s = settings(&key, cfg);
    Ok(match protocol {
        PushProtocol::Grpc => OtlpClient::Grpc(GrpcClient::new(&s, grpc_path)?),
        PushProtocol::Http => {
            OtlpClient::Http(HttpClient::new(&s, http_url()?, protobuf_headers())?)
        }
    })
}

/// The exporter kind (self-metric label) of a protocol.
pub(crate) fn kind(protocol: PushProtocol) -> ExporterKind {
    match protocol {
        PushProtocol::Grpc => ExporterKind::Grpc,
        PushProtocol::Http => ExporterKind::Http,
    }
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

/// What the OTLP metrics exporter reads and how it sends.
struct OtlpPush {
    aggregator: Arc<Aggregator>,
    include_sources: bool,
    client: OtlpClient,
}

impl Push for OtlpPush {
    fn read(&self) -> Option<Reading> {
        // Right after a restore the fleet may lag what the upstream last got (it would
        // see a counter reset): push once the sources reported again.
        if !self.aggregator.ready() {
            return None;
        }
        let (request, points) = self.aggregator.export_request(self.include_sources);
        Some(Reading {
            batches: vec![Batch {
                body: Bytes::from(request.encode_to_vec()),
                points,
            }],
            lost: 0,
        })
    }

    async fn send(&self, body: Bytes) -> SendResult {
        self.client.export(body).await
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
    let kind = kind(protocol);
    let client = match client(protocol, &cfg, METRICS_EXPORT_PATH, || {
        signal_url(&cfg.endpoint, "metrics")
    }) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(exporter = kind.as_str(), error = %e, "cannot start the OTLP exporter");
            return;
        }
    };
    let push = Arc::new(OtlpPush {
        aggregator,
        include_sources: cfg.include_sources,
        client,
    });
    let schedule = Schedule {
        interval: cfg.interval,
        queue_size: cfg.sending_queue.queue_size,
        retry: cfg.retry_on_failure.clone(),
    };
    let outcomes = Outcomes::new(kind, Signal::Metrics, &cfg.endpoint, stats);
    push::run_periodic(push, schedule, outcomes, cancel).await;
}
