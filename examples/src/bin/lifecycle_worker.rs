//! A GPU worker instrumented with higgsmeter, following the Python higgsmeter README's
//! "service lifecycle", "nested operations" and "client decorators" patterns.
//!
//! Beside a running collector (`cargo run --release -p higgsmeter-collector`, which
//! listens on 127.0.0.1:4317 for OTLP and serves 127.0.0.1:9464):
//!
//! ```text
//! RANK=1 OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc \
//!   HIGGSMETER_PROMETHEUS_ADDR=127.0.0.1:0 \
//!   cargo run -p higgsmeter-examples --bin lifecycle-worker -- --jobs 50
//! ```
//!
//! It processes `--jobs` simulated jobs (sleeps stand in for GPU kernels, downloads and
//! parsing), then shuts down, prints its own totals per state and exits. Exports go
//! wherever the `OTEL_*` / `HIGGSMETER_PROMETHEUS_ADDR` variables say; `127.0.0.1:0`
//! serves its own `/metrics` on a free port (9464 is the collector's). Every rank tracks
//! and exports, its `RANK` a resource attribute, and the collector sums them;
//! `--rank0-only` is the Python seed's mode (`enable_tracker(rank)`: only rank 0
//! tracks).

use std::time::Duration;

use anyhow::Context as _;
use higgsmeter::{AppState, enable_tracker, state_tracker, track_state};

/// A storage client whose methods count as I/O (the seed's "client decorators").
struct S3Client;

impl S3Client {
    #[track_state(AppState::Io)] // operation = "fetch_metadata"
    async fn fetch_metadata(&self, job: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(3)).await; // awaiting counts as io
        job * 31
    }

    #[track_state(AppState::Io, operation = "upload_result")]
    async fn upload(&self, _result: u64) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[track_state(AppState::Gpu, operation = "inference")]
fn run_inference(input: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(8)); // stands in for a GPU kernel
    input.rotate_left(7)
}

/// The seed's "nested operations": a CPU job with I/O and GPU steps inside.
async fn process_job(client: &S3Client, job: u64) -> anyhow::Result<()> {
    let _cpu = state_tracker().scope(AppState::Cpu, "process_job");
    std::thread::sleep(Duration::from_millis(1)); // parse (CPU)
    let metadata = client.fetch_metadata(job).await;
    let result = run_inference(metadata);
    client.upload(result).await;
    Ok(())
}

/// The command line: `--jobs N`, `--rank0-only`.
struct Args {
    jobs: u64,
    rank0_only: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = std::env::args().skip(1);
    let mut jobs = 20;
    let mut rank0_only = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--jobs" => {
                jobs = args
                    .next()
                    .context("--jobs needs a number")?
                    .parse()
                    .context("--jobs needs a number")?
            }
            "--rank0-only" => rank0_only = true,
            "--help" | "-h" => {
                println!(
                    "lifecycle-worker [--jobs N] [--rank0-only]   (exports per OTEL_* and HIGGSMETER_PROMETHEUS_ADDR; \
                     every rank tracks unless --rank0-only, the Python seed's mode)"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?}; try --help"),
        }
    }
    Ok(Args { jobs, rank0_only })
}

fn main() -> anyhow::Result<()> {
    let Args { jobs, rank0_only } = parse_args()?;
    let telemetry = higgsmeter::init()?;
    if let Some(addr) = telemetry.prometheus_addr() {
        println!("prometheus endpoint: http://{addr}/metrics");
    }
    if rank0_only {
        // The seed's mode: ranks other than 0 keep their tracker off (all "startup").
        let rank = match std::env::var("RANK") {
            Ok(r) => r
                .parse()
                .with_context(|| format!("RANK={r:?} is not a rank number"))?,
            Err(_) => 0,
        };
        enable_tracker(rank);
    }

    // Startup, then warm-up.
    state_tracker().set_state(AppState::Startup, "");
    {
        let _warmup = state_tracker().scope(AppState::Warmup, "model_loading");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Main loop.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let client = S3Client;
    state_tracker().set_state(AppState::Idle, "consuming_messages");
    for job in 0..jobs {
        std::thread::sleep(Duration::from_millis(2)); // waiting for a message
        rt.block_on(process_job(&client, job))?;
    }

    // Shutdown.
    state_tracker().set_state(AppState::Shutdown, "");
    state_tracker().finalize();
    let snap = state_tracker().snapshot();
    for state in AppState::ALL {
        println!(
            "{:>8}: {:>8.3} s",
            state.as_str(),
            snap.total(state).as_secs_f64()
        );
    }
    println!(
        "     sum: {:>8.3} s of {:.3} s wall",
        snap.sum().as_secs_f64(),
        snap.elapsed().as_secs_f64()
    );
    drop(telemetry); // flushes the final totals
    Ok(())
}
