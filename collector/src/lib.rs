//! A small OTLP collector for GPU worker fleets: it receives every rank's and worker's
//! metrics over OTLP (gRPC and HTTP, from the higgsmeter SDK or any OpenTelemetry SDK),
//! aggregates them reset-safely the way a serving engine's conductor does (it sums the
//! workers' series), and exports a Prometheus endpoint and OTLP to any backend.
//!
//! # Quick start
//!
//! The binary runs with zero configuration (`higgsmeter-collector`; for a simulated
//! fleet of instrumented ranks around it, `cargo run -p higgsmeter-examples --bin demo`).
//! As a library:
//!
//! ```no_run
//! # async fn run() -> Result<(), higgsmeter_collector::Error> {
//! use higgsmeter_collector::{Collector, Config, Overrides};
//!
//! let mut config = Config::default(); // or Config::from_file(path)?
//! config.apply(&Overrides {
//!     grpc: Some("127.0.0.1:0".into()),
//!     storage: Some("/var/lib/higgsmeter".into()), // or "none"; default ./higgsmeter-data
//!     ..Default::default()
//! });
//! let running = Collector::start(config.plan()?).await?;
//! println!("{}", running.addresses()); // grpc=127.0.0.1:PORT http=... prometheus=...
//! let text = running.aggregator().render(higgsmeter_collector::View::Fleet);
//! # let _ = text;
//! running.shutdown().await; // drains, flushes the upstream exporters, writes the final checkpoint
//! # Ok(()) }
//! ```
//!
//! # What it does
//!
//! - **Receivers**: OTLP/gRPC (default `127.0.0.1:4317`, gzip accepted) and OTLP/HTTP
//!   (`127.0.0.1:4318`, `POST /v1/metrics`, protobuf or JSON, gzip). With
//!   `service.pipelines.traces`, OTLP traces too, forwarded unchanged (batched, bounded,
//!   retried) to the `otlp` / `otlphttp` exporters; otherwise traces, and logs always,
//!   are refused as not supported (gRPC `UNIMPLEMENTED`, HTTP 501).
//! - **Aggregation**: sources are OTLP resources. `/metrics` is the fleet view:
//!   counters and histograms summed over the source identity (`rank`,
//!   `service.instance.id`, `host.name`, `local_rank` by default), reset-safe and
//!   never decreasing; a gauge combined over live sources only by a rule that fits
//!   it (sum, max, min, mean, last: a config rule, else the catalog's
//!   `Family::fleet`), or kept per source (`worker_current_state`, with
//!   `worker_sources_in_state` derived); a gauge with no rule is left out of the fleet
//!   view. `/metrics/sources` is the per-source view of every family.
//! - **Exporters**: Prometheus on `127.0.0.1:9464` (`/metrics`, `/metrics/sources`),
//!   negotiated as client_golang's exporters do: text 0.0.4, OpenMetrics 1.0 or the
//!   protobuf exposition (delimited `io.prometheus.client.MetricFamily`, classic
//!   histograms) by `Accept`, gzip-compressed when `Accept-Encoding` allows it; OTLP push (`exporters.otlp`, `exporters.otlphttp`) with a bounded
//!   queue and backoff, and Prometheus remote write 1.0
//!   (`exporters.prometheusremotewrite`: the series and values of a `/metrics` scrape
//!   plus `external_labels`, snappy-compressed protobuf, to Prometheus, Mimir, Cortex,
//!   Thanos Receive or VictoriaMetrics; retries on 5xx and 429, other 4xx dropped and
//!   counted, a bounded queue, a final flush on shutdown).
//! - **Durable state**: the aggregation state is checkpointed (every 5 s and on
//!   shutdown, atomically, to `extensions.file_storage.directory`, default
//!   `./higgsmeter-data`) and restored at start, so a restart shows Prometheus neither a
//!   reset nor a spike; SIGTERM ends within `service.shutdown_timeout` whatever clients
//!   do. See `otel-config/README.md`, *Restarts* and *Shutdown*.
//! - **TLS and tokens**: every listener can be TLS-only (rustls; `tls:` with
//!   `cert_file`, `key_file` and `client_ca_file` for mutual TLS), the receivers can
//!   require a bearer token (`extensions.bearertokenauth`, `auth.authenticator`), and
//!   the OTLP exporters push over `https://` with `tls.ca_file` and `headers`. See
//!   `otel-config/README.md`, *TLS and authentication*.
//! - **Bad input** gets an OTLP error or partial success and is counted in the
//!   collector's own metrics (`higgsmeter_collector_*`, listed in the catalog).
//!
//! Exponential histograms and summaries are refused (counted, reason
//! `unsupported_type`, reported as partial success): configure explicit-bucket
//! histograms in the sending SDK.
//!
//! - **Named instances**: receivers and exporters are keyed `type[/name]` as in the
//!   OpenTelemetry Collector (`otlp/primary`, `otlp/backup`,
//!   `prometheusremotewrite/tenant-a`), each exporter with its own queue, retries and
//!   `exporter` label on the self-metrics.
//!
//! # Layout
//!
//! Each receiver (`receivers/`) and exporter (`exporters/`) module owns its settings,
//! their checks into a plan, its `--check-config` line and its start; `config` only
//! loops over the pipelines' keys and `Collector::start` over the plans (ADR 0016, with
//! the drill for adding one). The store (`aggregate/`) knows nothing of transports,
//! TLS or exporters; the leaf modules `labels` (self-metric labels and the tables
//! sized by them), `duration`, `protobuf` (the one wire reader) and `error` use
//! nothing else of the crate, and `collector/tests/it/layering.rs` fails on any import
//! cycle between modules.
//!
//! # Configuration
//!
//! `otel-config/collector.yaml` is the shipped file; `otel-config/README.md` lists every
//! key and its default. Command-line flags (`--grpc`, `--http`, `--prometheus`,
//! `--otlp-endpoint`, `--otlphttp-endpoint`) win over the file.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RUST_LOG` | the collector's log filter (stderr), e.g. `info,higgsmeter_collector=debug` | `info` |
//!
//! # Supported Rust version
//!
//! 1.89 or newer.

pub(crate) mod aggregate;
mod auth;
mod component;
pub mod config;
mod duration;
mod error;
mod exporters;
mod forward;
mod labels;
mod net;
mod protobuf;
mod receivers;
mod self_metrics;
mod storage;
mod tls;
mod views;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use aggregate::{
    AggregateConfig, Aggregator, DecodeError, GaugeAggregation, GaugeRule, IngestResult, JsonError,
    SERIES_PER_MIB, StateSnapshot, View,
};
pub use config::{Config, Overrides, Plan};
pub use error::Error;
pub use self_metrics::Transport;
pub use storage::STATE_FILE;

use self_metrics::SelfMetrics;

/// Where the running collector listens (the bound addresses: useful with port 0). With
/// several instances of a kind (`otlp/a`, `otlp/b`), the first in key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Addresses {
    /// OTLP/gRPC.
    pub grpc: Option<SocketAddr>,
    /// OTLP/HTTP.
    pub http: Option<SocketAddr>,
    /// The Prometheus endpoint.
    pub prometheus: Option<SocketAddr>,
}

impl Addresses {
    /// Notes where a listener took its port (the first of each kind).
    fn record(&mut self, listener: self_metrics::Listener, addr: SocketAddr) {
        let slot = match listener {
            self_metrics::Listener::Grpc => &mut self.grpc,
            self_metrics::Listener::Http => &mut self.http,
            self_metrics::Listener::Prometheus => &mut self.prometheus,
        };
        slot.get_or_insert(addr);
    }
}

impl fmt::Display for Addresses {
    /// `grpc=IP:PORT http=IP:PORT prometheus=IP:PORT` (`off` for a component not running).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_owned(), |a| a.to_string());
        write!(
            f,
            "grpc={} http={} prometheus={}",
            show(self.grpc),
            show(self.http),
            show(self.prometheus)
        )
    }
}

/// Starts collectors; see [`Collector::start`].
#[derive(Debug)]
pub struct Collector;

/// A running collector; [`RunningCollector::shutdown`] stops it gracefully.
#[derive(Debug)]
pub struct RunningCollector {
    addresses: Addresses,
    aggregator: Arc<Aggregator>,
    /// Cancels everything (the token users get).
    cancel: CancellationToken,
    /// Children of `cancel`, cancelled in this order by `shutdown`.
    stop_receiving: CancellationToken,
    stop_exporting: CancellationToken,
    receivers: Vec<JoinHandle<()>>,
    exporters: Vec<JoinHandle<()>>,
    others: Vec<JoinHandle<()>>,
    checkpointer: Option<Arc<Checkpointer>>,
    shutdown_timeout: Duration,
    stats: Arc<SelfMetrics>,
}

/// Writes the aggregation state to the storage directory.
struct Checkpointer {
    storage: storage::FileStorage,
    aggregator: Arc<Aggregator>,
    stats: Arc<SelfMetrics>,
    last_error_log: std::sync::Mutex<Option<Instant>>,
    writing: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpointer")
            .field("state", &self.storage.state_path())
            .finish_non_exhaustive()
    }
}

impl Checkpointer {
    /// One checkpoint: the copy under the aggregator's lock, then encoding and the
    /// atomic write after it. Blocking (file I/O): run it off the async workers. A
    /// failure (a full disk) is counted and logged at most once a minute; ingest goes
    /// on and the next checkpoint tries again.
    fn write(&self) -> bool {
        // One checkpoint at a time, snapshot to rename: the periodic one and the final
        // one share the temporary file, and an older snapshot must never be written
        // after a newer one.
        let _one_at_a_time = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let snapshot = self.aggregator.snapshot_state();
        match self.storage.write_with(|file| snapshot.write_to(file)) {
            Ok(()) => {
                self_metrics::add(
                    &self.stats.checkpoints[self_metrics::CheckpointOutcome::Ok],
                    1,
                );
                true
            }
            Err(e) => {
                self_metrics::add(
                    &self.stats.checkpoints[self_metrics::CheckpointOutcome::Failed],
                    1,
                );
                let mut last = self
                    .last_error_log
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    *last = Some(Instant::now());
                    tracing::error!(
                        state = %self.storage.state_path().display(),
                        error = %e,
                        "cannot write the aggregation state (counted in higgsmeter_collector_checkpoints_total{{outcome=\"failed\"}}; the previous state file is kept; retrying every checkpoint_interval, logged at most once a minute)"
                    );
                }
                false
            }
        }
    }
}

impl Collector {
    /// Binds every listener (so a taken port fails here, before anything serves), then
    /// starts the receivers, the exporters and the sweeper on the current tokio runtime.
    ///
    /// With storage on, the storage directory is opened and locked and the
    /// checkpointed aggregation state restored before any listener is bound.
    pub async fn start(plan: Plan) -> Result<RunningCollector, Error> {
        let stats = Arc::new(SelfMetrics::default());
        // Where the state lives (or that there is none), before anything else.
        tracing::info!("{}", plan.state_summary());
        let (aggregator, checkpointer) = restore(&plan, &stats)?;
        let cancel = CancellationToken::new();
        let stop_receiving = cancel.child_token();
        let stop_exporting = cancel.child_token();
        let context = |stop: &CancellationToken| component::Context {
            aggregator: aggregator.clone(),
            stats: stats.clone(),
            traces: None,
            stop: stop.clone(),
            stopped: cancel.clone(),
        };
        // The traces pipeline's exporters stop after the receivers, as the others do.
        let mut exporters = Vec::new();
        let mut receiving = context(&stop_receiving);
        if !plan.traces.is_empty() {
            let (forwarder, tasks) = exporters::traces::start(
                plan.traces.clone(),
                stats.clone(),
                stop_exporting.clone(),
            );
            receiving.traces = Some(forwarder);
            exporters.extend(tasks);
        }
        // Every port taken and every file read before anything serves: a failure here
        // drops what was bound.
        let mut started = Vec::new();
        for r in plan.receivers {
            started.push((true, r.start(&receiving).await?));
        }
        let exporting = context(&stop_exporting);
        for e in plan.exporters {
            started.push((false, e.start(&exporting).await?));
        }
        let mut addresses = Addresses::default();
        let mut receivers = Vec::new();
        for (receiver, s) in started {
            if let Some((listener, addr)) = s.address {
                addresses.record(listener, addr);
            }
            let task = tokio::spawn(s.run);
            if receiver {
                receivers.push(task);
            } else {
                exporters.push(task);
            }
        }
        let others = background(
            checkpointer.clone(),
            aggregator.clone(),
            plan.aggregate.checkpoint_interval,
            &cancel,
        );
        tracing::info!(%addresses, "higgsmeter-collector started");
        Ok(RunningCollector {
            addresses,
            aggregator,
            cancel,
            stop_receiving,
            stop_exporting,
            receivers,
            exporters,
            others,
            checkpointer,
            shutdown_timeout: plan.shutdown_timeout,
            stats,
        })
    }
}

/// Opens and locks the storage directory (with storage on) and restores the checkpointed
/// state, or starts a new aggregation; the checkpointer that keeps writing it.
fn restore(
    plan: &Plan,
    stats: &Arc<SelfMetrics>,
) -> Result<(Arc<Aggregator>, Option<Arc<Checkpointer>>), Error> {
    let storage = match &plan.storage {
        Some(dir) => Some(storage::FileStorage::open(dir)?),
        None => None,
    };
    let restored = storage.as_ref().and_then(|s| {
        let state = s.load()?;
        match Aggregator::restored(plan.aggregate.clone(), stats.clone(), &state) {
            Ok((aggregator, count)) => {
                tracing::info!(
                    state = %s.state_path().display(),
                    sources = count.sources,
                    series = count.series,
                    left_out = count.left_out,
                    "restored the aggregation state"
                );
                Some(aggregator)
            }
            Err(e) => {
                s.set_aside(&e.to_string());
                None
            }
        }
    });
    let aggregator = Arc::new(
        restored.unwrap_or_else(|| Aggregator::new(plan.aggregate.clone(), stats.clone())),
    );
    let checkpointer = storage.map(|storage| {
        Arc::new(Checkpointer {
            storage,
            aggregator: aggregator.clone(),
            stats: stats.clone(),
            last_error_log: std::sync::Mutex::new(None),
            writing: std::sync::Mutex::new(()),
        })
    });
    Ok((aggregator, checkpointer))
}

/// The checkpoint writer (every `interval`, off the async workers) and the once-a-second
/// sweep of stale sources, until `cancel`.
fn background(
    checkpointer: Option<Arc<Checkpointer>>,
    aggregator: Arc<Aggregator>,
    interval: Duration,
    cancel: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut others = Vec::new();
    if let Some(checkpointer) = checkpointer {
        let stop = cancel.clone();
        others.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {
                        let c = checkpointer.clone();
                        let _ = tokio::task::spawn_blocking(move || c.write()).await;
                    }
                }
            }
        }));
    }
    let sweeper = aggregator.clone();
    let sweep_cancel = cancel.clone();
    others.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = sweep_cancel.cancelled() => break,
                _ = tick.tick() => sweeper.sweep(),
            }
        }
    }));
    others
}

impl RunningCollector {
    /// The bound addresses.
    pub fn addresses(&self) -> Addresses {
        self.addresses
    }

    /// The aggregation state (render a view).
    pub fn aggregator(&self) -> &Arc<Aggregator> {
        &self.aggregator
    }

    /// A token that stops the collector when cancelled.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Stops within `service.shutdown_timeout`, whatever clients do: stops accepting,
    /// closes unfinished and idle connections at once and lets requests in flight
    /// finish (up to half the time; connections still open then are dropped), refuses anything later as unavailable, flushes the
    /// upstream exporters, OTLP and remote write (up to 80 % of the time), writes the
    /// final checkpoint, and returns whether it all finished in time.
    pub async fn shutdown(self) -> bool {
        let started = Instant::now();
        let timeout = self.shutdown_timeout;
        let mut clean = true;
        self.stop_receiving.cancel();
        clean &= join_until(self.receivers, started + timeout / 2, "receiver").await;
        self.aggregator.close();
        self.stop_exporting.cancel();
        clean &= join_until(self.exporters, started + timeout.mul_f64(0.8), "exporter").await;
        exporters::traces::count_unsent(&self.stats);
        if let Some(checkpointer) = self.checkpointer {
            let write = tokio::task::spawn_blocking(move || checkpointer.write());
            let left = timeout.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, write).await {
                Ok(Ok(true)) => tracing::info!("wrote the final checkpoint"),
                Ok(_) => clean = false,
                Err(_) => {
                    tracing::error!(
                        "the final checkpoint did not finish within service.shutdown_timeout; the previous one stays"
                    );
                    clean = false;
                }
            }
        }
        self.cancel.cancel();
        clean &= join_until(self.others, started + timeout, "background").await;
        clean
    }
}

/// Waits for `tasks` until `deadline`, then aborts the rest (dropping their
/// connections); whether all ended in time.
async fn join_until(tasks: Vec<JoinHandle<()>>, deadline: Instant, what: &str) -> bool {
    let mut clean = true;
    for mut task in tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "a collector {what} task ended abnormally");
            }
            Err(_) => {
                task.abort();
                tracing::warn!(
                    "a collector {what} did not stop within its share of service.shutdown_timeout; its connections were dropped"
                );
                clean = false;
            }
        }
    }
    clean
}
