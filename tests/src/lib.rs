//! End-to-end test support for higgsmeter: real processes on 127.0.0.1.
//!
//! - [`Workload`]: the known per-rank workloads the `e2e-worker` binary runs and the
//!   tests check against, and [`GroundTruth`], what each worker writes at exit.
//! - [`ChildGuard`]: a child process killed (and reaped) on drop, panics included.
//! - [`collector_binary`]: builds `higgsmeter-collector` with cargo and returns its path.
//! - [`Collector`] and [`Prometheus`]: the collector and a real Prometheus server
//!   (Debian's `/usr/bin/prometheus`) on ephemeral ports with temporary storage.
//! - [`http_get`] and [`PromClient`]: a minimal HTTP/1.0 client and the Prometheus
//!   query API on top of it.
//! - [`rules`]: the rule files' two flavours (scrape, remote write), rendered from one
//!   source.
//!
//! Every wait is bounded in count and in time; nothing asserts timings.

pub mod rules;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::{Deserialize, Serialize};

/// The `service.name` every e2e worker reports (Prometheus: `exported_job`).
pub const SERVICE_NAME: &str = "e2e-worker";

/// The workers' OTLP push interval.
pub const EXPORT_INTERVAL: Duration = Duration::from_millis(200);

/// The repository root (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// One phase of a worker's repeating cycle: a state, an operation, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// The state's name (`gpu`, `io`, `cpu`, `idle`).
    pub state: &'static str,
    /// The operation label.
    pub operation: &'static str,
    /// How long the phase lasts in each cycle.
    pub millis: u64,
}

const fn phase(state: &'static str, operation: &'static str, millis: u64) -> Phase {
    Phase {
        state,
        operation,
        millis,
    }
}

/// A rank's known workload: a cycle of phases repeated for the steady period, then a
/// hold in one (state, operation) until the test releases it.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// The phases of one cycle, in order.
    pub cycle: &'static [Phase],
    /// The (state, operation) the worker holds after the steady period.
    pub hold: (&'static str, &'static str),
    /// Bytes "read over the wire" per cycle, recorded as `mstar_transfer_bytes_total`.
    pub transfer_bytes_per_cycle: u64,
}

/// The workloads of ranks 0..4. Rank 3 is the straggler: mostly idle while the others
/// compute. Over the fleet, five (state, operation) pairs each take at least 110 ms of
/// every 200 ms cycle summed over ranks, well above the startup phase, so the top 5 is
/// unambiguous. The `gpu` phase of each cycle is one engine step (`mstar_step_seconds`),
/// each rank's step length in a different histogram bucket.
pub const WORKLOADS: [Workload; 4] = [
    Workload {
        cycle: &[
            phase("gpu", "forward", 110),
            phase("io", "load_batch", 40),
            phase("io", "checkpoint", 20),
            phase("cpu", "tokenize", 10),
            phase("idle", "wait", 20),
        ],
        hold: ("gpu", "forward"),
        transfer_bytes_per_cycle: 4 << 20,
    },
    Workload {
        cycle: &[
            phase("gpu", "forward", 80),
            phase("io", "load_batch", 40),
            phase("io", "checkpoint", 40),
            phase("cpu", "tokenize", 30),
            phase("idle", "wait", 10),
        ],
        hold: ("io", "checkpoint"),
        transfer_bytes_per_cycle: 3 << 20,
    },
    Workload {
        cycle: &[
            phase("gpu", "forward", 60),
            phase("io", "load_batch", 30),
            phase("io", "checkpoint", 30),
            phase("cpu", "tokenize", 60),
            phase("idle", "wait", 20),
        ],
        hold: ("cpu", "tokenize"),
        transfer_bytes_per_cycle: 2 << 20,
    },
    Workload {
        cycle: &[
            phase("gpu", "forward", 30),
            phase("io", "load_batch", 20),
            phase("io", "checkpoint", 20),
            phase("cpu", "tokenize", 10),
            phase("idle", "wait", 120),
        ],
        hold: ("idle", "wait"),
        transfer_bytes_per_cycle: 1 << 20,
    },
];

/// One (state, operation) total of a worker's tracker at exit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruthEntry {
    /// The state's name.
    pub state: String,
    /// The operation.
    pub operation: String,
    /// Seconds spent (the tracker's nanoseconds / 1e9).
    pub seconds: f64,
}

/// What one worker recorded, written by `e2e-worker` at exit (after entering
/// `shutdown`, before its final flush).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    /// The worker's rank.
    pub rank: u32,
    /// The tracker's snapshot: every (state, operation) with its time.
    pub entries: Vec<GroundTruthEntry>,
    /// Every engine step recorded (`mstar_step_seconds`), in seconds.
    pub steps: Vec<f64>,
    /// Bytes recorded on `mstar_transfer_bytes_total`.
    pub transfer_bytes: u64,
    /// Seconds recorded on the synthetic GPU's `hw.gpu.session.active_time`, by the
    /// worker state they were attributed to (`gpu`, `io`).
    #[serde(default)]
    pub gpu_active_seconds: BTreeMap<String, f64>,
}

/// The synthetic GPU readings a worker reports (no NVML in CI): the NVML meter's
/// instrument names and labels, fixed values per rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticGpu {
    /// `hw.gpu.utilization`.
    pub utilization: f64,
    /// `hw.gpu.memory.utilization`.
    pub memory_utilization: f64,
    /// `hw.power`, watts.
    pub power: f64,
    /// `hw.gpu.temperature`, °C.
    pub temperature: f64,
    /// The share of each `io/load_batch` phase during which the GPU counts as active
    /// (asynchronous kernels still running), attributed to state `io`.
    pub active_share_of_load_batch: f64,
    /// `hw.status`: the `hw.state` that is 1 (the others are 0).
    pub health: &'static str,
    /// `hw.gpu.xid.errors`: one XID of this code, if any.
    pub xid: Option<u64>,
}

impl SyntheticGpu {
    /// Rank `rank`'s readings.
    pub fn of_rank(rank: u32) -> SyntheticGpu {
        let r = f64::from(rank);
        SyntheticGpu {
            utilization: 0.2 + 0.2 * r,
            memory_utilization: 0.5,
            power: 300.0 + r,
            temperature: 60.0 + r,
            active_share_of_load_batch: 0.5,
            // Rank 1's GPU fell off the bus; rank 0's is healthy.
            health: if rank == 1 { "failed" } else { "ok" },
            xid: (rank == 1).then_some(79),
        }
    }

    /// `hw.id` of rank `rank`'s device.
    pub fn device_id(rank: u32) -> String {
        format!("GPU-e2e-{rank}")
    }
}

impl GroundTruth {
    /// Seconds in (state, operation), 0 if never visited.
    pub fn seconds(&self, state: &str, operation: &str) -> f64 {
        self.entries
            .iter()
            .filter(|e| e.state == state && e.operation == operation)
            .map(|e| e.seconds)
            .sum()
    }

    /// Seconds in `state` over every operation.
    pub fn state_seconds(&self, state: &str) -> f64 {
        self.entries
            .iter()
            .filter(|e| e.state == state)
            .map(|e| e.seconds)
            .sum()
    }

    /// Seconds in the working states: everything but startup, warmup and shutdown
    /// (the Python higgsmeter README's denominator).
    pub fn working_seconds(&self) -> f64 {
        self.entries
            .iter()
            .filter(|e| !matches!(e.state.as_str(), "startup" | "warmup" | "shutdown"))
            .map(|e| e.seconds)
            .sum()
    }
}

/// A child process that is killed and reaped when dropped (also while unwinding).
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    child: Child,
}

impl ChildGuard {
    /// Spawns `command` and guards it; `name` appears in errors.
    pub fn spawn(name: impl Into<String>, command: &mut Command) -> anyhow::Result<ChildGuard> {
        let name = name.into();
        let child = command
            .spawn()
            .with_context(|| format!("starting {name}: {command:?}"))?;
        Ok(ChildGuard { name, child })
    }

    /// The child process.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits up to `limit` (polling every 20 ms) for the child to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{} did not exit within {limit:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Reads a child's stdout lines on a thread of its own and hands them over a channel.
pub fn line_reader(stdout: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (up to `limit`) for a line satisfying `pred`; returns it.
pub fn wait_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no {what} within {limit:?}");
        }
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return Ok(line),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => bail!("no {what} within {limit:?}"),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("the process closed its output before {what}")
            }
        }
    }
}

/// Builds `higgsmeter-collector` with the cargo that runs the tests (a no-op when it is
/// up to date) and returns the binary's path. `HIGGSMETER_COLLECTOR_BIN` overrides.
pub fn collector_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("HIGGSMETER_COLLECTOR_BIN") {
        return Ok(PathBuf::from(path));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root()).args([
        "build",
        "--quiet",
        "-p",
        "higgsmeter-collector",
        "--bin",
        "higgsmeter-collector",
        "--message-format=json-render-diagnostics",
    ]);
    let release = std::env::current_exe()
        .map(|p| p.components().any(|c| c.as_os_str() == "release"))
        .unwrap_or(false);
    if release {
        cmd.arg("--release");
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build -p higgsmeter-collector")?;
    if !out.status.success() {
        bail!(
            "cargo build -p higgsmeter-collector failed ({}); to test against a collector \
             built elsewhere, set HIGGSMETER_COLLECTOR_BIN to its path",
            out.status
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_bin = msg["target"]["name"] == "higgsmeter-collector"
            && msg["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|v| v == "bin"));
        if let (true, Some(exe)) = (is_bin, msg["executable"].as_str()) {
            return Ok(PathBuf::from(exe));
        }
    }
    bail!("cargo build reported no higgsmeter-collector executable")
}

/// A free TCP port on 127.0.0.1 (bound and released; the caller retries on a race).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A running collector on ephemeral ports.
#[derive(Debug)]
pub struct Collector {
    /// The process.
    pub process: ChildGuard,
    /// OTLP/gRPC address.
    pub grpc: SocketAddr,
    /// OTLP/HTTP address.
    pub http: SocketAddr,
    /// Prometheus endpoint address (`/metrics`, `/metrics/sources`).
    pub prometheus: SocketAddr,
}

impl Collector {
    /// Starts `binary` on port 0 everywhere, without state, and reads its
    /// "listening" line.
    pub fn start(binary: &Path) -> anyhow::Result<Collector> {
        Collector::start_with(binary, &["--storage", "none"])
    }

    /// Starts `binary` on port 0 everywhere with `extra` arguments (e.g.
    /// `--storage DIR`, `--grpc ADDR` to take an address again after a restart; the
    /// last of a repeated flag wins), and reads its "listening" line.
    pub fn start_with<S: AsRef<std::ffi::OsStr>>(
        binary: &Path,
        extra: &[S],
    ) -> anyhow::Result<Collector> {
        let mut process = ChildGuard::spawn(
            "higgsmeter-collector",
            Command::new(binary)
                .args([
                    "--grpc",
                    "127.0.0.1:0",
                    "--http",
                    "127.0.0.1:0",
                    "--prometheus",
                    "127.0.0.1:0",
                ])
                .args(extra)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        )?;
        let stdout = process.child().stdout.take().context("collector stdout")?;
        let lines = line_reader(stdout);
        let line = wait_line(&lines, Duration::from_secs(30), "listening line", |l| {
            l.starts_with("higgsmeter-collector listening")
        })?;
        let addr = |key: &str| -> anyhow::Result<SocketAddr> {
            let value = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .with_context(|| format!("no {key} in {line:?}"))?;
            value
                .parse()
                .with_context(|| format!("bad {key} in {line:?}"))
        };
        Ok(Collector {
            grpc: addr("grpc=")?,
            http: addr("http=")?,
            prometheus: addr("prometheus=")?,
            process,
        })
    }
}

/// A real Prometheus server on 127.0.0.1 with a temporary config and storage.
#[derive(Debug)]
pub struct Prometheus {
    process: ChildGuard,
    /// Its HTTP address.
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    /// Writes `config` (a prometheus.yml) into `dir` and starts `/usr/bin/prometheus`
    /// (or `$PROMETHEUS`) on a free port, waiting until `/-/ready` answers 200.
    pub fn start(dir: &Path, config: &str) -> anyhow::Result<Prometheus> {
        Prometheus::start_with_flags(dir, config, &[])
    }

    /// [`Prometheus::start`] with extra command-line flags, e.g.
    /// `--web.enable-remote-write-receiver`.
    pub fn start_with_flags(
        dir: &Path,
        config: &str,
        flags: &[&str],
    ) -> anyhow::Result<Prometheus> {
        let binary = std::env::var_os("PROMETHEUS").unwrap_or_else(|| "/usr/bin/prometheus".into());
        std::fs::create_dir_all(dir)?;
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let mut last_err = anyhow!("not started");
        for attempt in 0..3 {
            let port = free_port()?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let log = std::fs::File::create(dir.join(format!("prometheus-{attempt}.log")))?;
            let mut process = ChildGuard::spawn(
                "prometheus",
                Command::new(&binary)
                    .arg(format!("--config.file={}", config_path.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.join(format!("data-{attempt}")).display()
                    ))
                    .arg(format!("--web.listen-address={addr}"))
                    .arg("--log.level=warn")
                    .args(flags)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log),
            )?;
            match wait_ready(&mut process, addr) {
                Ok(()) => {
                    return Ok(Prometheus {
                        process,
                        addr,
                        dir: dir.to_path_buf(),
                    });
                }
                Err(e) => last_err = e,
            }
        }
        Err(last_err.context(format!(
            "prometheus did not start; logs in {}",
            dir.display()
        )))
    }

    /// The query client.
    pub fn client(&self) -> PromClient {
        PromClient { addr: self.addr }
    }

    /// The server's log of its last start.
    pub fn log(&self) -> String {
        let mut out = String::new();
        for attempt in 0..3 {
            if let Ok(text) =
                std::fs::read_to_string(self.dir.join(format!("prometheus-{attempt}.log")))
            {
                out.push_str(&text);
            }
        }
        out
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.process.child().try_wait(), Ok(None))
    }
}

fn wait_ready(process: &mut ChildGuard, addr: SocketAddr) -> anyhow::Result<()> {
    for _ in 0..300 {
        if let Some(status) = process.child().try_wait()? {
            bail!("prometheus exited: {status}");
        }
        if let Ok((200, _)) = http_get(addr, "/-/ready") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("prometheus at {addr} not ready after 30 s")
}

/// `GET path` over HTTP/1.0 (no chunking, connection closed by the server):
/// (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).context("response is not UTF-8")?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("response without a header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("response without a status")?;
    Ok((status, body.to_owned()))
}

/// Percent-encodes a query-string value.
pub fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One sample of an instant-vector result.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its labels (the metric name under `__name__` when kept).
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// A label's value, `""` when absent.
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or("")
    }
}

/// The Prometheus HTTP query API.
#[derive(Debug, Clone, Copy)]
pub struct PromClient {
    /// The server's address.
    pub addr: SocketAddr,
}

impl PromClient {
    /// `GET /api/v1/query`: the whole JSON answer, an error unless `status` is `success`.
    pub fn query_raw(&self, promql: &str) -> anyhow::Result<serde_json::Value> {
        let path = format!("/api/v1/query?query={}", url_encode(promql));
        let (status, body) = http_get(self.addr, &path)?;
        let json: serde_json::Value = serde_json::from_str(&body)
            .with_context(|| format!("HTTP {status}, not JSON: {body}"))?;
        if json["status"] != "success" {
            bail!("query {promql:?} failed (HTTP {status}): {body}");
        }
        Ok(json)
    }

    /// An instant query that must return a vector: its samples.
    pub fn query(&self, promql: &str) -> anyhow::Result<Vec<Sample>> {
        let json = self.query_raw(promql)?;
        let data = &json["data"];
        if data["resultType"] != "vector" {
            bail!("query {promql:?}: expected a vector, got {data}");
        }
        let mut out = Vec::new();
        for item in data["result"]
            .as_array()
            .context("result is not an array")?
        {
            let labels = item["metric"]
                .as_object()
                .context("sample without metric")?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect();
            let value = item["value"][1]
                .as_str()
                .context("sample without value")?
                .parse::<f64>()
                .context("sample value is not a number")?;
            out.push(Sample { labels, value });
        }
        Ok(out)
    }

    /// A query whose answer must be exactly one sample: its value.
    pub fn scalar(&self, promql: &str) -> anyhow::Result<f64> {
        let samples = self.query(promql)?;
        match samples.as_slice() {
            [one] => Ok(one.value),
            other => bail!("query {promql:?}: expected one sample, got {other:?}"),
        }
    }

    /// A query answered per value of `label`: label value → sample value (an error if
    /// a value repeats).
    pub fn by_label(&self, promql: &str, label: &str) -> anyhow::Result<BTreeMap<String, f64>> {
        let mut out = BTreeMap::new();
        for s in self.query(promql)? {
            let key = s.label(label).to_owned();
            if out.insert(key.clone(), s.value).is_some() {
                bail!("query {promql:?}: {label}={key:?} appears twice");
            }
        }
        Ok(out)
    }
}

/// Every PromQL expression of a Grafana dashboard (panels, rows' nested panels, and
/// query variables), with the title of the panel (or variable) it belongs to.
pub fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("").to_owned();
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((title.clone(), expr.to_owned()));
                }
            }
            panels(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = var["name"].as_str().unwrap_or("").to_owned();
        let query = var["query"]["query"]
            .as_str()
            .or_else(|| var["query"].as_str())
            .or_else(|| var["definition"].as_str());
        if var["type"] == "query"
            && let Some(q) = query
        {
            // label_values(metric{...}, label) → the selector it reads.
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|rest| rest.rsplit_once(','))
                .map(|(selector, _)| selector.trim().to_owned());
            if let Some(selector) = inner {
                out.push((format!("variable {name}"), selector));
            }
        }
    }
    out
}

/// A Grafana PromQL expression made runnable against the Prometheus API: the
/// dashboard's variables (`$service`, `$rank`, all-values) become `.+`, Grafana's
/// interval macros become fixed durations.
pub fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1s")
        .replace("$__range", "5m")
        .replace("${service:regex}", ".+")
        .replace("${rank:regex}", ".+")
        .replace("$service", ".+")
        .replace("$rank", ".+")
}
