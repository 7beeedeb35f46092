//! OTLP push of the aggregate to an upstream (`exporters.otlp`, `exporters.otlphttp`,
//! and their named instances `otlp/NAME`): its settings and their checks, what it
//! reads (the fleet view, and with `include_sources` every live source's series) and
//! how it encodes it (an `ExportMetricsServiceRequest`). Queue, retries, counting and
//! the final flush are the push driver's (`push.rs`); TLS, headers, compression and
//! timeouts the client's (`client.rs`). The traces pipeline (`traces.rs`) pushes with
//! the same settings.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt as _;
use prost::Message as _;
use serde::Deserialize;
use serde::de::MapAccess;

use super::client::{ClientSettings, GrpcClient, HttpClient, OtlpClient, protobuf_headers};
use super::push::{self, Batch, Outcomes, Push, Reading, Schedule, SendResult, Signal};
use super::settings::{
    Compression, Headers, RetryOnFailure, SendingQueue, check_push, check_security, check_url,
    default_export_interval, default_timeout,
};
use super::{Exporter, ExporterPlan, ExporterSettings};
use crate::aggregate::Aggregator;
use crate::component::{ComponentId, Context, ReadSettings, Started, required};
use crate::duration as duration_serde;
use crate::error::Error;
use crate::tls::TlsClientSettings;

/// `exporters.otlp` / `exporters.otlphttp` (and `otlp/NAME`, `otlphttp/NAME`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpExporter {
    /// The upstream: `http://host:4317` (gRPC) or `http://host:4318` (HTTP; `/v1/metrics`
    /// is appended unless the URL has a path); `https://` for TLS. Required.
    pub endpoint: String,
    /// TLS settings for an `https://` endpoint (default: the system's roots).
    #[serde(default)]
    pub tls: Option<TlsClientSettings>,
    /// Headers sent with every push, e.g. `authorization: "Bearer ..."`.
    #[serde(default)]
    pub headers: Headers,
    /// `otlphttp` only: where traces go (default: `endpoint` with `/v1/traces`, or the
    /// endpoint as written when it has a path other than `/v1/metrics`).
    #[serde(default)]
    pub traces_endpoint: Option<String>,
    /// How often the aggregate is pushed (default 1 s, the catalog's `STATUS_INTERVAL_S`).
    #[serde(default = "default_export_interval", with = "duration_serde")]
    pub interval: Duration,
    /// Per-attempt timeout (default 5 s).
    #[serde(default = "default_timeout", with = "duration_serde")]
    pub timeout: Duration,
    /// `gzip` (default) or `none`.
    #[serde(default)]
    pub compression: Compression,
    /// Also push every live source's series, with its own resource (default false).
    #[serde(default)]
    pub include_sources: bool,
    /// The bounded queue of pending pushes.
    #[serde(default)]
    pub sending_queue: SendingQueue,
    /// Retries with exponential backoff.
    #[serde(default)]
    pub retry_on_failure: RetryOnFailure,
}

impl OtlpExporter {
    /// Pushes to `endpoint` with every other setting at its default.
    pub fn new(endpoint: impl Into<String>) -> OtlpExporter {
        OtlpExporter {
            endpoint: endpoint.into(),
            tls: None,
            headers: Headers::default(),
            traces_endpoint: None,
            interval: default_export_interval(),
            timeout: default_timeout(),
            compression: Compression::default(),
            include_sources: false,
            sending_queue: SendingQueue::default(),
            retry_on_failure: RetryOnFailure::default(),
        }
    }

    /// Checks the settings of exporter `id` pushing metrics with `protocol`.
    pub(crate) fn plan(&self, id: &ComponentId, protocol: PushProtocol) -> Result<OtlpPlan, Error> {
        let key = format!("exporters.{id}");
        check_url(&format!("{key}.endpoint"), &self.endpoint)?;
        check_security(&key, &self.endpoint, &self.tls, &self.headers)?;
        check_push(
            &key,
            self.interval,
            self.timeout,
            &self.sending_queue,
            &self.retry_on_failure,
        )?;
        Ok(OtlpPlan {
            id: id.clone(),
            protocol,
            settings: self.clone(),
        })
    }

    /// Checks the settings of exporter `id` forwarding spans with `protocol`.
    pub(crate) fn plan_traces(
        &self,
        id: &ComponentId,
        protocol: PushProtocol,
    ) -> Result<OtlpPlan, Error> {
        let key = format!("exporters.{id}");
        check_url(&format!("{key}.endpoint"), &self.endpoint)?;
        if let Some(t) = &self.traces_endpoint {
            check_url(&format!("{key}.traces_endpoint"), t)?;
        }
        check_security(&key, &self.endpoint, &self.tls, &self.headers)?;
        if self.sending_queue.traces_queue_mib == 0 || self.timeout.is_zero() {
            return Err(Error::Config {
                path: format!("{key}.sending_queue.traces_queue_mib"),
                message: "traces_queue_mib and timeout must be more than 0".into(),
            });
        }
        Ok(OtlpPlan {
            id: id.clone(),
            protocol,
            settings: self.clone(),
        })
    }
}

/// Which OTLP transport an exporter pushes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushProtocol {
    /// `exporters.otlp`.
    Grpc,
    /// `exporters.otlphttp`.
    Http,
}

/// A checked OTLP exporter: its key, transport and settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpPlan {
    pub(crate) id: ComponentId,
    pub(crate) protocol: PushProtocol,
    pub(crate) settings: OtlpExporter,
}

impl OtlpPlan {
    /// Its key under `exporters`.
    pub fn id(&self) -> &ComponentId {
        &self.id
    }

    /// Its settings.
    pub fn settings(&self) -> &OtlpExporter {
        &self.settings
    }
}

impl ReadSettings for OtlpExporter {
    /// `otlp` and `otlphttp` need at least an `endpoint`.
    fn read<'de, A: MapAccess<'de>>(id: &ComponentId, map: &mut A) -> Result<Self, A::Error> {
        required(id, "endpoint", map)
    }
}

/// The protocol of an exporter by its type: `otlphttp` pushes OTLP/HTTP, `otlp` gRPC.
fn protocol(id: &ComponentId) -> PushProtocol {
    if id.kind() == "otlphttp" {
        PushProtocol::Http
    } else {
        PushProtocol::Grpc
    }
}

impl ExporterSettings for OtlpExporter {
    fn metrics_plan(&self, id: &ComponentId) -> Result<ExporterPlan, Error> {
        Ok(ExporterPlan::Otlp(self.plan(id, protocol(id))?))
    }

    fn traces_plan(&self, id: &ComponentId) -> Option<Result<OtlpPlan, Error>> {
        Some(self.plan_traces(id, protocol(id)))
    }
}

impl Exporter for OtlpPlan {
    /// `otlp/primary http://...`: the exporter in a pipeline line.
    fn describe(&self) -> String {
        format!("{} {}", self.id, self.settings.endpoint)
    }

    /// Its line under `exporters:` in `--check-config`.
    fn summary(&self) -> String {
        let e = &self.settings;
        format!(
            "  {} to {}: every {}, timeout {}, per-source series {}",
            self.id,
            e.endpoint,
            crate::duration::show(e.interval),
            crate::duration::show(e.timeout),
            if e.include_sources {
                "included"
            } else {
                "not included"
            }
        )
    }

    /// Starts pushing the aggregate (nothing to bind: the client is made as it runs).
    async fn start(self, ctx: &Context) -> Result<Started, Error> {
        Ok(Started {
            address: None,
            run: run(self, ctx.clone()).boxed(),
        })
    }
}

const METRICS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// The client settings of an OTLP exporter (`key`: `exporters.<id>`).
pub(crate) fn settings<'a>(key: &'a str, cfg: &'a OtlpExporter) -> ClientSettings<'a> {
    ClientSettings {
        key,
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
    plan: &OtlpPlan,
    grpc_path: &'static str,
    http_url: impl FnOnce() -> Result<http::Uri, String>,
) -> Result<OtlpClient, String> {
    let key = format!("exporters.{}", plan.id);
    let s = settings(&key, &plan.settings);
    Ok(match plan.protocol {
        PushProtocol::Grpc => OtlpClient::Grpc(GrpcClient::new(&s, grpc_path)?),
        PushProtocol::Http => {
            OtlpClient::Http(HttpClient::new(&s, http_url()?, protobuf_headers())?)
        }
    })
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

/// Pushes the aggregate every `interval` until the exporters stop, then flushes once.
async fn run(plan: OtlpPlan, ctx: Context) {
    let name = plan.id.to_string();
    let client = match client(&plan, METRICS_EXPORT_PATH, || {
        signal_url(&plan.settings.endpoint, "metrics")
    }) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(exporter = name, error = %e, "cannot start the OTLP exporter");
            return;
        }
    };
    let cfg = plan.settings;
    let push = Arc::new(OtlpPush {
        aggregator: ctx.aggregator.clone(),
        include_sources: cfg.include_sources,
        client,
    });
    let schedule = Schedule {
        interval: cfg.interval,
        queue_size: cfg.sending_queue.queue_size,
        retry: cfg.retry_on_failure.clone(),
    };
    let stats = ctx.stats.exporter(&name, Signal::Metrics);
    let outcomes = Outcomes::new(Signal::Metrics, &cfg.endpoint, stats);
    push::run_periodic(push, schedule, outcomes, ctx.stop).await;
}
