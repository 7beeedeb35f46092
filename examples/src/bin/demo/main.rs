//! `demo`: the higgsmeter collector plus N simulated ranks, each a separate process
//! (this binary's hidden `worker` subcommand) instrumented with the higgsmeter SDK and
//! pushing OTLP/gRPC to the collector, with a live terminal view of each rank's state
//! and share of time.
//!
//! ```text
//! cargo run --release -p higgsmeter-examples --bin demo                 # until ctrl-c
//! cargo run --release -p higgsmeter-examples --bin demo -- --ranks 8 --duration 10 --plain
//! ```
//!
//! The collector runs in this process, as a library ([`Collector::start`]), on
//! 127.0.0.1:4317 (gRPC), :4318 (HTTP) and :9464 (Prometheus `/metrics`,
//! `/metrics/sources` and the cluster page `/`), or on a free port for any of them that
//! is taken; `--grpc`, `--http` and `--prometheus` choose the addresses instead. The
//! view reads the collector's `GET /api/cluster`, the document the cluster page reads.

mod view;
mod worker;

use std::io::{IsTerminal as _, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use higgsmeter_collector::{Collector, Config, Error, Overrides, RunningCollector};
use tokio::process::{Child, Command};

/// The higgsmeter collector with a demo cluster of instrumented ranks and a live view.
///
/// Listens on 127.0.0.1:4317 (OTLP/gRPC), 127.0.0.1:4318 (OTLP/HTTP) and
/// 127.0.0.1:9464 (Prometheus and the cluster page), or a free port for any that is
/// taken; `--grpc`, `--http`, `--prometheus` choose the addresses instead.
#[derive(Debug, Parser)]
#[command(name = "demo", about, long_about)]
struct Cli {
    /// How many simulated ranks (separate processes using the higgsmeter SDK).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    ranks: u32,
    /// Stop after this many seconds (default: run until ctrl-c).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Print plain blocks instead of redrawing the screen (the default when standard
    /// output is not a terminal: a file or a pipe gets no clear-screen codes).
    #[arg(long)]
    plain: bool,
    /// OTLP/gRPC listen address (no fallback), e.g. 127.0.0.1:4317 (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    grpc: Option<String>,
    /// OTLP/HTTP listen address (no fallback), e.g. 127.0.0.1:4318.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Prometheus endpoint listen address (no fallback), e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One simulated rank (started by the demo; the collector's tests start it too).
    #[command(hide = true)]
    Worker {
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

fn seconds(value: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("{what} must be a non-negative number of seconds"))
}

/// Starts the collector on the standard ports (4317, 4318, 9464 on 127.0.0.1), falling
/// back to a free port for any that is taken, unless `listen` names an address.
async fn start_collector(listen: &Overrides) -> Result<RunningCollector, Error> {
    let or = |given: &Option<String>, standard: &str| {
        Some(given.clone().unwrap_or_else(|| standard.to_owned()))
    };
    let mut overrides = Overrides {
        grpc: or(&listen.grpc, "127.0.0.1:4317"),
        http: or(&listen.http, "127.0.0.1:4318"),
        prometheus: or(&listen.prometheus, "127.0.0.1:9464"),
        // A simulated cluster keeps no state between runs.
        storage: Some("none".to_owned()),
        ..Overrides::default()
    };
    let chosen = listen.grpc.is_some() || listen.http.is_some() || listen.prometheus.is_some();
    loop {
        let mut config = Config::default();
        config.apply(&overrides);
        match Collector::start(config.plan()?).await {
            Ok(running) => return Ok(running),
            Err(Error::Bind { what, addr, .. }) if addr.port() != 0 && !chosen => {
                let free = Some(format!("{}:0", addr.ip()));
                if what.starts_with("OTLP/gRPC receiver") {
                    overrides.grpc = free;
                } else if what.starts_with("OTLP/HTTP receiver") {
                    overrides.http = free;
                } else {
                    overrides.prometheus = free;
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Starts rank `rank` of `world`: this executable's `worker` subcommand, stopped by
/// closing its stdin (or killed when dropped).
fn spawn_worker(
    rank: u32,
    world: u32,
    endpoint: &str,
    interval: Duration,
) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding this executable")?;
    Command::new(exe)
        .args(["worker", "--rank", &rank.to_string()])
        .args(["--world-size", &world.to_string(), "--endpoint", endpoint])
        .args(["--interval-ms", &interval.as_millis().to_string()])
        .arg("--exit-on-stdin-eof")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting a demo worker")
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

/// The view of the collector's sources now, or a line saying why it cannot be read;
/// `None` while no rank has reported yet (no empty first frame).
async fn current_view(
    running: &RunningCollector,
    prometheus: &str,
    elapsed: Duration,
) -> Option<String> {
    let Some(addr) = running.addresses().prometheus else {
        return Some("the Prometheus endpoint is off: no view".to_owned());
    };
    match view::get_json(addr, "/api/cluster").await {
        Ok(doc) => {
            let sources = view::sources(&doc);
            (!sources.is_empty()).then(|| view::render(&sources, prometheus, elapsed))
        }
        Err(e) => Some(format!("cannot read the cluster: {e:#}\n")),
    }
}

/// Runs the demo until ctrl-c/SIGTERM or `duration`; stops the workers on the way out.
async fn demo(cli: Cli) -> anyhow::Result<()> {
    let duration = cli.duration.map(|d| seconds(d, "--duration")).transpose()?;
    let plain = cli.plain || !std::io::stdout().is_terminal();
    let running = start_collector(&Overrides {
        grpc: cli.grpc,
        http: cli.http,
        prometheus: cli.prometheus,
        ..Overrides::default()
    })
    .await?;
    let addrs = running.addresses();
    let grpc = addrs.grpc.context("the demo needs the gRPC receiver")?;
    let prometheus = addrs.prometheus.map_or_else(
        || "off".to_owned(),
        |a| format!("http://{a}/metrics  |  cluster page: http://{a}/"),
    );
    println!("higgsmeter-collector listening {addrs}");
    let endpoint = format!("http://{grpc}");
    let mut workers = Vec::new();
    for rank in 0..cli.ranks {
        workers.push(spawn_worker(
            rank,
            cli.ranks,
            &endpoint,
            Duration::from_millis(500),
        )?);
    }
    let started = Instant::now();
    let deadline = duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => break,
            _ = tick.tick() => {
                let Some(view) = current_view(&running, &prometheus, started.elapsed()).await else {
                    continue;
                };
                let mut stdout = std::io::stdout().lock();
                let _ = if plain { writeln!(stdout, "{view}") } else { write!(stdout, "\x1b[2J\x1b[H{view}") };
                let _ = stdout.flush();
            }
        }
    }
    for mut w in workers {
        let _ = w.start_kill();
        let _ = w.wait().await;
    }
    println!(
        "{}",
        current_view(&running, &prometheus, started.elapsed())
            .await
            .unwrap_or_else(|| "no rank reported".to_owned())
    );
    running.shutdown().await;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse();
    match cli.command.take() {
        Some(Cmd::Worker {
            rank,
            world_size,
            endpoint,
            http,
            interval_ms,
            duration,
            exit_on_stdin_eof,
            print_totals,
        }) => {
            let options = worker::WorkerOptions {
                rank,
                world_size,
                endpoint,
                http,
                export_interval: Duration::from_millis(interval_ms.max(1)),
                duration: duration.map(|d| seconds(d, "--duration")).transpose()?,
                exit_on_stdin_eof,
                print_totals,
            };
            worker::run(&options)?;
            Ok(())
        }
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("demo")
            .build()?
            .block_on(demo(cli)),
    }
}
