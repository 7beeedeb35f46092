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
//! `--steady-secs` (with a synthetic GPU: the NVML meter's instrument names and labels,
//! fixed readings, busy during `gpu` phases and half of each `io/load_batch`, a health
//! status and, on rank 1, one XID 79), prints
//! `HOLD` and holds one (state, operation) until a line arrives
//! on stdin (or 60 s pass), then enters `shutdown`, writes its tracker's totals, the
//! steps and the transfer bytes it recorded to the ground-truth file, flushes, exits.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use higgsmeter::catalog::{
    Family, GPU_HEALTH_STATES, HW_GPU_MEMORY_UTILIZATION, HW_GPU_SESSION_ACTIVE_TIME,
    HW_GPU_TEMPERATURE, HW_GPU_UTILIZATION, HW_GPU_XID_ERRORS, HW_POWER, HW_STATUS,
    gpu_instrument_name,
};
use higgsmeter::{AppState, EngineRecorders, Protocol, Telemetry, state_tracker};
use higgsmeter_e2e::{
    EXPORT_INTERVAL, GroundTruth, GroundTruthEntry, SERVICE_NAME, SyntheticGpu, WORKLOADS,
};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};

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

/// The synthetic GPU: the NVML meter's instrument names (dotted, from the catalog),
/// units and labels, with fixed readings.
struct Gpu {
    readings: SyntheticGpu,
    labels: Vec<KeyValue>,
    active: Counter<f64>,
}

fn instrument_name(family: &Family) -> anyhow::Result<&'static str> {
    gpu_instrument_name(family).with_context(|| format!("{} is no GPU family", family.name))
}

impl Gpu {
    fn start(meter: &Meter, rank: u32) -> anyhow::Result<Gpu> {
        let readings = SyntheticGpu::of_rank(rank);
        let labels = vec![
            KeyValue::new("hw.type", "gpu"),
            KeyValue::new("hw.id", SyntheticGpu::device_id(rank)),
            KeyValue::new("hw.name", "higgsmeter e2e synthetic GPU"),
            KeyValue::new("hw.gpu.index", i64::from(rank)),
        ];
        let mut with_task = labels.clone();
        with_task.push(KeyValue::new("hw.gpu.task", "general"));
        for (family, value, attrs) in [
            (&HW_GPU_UTILIZATION, readings.utilization, &with_task),
            (
                &HW_GPU_MEMORY_UTILIZATION,
                readings.memory_utilization,
                &labels,
            ),
            (&HW_POWER, readings.power, &labels),
            (&HW_GPU_TEMPERATURE, readings.temperature, &labels),
        ] {
            meter
                .f64_gauge(instrument_name(family)?)
                .with_unit(family.unit)
                .with_description(family.help)
                .build()
                .record(value, attrs);
        }
        // GPU health: hw.status (1 for the current hw.state) and an XID counter.
        let status = meter
            .u64_gauge(instrument_name(&HW_STATUS)?)
            .with_unit(HW_STATUS.unit)
            .with_description(HW_STATUS.help)
            .build();
        for state in GPU_HEALTH_STATES {
            let mut attrs = labels.clone();
            attrs.push(KeyValue::new("hw.state", *state));
            status.record(u64::from(*state == readings.health), &attrs);
        }
        if let Some(code) = readings.xid {
            let mut attrs = labels.clone();
            attrs.push(KeyValue::new("hw.gpu.xid.code", code.to_string()));
            meter
                .u64_counter(instrument_name(&HW_GPU_XID_ERRORS)?)
                .with_unit(HW_GPU_XID_ERRORS.unit)
                .with_description(HW_GPU_XID_ERRORS.help)
                .build()
                .add(1, &attrs);
        }
        let active = meter
            .f64_counter(instrument_name(&HW_GPU_SESSION_ACTIVE_TIME)?)
            .with_unit(HW_GPU_SESSION_ACTIVE_TIME.unit)
            .with_description(HW_GPU_SESSION_ACTIVE_TIME.help)
            .build();
        Ok(Gpu {
            readings,
            labels,
            active,
        })
    }

    fn add_active(&self, state: &str, seconds: f64, truth: &mut BTreeMap<String, f64>) {
        let mut attrs = self.labels.clone();
        attrs.push(KeyValue::new("state", state.to_owned()));
        self.active.add(seconds, &attrs);
        *truth.entry(state.to_owned()).or_insert(0.0) += seconds;
    }
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
    let gpu = Gpu::start(&meter, args.rank)?;
    let mut steps = Vec::new();
    let mut transfer_bytes = 0u64;
    let mut gpu_active_seconds = BTreeMap::new();

    // Prime: every (state, operation) and the transfer counter exist from the first export.
    for p in workload.cycle {
        drop(tracker.scope(state(p.state)?, p.operation));
    }
    transfer.record(Duration::ZERO, 0);
    gpu.add_active("gpu", 0.0, &mut gpu_active_seconds);
    gpu.add_active("io", 0.0, &mut gpu_active_seconds);
    tracker.set_state(AppState::Startup, "");
    std::thread::sleep(args.prime);

    let start = Instant::now();
    while start.elapsed() < args.steady {
        for p in workload.cycle {
            let scope = tracker.scope(state(p.state)?, p.operation);
            let began = Instant::now();
            std::thread::sleep(Duration::from_millis(p.millis));
            let took = began.elapsed();
            drop(scope);
            if p.state == "gpu" {
                step.record(took, Some(8));
                steps.push(took.as_secs_f64());
                gpu.add_active("gpu", took.as_secs_f64(), &mut gpu_active_seconds);
            }
            if p.operation == "load_batch" {
                let busy = took.as_secs_f64() * gpu.readings.active_share_of_load_batch;
                gpu.add_active("io", busy, &mut gpu_active_seconds);
            }
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
        gpu_active_seconds,
    };
    std::fs::write(&args.ground_truth, serde_json::to_vec_pretty(&truth)?)
        .with_context(|| format!("writing {}", args.ground_truth.display()))?;
    tracker.finalize();
    drop(telemetry); // the final export
    println!("DONE rank={}", args.rank);
    Ok(())
}
