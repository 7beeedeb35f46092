//! `higgsmeter-session`: the lab session agent (`run`) and offline recomputation
//! (`replay`). See the crate docs for formats and behaviour.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use higgsmeter_nvml::NvmlMeter;
use higgsmeter_session::{
    DEFAULT_PROCESS_RULES, GpuSampler, NoGpu, NvmlGpu, ProcScanner, ProcessRule, Pusher,
    SessionAgent, TrainingLogFollower, WindowRule, X11Window, default_window_rules,
    parse_timestamp, replay,
};
use opentelemetry::metrics::MeterProvider as _;

#[derive(Debug, Parser)]
#[command(
    name = "higgsmeter-session",
    version,
    about = "The lab session agent: rolling session counters as OpenTelemetry metrics and an allocator JSON push"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sample the session until SIGTERM/SIGINT: OTLP from the OTEL_* variables, and a
    /// JSON push to --push-url (one more on SIGTERM).
    Run(Box<RunArgs>),
    /// Apply a JSON Lines file of samples to fresh counters and print them as one JSON
    /// object.
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Tick interval (`2s`, `500ms`, `1m`, or seconds).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    interval: Duration,
    /// When the session started (ISO 8601); default: now.
    #[arg(long, value_name = "ISO")]
    session_started_at: Option<String>,
    /// POST the counters JSON here (an http:// URL).
    #[arg(long, value_name = "URL")]
    push_url: Option<String>,
    /// How often to push; a crash loses at most this much counting.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    push_interval: Duration,
    /// Timeout of one push.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    push_timeout: Duration,
    /// How long the final push on SIGTERM keeps retrying.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    final_push_deadline: Duration,
    /// A header on every push, e.g. `Authorization=Bearer abc` (repeatable).
    #[arg(long = "push-header", value_name = "NAME=VALUE")]
    push_headers: Vec<String>,
    /// A watched process: its name, and optionally a command-line substring that also
    /// identifies it (repeatable; added to the SLEAP defaults).
    #[arg(long = "process", value_name = "NAME[=PATTERN]")]
    processes: Vec<String>,
    /// Watch only the --process names, not sleap-label/-train/-track.
    #[arg(long)]
    no_default_processes: bool,
    /// A window rule, checked before the defaults (repeatable):
    /// `subject=class:napari`, `browser=title:jupyter`.
    #[arg(long = "window-rule", value_name = "BUCKET=class|title:SUBSTRING")]
    window_rules: Vec<String>,
    /// Use only the --window-rule rules.
    #[arg(long)]
    no_default_window_rules: bool,
    /// The X display to read (default: DISPLAY).
    #[arg(long)]
    display: Option<String>,
    /// Follow this CSV training log (e.g. SLEAP's training_log.csv).
    #[arg(long, value_name = "FILE")]
    training_log: Option<PathBuf>,
    /// The training log's epoch column.
    #[arg(long, default_value = "epoch")]
    training_log_epoch_column: String,
    /// The training log's loss column.
    #[arg(long, default_value = "loss")]
    training_log_loss_column: String,
    /// The number of the first epoch in the training log (Keras: 0).
    #[arg(long, default_value_t = 0)]
    training_log_epoch_base: i64,
    /// Do not read GPUs (no NVML).
    #[arg(long)]
    no_gpu: bool,
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// When the session started (ISO 8601).
    #[arg(long, value_name = "ISO")]
    session_started_at: String,
    /// The samples: JSON Lines, one sample per line.
    #[arg(long, value_name = "FILE.jsonl")]
    samples: PathBuf,
}

/// `2s`, `500ms`, `1.5m`, `1h`, or a number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 2s, 500ms, 1m)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown unit `{other}` (ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("`{text}`: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(*args),
        Command::Replay(args) => run_replay(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("higgsmeter-session: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_replay(args: &ReplayArgs) -> anyhow::Result<()> {
    let Some(started) = parse_timestamp(&args.session_started_at) else {
        bail!(
            "--session-started-at `{}` is not an ISO 8601 timestamp (e.g. 2025-03-01T09:00:00+00:00)",
            args.session_started_at
        );
    };
    let file = std::fs::File::open(&args.samples)
        .with_context(|| format!("cannot open {}", args.samples.display()))?;
    let counters = replay(started, std::io::BufReader::new(file))
        .with_context(|| args.samples.display().to_string())?;
    println!("{}", counters.to_json());
    Ok(())
}

fn process_rules(args: &RunArgs) -> Vec<ProcessRule> {
    let mut rules: Vec<ProcessRule> = args
        .processes
        .iter()
        .map(|p| match p.split_once('=') {
            Some((name, pattern)) => ProcessRule::new(name, Some(pattern)),
            None => ProcessRule::new(p.as_str(), None),
        })
        .collect();
    if !args.no_default_processes {
        rules.extend(
            DEFAULT_PROCESS_RULES
                .iter()
                .map(|(name, pattern)| ProcessRule::new(*name, Some(pattern))),
        );
    }
    rules
}

fn window_rules(args: &RunArgs) -> anyhow::Result<Vec<WindowRule>> {
    let mut rules = Vec::new();
    for text in &args.window_rules {
        let Some(rule) = WindowRule::parse(text) else {
            bail!(
                "--window-rule `{text}`: expected BUCKET=class:SUBSTRING or BUCKET=title:SUBSTRING, \
                 BUCKET one of subject, terminal, browser, other"
            );
        };
        rules.push(rule);
    }
    if !args.no_default_window_rules {
        rules.extend(default_window_rules());
    }
    Ok(rules)
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let started = match &args.session_started_at {
        Some(text) => Some(parse_timestamp(text).with_context(|| {
            format!("--session-started-at `{text}` is not an ISO 8601 timestamp")
        })?),
        None => None,
    };
    // The agent is no worker: its own activity timeline is off, so it exports no
    // worker_activity series; the GPU meter is started below, once, for the samples
    // and the hw.gpu.* families both.
    let tracker = higgsmeter::Tracker::new();
    tracker.set_enabled(false);
    let telemetry = higgsmeter::Telemetry::builder()
        .with_tracker(tracker)
        .with_gpu_meter(false)
        .init()
        .context("cannot start the OpenTelemetry export")?;
    let meter = match telemetry.meter_provider() {
        Some(provider) => provider.meter("higgsmeter-session"),
        None => opentelemetry::global::meter("higgsmeter-session"),
    };

    let gpu_meter = if args.no_gpu {
        None
    } else {
        match NvmlMeter::builder().start(&meter) {
            Ok(gpus) => Some(gpus),
            Err(e) => {
                tracing::info!("GPU readings off: {e}");
                None
            }
        }
    };
    let gpu: Box<dyn GpuSampler> = match &gpu_meter {
        Some(gpus) => Box::new(NvmlGpu::new(gpus.readings())),
        None => Box::new(NoGpu),
    };

    let mut window = X11Window::new(window_rules(&args)?);
    if let Some(display) = &args.display {
        window = window.with_display(display.clone());
    }
    let mut builder = SessionAgent::builder()
        .with_interval(args.interval)
        .with_window_sampler(window)
        .with_process_sampler(ProcScanner::new(process_rules(&args)))
        .with_gpu_sampler(gpu);
    if let Some(path) = &args.training_log {
        builder = builder.with_training_sampler(
            TrainingLogFollower::new(path)
                .with_epoch_column(args.training_log_epoch_column.clone())
                .with_loss_column(args.training_log_loss_column.clone())
                .with_epoch_base(args.training_log_epoch_base),
        );
    }
    if let Some(started) = started {
        builder = builder.with_session_started_at(started);
    }
    let agent = builder.start(&meter).context("cannot start the agent")?;

    let pusher = match &args.push_url {
        Some(url) => {
            let mut push = Pusher::builder(url.clone())
                .with_interval(args.push_interval)
                .with_timeout(args.push_timeout);
            for header in &args.push_headers {
                let Some((name, value)) = header.split_once('=') else {
                    bail!("--push-header `{header}`: expected NAME=VALUE");
                };
                push = push.with_header(name.trim(), value.trim());
            }
            let counters = agent.handle();
            Some(
                push.start(move || counters.counters())
                    .context("cannot start the allocator push")?,
            )
        }
        None => None,
    };
    tracing::info!(
        push = args.push_url.as_deref().unwrap_or("off"),
        gpu = gpu_meter.is_some(),
        "higgsmeter-session running; SIGTERM or SIGINT stops it"
    );

    let signal = wait_for_signal().context("cannot wait for signals")?;
    tracing::info!(signal, "stopping: final push, then exit");
    drop(agent);
    if let Some(pusher) = pusher {
        pusher.stop(args.final_push_deadline);
    }
    drop(gpu_meter);
    drop(telemetry); // flushes the last OTLP export
    Ok(())
}

/// Blocks until SIGTERM or SIGINT; returns its name.
fn wait_for_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => Ok("SIGTERM"),
            _ = int.recv() => Ok("SIGINT"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("2d").is_err());
    }
}
