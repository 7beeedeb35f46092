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
//! config.apply(&Overrides { grpc: Some("127.0.0.1:0".into()), ..Default::default() });
//! let running = Collector::start(config.plan()?).await?;
//! println!("{}", running.addresses()); // grpc=127.0.0.1:PORT http=... prometheus=...
//! let text = running.aggregator().render(higgsmeter_collector::View::Fleet);
//! # let _ = text;
//! running.shutdown().await; // flushes the OTLP exporters
//! # Ok(()) }
//! ```
//!
//! # What it does
//!
//! - **Receivers**: OTLP/gRPC (default `127.0.0.1:4317`, gzip accepted) and OTLP/HTTP
//!   (`127.0.0.1:4318`, `POST /v1/metrics`, protobuf or JSON, gzip). Traces and logs are
//!   refused as not supported (gRPC `UNIMPLEMENTED`, HTTP 501).
//! - **Aggregation**: sources are OTLP resources. `/metrics` is the fleet view:
//!   counters and histograms summed over the source identity (`rank`,
//!   `service.instance.id`, `host.name`, `local_rank` by default), reset-safe and
//!   never decreasing; gauges summed (or max/min/last by rule) over live sources, or
//!   kept per source (`worker_current_state`) with `worker_sources_in_state` derived.
//!   `/metrics/sources` is the per-source view of every family.
//! - **Exporters**: Prometheus text on `127.0.0.1:9464` (OpenMetrics when the scraper
//!   asks for it), OTLP push (`exporters.otlp`, `exporters.otlphttp`) with a bounded
//!   queue and backoff.
//! - **Bad input** gets an OTLP error or partial success and is counted in the
//!   collector's own metrics (`higgsmeter_collector_*`, listed in the catalog).
//!
//! Exponential histograms and summaries are refused (counted, reason
//! `unsupported_type`, reported as partial success): configure explicit-bucket
//! histograms in the sending SDK.
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
//! 1.88 or newer.

pub(crate) mod aggregate;
pub mod config;
mod error;
mod exporters;
mod receivers;
mod self_metrics;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use aggregate::{
    AggregateConfig, Aggregator, DecodeError, GaugeAggregation, GaugeRule, IngestResult, View,
};
pub use config::{Config, Overrides, Plan};
pub use error::Error;
pub use self_metrics::Transport;

use self_metrics::SelfMetrics;

/// Where the running collector listens (the bound addresses: useful with port 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// OTLP/gRPC.
    pub grpc: Option<SocketAddr>,
    /// OTLP/HTTP.
    pub http: Option<SocketAddr>,
    /// The Prometheus endpoint.
    pub prometheus: Option<SocketAddr>,
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
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { what, addr, source })
}

impl Collector {
    /// Binds every listener (so a taken port fails here, before anything serves), then
    /// starts the receivers, the exporters and the sweeper on the current tokio runtime.
    pub async fn start(plan: Plan) -> Result<RunningCollector, Error> {
        let stats = Arc::new(SelfMetrics::default());
        let aggregator = Arc::new(Aggregator::new(plan.aggregate.clone(), stats.clone()));
        let cancel = CancellationToken::new();
        let grpc = match plan.grpc {
            Some((addr, max)) => Some((bind("OTLP/gRPC receiver", addr).await?, max)),
            None => None,
        };
        let http = match plan.http {
            Some((addr, max)) => Some((bind("OTLP/HTTP receiver", addr).await?, max)),
            None => None,
        };
        let prometheus = match plan.prometheus {
            Some((addr, sources)) => Some((bind("Prometheus endpoint", addr).await?, sources)),
            None => None,
        };
        let local = |l: &TcpListener| {
            l.local_addr().map_err(|source| Error::Io {
                what: "reading a bound address",
                source,
            })
        };
        let addresses = Addresses {
            grpc: grpc.as_ref().map(|(l, _)| local(l)).transpose()?,
            http: http.as_ref().map(|(l, _)| local(l)).transpose()?,
            prometheus: prometheus.as_ref().map(|(l, _)| local(l)).transpose()?,
        };
        let mut tasks = Vec::new();
        if let Some((listener, max)) = grpc {
            tasks.push(tokio::spawn(receivers::grpc::serve(
                listener,
                max,
                aggregator.clone(),
                stats.clone(),
                cancel.clone(),
            )));
        }
        if let Some((listener, max)) = http {
            tasks.push(tokio::spawn(receivers::http::serve(
                listener,
                max,
                aggregator.clone(),
                stats.clone(),
                cancel.clone(),
            )));
        }
        if let Some((listener, sources)) = prometheus {
            tasks.push(tokio::spawn(exporters::prometheus::serve(
                listener,
                sources,
                aggregator.clone(),
                cancel.clone(),
            )));
        }
        for (protocol, cfg) in plan.pushes {
            tasks.push(tokio::spawn(exporters::otlp::run(
                protocol,
                cfg,
                aggregator.clone(),
                stats.clone(),
                cancel.clone(),
            )));
        }
        let sweeper = aggregator.clone();
        let sweep_cancel = cancel.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = sweep_cancel.cancelled() => break,
                    _ = tick.tick() => sweeper.sweep(),
                }
            }
        }));
        tracing::info!(%addresses, "higgsmeter-collector started");
        Ok(RunningCollector {
            addresses,
            aggregator,
            cancel,
            tasks,
        })
    }
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

    /// Stops receiving, flushes the OTLP exporters, and waits for every task.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        for task in self.tasks {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "a collector task ended abnormally");
            }
        }
    }
}
