//! Demo mode: the collector plus N simulated ranks, each a separate process (this
//! binary's hidden `demo-worker` subcommand) using the higgsmeter SDK, with a live
//! terminal view. Not a stable API.

use std::io::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use higgsmeter::{AppState, Protocol, Telemetry, state_tracker};
use tokio::process::{Child, Command};

use crate::{Collector, Config, Error, Overrides, RunningCollector, SourceActivity};

/// Settings of `higgsmeter-collector demo`.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoOptions {
    /// Simulated ranks (separate processes).
    pub ranks: u32,
    /// Stop after this long (default: until ctrl-c).
    pub duration: Option<Duration>,
    /// How often the workers push (default 500 ms).
    pub export_interval: Duration,
    /// Redraw the terminal view in place (ANSI); otherwise print plain blocks.
    pub ansi: bool,
    /// Listen addresses that replace the standard ports (`--grpc`, `--http`,
    /// `--prometheus`; no fallback for these).
    pub listen: Overrides,
}

/// Starts a demo collector on the standard ports (4317, 4318, 9464 on 127.0.0.1),
/// falling back to a free port for any that is taken.
async fn start_collector(listen: &Overrides) -> Result<RunningCollector, Error> {
    let mut overrides = Overrides {
        grpc: Some(
            listen
                .grpc
                .clone()
                .unwrap_or_else(|| "127.0.0.1:4317".into()),
        ),
        http: Some(
            listen
                .http
                .clone()
                .unwrap_or_else(|| "127.0.0.1:4318".into()),
        ),
        prometheus: Some(
            listen
                .prometheus
                .clone()
                .unwrap_or_else(|| "127.0.0.1:9464".into()),
        ),
        ..Overrides::default()
    };
    loop {
        let mut config = Config::default();
        // A simulated cluster keeps no state between runs.
        if let Some(agg) = &mut config.processors.higgsmeter {
            agg.storage = "none".to_owned();
        }
        config.apply(&overrides);
        match Collector::start(config.plan()?).await {
            Ok(running) => return Ok(running),
            Err(Error::Bind { what, addr, .. })
                if addr.port() != 0
                    && listen.grpc.is_none()
                    && listen.http.is_none()
                    && listen.prometheus.is_none() =>
            {
                let free = format!("{}:0", addr.ip());
                match what {
                    "OTLP/gRPC receiver" => overrides.grpc = Some(free),
                    "OTLP/HTTP receiver" => overrides.http = Some(free),
                    _ => overrides.prometheus = Some(free),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn spawn_worker(rank: u32, world: u32, endpoint: &str, interval: Duration) -> Result<Child, Error> {
    let exe = std::env::current_exe().map_err(|source| Error::Io {
        what: "finding this executable",
        source,
    })?;
    Command::new(exe)
        .args([
            "demo-worker",
            "--rank",
            &rank.to_string(),
            "--world-size",
            &world.to_string(),
        ])
        .args([
            "--endpoint",
            endpoint,
            "--interval-ms",
            &interval.as_millis().to_string(),
            "--exit-on-stdin-eof",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| Error::Io {
            what: "starting a demo worker",
            source,
        })
}

const SHOWN: [&str; 4] = ["gpu", "io", "cpu", "idle"];

/// One screen of the live view.
pub fn render_view(sources: &[SourceActivity], prometheus: &str, elapsed: Duration) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "higgsmeter demo — {} rank(s), {:.0}s  |  Prometheus: {prometheus}  (ctrl-c to stop)\n\n",
        sources.iter().filter(|s| s.live).count(),
        elapsed.as_secs_f64()
    ));
    out.push_str("rank  now       gpu     io      cpu     idle    other   share of time\n");
    for s in sources {
        let total: f64 = s.seconds_by_state.iter().map(|(_, v)| v).sum();
        let share = |name: &str| {
            let v: f64 = s
                .seconds_by_state
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v)
                .sum();
            if total > 0.0 {
                (v / total).max(0.0)
            } else {
                0.0
            }
        };
        let other = 1.0 - SHOWN.iter().map(|n| share(n)).sum::<f64>();
        let now = match s
            .current_state
            .and_then(|c| u64::try_from(c).ok())
            .and_then(AppState::from_code)
        {
            Some(state) if s.live => state.as_str(),
            _ if !s.live => "gone",
            _ => "?",
        };
        let mut bar = String::new();
        for (name, ch) in [("gpu", '#'), ("io", '='), ("cpu", '+'), ("idle", '.')] {
            bar.extend(std::iter::repeat_n(
                ch,
                (share(name) * 30.0).round() as usize,
            ));
        }
        out.push_str(&format!(
            "{:<5} {:<9} {:>5.1}%  {:>5.1}%  {:>5.1}%  {:>5.1}%  {:>5.1}%  {bar}\n",
            s.rank.as_deref().unwrap_or("-"),
            now,
            share("gpu") * 100.0,
            share("io") * 100.0,
            share("cpu") * 100.0,
            share("idle") * 100.0,
            other.max(0.0) * 100.0,
        ));
    }
    out.push_str("\n# gpu  = io  + cpu  . idle\n");
    out
}

/// Runs the demo until ctrl-c/SIGTERM or `duration`; kills the workers on the way out.
pub async fn run(
    options: DemoOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let running = start_collector(&options.listen).await?;
    let addrs = running.addresses();
    let grpc = addrs.grpc.ok_or_else(|| Error::Config {
        path: "demo".into(),
        message: "no gRPC receiver".into(),
    })?;
    let prometheus = addrs.prometheus.map_or_else(
        || "off".to_owned(),
        |a| format!("http://{a}/metrics  |  cluster page: http://{a}/"),
    );
    println!("higgsmeter-collector listening {addrs}");
    let endpoint = format!("http://{grpc}");
    let mut workers = Vec::new();
    for rank in 0..options.ranks {
        workers.push(spawn_worker(
            rank,
            options.ranks,
            &endpoint,
            options.export_interval,
        )?);
    }
    let started = Instant::now();
    let deadline = options.duration.map(|d| tokio::time::Instant::now() + d);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => break,
            _ = tick.tick() => {
                let view = render_view(&running.aggregator().sources_activity(), &prometheus, started.elapsed());
                let mut stdout = std::io::stdout().lock();
                let _ = if options.ansi { write!(stdout, "\x1b[2J\x1b[H{view}") } else { writeln!(stdout, "{view}") };
                let _ = stdout.flush();
            }
        }
    }
    for mut w in workers {
        let _ = w.start_kill();
        let _ = w.wait().await;
    }
    let view = render_view(
        &running.aggregator().sources_activity(),
        &prometheus,
        started.elapsed(),
    );
    println!("{view}");
    running.shutdown().await;
    Ok(())
}

/// Settings of the hidden `demo-worker` subcommand.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOptions {
    /// The `rank` resource attribute; also picks the mix of states.
    pub rank: u32,
    /// The `world_size` resource attribute.
    pub world_size: u32,
    /// The collector's OTLP endpoint (`http://127.0.0.1:4317`).
    pub endpoint: String,
    /// gRPC (default) or HTTP/protobuf.
    pub http: bool,
    /// Export interval.
    pub export_interval: Duration,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop when stdin closes (the demo's parent died or stopped).
    pub exit_on_stdin_eof: bool,
    /// Print the tracker's totals as one JSON line on exit.
    pub print_totals: bool,
}

/// Each rank's weights for gpu, io, cpu, idle.
const MIXES: [[u32; 4]; 4] = [
    [60, 15, 15, 10],
    [30, 40, 20, 10],
    [20, 10, 60, 10],
    [35, 15, 10, 40],
];

/// Runs one simulated rank: a loop of state scopes, pushed over OTLP by the SDK.
pub fn run_worker(options: &WorkerOptions) -> Result<(), higgsmeter::Error> {
    let protocol = if options.http {
        Protocol::HttpProtobuf
    } else {
        Protocol::Grpc
    };
    let telemetry = Telemetry::builder()
        .with_env(false)
        .with_service_name("demo-worker")
        .with_otlp_endpoint(options.endpoint.clone())
        .with_otlp_protocol(protocol)
        .with_export_interval(options.export_interval)
        .with_resource_attribute("rank", i64::from(options.rank))
        .with_resource_attribute("world_size", i64::from(options.world_size))
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
        let _scope = tracker.scope(state, op);
        std::thread::sleep(Duration::from_millis(20 + (z >> 40) % 120));
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
