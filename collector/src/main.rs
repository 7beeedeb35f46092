//! The `higgsmeter-collector` binary: parses arguments, loads the config, wires the
//! collector, and waits for ctrl-c or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use higgsmeter_collector::{Collector, Config, Overrides};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// A small OTLP collector for GPU worker fleets.
///
/// Receives OTLP metrics from every rank and worker (gRPC on 127.0.0.1:4317, HTTP on
/// 127.0.0.1:4318), aggregates them reset-safely over the source identity, and serves
/// Prometheus text on 127.0.0.1:9464: /metrics is the fleet view (sums over ranks),
/// /metrics/sources the per-source view. Runs on built-in defaults; flags win over
/// the config file. On start it prints one line:
/// `higgsmeter-collector listening grpc=IP:PORT http=IP:PORT prometheus=IP:PORT`.
#[derive(Debug, Parser)]
#[command(
    name = "higgsmeter-collector",
    version,
    about,
    long_about,
    args_override_self = true
)]
struct Cli {
    /// A YAML config (OpenTelemetry Collector shape); every key: otel-config/README.md.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// OTLP/gRPC listen address, e.g. 127.0.0.1:4317 (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    grpc: Option<String>,
    /// OTLP/HTTP listen address, e.g. 127.0.0.1:4318.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Prometheus endpoint listen address, e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
    /// Push the aggregate over OTLP/gRPC to this upstream, e.g. http://127.0.0.1:4317.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Push the aggregate over OTLP/HTTP to this upstream, e.g. http://127.0.0.1:4318.
    #[arg(long, value_name = "URL")]
    otlphttp_endpoint: Option<String>,
    /// Where the aggregation state is checkpointed: a directory
    /// (extensions.file_storage.directory; default ./higgsmeter-data), or `none`.
    #[arg(long, value_name = "DIR|none")]
    storage: Option<String>,
    /// Validate the config (and flags), print the effective pipelines (receivers ->
    /// processors -> exporters), where state lives and the limits, and exit.
    #[arg(long)]
    check_config: bool,
}

fn init_logging(default: tracing::Level) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(default));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .try_init();
}

/// SIGTERM or ctrl-c, listened for from creation on: created before the startup line
/// is printed, a signal sent right after that line stops the collector cleanly.
struct ShutdownSignal {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignal {
    /// Registers the handlers (inside the runtime).
    fn new() -> ShutdownSignal {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            ShutdownSignal {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignal {}
    }

    /// Waits for either signal.
    async fn recv(self) {
        #[cfg(unix)]
        {
            async fn next(s: Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                _ = next(self.term) => {},
                _ = next(self.int) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

mod allocator;

/// mimalloc: ingest allocates and frees request buffers on every runtime worker, often
/// a buffer on another worker than the one that allocated it; glibc's arenas made that
/// a lock (BENCHMARKS.md, *Collector: parallel ingest*). Made lean by
/// [`allocator::lean`] at the top of `main`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("higgsmeter-collector")
        .build()?)
}

fn main() -> ExitCode {
    allocator::lean();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("higgsmeter-collector: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut config = match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    config.apply(&Overrides {
        grpc: cli.grpc,
        http: cli.http,
        prometheus: cli.prometheus,
        otlp_endpoint: cli.otlp_endpoint,
        otlphttp_endpoint: cli.otlphttp_endpoint,
        storage: cli.storage,
    });
    let plan = config.plan()?;
    if cli.check_config {
        println!("config OK");
        for line in plan.summary() {
            println!("{line}");
        }
        return Ok(());
    }
    init_logging(tracing::Level::INFO);
    runtime()?.block_on(async move {
        let signal = ShutdownSignal::new();
        let running = Collector::start(plan).await?;
        println!("higgsmeter-collector listening {}", running.addresses());
        signal.recv().await;
        tracing::info!("shutting down");
        if !running.shutdown().await {
            tracing::warn!("shutdown was not clean (see above); exiting anyway");
        }
        Ok::<(), anyhow::Error>(())
    })
}
