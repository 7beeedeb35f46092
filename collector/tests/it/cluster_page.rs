//! The cluster view (`GET /` and `GET /api/cluster`) in a real headless browser: the
//! real collector binary, real SDK workers pushing OTLP/gRPC (two ranks of the demo,
//! `higgsmeter-examples`' `demo worker`, and two workers of this test binary that hold
//! one state each), and Debian's `chromium` loading the page, dumping its DOM and
//! writing a screenshot.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::{CollectorProcess, Sample, bins, temp_dir, wait_for_or};

/// Environment variable that turns this test binary into a fixed-state worker:
/// `RANK STATE ENDPOINT`.
const WORKER_ENV: &str = "HIGGSMETER_CLUSTER_PAGE_WORKER";

/// Ranks of the demo workers and of the fixed-state workers (with their state).
const DEMO_RANKS: [u32; 2] = [0, 1];
const FIXED: [(u32, &str); 2] = [(2, "gpu"), (3, "io")];

/// The rank an OTLP/HTTP JSON client pushes GPU readings for (two devices, mean 0.42).
const GPU_RANK: u32 = 4;
const GPU_READINGS: [f64; 2] = [0.30, 0.54];

/// States a demo worker can report (it warms up, then loops over these).
const DEMO_STATES: [&str; 6] = ["startup", "warmup", "gpu", "io", "cpu", "idle"];

/// A child process killed (and reaped) on drop, also when the test panics.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A source pushed by [`Pusher`]: its rank, the state it holds (or, with `flip`, the
/// two states it alternates between every [`FLIP_S`] seconds), its GPUs' utilisation.
#[derive(Clone)]
struct Fake {
    rank: u32,
    state: higgsmeter::AppState,
    flip: Option<higgsmeter::AppState>,
    gpus: Vec<f64>,
}

/// Seconds a flipping [`Fake`] spends in each of its two states in turn.
const FLIP_S: f64 = 3.0;

impl Fake {
    /// The state now, and seconds per (state, operation) since the start, at `elapsed`.
    fn at(
        &self,
        elapsed: f64,
    ) -> (
        higgsmeter::AppState,
        Vec<(higgsmeter::AppState, &'static str, f64)>,
    ) {
        let Some(other) = self.flip else {
            return (self.state, vec![(self.state, "hold", elapsed)]);
        };
        let full = (elapsed / (2.0 * FLIP_S)).floor();
        let rest = elapsed - full * 2.0 * FLIP_S;
        let first = full * FLIP_S + rest.min(FLIP_S);
        let second = full * FLIP_S + (rest - FLIP_S).max(0.0);
        let now = if rest < FLIP_S { self.state } else { other };
        (
            now,
            vec![(self.state, "step", first), (other, "load", second)],
        )
    }
}

/// Sources that are no SDK workers: a plain OTLP/HTTP JSON client pushes all of them
/// in one request every 200 ms (until dropped, at most two minutes), each holding its
/// state (seconds growing with wall-clock time) with its `hw.gpu.utilization` gauges.
struct Pusher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn otlp_json(fakes: &[Fake], start_nanos: u128, elapsed: Duration) -> serde_json::Value {
    let s = |v: &str| serde_json::json!({ "stringValue": v });
    let now = (start_nanos + elapsed.as_nanos()).to_string();
    let resources: Vec<_> = fakes
        .iter()
        .map(|f| {
            let gpus: Vec<_> = f
                .gpus
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    let id = format!("GPU-{}-{i}", f.rank);
                    serde_json::json!({
                        "attributes": [{ "key": "hw.id", "value": s(&id) }],
                        "timeUnixNano": now, "asDouble": u })
                })
                .collect();
            let (state, seconds) = f.at(elapsed.as_secs_f64());
            let points: Vec<_> = seconds
                .iter()
                .map(|(st, op, v)| {
                    serde_json::json!({
                        "attributes": [
                            { "key": "state", "value": s(st.as_str()) },
                            { "key": "operation", "value": s(op) } ],
                        "startTimeUnixNano": start_nanos.to_string(),
                        "timeUnixNano": now,
                        "asDouble": v })
                })
                .collect();
            let activity = serde_json::json!({
                "name": "worker_activity_time_seconds_total", "unit": "s",
                "sum": { "aggregationTemporality": 2, "isMonotonic": true, "dataPoints": points } });
            let current = serde_json::json!({
                "name": "worker_current_state",
                "gauge": { "dataPoints": [{
                    "timeUnixNano": now, "asDouble": f64::from(state.code()) }] } });
            let mut metrics = vec![activity, current];
            if !gpus.is_empty() {
                metrics.push(serde_json::json!({
                    "name": "hw.gpu.utilization", "unit": "1", "gauge": { "dataPoints": gpus } }));
            }
            serde_json::json!({
                "resource": { "attributes": [
                    { "key": "service.name", "value": s("otlp-json-feeder") },
                    { "key": "service.instance.id", "value": s(&format!("feeder-{}", f.rank)) },
                    { "key": "host.name", "value": s("node-b") },
                    { "key": "rank", "value": { "intValue": f.rank.to_string() } } ] },
                "scopeMetrics": [{ "metrics": metrics }] })
        })
        .collect();
    serde_json::json!({ "resourceMetrics": resources })
}

impl Pusher {
    fn start(http_url: String, fakes: Vec<Fake>) -> Pusher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let client = reqwest::blocking::Client::new();
            let started = Instant::now();
            let start_nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let body = otlp_json(&fakes, start_nanos, started.elapsed());
                let resp = client
                    .post(format!("{http_url}/v1/metrics"))
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send();
                if let Ok(r) = resp {
                    assert!(r.status().is_success(), "the collector refused a push");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Pusher {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Not a test of its own: the process [`cluster_page_in_a_headless_browser`] starts
/// (this binary, run with `--ignored --exact cluster_page::fixed_state_worker` and [`WORKER_ENV`]).
/// It holds one state, pushing every 200 ms, until stdin closes or two minutes pass.
#[test]
#[ignore = "a worker process started by cluster_page_in_a_headless_browser"]
fn fixed_state_worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        eprintln!("{WORKER_ENV} is not set: nothing to do (a helper process, not a test)");
        return;
    };
    let mut parts = spec.split_whitespace();
    let rank: i64 = parts.next().unwrap().parse().unwrap();
    let state = higgsmeter::AppState::parse(parts.next().unwrap()).unwrap();
    let endpoint = parts.next().unwrap().to_owned();
    let telemetry = higgsmeter::Telemetry::builder()
        .with_env(false)
        .with_service_name("fixed-worker")
        .with_otlp_endpoint(endpoint)
        .with_otlp_protocol(higgsmeter::Protocol::Grpc)
        .with_export_interval(Duration::from_millis(200))
        .with_resource_attribute("rank", rank)
        .init()
        .unwrap();
    telemetry.tracker().set_state(state, "hold");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(120));
    drop(telemetry);
}

fn fixed_worker(rank: u32, state: &str, endpoint: &str) -> Killed {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "cluster_page::fixed_state_worker",
            "--nocapture",
        ])
        .env(WORKER_ENV, format!("{rank} {state} {endpoint}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a fixed-state worker (this test binary)");
    Killed(child)
}

fn demo_worker(rank: u32, endpoint: &str) -> Killed {
    let child = Command::new(bins::demo())
        .args(["worker", "--rank", &rank.to_string(), "--world-size", "4"])
        .args(["--endpoint", endpoint, "--interval-ms", "200"])
        .args(["--exit-on-stdin-eof"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a demo worker");
    Killed(child)
}

/// `chromium`, or a failure that says how to install it.
pub(crate) fn chromium() -> &'static str {
    let ok = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "Debian `chromium` is not installed (the cluster page is tested in a real headless \
         browser): run `bash .ci/setup`"
    );
    "chromium"
}

/// Runs headless chromium on `url` with `extra` flags (a fresh profile each time),
/// killed if it runs past a generous bound.
fn run_chromium(url: &str, extra: &[&str]) -> Output {
    let profile = temp_dir("chromium-profile");
    let mut child = Killed(
        Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium"),
    );
    // Drain both pipes while it runs: a DOM dump larger than a pipe's buffer (64 KiB)
    // would otherwise block chromium on its write, and it would never exit.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = std::io::Read::read_to_end(&mut p, &mut out);
            }
            out
        })
    };
    let stdout = drain(child.0.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.0.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.0.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not finish in 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Exited: its output (the pipes are at EOF).
    let Killed(c) = &mut child;
    let stdout = stdout.join().unwrap();
    let stderr = stderr.join().unwrap();
    let status = c.wait().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The DOM after the page ran for `budget_ms` of virtual time in a 1280x900 window.
pub(crate) fn dump_dom(url: &str, budget_ms: u32) -> String {
    let out = run_chromium(
        url,
        &[
            &format!("--virtual-time-budget={budget_ms}"),
            "--window-size=1280,900",
            "--dump-dom",
        ],
    );
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The attributes of every start tag in `html` that contains `marker`.
pub(crate) fn tags_with(html: &str, marker: &str) -> Vec<BTreeMap<String, String>> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(marker) {
        let start = rest[..i].rfind('<').unwrap();
        let end = i + rest[i..].find('>').unwrap();
        let tag = &rest[start..end];
        let mut attrs = BTreeMap::new();
        let mut t = tag;
        while let Some(eq) = t.find("=\"") {
            let name = t[..eq].rsplit(' ').next().unwrap().to_owned();
            let value_end = eq + 2 + t[eq + 2..].find('"').unwrap();
            attrs.insert(name, t[eq + 2..value_end].to_owned());
            t = &t[value_end + 1..];
        }
        out.push(attrs);
        rest = &rest[end..];
    }
    out
}

/// What the page shows: per rank its row's attributes, and the status line's.
struct Shown {
    rows: BTreeMap<String, BTreeMap<String, String>>,
    status: BTreeMap<String, String>,
}

fn shown(html: &str) -> Shown {
    let rows = tags_with(html, "class=\"row")
        .into_iter()
        .map(|a| (a["data-rank"].clone(), a))
        .collect();
    let status = tags_with(html, "id=\"status\"")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no status line in the page:\n{html}"));
    Shown { rows, status }
}

/// Per rank: the current state name and seconds per state, from `/metrics/sources`.
struct SourcesView {
    current: BTreeMap<String, String>,
    seconds: BTreeMap<String, BTreeMap<String, f64>>,
}

fn sources_view(samples: &[Sample]) -> SourcesView {
    let mut current = BTreeMap::new();
    let mut seconds: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for s in samples {
        let Some(rank) = s.label("rank") else {
            continue;
        };
        if s.name == "worker_current_state" {
            let name = higgsmeter::AppState::from_code(s.value as u64)
                .map_or("?", higgsmeter::AppState::as_str);
            current.insert(rank.to_owned(), name.to_owned());
        } else if s.name == "worker_activity_time_seconds_total" {
            *seconds
                .entry(rank.to_owned())
                .or_default()
                .entry(s.label("state").unwrap_or("").to_owned())
                .or_default() += s.value;
        }
    }
    SourcesView { current, seconds }
}

/// The states `rank` was in at some time between `before` and `after`: current in
/// either, or with seconds that grew in between.
fn states_within(rank: &str, before: &SourcesView, after: &SourcesView) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = [&before.current, &after.current]
        .iter()
        .filter_map(|c| c.get(rank).cloned())
        .collect();
    if let (Some(b), Some(a)) = (before.seconds.get(rank), after.seconds.get(rank)) {
        for (state, v) in a {
            if *v > b.get(state).copied().unwrap_or(0.0) {
                out.insert(state.clone());
            }
        }
    }
    out
}

fn api(collector: &CollectorProcess) -> serde_json::Value {
    serde_json::from_str(&collector.scrape("/api/cluster")).unwrap()
}

fn api_source(doc: &serde_json::Value, rank: u32) -> Option<&serde_json::Value> {
    doc["sources"]
        .as_array()?
        .iter()
        .find(|s| s["rank"] == rank.to_string().as_str())
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.len() > 10_000 && b.starts_with(b"\x89PNG\r\n\x1a\n"))
}

#[test]
fn cluster_page_in_a_headless_browser() {
    chromium();
    let collector = CollectorProcess::start(
        Some("processors:\n  higgsmeter:\n    stale_after: 2s\n"),
        &[],
    );
    let endpoint = collector.grpc_url();
    let url = format!("http://{}/", collector.prometheus);
    let mut workers: BTreeMap<u32, Killed> = BTreeMap::new();
    for rank in DEMO_RANKS {
        workers.insert(rank, demo_worker(rank, &endpoint));
    }
    for (rank, state) in FIXED {
        workers.insert(rank, fixed_worker(rank, state, &endpoint));
    }
    let fake = Fake {
        rank: GPU_RANK,
        state: higgsmeter::AppState::Gpu,
        flip: None,
        gpus: GPU_READINGS.to_vec(),
    };
    let _gpu = Pusher::start(collector.http_url(), vec![fake]);

    // The served page is the embedded one, self-contained: no external resources.
    let page = collector.scrape("/");
    assert!(page.contains("<title>higgsmeter cluster</title>"), "{page}");
    for external in ["src=\"http", "href=\"http", "//cdn", "@import"] {
        assert!(!page.contains(external), "the page loads `{external}`");
    }

    // Every worker live, the fixed ones in their state, with some history behind them.
    wait_for_or(
        Duration::from_secs(60),
        || format!("5 live ranks in /api/cluster: {}", api(&collector)),
        || {
            let doc = api(&collector);
            let ready = DEMO_RANKS
                .iter()
                .chain(FIXED.iter().map(|(r, _)| r))
                .chain([&GPU_RANK])
                .all(|r| {
                    api_source(&doc, *r).is_some_and(|s| {
                        s["live"] == true
                            && s["state"].is_string()
                            && s["last_minute_s"].as_f64().is_some_and(|w| w >= 2.0)
                    })
                })
                && FIXED
                    .iter()
                    .all(|(r, st)| api_source(&doc, *r).is_some_and(|s| s["state"] == *st));
            ready.then_some(())
        },
    );

    // The JSON: identity, state, shares, GPU (none here), staleness, fleet totals.
    let doc = api(&collector);
    assert_eq!(doc["fleet"]["live"], 5, "{doc}");
    let gpu = api_source(&doc, GPU_RANK).unwrap();
    assert_eq!(gpu["gpu_devices"], 2, "{gpu}");
    assert!(
        (gpu["gpu_utilization"].as_f64().unwrap() - 0.42).abs() < 1e-9,
        "{gpu}"
    );
    assert!((doc["fleet"]["gpu_utilization_mean"].as_f64().unwrap() - 0.42).abs() < 1e-9);
    for (rank, state) in FIXED {
        let s = api_source(&doc, rank).unwrap();
        assert_eq!(s["service.name"], "fixed-worker", "{s}");
        assert!(s["service.instance.id"].is_string(), "{s}");
        assert_eq!(s["state"], state, "{s}");
        let share = s["share_last_minute"][state].as_f64().unwrap();
        assert!(
            share > 0.9,
            "rank {rank} held {state} but its share is {share}: {s}"
        );
        assert!(s["seconds_by_state"][state].as_f64().unwrap() > 0.0, "{s}");
        assert_eq!(s["gpu_utilization"], serde_json::Value::Null, "{s}");
        assert!(s["seen_s_ago"].as_f64().unwrap() < 2.0, "{s}");
    }
    for rank in DEMO_RANKS {
        let s = api_source(&doc, rank).unwrap();
        assert_eq!(s["service.name"], "demo-worker", "{s}");
    }

    // First dump, between two scrapes of the per-source view.
    let before = sources_view(&collector.sources());
    let first_html = dump_dom(&url, 5000);
    let after = sources_view(&collector.sources());
    let first = shown(&first_html);
    let ranks: BTreeSet<&str> = first.rows.keys().map(String::as_str).collect();
    assert_eq!(
        ranks,
        BTreeSet::from(["0", "1", "2", "3", "4"]),
        "the page shows every rank:\n{first_html}"
    );
    for (rank, row) in &first.rows {
        assert_eq!(row["data-live"], "true", "rank {rank}: {row:?}");
        let state = &row["data-state"];
        let within = states_within(rank, &before, &after);
        assert!(
            within.contains(state),
            "rank {rank} is shown in {state}, but between two scrapes of /metrics/sources \
             around the page load it was in {within:?}"
        );
    }
    for (rank, state) in FIXED {
        let rank = rank.to_string();
        assert_eq!(first.rows[&rank]["data-state"], state);
        assert_eq!(after.current[&rank], state, "/metrics/sources agrees");
    }
    // GPU utilisation where known (the mean over the source's devices), n/a elsewhere.
    assert_eq!(first.rows["4"]["data-gpu"], "0.420");
    assert_eq!(first.rows["2"]["data-gpu"], "");
    assert!(
        first_html.contains("id=\"fleetgpu\">42.0%<"),
        "the fleet's GPU utilisation is shown"
    );
    for rank in DEMO_RANKS {
        let state = &first.rows[&rank.to_string()]["data-state"];
        assert!(
            DEMO_STATES.contains(&state.as_str()),
            "rank {rank}: {state}"
        );
    }
    // It refreshes by itself: more than one fetch while the page ran.
    let count: u32 = first.status["data-count"].parse().unwrap();
    assert!(
        count >= 2,
        "the page refreshed {count} time(s): {:?}",
        first.status
    );

    // Updates: a later load shows a later collector uptime and more counted time.
    let time_of = |s: &Shown, rank: &str| -> f64 { s.rows[rank]["data-total-s"].parse().unwrap() };
    wait_for_or(
        Duration::from_secs(30),
        || "the collector's uptime to grow by 2 s".to_owned(),
        || {
            let now = api(&collector)["uptime_s"].as_f64()?;
            let then: f64 = first.status["data-uptime"].parse().ok()?;
            (now > then + 2.0).then_some(())
        },
    );
    let second = shown(&dump_dom(&url, 2500));
    let up = |s: &Shown| -> f64 { s.status["data-uptime"].parse().unwrap() };
    assert!(
        up(&second) > up(&first),
        "{:?} then {:?}",
        first.status,
        second.status
    );
    for rank in ["0", "1", "2", "3", "4"] {
        assert!(
            time_of(&second, rank) > time_of(&first, rank),
            "rank {rank}'s counted time did not grow between two loads"
        );
    }

    // Staleness: a worker that stops pushing is shown stale once `stale_after` passes.
    drop(workers.remove(&3));
    wait_for_or(
        Duration::from_secs(30),
        || format!("rank 3 to go stale: {}", api(&collector)),
        || {
            let doc = api(&collector);
            api_source(&doc, 3)
                .is_some_and(|s| s["live"] == false)
                .then_some(())
        },
    );
    let third = shown(&dump_dom(&url, 2500));
    assert_eq!(
        third.rows["3"]["data-live"], "false",
        "{:?}",
        third.rows["3"]
    );
    assert_eq!(third.rows["3"]["data-state"], "stale");
    assert_eq!(third.rows["2"]["data-state"], "gpu");

    // The screenshot, a test artifact: four live ranks and a stale one.
    let shot: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster_page.png");
    let _ = std::fs::remove_file(&shot);
    let out = run_chromium(
        &url,
        &[
            "--virtual-time-budget=2500",
            "--window-size=1280,900",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        out.status.success() && is_png(&shot),
        "no screenshot at {}: {}\n{}",
        shot.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!("cluster page screenshot: {}", shot.display());
}

#[test]
fn sixty_four_ranks_fit_on_one_screen() {
    chromium();
    let collector = CollectorProcess::start(None, &[]);
    let states = [
        higgsmeter::AppState::Gpu,
        higgsmeter::AppState::Io,
        higgsmeter::AppState::Cpu,
        higgsmeter::AppState::Idle,
        higgsmeter::AppState::Warmup,
    ];
    let fakes: Vec<Fake> = (0..64u32)
        .map(|rank| Fake {
            rank,
            state: states[rank as usize % states.len()],
            flip: None,
            gpus: if rank % 2 == 0 {
                vec![f64::from(rank % 10) / 10.0]
            } else {
                Vec::new()
            },
        })
        .collect();
    let _pusher = Pusher::start(collector.http_url(), fakes.clone());
    wait_for_or(
        Duration::from_secs(60),
        || format!("64 live sources: {}", api(&collector)["fleet"]),
        || (api(&collector)["fleet"]["live"] == 64).then_some(()),
    );
    let url = format!("http://{}/", collector.prometheus);
    let html = dump_dom(&url, 2500);
    let rows = tags_with(&html, "class=\"row");
    let ranks: Vec<String> = rows.iter().map(|r| r["data-rank"].clone()).collect();
    let want: Vec<String> = (0..64).map(|r: u32| r.to_string()).collect();
    assert_eq!(ranks, want, "one row per rank, in rank order");
    for (row, fake) in rows.iter().zip(&fakes) {
        assert_eq!(row["data-state"], fake.state.as_str(), "{row:?}");
        let gpu = fake
            .gpus
            .first()
            .map_or(String::new(), |g| format!("{g:.3}"));
        assert_eq!(row["data-gpu"], gpu, "{row:?}");
    }
    let body = tags_with(&html, "data-rows-visible")
        .into_iter()
        .next()
        .unwrap();
    assert_eq!(
        body["data-rows-visible"], "64",
        "every rank fits in a 1280x900 window: {body:?}"
    );
    let shot: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster_page_64.png");
    let _ = std::fs::remove_file(&shot);
    let out = run_chromium(
        &url,
        &[
            "--virtual-time-budget=2500",
            "--window-size=1280,900",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        out.status.success() && is_png(&shot),
        "no screenshot at {}",
        shot.display()
    );
    println!("cluster page screenshot (64 ranks): {}", shot.display());
}

/// The page's colour for each state (`HEX` in `collector/assets/cluster.html`).
const STATE_COLOURS: [(&str, &str); 9] = [
    ("gpu", "#2e9e4f"),
    ("io", "#2f6fdb"),
    ("cpu", "#f08c1a"),
    ("idle", "#b9c0cb"),
    ("warmup", "#8e5cd9"),
    ("startup", "#8a6a4f"),
    ("shutdown", "#d64545"),
    ("silent", "#e3e6eb"),
    ("unknown", "#9aa1ad"),
];

fn timeline(collector: &CollectorProcess, window_s: u32) -> serde_json::Value {
    serde_json::from_str(&collector.scrape(&format!("/api/cluster/timeline?window={window_s}")))
        .unwrap()
}

fn timeline_lane(doc: &serde_json::Value, rank: u32) -> Option<&serde_json::Value> {
    doc["lanes"]
        .as_array()?
        .iter()
        .find(|l| l["rank"] == rank.to_string().as_str())
}

/// The state timeline: two ranks that alternate gpu and io every 3 s, and a third that
/// holds io (operation `hold`) with an idle GPU: a known stall, and a straggler.
#[test]
fn state_timeline_in_a_headless_browser() {
    chromium();
    let collector = CollectorProcess::start(None, &[]);
    let gpu = higgsmeter::AppState::Gpu;
    let io = higgsmeter::AppState::Io;
    let fakes = vec![
        Fake {
            rank: 0,
            state: gpu,
            flip: Some(io),
            gpus: vec![0.8],
        },
        Fake {
            rank: 1,
            state: gpu,
            flip: Some(io),
            gpus: vec![0.7, 0.9],
        },
        Fake {
            rank: 2,
            state: io,
            flip: None,
            gpus: vec![0.05],
        },
    ];
    let _pusher = Pusher::start(collector.http_url(), fakes);

    // The collector marks rank 2 stalled once it has held io for `stall_after_s` while
    // its peers moved on; the JSON says so first.
    wait_for_or(
        Duration::from_secs(90),
        || {
            format!(
                "rank 2 stalled in the timeline: {}",
                timeline(&collector, 60)
            )
        },
        || {
            let doc = timeline(&collector, 60);
            let ok = timeline_lane(&doc, 2).is_some_and(|l| l["stalled"] == true)
                && [0, 1].iter().all(|r| {
                    timeline_lane(&doc, *r).is_some_and(|l| {
                        let states: BTreeSet<u64> = l["segments"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(|s| s[1].as_u64())
                            .collect();
                        states.len() >= 2 && l["gpu"].as_array().unwrap().len() >= 2
                    })
                });
            ok.then_some(())
        },
    );
    let doc = timeline(&collector, 60);
    assert_eq!(doc["window_s"], 60, "{doc}");
    let stuck = timeline_lane(&doc, 2).unwrap();
    assert_eq!(stuck["state"], "io", "{stuck}");
    assert_eq!(stuck["operation"], "hold", "{stuck}");
    assert_eq!(stuck["behind"], true, "{stuck}");
    assert!(stuck["since_s"].as_f64().unwrap() >= doc["stall_after_s"].as_f64().unwrap());
    for rank in [0, 1] {
        let l = timeline_lane(&doc, rank).unwrap();
        assert_eq!(l["stalled"], false, "{l}");
        assert_eq!(l["behind"], false, "{l}");
        assert_eq!(l["silent"], false, "{l}");
    }

    // The page, zoomed to the last minute.
    let url = format!("http://{}/?window=60", collector.prometheus);
    let html = dump_dom(&url, 5000);
    let lanes = tags_with(&html, "class=\"lane");
    let ranks: Vec<&str> = lanes.iter().map(|l| l["data-rank"].as_str()).collect();
    assert_eq!(
        ranks,
        ["0", "1", "2"],
        "one lane per rank, in rank order:\n{html}"
    );
    let by_rank: BTreeMap<&str, &BTreeMap<String, String>> =
        lanes.iter().map(|l| (l["data-rank"].as_str(), l)).collect();
    // The known stall, and the straggler, as the data says.
    let two = by_rank["2"];
    assert_eq!(two["data-stalled"], "true", "{two:?}");
    assert_eq!(two["data-behind"], "true", "{two:?}");
    assert_eq!(two["data-state"], "io", "{two:?}");
    assert_eq!(two["data-operation"], "hold", "{two:?}");
    assert!(two["class"].contains("stalled"), "{two:?}");
    for rank in ["0", "1"] {
        assert_eq!(
            by_rank[rank]["data-stalled"], "false",
            "{:?}",
            by_rank[rank]
        );
        assert_eq!(by_rank[rank]["data-behind"], "false", "{:?}", by_rank[rank]);
        let state = &by_rank[rank]["data-state"];
        assert!(
            state == "gpu" || state == "io",
            "rank {rank} now in {state}"
        );
    }
    assert_eq!(
        html.matches("class=\"mark stalled\" title=").count(),
        1,
        "one lane is labelled stalled"
    );
    // Segments (a path per state and lane): coloured by their state; rank 2 only ever
    // in io (its operation `hold` once known), ranks 0 and 1 in both gpu and io, with
    // their operations.
    let colour: BTreeMap<&str, &str> = STATE_COLOURS.into_iter().collect();
    let mut drawn: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for seg in tags_with(&html, "class=\"seg\"") {
        let state = &seg["data-state"];
        assert_eq!(
            seg["fill"],
            colour[state.as_str()],
            "{state} is drawn in its colour: {seg:?}"
        );
        assert!(seg["d"].starts_with('M'), "{seg:?}");
        drawn
            .entry(seg["data-rank"].clone())
            .or_default()
            .insert(state.clone());
    }
    assert_eq!(drawn["2"], BTreeSet::from(["io".to_owned()]), "{drawn:?}");
    for rank in ["0", "1"] {
        let want = BTreeSet::from(["gpu".to_owned(), "io".to_owned()]);
        assert_eq!(drawn[rank], want, "rank {rank}: {drawn:?}");
    }
    let ops = |rank: &str| -> BTreeSet<&str> { by_rank[rank]["data-ops"].split('|').collect() };
    assert!(ops("2").contains("io/hold"), "{:?}", ops("2"));
    assert!(
        ops("2").iter().all(|s| s.starts_with("io/")),
        "{:?}",
        ops("2")
    );
    for rank in ["0", "1"] {
        let seen = ops(rank);
        assert!(
            seen.contains("gpu/step") && seen.contains("io/load"),
            "rank {rank}: {seen:?}"
        );
    }
    // A GPU line in every lane (each rank reports utilisation).
    let lines = tags_with(&html, "class=\"gpuline\"");
    let with_line: BTreeSet<&str> = lines.iter().map(|l| l["data-rank"].as_str()).collect();
    assert_eq!(with_line, BTreeSet::from(["0", "1", "2"]), "{lines:?}");
    // The full width of the window: the lanes' track takes most of 1280 px.
    let section = tags_with(&html, "id=\"timeline\"")
        .into_iter()
        .next()
        .unwrap();
    assert_eq!(section["data-window"], "60", "{section:?}");
    let width: u32 = section["data-track-width"].parse().unwrap();
    assert!(
        width >= 800,
        "the timeline's track is {width} px wide in a 1280 px window"
    );
    // Zoom buttons up to an hour; the one in use is marked.
    let zooms = tags_with(&html, "data-window=\"");
    let windows: Vec<&str> = zooms
        .iter()
        .filter(|z| z.contains_key("title"))
        .map(|z| z["data-window"].as_str())
        .collect();
    assert_eq!(windows, ["60", "300", "900", "1800", "3600"], "{zooms:?}");
    assert!(
        html.contains("class=\"on\" data-window=\"60\""),
        "the 1m zoom is on"
    );

    let shot: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster_timeline.png");
    let _ = std::fs::remove_file(&shot);
    let out = run_chromium(
        &url,
        &[
            "--virtual-time-budget=3000",
            "--window-size=1280,600",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        out.status.success() && is_png(&shot),
        "no screenshot at {}",
        shot.display()
    );
    println!("cluster timeline screenshot: {}", shot.display());
}

/// Writes `docs/cluster-page.png`, the README's picture: the demo (`demo`, four ranks)
/// for two minutes, its page zoomed to the last two minutes. Run by hand:
/// `cargo test -p higgsmeter-collector --test it -- --ignored --exact cluster_page::readme_screenshot_of_the_demo`.
#[test]
#[ignore = "writes docs/cluster-page.png for the README; takes two minutes"]
fn readme_screenshot_of_the_demo() {
    chromium();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let prometheus = format!("127.0.0.1:{port}");
    let _demo = Killed(
        Command::new(bins::demo())
            .args(["--plain", "--duration", "200", "--ranks", "4"])
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--prometheus", &prometheus])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the demo"),
    );
    let client = reqwest::blocking::Client::new();
    let lanes = || -> Option<serde_json::Value> {
        let text = client
            .get(format!(
                "http://{prometheus}/api/cluster/timeline?window=120"
            ))
            .send()
            .ok()?
            .text()
            .ok()?;
        serde_json::from_str(&text).ok()
    };
    // Two minutes of history (covered_s is how much of the window a lane has).
    wait_for_or(
        Duration::from_secs(180),
        || format!("two minutes of demo history: {:?}", lanes()),
        || {
            let doc = lanes()?;
            let all = doc["lanes"].as_array()?;
            (all.len() == 4 && all.iter().all(|l| l["covered_s"].as_f64() >= Some(115.0)))
                .then_some(())
        },
    );
    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cluster-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = run_chromium(
        &format!("http://{prometheus}/?window=120"),
        &[
            "--virtual-time-budget=3000",
            "--window-size=1280,460",
            "--hide-scrollbars",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        out.status.success() && is_png(&shot),
        "no screenshot at {}",
        shot.display()
    );
    let size = std::fs::metadata(&shot).unwrap().len();
    assert!(
        size < 200_000,
        "{} is {size} bytes: keep it under 200 KB",
        shot.display()
    );
    println!("README screenshot: {} ({size} bytes)", shot.display());
}

/// A request carrying the activity counter of rank `rank` over `ops` operations of the
/// `gpu` state, each at `value` seconds (cumulative).
fn activity_request(
    rank: u32,
    ops: u32,
    value: f64,
) -> opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest {
    use crate::support::{kv, started};
    let points: Vec<(&str, String)> = (0..ops).map(|op| ("gpu", format!("req-{op}"))).collect();
    let resource = vec![
        kv("service.name", "overflow-page"),
        kv("service.instance.id", &format!("r{rank}")),
        kv("rank", &rank.to_string()),
    ];
    crate::support::activity_request([resource], &points, value, started() + 1)
}

/// A source past its series quota is marked on its row and its timeline lane (the
/// metric it folds in the badge's title); the healthy source beside it is not.
#[test]
fn an_overflowing_source_is_marked_on_the_page() {
    use prost::Message as _;
    let collector = CollectorProcess::start(
        Some("processors:\n  higgsmeter:\n    max_series_per_source_metric: 8\n"),
        &[],
    );
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/v1/metrics", collector.http_url());
    let post = |rank: u32, ops: u32, value: f64| {
        let resp = client
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .body(activity_request(rank, ops, value).encode_to_vec())
            .send()
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    };
    for value in [1.0, 2.0, 3.0] {
        post(0, 20, value);
        post(1, 2, value);
        std::thread::sleep(Duration::from_millis(600));
    }
    let doc = api(&collector);
    let bad = api_source(&doc, 0).expect("rank 0 in /api/cluster");
    // 20 operations, 8 kept as series (the quota; the overflow series comes beside
    // them): 12 fold, 3 times. Their seconds are shown as the `overflow` state's.
    assert_eq!(
        bad["overflow"]["worker_activity_time_seconds_total"], 36,
        "{bad}"
    );
    assert_eq!(bad["seconds_by_state"]["overflow"], 36.0, "{bad}");
    assert_eq!(bad["seconds_by_state"]["gpu"], 24.0, "{bad}");
    let good = api_source(&doc, 1).expect("rank 1 in /api/cluster");
    assert_eq!(good["overflow"], serde_json::json!({}), "{good}");

    let html = dump_dom(&format!("http://{}/", collector.prometheus), 3000);
    let marked = tags_with(&html, "data-overflow=\"true\"");
    assert!(
        !marked.is_empty()
            && marked
                .iter()
                .all(|t| t.get("data-rank").map(String::as_str) == Some("0")),
        "only rank 0's row and lane are marked: {marked:?}"
    );
    assert!(
        marked.iter().any(|t| t["class"].starts_with("row"))
            && marked.iter().any(|t| t["class"].starts_with("lane")),
        "its row and its lane: {marked:?}"
    );
    let badges = tags_with(&html, "class=\"mark overflow\"");
    assert_eq!(
        badges.len(),
        2,
        "a badge on the row and on the lane: {badges:?}"
    );
    assert!(
        badges
            .iter()
            .any(|t| t["title"].contains("36 points of worker_activity_time_seconds_total")),
        "{badges:?}"
    );
    assert!(
        tags_with(&html, "data-overflow=\"false\"")
            .iter()
            .any(|t| t.get("data-rank").map(String::as_str) == Some("1")),
        "rank 1 is shown unmarked"
    );
}
