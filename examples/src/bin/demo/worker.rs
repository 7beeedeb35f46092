//! One simulated rank (the hidden `demo worker` subcommand): a loop of state scopes,
//! pushed over OTLP by the higgsmeter SDK.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use higgsmeter::{AppState, Protocol, Telemetry, state_tracker};

/// The `service.name` every demo worker reports (the collector's tests look for it).
pub(crate) const SERVICE_NAME: &str = "demo-worker";

/// The `job.id` of the demo's ranks: one training job.
pub(crate) const DEMO_JOB: &str = "demo-training";

/// Settings of the hidden `demo worker` subcommand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkerOptions {
    /// The `rank` resource attribute; also picks the mix of states.
    pub(crate) rank: u32,
    /// The `world_size` resource attribute.
    pub(crate) world_size: u32,
    /// The collector's OTLP endpoint (`http://127.0.0.1:4317`).
    pub(crate) endpoint: String,
    /// gRPC (default) or HTTP/protobuf.
    pub(crate) http: bool,
    /// Export interval.
    pub(crate) export_interval: Duration,
    /// Stop after this long.
    pub(crate) duration: Option<Duration>,
    /// Stop when stdin closes (the demo's parent died or stopped).
    pub(crate) exit_on_stdin_eof: bool,
    /// Print the tracker's totals as one JSON line on exit.
    pub(crate) print_totals: bool,
}

/// Each rank's weights for gpu, io, cpu, idle.
const MIXES: [[u32; 4]; 4] = [
    [60, 15, 15, 10],
    [30, 40, 20, 10],
    [20, 10, 60, 10],
    [35, 15, 10, 40],
];

/// Runs one simulated rank until `duration` passes or stdin closes.
pub(crate) fn run(options: &WorkerOptions) -> Result<(), higgsmeter::Error> {
    let protocol = if options.http {
        Protocol::HttpProtobuf
    } else {
        Protocol::Grpc
    };
    let telemetry = Telemetry::builder()
        .with_env(false)
        // Simulated ranks use no GPU: no NVML meter even where the feature and a
        // driver are there.
        .with_gpu_meter(false)
        .with_service_name(SERVICE_NAME)
        .with_otlp_endpoint(options.endpoint.clone())
        .with_otlp_protocol(protocol)
        .with_export_interval(options.export_interval)
        .with_resource_attribute("rank", i64::from(options.rank))
        .with_resource_attribute("world_size", i64::from(options.world_size))
        // The demo's ranks are one training job: the cluster page's job section and
        // the collector's goodput families show it.
        .with_resource_attribute(higgsmeter::catalog::JOB_ID_ATTRIBUTE, DEMO_JOB)
        .init()?;
    let stop = Arc::new(AtomicBool::new(false));
    if options.exit_on_stdin_eof {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            stop.store(true, Ordering::Relaxed);
        });
    }
    let tracker = state_tracker();
    tracker.set_state(AppState::Warmup, "load_model");
    std::thread::sleep(Duration::from_millis(100));
    let mix = MIXES[options.rank as usize % MIXES.len()];
    let states = [
        (AppState::Gpu, "forward"),
        (AppState::Io, "load_batch"),
        (AppState::Cpu, "tokenize"),
        (AppState::Idle, "wait"),
    ];
    let mut seed =
        0x9e37_79b9_7f4a_7c15u64 ^ u64::from(options.rank).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let started = Instant::now();
    let mut step = 0u64;
    while !stop.load(Ordering::Relaxed) && options.duration.is_none_or(|d| started.elapsed() < d) {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let total: u32 = mix.iter().sum();
        let mut pick = (z % u64::from(total)) as u32;
        let mut which = 0;
        for (i, w) in mix.iter().enumerate() {
            if pick < *w {
                which = i;
                break;
            }
            pick -= w;
        }
        let (state, op) = states[which];
        {
            let _scope = tracker.scope(state, op);
            std::thread::sleep(Duration::from_millis(20 + (z >> 40) % 120));
        }
        // A gpu phase is a training step; every 50th is checkpointed.
        if state == AppState::Gpu {
            step += 1;
            higgsmeter::job::record_step(step);
            if step.is_multiple_of(50) {
                let _save = higgsmeter::job::checkpoint_save(step);
                std::thread::sleep(Duration::from_millis(30));
            }
        }
    }
    tracker.set_state(AppState::Shutdown, "");
    let snapshot = tracker.snapshot();
    drop(telemetry);
    if options.print_totals {
        let mut entries = serde_json::Map::new();
        for e in snapshot.entries() {
            entries.insert(
                format!("{}/{}", e.state.as_str(), e.operation),
                serde_json::Value::from(e.seconds()),
            );
        }
        println!(
            "{}",
            serde_json::json!({ "rank": options.rank, "seconds": entries })
        );
    }
    Ok(())
}
