//! Prometheus remote write 1.0: every `interval` the fleet view (and with
//! `include_sources` the per-source view) is read — the same rows a scrape of
//! `/metrics` gets — encoded as snappy-compressed protobuf `WriteRequest`s and sent to
//! a receiver (Prometheus with `--web.enable-remote-write-receiver`, Mimir, Cortex,
//! Thanos Receive, VictoriaMetrics), over TLS when the endpoint is `https://`.
//!
//! Sends go through the push driver (`exporters/push.rs`): a bounded queue of views
//! read (the oldest dropped and its samples counted when full); 5xx, 429 and network
//! errors are retried with exponential backoff (a `Retry-After` wins); any other 4xx
//! drops the request, counted with reason `refused`. On shutdown the newest view is
//! sent once more. Nothing here holds the aggregator's lock longer than reading the
//! rows, and reading and encoding run off the async workers, so ingest never waits for
//! the receiver.

mod config;
mod encode;
mod prompb;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt as _;
use tokio_util::sync::CancellationToken;

pub use config::RemoteWriteExporter;
pub(crate) use config::SOURCES_VIEW_LABEL;
use encode::{BatchBuilder, Extra};

use serde::de::MapAccess;

use super::client::{ClientSettings, HttpClient};
use super::push::{self, Batch, Outcomes, Push, Reading, Schedule, SendResult, Signal};
use super::settings::{Compression, check_security};
use super::{Exporter, ExporterPlan, ExporterSettings};
use crate::aggregate::{Aggregator, View};
use crate::component::{ComponentId, Context, ReadSettings, Started, required};
use crate::error::Error;
use crate::self_metrics::ExporterStats;

impl RemoteWriteExporter {
    /// Checks the settings of exporter `id`.
    pub(crate) fn plan(&self, id: &ComponentId) -> Result<RemoteWritePlan, Error> {
        let key = format!("exporters.{id}");
        self.validate(&key)?;
        check_security(&key, &self.endpoint, &self.tls, &self.headers)?;
        Ok(RemoteWritePlan {
            id: id.clone(),
            settings: self.clone(),
        })
    }
}

/// A checked remote-write exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteWritePlan {
    pub(crate) id: ComponentId,
    pub(crate) settings: RemoteWriteExporter,
}

impl ReadSettings for RemoteWriteExporter {
    /// `prometheusremotewrite` needs at least an `endpoint`.
    fn read<'de, A: MapAccess<'de>>(id: &ComponentId, map: &mut A) -> Result<Self, A::Error> {
        required(id, "endpoint", map)
    }
}

impl ExporterSettings for RemoteWriteExporter {
    fn metrics_plan(&self, id: &ComponentId) -> Result<ExporterPlan, Error> {
        Ok(ExporterPlan::RemoteWrite(self.plan(id)?))
    }
}

impl Exporter for RemoteWritePlan {
    /// `prometheusremotewrite http://...`: the exporter in a pipeline line.
    fn describe(&self) -> String {
        format!("{} {}", self.id, self.settings.endpoint)
    }

    /// Its line under `exporters:` in `--check-config`.
    fn summary(&self) -> String {
        let rw = &self.settings;
        format!(
            "  {} to {}: every {}, timeout {}",
            self.id,
            rw.endpoint,
            crate::duration::show(rw.interval),
            crate::duration::show(rw.timeout)
        )
    }

    /// Starts sending (nothing to bind: the client is made as it runs).
    async fn start(self, ctx: &Context) -> Result<Started, Error> {
        let stats = ctx.stats.exporter(&self.id.to_string(), Signal::Metrics);
        Ok(Started {
            address: None,
            run: run(self, ctx.aggregator.clone(), stats, ctx.stop.clone()).boxed(),
        })
    }
}

/// The HTTP client of one receiver: the body is snappy-compressed by the encoder, so
/// the client adds no compression of its own.
fn client(key: &str, cfg: &RemoteWriteExporter) -> Result<HttpClient, String> {
    let url = cfg
        .endpoint
        .parse::<http::Uri>()
        .map_err(|e| format!("bad endpoint {}: {e}", cfg.endpoint))?;
    use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderName, HeaderValue};
    let mut fixed = http::HeaderMap::new();
    fixed.insert(CONTENT_ENCODING, HeaderValue::from_static("snappy"));
    fixed.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    fixed.insert(
        HeaderName::from_static("x-prometheus-remote-write-version"),
        HeaderValue::from_static("0.1.0"),
    );
    let settings = ClientSettings {
        key,
        endpoint: &cfg.endpoint,
        tls: &cfg.tls,
        headers: &cfg.headers,
        compression: Compression::None,
        timeout: cfg.timeout,
    };
    HttpClient::new(&settings, url, fixed)
}

/// Reads the views and encodes them (blocking: run it off the async workers).
fn read(
    aggregator: &Aggregator,
    include_sources: bool,
    external: &[(String, String)],
    max_batch: usize,
) -> Reading {
    let fleet = aggregator.rows(View::Fleet);
    let sources = include_sources.then(|| aggregator.rows(View::Sources));
    let timestamp_ms =
        i64::try_from(crate::aggregate::unix_nanos() / 1_000_000).unwrap_or(i64::MAX);
    let mut builder = BatchBuilder::new(Extra {
        external,
        max_batch,
        timestamp_ms,
    });
    builder.add_view(&fleet, None);
    if let Some(sources) = &sources {
        builder.add_view(sources, Some((SOURCES_VIEW_LABEL, "sources")));
    }
    let (batches, lost) = builder.finish();
    Reading {
        batches: batches
            .into_iter()
            .map(|b| Batch {
                body: b.body,
                points: b.samples,
            })
            .collect(),
        lost,
    }
}

/// What the remote write exporter reads and how it sends.
struct RemoteWritePush {
    aggregator: Arc<Aggregator>,
    include_sources: bool,
    external: Vec<(String, String)>,
    max_batch: usize,
    client: HttpClient,
}

impl Push for RemoteWritePush {
    fn read(&self) -> Option<Reading> {
        // Right after a restore the fleet may lag what the receiver last got (it would
        // see a counter reset): send once the sources reported again.
        if !self.aggregator.ready() {
            return None;
        }
        Some(read(
            &self.aggregator,
            self.include_sources,
            &self.external,
            self.max_batch,
        ))
    }

    async fn send(&self, body: Bytes) -> SendResult {
        self.client.post(body).await.map(|_| Default::default())
    }
}

/// Sends the views every `interval` until `cancel`, then flushes once.
async fn run(
    plan: RemoteWritePlan,
    aggregator: Arc<Aggregator>,
    stats: Arc<ExporterStats>,
    cancel: CancellationToken,
) {
    let cfg = plan.settings;
    let client = match client(&format!("exporters.{}", plan.id), &cfg) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(exporter = %plan.id, error = %e, "cannot start the remote write exporter");
            return;
        }
    };
    let push = Arc::new(RemoteWritePush {
        aggregator,
        include_sources: cfg.include_sources,
        external: cfg
            .external_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        max_batch: cfg.max_batch_size_bytes,
        client,
    });
    let schedule = Schedule {
        interval: cfg.interval,
        queue_size: cfg.sending_queue.queue_size,
        retry: cfg.retry_on_failure.clone(),
    };
    let outcomes = Outcomes::new(Signal::Metrics, &cfg.endpoint, stats);
    push::run_periodic(push, schedule, outcomes, cancel).await;
}

#[cfg(test)]
mod tests;
