//! The `higgsmeter-collector` binary: parses arguments, loads the config, wires the
//! collector, and waits for ctrl-c or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use higgsmeter_collector::demo::{DemoOptions, WorkerOptions};
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
    /// Validate the config (and flags), print where state lives and the plan, and exit.
    #[arg(long)]
    check_config: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the collector with N simulated ranks (separate processes using the
    /// higgsmeter SDK) and a live view of each rank's state and share of time.
    ///
    /// Listens on 4317/4318/9464 (127.0.0.1), or a free port for any that is taken;
    /// `--grpc`, `--http`, `--prometheus` before `demo` choose the addresses instead.
    Demo {
        /// How many simulated ranks.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
        ranks: u32,
        /// Stop after this many seconds (default: run until ctrl-c).
        #[arg(long, value_name = "SECS")]
        duration: Option<f64>,
        /// Print plain blocks instead of redrawing the screen.
        #[arg(long)]
        plain: bool,
    },
    /// One simulated rank (started by `demo`; also used by the tests).
    #[command(hide = true)]
    DemoWorker {
        #[arg(long)]
        rank: u32,
        #[arg(long, default_value_t = 1)]
        world_size: u32,
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        http: bool,
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        #[arg(long)]
        duration: Option<f64>,
        #[arg(long)]
        exit_on_stdin_eof: bool,
        #[arg(long)]
        print_totals: bool,
    },
}

fn seconds(value: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("{what} must be a non-negative number of seconds"))
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

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("higgsmeter-collector")
        .build()?)
}

fn main() -> ExitCode {
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
    match cli.command {
        Some(Cmd::DemoWorker {
            rank,
            world_size,
            endpoint,
            http,
            interval_ms,
            duration,
            exit_on_stdin_eof,
            print_totals,
        }) => {
            let options = WorkerOptions {
                rank,
                world_size,
                endpoint,
                http,
                export_interval: Duration::from_millis(interval_ms.max(1)),
                duration: duration
                    .map(|d| seconds(d, "--duration"))
                    .transpose()
                    .map_err(anyhow::Error::msg)?,
                exit_on_stdin_eof,
                print_totals,
            };
            higgsmeter_collector::demo::run_worker(&options)?;
            Ok(())
        }
        Some(Cmd::Demo {
            ranks,
            duration,
            plain,
        }) => {
            init_logging(tracing::Level::ERROR);
            let options = DemoOptions {
                ranks,
                duration: duration
                    .map(|d| seconds(d, "--duration"))
                    .transpose()
                    .map_err(anyhow::Error::msg)?,
                export_interval: Duration::from_millis(500),
                ansi: !plain,
                listen: Overrides {
                    grpc: cli.grpc,
                    http: cli.http,
                    prometheus: cli.prometheus,
                    ..Overrides::default()
                },
            };
            runtime()?.block_on(higgsmeter_collector::demo::run(options, shutdown_signal()))?;
            Ok(())
        }
        None => {
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
                println!("{}", plan.state_summary());
                println!("{plan:#?}");
                return Ok(());
            }
            init_logging(tracing::Level::INFO);
            runtime()?.block_on(async move {
                let running = Collector::start(plan).await?;
                println!("higgsmeter-collector listening {}", running.addresses());
                shutdown_signal().await;
                tracing::info!("shutting down");
                if !running.shutdown().await {
                    tracing::warn!("shutdown was not clean (see above); exiting anyway");
                }
                Ok::<(), anyhow::Error>(())
            })
        }
    }
}
