//! A worker with a known workload for the end-to-end tests.
//!
//! ```text
//! e2e-worker --rank R --endpoint http://127.0.0.1:4317 --ground-truth gt.json \
//!            [--prime-secs 1.3] [--steady-secs 12]
//! ```
//!
//! It pushes OTLP/gRPC every 200 ms with `rank=R`, visits every (state, operation) of
//! its workload for an instant (so every series exists before its time counts), stays
//! in `startup` for `--prime-secs`, runs its cycle ([`higgsmeter_e2e::WORKLOADS`]) for
//! `--steady-secs`, prints `HOLD` and holds one (state, operation) until a line arrives
//! on stdin (or 60 s pass), then enters `shutdown`, writes its tracker's totals, the
//! steps and the transfer bytes it recorded to the ground-truth file, flushes, exits.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use higgsmeter::{AppState, EngineRecorders, Protocol, Telemetry, state_tracker};
use higgsmeter_e2e::{EXPORT_INTERVAL, GroundTruth, GroundTruthEntry, SERVICE_NAME, WORKLOADS};

struct Args {
    rank: u32,
    endpoint: String,
    ground_truth: PathBuf,
    prime: Duration,
    steady: Duration,
}

fn args() -> anyhow::Result<Args> {
    let mut rank = None;
    let mut endpoint = None;
    let mut ground_truth = None;
    let mut prime = Duration::from_millis(1300);
    let mut steady = Duration::from_secs(12);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--rank" => rank = Some(value()?.parse::<u32>()?),
            "--endpoint" => endpoint = Some(value()?),
            "--ground-truth" => ground_truth = Some(PathBuf::from(value()?)),
            "--prime-secs" => prime = Duration::try_from_secs_f64(value()?.parse()?)?,
            "--steady-secs" => steady = Duration::try_from_secs_f64(value()?.parse()?)?,
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(Args {
        rank: rank.context("--rank is required")?,
        endpoint: endpoint.context("--endpoint is required")?,
        ground_truth: ground_truth.context("--ground-truth is required")?,
        prime,
        steady,
    })
}

fn state(name: &str) -> anyhow::Result<AppState> {
    AppState::parse(name).with_context(|| format!("unknown state {name:?}"))
}

fn main() -> anyhow::Result<()> {
    let args = args()?;
    let workload = *WORKLOADS
        .get(args.rank as usize)
        .with_context(|| format!("no workload for rank {}", args.rank))?;

    let telemetry = Telemetry::builder()
        .with_env(false)
        .with_service_name(SERVICE_NAME)
        .with_resource_attribute("rank", i64::from(args.rank))
        .with_otlp_endpoint(args.endpoint.clone())
        .with_otlp_protocol(Protocol::Grpc)
        .with_export_interval(EXPORT_INTERVAL)
        .init()?;
    let tracker = state_tracker();
    let meter = opentelemetry::global::meter("higgsmeter-e2e-worker");
    let engine = EngineRecorders::new(&meter);
    let step = engine.step("worker", "decode")?;
    let transfer = engine.transfer("loader", "worker", "shm")?;
    let mut steps = Vec::new();
    let mut transfer_bytes = 0u64;

    // Prime: every (state, operation) and the transfer counter exist from the first export.
    for p in workload.cycle {
        drop(tracker.scope(state(p.state)?, p.operation));
    }
    transfer.record(Duration::ZERO, 0);
    tracker.set_state(AppState::Startup, "");
    std::thread::sleep(args.prime);

    let start = Instant::now();
    while start.elapsed() < args.steady {
        for p in workload.cycle {
            let scope = tracker.scope(state(p.state)?, p.operation);
            let began = Instant::now();
            std::thread::sleep(Duration::from_millis(p.millis));
            if p.state == "gpu" {
                let took = began.elapsed();
                step.record(took, Some(8));
                steps.push(took.as_secs_f64());
            }
            drop(scope);
        }
        transfer.record(Duration::from_millis(1), workload.transfer_bytes_per_cycle);
        transfer_bytes += workload.transfer_bytes_per_cycle;
    }

    // Hold until released by the test (bounded).
    tracker.set_state(state(workload.hold.0)?, workload.hold.1);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let _ = tx.send(());
    });
    println!("HOLD rank={}", args.rank);
    let _ = rx.recv_timeout(Duration::from_secs(60));

    tracker.set_state(AppState::Shutdown, "");
    let snap = tracker.snapshot();
    let truth = GroundTruth {
        rank: args.rank,
        entries: snap
            .entries()
            .iter()
            .map(|e| GroundTruthEntry {
                state: e.state.as_str().to_owned(),
                operation: e.operation.to_string(),
                seconds: e.seconds(),
            })
            .collect(),
        steps,
        transfer_bytes,
    };
    std::fs::write(&args.ground_truth, serde_json::to_vec_pretty(&truth)?)
        .with_context(|| format!("writing {}", args.ground_truth.display()))?;
    tracker.finalize();
    drop(telemetry); // the final export
    println!("DONE rank={}", args.rank);
    Ok(())
}
