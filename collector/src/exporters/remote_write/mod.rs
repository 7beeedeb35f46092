//! Prometheus remote write 1.0: every `interval` the fleet view (and with
//! `include_sources` the per-source view) is read — the same rows a scrape of
//! `/metrics` gets — encoded as snappy-compressed protobuf `WriteRequest`s and sent to
//! a receiver (Prometheus with `--web.enable-remote-write-receiver`, Mimir, Cortex,
//! Thanos Receive, VictoriaMetrics), over TLS when the endpoint is `https://`.
//!
//! Sends go through a bounded queue of views read (the oldest dropped and its samples
//! counted when full); 5xx, 429 and network errors are retried with exponential
//! backoff (a `Retry-After` wins); any other 4xx drops the request, counted. On
//! shutdown the newest view is sent once more. Nothing here holds the aggregator's
//! lock longer than reading the rows, and reading and encoding run off the async
//! workers, so ingest never waits for the receiver.

mod config;
mod encode;
mod prompb;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

pub use config::RemoteWriteExporter;
pub(crate) use config::{KEY, SOURCES_VIEW_LABEL};
use encode::{Batch, BatchBuilder, Extra};

use super::connect::Connector;
use crate::aggregate::{Aggregator, View};
use crate::self_metrics::{ExporterKind, SelfMetrics};

/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// What a failed send means for its request.
#[derive(Debug)]
enum Failure {
    /// Send it again later (5xx, 429, a network error, a timeout), not before
    /// `retry_after` when the receiver said so.
    Retry {
        error: String,
        retry_after: Option<Duration>,
    },
    /// The receiver refused it for good (4xx other than 429): drop it.
    Refused(String),
}

/// The HTTP client of one receiver.
struct Sender {
    client: Client<Connector, Full<Bytes>>,
    url: http::Uri,
    headers: http::HeaderMap,
    timeout: Duration,
}

impl Sender {
    fn new(cfg: &RemoteWriteExporter) -> Result<Sender, String> {
        let url = cfg
            .endpoint
            .parse::<http::Uri>()
            .map_err(|e| format!("bad endpoint {}: {e}", cfg.endpoint))?;
        let tls = if cfg.endpoint.starts_with("https://") {
            let settings = cfg.tls.clone().unwrap_or_default();
            let config = crate::tls::client_config(
                &format!("{KEY}.tls"),
                &settings,
                &[crate::tls::ALPN_HTTP1],
            )
            .map_err(|e| e.to_string())?;
            let name = settings
                .server_name_override
                .map(|n| {
                    rustls_pki_types::ServerName::try_from(n.clone())
                        .map_err(|e| format!("server_name_override `{n}`: {e}"))
                })
                .transpose()?;
            Some((config, name))
        } else {
            None
        };
        let connector = Connector::new(cfg.timeout, tls);
        let mut headers = http::HeaderMap::new();
        for (k, v) in &cfg.headers.0 {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| format!("header `{k}`: {e}"))?;
            let value = http::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
            headers.insert(name, value);
        }
        use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("snappy"));
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        headers.insert(
            HeaderName::from_static("x-prometheus-remote-write-version"),
            HeaderValue::from_static("0.1.0"),
        );
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("higgsmeter-collector/", env!("CARGO_PKG_VERSION"))),
        );
        Ok(Sender {
            client: Client::builder(TokioExecutor::new()).build(connector),
            url,
            headers,
            timeout: cfg.timeout,
        })
    }

    async fn send(&self, body: Bytes) -> Result<(), Failure> {
        let mut request = http::Request::post(self.url.clone());
        if let Some(h) = request.headers_mut() {
            h.extend(self.headers.clone());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| Failure::Refused(e.to_string()))?;
        let response = tokio::time::timeout(self.timeout, self.client.request(request))
            .await
            .map_err(|_| Failure::Retry {
                error: "timed out".to_owned(),
                retry_after: None,
            })?
            .map_err(|e| Failure::Retry {
                error: e.to_string(),
                retry_after: None,
            })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
        // Read the body whole (short, bounded): the connection is then reused.
        let body = tokio::time::timeout(self.timeout, response.into_body().collect())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        if status.is_success() {
            return Ok(());
        }
        let error = format!(
            "HTTP {status}: {}",
            body.trim().chars().take(200).collect::<String>()
        );
        if status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS {
            Err(Failure::Retry { error, retry_after })
        } else {
            Err(Failure::Refused(error))
        }
    }
}

/// One reading of the views, as requests still to send.
struct Pending {
    batches: VecDeque<Batch>,
}

impl Pending {
    fn samples(&self) -> u64 {
        self.batches.iter().map(|b| b.samples).sum()
    }
}

/// Reads the views and encodes them (blocking: run it off the async workers).
fn read(
    aggregator: &Aggregator,
    include_sources: bool,
    external: &[(String, String)],
    max_batch: usize,
) -> (Vec<Batch>, u64) {
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
    builder.finish()
}

/// Reads the views on the blocking pool; `None` if that task failed.
async fn read_off_thread(
    aggregator: &Arc<Aggregator>,
    cfg: &RemoteWriteExporter,
    external: &Arc<Vec<(String, String)>>,
) -> Option<(Vec<Batch>, u64)> {
    let aggregator = aggregator.clone();
    let external = external.clone();
    let include_sources = cfg.include_sources;
    let max_batch = cfg.max_batch_size_bytes;
    tokio::task::spawn_blocking(move || read(&aggregator, include_sources, &external, max_batch))
        .await
        .ok()
}

/// Sends the views every `cfg.interval` until `cancel`, then flushes once.
pub(crate) async fn run(
    cfg: RemoteWriteExporter,
    aggregator: Arc<Aggregator>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let i = ExporterKind::RemoteWrite as usize;
    let name = ExporterKind::RemoteWrite.as_str();
    let sender = match Sender::new(&cfg) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(exporter = name, error = %e, "cannot start the remote write exporter");
            return;
        }
    };
    let external: Arc<Vec<(String, String)>> = Arc::new(
        cfg.external_labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    let drop_samples = |n: u64| {
        if n > 0 {
            stats.export_dropped[i].fetch_add(n, Ordering::Relaxed);
        }
    };
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    ticker.tick().await;
    let mut backoff = cfg.retry_on_failure.initial_interval;
    let mut next_attempt = Instant::now();
    let mut failing = false;
    let mut refusing = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {
                // Right after a restore the fleet may lag what the receiver last got
                // (it would see a counter reset): send once the sources reported again.
                if aggregator.ready()
                    && let Some((batches, lost)) = read_off_thread(&aggregator, &cfg, &external).await
                {
                    drop_samples(lost);
                    if queue.len() >= cfg.sending_queue.queue_size
                        && let Some(oldest) = queue.pop_front()
                    {
                        drop_samples(oldest.samples());
                    }
                    if !batches.is_empty() {
                        queue.push_back(Pending { batches: batches.into() });
                    }
                }
                stats.queue_depth[i].store(queue.len() as u64, Ordering::Relaxed);
            }
            _ = tokio::time::sleep_until(next_attempt), if !queue.is_empty() => {
                let Some(batch) = queue.front().and_then(|p| p.batches.front()).cloned() else {
                    queue.pop_front();
                    continue;
                };
                let sent = match sender.send(batch.body).await {
                    Ok(()) => {
                        stats.exports_ok[i].fetch_add(1, Ordering::Relaxed);
                        backoff = cfg.retry_on_failure.initial_interval;
                        next_attempt = Instant::now();
                        if failing || refusing {
                            tracing::info!(exporter = name, "the remote write receiver takes requests again");
                            failing = false;
                            refusing = false;
                        }
                        true
                    }
                    Err(Failure::Refused(e)) => {
                        stats.exports_failed[i].fetch_add(1, Ordering::Relaxed);
                        drop_samples(batch.samples);
                        if !refusing {
                            tracing::warn!(exporter = name, endpoint = %cfg.endpoint, error = %e, "the remote write receiver refused a request; dropped (counted in higgsmeter_collector_export_dropped_points_total)");
                            refusing = true;
                        }
                        next_attempt = Instant::now();
                        true
                    }
                    Err(Failure::Retry { error, retry_after }) => {
                        stats.exports_failed[i].fetch_add(1, Ordering::Relaxed);
                        if !failing {
                            tracing::warn!(exporter = name, endpoint = %cfg.endpoint, error = %error, "remote write failed; retrying with backoff");
                            failing = true;
                        }
                        next_attempt = Instant::now() + retry_after.unwrap_or(backoff);
                        backoff = (backoff * 2).min(cfg.retry_on_failure.max_interval);
                        false
                    }
                };
                if sent && let Some(front) = queue.front_mut() {
                    front.batches.pop_front();
                    if front.batches.is_empty() {
                        queue.pop_front();
                    }
                }
                stats.queue_depth[i].store(queue.len() as u64, Ordering::Relaxed);
            }
        }
    }
    // Flush: the newest reading holds everything older ones did (cumulative); the
    // older ones' intermediate samples are left out, not counted as dropped.
    queue.clear();
    stats.queue_depth[i].store(0, Ordering::Relaxed);
    if !aggregator.ready() {
        return;
    }
    let Some((batches, lost)) = read_off_thread(&aggregator, &cfg, &external).await else {
        return;
    };
    drop_samples(lost);
    let mut batches = batches.into_iter();
    while let Some(batch) = batches.next() {
        let samples = batch.samples;
        match sender.send(batch.body).await {
            Ok(()) => {
                stats.exports_ok[i].fetch_add(1, Ordering::Relaxed);
            }
            Err(Failure::Refused(e) | Failure::Retry { error: e, .. }) => {
                stats.exports_failed[i].fetch_add(1, Ordering::Relaxed);
                drop_samples(samples + batches.by_ref().map(|b| b.samples).sum::<u64>());
                tracing::warn!(exporter = name, error = %e, "final remote write flush failed");
            }
        }
    }
}

#[cfg(test)]
mod tests;
