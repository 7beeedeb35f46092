//! `higgsmeter-loadgen`: an OTLP metrics load generator for benchmarking the higgsmeter
//! collector against its peers.
//!
//! It pre-encodes `ExportMetricsServiceRequest`s for W workers × S series (by default
//! half cumulative monotonic sums, half explicit-bucket histograms; each worker its own
//! resource with `service.instance.id` and `rank`), sends them with C requests in
//! flight over OTLP/gRPC or OTLP/HTTP, at full speed or at a fixed points/s, for a
//! bounded time, and reports accepted points/s, p50/p99 latency and the target's CPU%
//! and RSS. `--sink` turns it into a decode-only OTLP receiver (metrics and traces),
//! the floor. `--traces-rate` sends OTLP traces alongside the metrics load, paced, from
//! a thread of their own, and reports the spans accepted and refused.
//!
//! ```text
//! higgsmeter-loadgen --sink 127.0.0.1:14317 --sink-for 60 &
//! higgsmeter-loadgen --endpoint http://127.0.0.1:14317 --pid $! --duration 10
//! higgsmeter-loadgen --endpoint http://127.0.0.1:14317 --traces-rate 20000 --duration 10
//! higgsmeter-loadgen --spawn "rotel-agent start --exporter blackhole ..." --rate 100000
//! ```
//!
//! All traffic goes where `--endpoint`/`--scrape` say; every run stops by itself after
//! `--warmup + --duration` (capped at 10 minutes) or `--rounds`.

mod payload;
mod procstat;
mod report;
mod send;
mod sink;
mod spawn;
mod traces;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use clap::Parser;

use crate::payload::Shape;
use crate::send::{Protocol, SendConfig};

/// Longest run the tool accepts (warm-up plus measurement), so that no load is unbounded.
const MAX_RUN: Duration = Duration::from_secs(600);

/// OTLP metrics load generator (and decode-only sink) for collector benchmarks.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// Protocol to send with.
    #[arg(long, value_enum, default_value = "grpc")]
    protocol: Protocol,
    /// Where to send: `http://HOST:PORT` for gRPC (default http://127.0.0.1:4317),
    /// `http://HOST:PORT/v1/metrics` for HTTP (default http://127.0.0.1:4318/v1/metrics).
    #[arg(long)]
    endpoint: Option<String>,
    /// Simulated workers (distinct OTLP resources).
    #[arg(long, short = 'w', default_value_t = 64)]
    workers: usize,
    /// Series per worker (see --histogram-percent for the mix).
    #[arg(long, short = 's', default_value_t = 200)]
    series: usize,
    /// Data points per request.
    #[arg(long, short = 'p', default_value_t = 1000)]
    points_per_request: usize,
    /// Series per metric name (they differ by an `op` attribute).
    #[arg(long, default_value_t = 10)]
    series_per_metric: usize,
    /// Percent of each worker's series that are explicit-bucket histograms (the rest
    /// are cumulative monotonic sums).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    histogram_percent: u8,
    /// Give each worker's points a `shard` attribute, so series stay distinct after
    /// the collector sums over workers (for exposition-size runs).
    #[arg(long)]
    unique_per_worker: bool,
    /// Requests in flight (each on its own connection; capped at requests per round).
    #[arg(long, short = 'c', default_value_t = 8)]
    concurrency: usize,
    /// Target points per second; without it, send as fast as the receiver answers.
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds measured.
    #[arg(long, short = 'd', default_value_t = 10.0)]
    duration: f64,
    /// Send exactly this many rounds of the whole fleet, then stop (no warm-up; the
    /// whole run is measured; --duration still caps it).
    #[arg(long)]
    rounds: Option<u64>,
    /// Gzip each request while sending (gRPC `grpc-encoding: gzip`, HTTP
    /// `Content-Encoding: gzip`, level 6). Compression runs in the generator at send
    /// time, so at full speed the generator, not the target, may become the limit.
    #[arg(long)]
    gzip: bool,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Tokio worker threads of the generator.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Measure CPU and memory of this process during the run.
    #[arg(long, conflicts_with = "spawn")]
    pid: Option<u32>,
    /// Start this command (through `sh -c`) as the target, wait until the endpoint
    /// accepts connections, measure it, and stop it afterwards.
    #[arg(long)]
    spawn: Option<String>,
    /// File for the spawned target's stdout and stderr (default: discarded).
    #[arg(long, requires = "spawn")]
    spawn_log: Option<String>,
    /// Seconds to wait for the spawned target's endpoint.
    #[arg(long, default_value_t = 15.0)]
    ready_timeout: f64,
    /// After the load, GET this URL (e.g. a Prometheus /metrics) and time the responses.
    #[arg(long)]
    scrape: Option<String>,
    /// How many times to GET --scrape.
    #[arg(long, default_value_t = 5)]
    scrape_count: usize,
    /// Name of the target in the report.
    #[arg(long, default_value = "target")]
    label: String,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
    /// Also send OTLP traces at this many spans per second while the metrics load runs
    /// (0: none), to --traces-endpoint; they are reported separately.
    #[arg(long, value_name = "SPANS_PER_S")]
    traces_rate: Option<f64>,
    /// Protocol of the traces (default: --protocol).
    #[arg(long, value_enum)]
    traces_protocol: Option<Protocol>,
    /// Where to send traces (default: --endpoint for gRPC; its `/v1/metrics` replaced
    /// by `/v1/traces` for HTTP; required when --traces-protocol differs from --protocol).
    #[arg(long)]
    traces_endpoint: Option<String>,
    /// Spans per trace request (one root span and its children; the OTel SDKs' batch
    /// span processors send up to 512).
    #[arg(long, default_value_t = 100)]
    spans_per_request: usize,
    /// Attributes per span (`state`, `operation`, `code.filepath`, `code.lineno`, then
    /// `attr.N` strings).
    #[arg(long, default_value_t = 4)]
    span_attributes: usize,
    /// Trace requests in flight (each on its own connection).
    #[arg(long, default_value_t = 2)]
    traces_concurrency: usize,
    /// Run as a decode-only OTLP/gRPC sink on this address instead of generating load.
    #[arg(long, value_name = "ADDR")]
    sink: Option<SocketAddr>,
    /// With --sink: also accept OTLP/HTTP (`POST /v1/metrics`, `/v1/traces`) on this
    /// address.
    #[arg(long, value_name = "ADDR", requires = "sink")]
    sink_http: Option<SocketAddr>,
    /// With --sink: exit after this many seconds (at most 3600).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3600))]
    sink_for: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(grpc) = cli.sink {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        return rt.block_on(sink::run(
            grpc,
            cli.sink_http,
            Duration::from_secs(cli.sink_for),
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(generate(cli))
}

fn secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    ensure!(
        v.is_finite() && v >= 0.0,
        "{name} must be a non-negative number of seconds"
    );
    Ok(Duration::from_secs_f64(v))
}

async fn generate(cli: Cli) -> anyhow::Result<()> {
    let endpoint = cli.endpoint.clone().unwrap_or_else(|| match cli.protocol {
        Protocol::Grpc => "http://127.0.0.1:4317".to_owned(),
        Protocol::Http => "http://127.0.0.1:4318/v1/metrics".to_owned(),
    });
    let warmup = if cli.rounds.is_some() {
        Duration::ZERO
    } else {
        secs("--warmup", cli.warmup)?
    };
    let duration = secs("--duration", cli.duration)?;
    ensure!(
        warmup + duration <= MAX_RUN,
        "--warmup + --duration must stay within {} s",
        MAX_RUN.as_secs()
    );
    ensure!(!duration.is_zero(), "--duration must be positive");
    if let Some(r) = cli.rate {
        ensure!(r.is_finite() && r > 0.0, "--rate must be a positive number");
    }
    ensure!(cli.concurrency > 0, "--concurrency must be at least 1");

    let shape = Shape {
        workers: cli.workers,
        series: cli.series,
        points_per_request: cli.points_per_request,
        series_per_metric: cli.series_per_metric,
        histogram_percent: cli.histogram_percent,
        unique_per_worker: cli.unique_per_worker,
    };
    let templates = Arc::new(payload::build(
        &shape,
        send::unix_nanos().saturating_sub(1_000_000_000),
    )?);

    // The target: spawned by us or given by pid.
    let mut spawned = None;
    if let Some(cmd) = &cli.spawn {
        let target = spawn::Spawned::start(cmd, cli.spawn_log.as_deref())?;
        target
            .wait_ready(&endpoint, secs("--ready-timeout", cli.ready_timeout)?)
            .await?;
        spawned = Some(target);
    }
    let pid = cli
        .pid
        .or_else(|| spawned.as_ref().map(spawn::Spawned::pid));
    if let Some(pid) = pid {
        procstat::cpu(pid)?;
    }

    let cfg = SendConfig {
        protocol: cli.protocol,
        endpoint: endpoint.clone(),
        concurrency: cli.concurrency,
        rate: cli.rate,
        stop_after: warmup + duration,
        rounds: cli.rounds,
        timeout: secs("--timeout", cli.timeout)?,
        gzip: cli.gzip,
    };
    let traces_cfg = traces_config(&cli, &endpoint, warmup + duration)?;
    let trace_requests = match &traces_cfg {
        Some(_) => traces::build(
            &traces::SpanShape {
                spans_per_request: cli.spans_per_request,
                attributes: cli.span_attributes,
            },
            send::unix_nanos(),
        )?,
        None => Vec::new(),
    };
    let loadavg = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();

    let start = Instant::now();
    let sender = {
        let cfg = cfg.clone();
        let templates = templates.clone();
        tokio::spawn(async move { send::run(&cfg, templates, start).await })
    };
    let traces_sender = match &traces_cfg {
        Some(cfg) => Some(traces::spawn(
            cfg.clone(),
            trace_requests,
            cli.spans_per_request,
            start,
        )?),
        None => None,
    };
    let monitor = report::Monitor::start(pid, start + warmup).await;
    let results = if cli.rounds.is_some() {
        let r = sender.await.context("the sender panicked")??;
        (r, monitor.finish().await)
    } else {
        tokio::time::sleep_until((start + warmup + duration).into()).await;
        let m = monitor.finish().await;
        (sender.await.context("the sender panicked")??, m)
    };
    let (tasks, usage) = results;
    let window_end = if cli.rounds.is_some() {
        start.elapsed()
    } else {
        warmup + duration
    };

    let traces = match traces_sender {
        Some(handle) => Some(
            tokio::task::spawn_blocking(move || handle.join())
                .await
                .context("joining the traces thread")?
                .map_err(|_| anyhow::anyhow!("the traces thread panicked"))??,
        ),
        None => None,
    };

    let scrape = match &cli.scrape {
        Some(url) => Some(report::scrape(url, cli.scrape_count, pid).await?),
        None => None,
    };
    if let Some(target) = spawned.take() {
        target.stop();
    }

    let mut rep = report::Report::build(
        &cli.label,
        &cfg,
        &shape,
        tasks.len(),
        &tasks,
        warmup,
        window_end,
        usage,
        scrape,
        loadavg,
    );
    if let (Some(cfg), Some(t)) = (&traces_cfg, &traces) {
        rep.traces = Some(t.report(cfg, warmup, window_end));
    }
    if cli.json {
        println!("{}", serde_json::to_string(&rep)?);
    } else {
        rep.print_summary();
    }
    if rep.requests_ok == 0 {
        bail!(
            "no request succeeded; first errors: {}",
            rep.errors.join("; ")
        );
    }
    Ok(())
}

/// The traces load `cli` asks for, if any (`--traces-rate` absent or 0: none).
fn traces_config(
    cli: &Cli,
    endpoint: &str,
    stop_after: Duration,
) -> anyhow::Result<Option<traces::TracesConfig>> {
    let rate = match cli.traces_rate {
        None => return Ok(None),
        Some(r) => {
            ensure!(
                r.is_finite() && r >= 0.0,
                "--traces-rate must be a non-negative number of spans per second"
            );
            if r == 0.0 {
                return Ok(None);
            }
            r
        }
    };
    let protocol = cli.traces_protocol.unwrap_or(cli.protocol);
    let endpoint = match (&cli.traces_endpoint, protocol) {
        (Some(e), _) => e.clone(),
        (None, p) if p != cli.protocol => {
            bail!("--traces-protocol differs from --protocol: give --traces-endpoint too")
        }
        (None, Protocol::Grpc) => endpoint.to_owned(),
        (None, Protocol::Http) => {
            let base = endpoint.trim_end_matches('/');
            let base = base.strip_suffix("/v1/metrics").unwrap_or(base);
            format!("{base}/v1/traces")
        }
    };
    Ok(Some(traces::TracesConfig {
        protocol,
        endpoint,
        rate,
        concurrency: cli.traces_concurrency,
        stop_after,
        timeout: secs("--timeout", cli.timeout)?,
    }))
}
