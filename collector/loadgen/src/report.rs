//! Measuring the target while the load runs, and the report.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::payload::Shape;
use crate::procstat;
use crate::send::{SendConfig, TaskResult};

/// CPU and memory of the target over the measured window.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TargetUsage {
    /// Process id measured.
    pub(crate) pid: u32,
    /// CPU over the window, percent of one core (all threads).
    pub(crate) cpu_percent: Option<f64>,
    /// `VmRSS` at the end of the window, MiB.
    pub(crate) rss_mib: Option<f64>,
    /// Largest `VmRSS` sampled every 100 ms during the window, MiB.
    pub(crate) rss_max_mib: Option<f64>,
    /// `VmHWM` (peak RSS since the process started), MiB.
    pub(crate) hwm_mib: Option<f64>,
}

/// What the monitor measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Usage {
    /// The target, when a pid was given or spawned.
    pub(crate) target: Option<TargetUsage>,
    /// The generator's own CPU over the window, percent of one core.
    pub(crate) loadgen_cpu_percent: Option<f64>,
    /// Busy CPU of the whole machine over the window, percent of one core (at most
    /// 100 × cores).
    pub(crate) machine_cpu_percent: Option<f64>,
    /// Machine CPU used by neither the target nor the generator: the noise from other
    /// work on the box, percent of one core.
    pub(crate) other_cpu_percent: Option<f64>,
}

/// Samples the target's and the generator's CPU and memory over the window.
#[derive(Debug)]
pub(crate) struct Monitor {
    stop: oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<Usage>,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Monitor {
    /// Starts measuring at `from`; [`Monitor::finish`] ends the window.
    pub(crate) async fn start(pid: Option<u32>, from: Instant) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let handle = tokio::spawn(async move {
            tokio::time::sleep_until(from.into()).await;
            let me = std::process::id();
            let self0 = procstat::cpu(me).ok();
            let all0 = procstat::machine().ok();
            let cpu0 = pid.and_then(|p| procstat::cpu(p).ok());
            let mut rss_max = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {
                        if let Some(m) = pid.and_then(|p| procstat::memory(p).ok()) {
                            rss_max = rss_max.max(m.rss_kib);
                        }
                    }
                }
            }
            let cpu1 = pid.and_then(|p| procstat::cpu(p).ok());
            let self1 = procstat::cpu(me).ok();
            let all1 = procstat::machine().ok();
            let mem = pid.and_then(|p| procstat::memory(p).ok());
            if let Some(m) = mem {
                rss_max = rss_max.max(m.rss_kib);
            }
            let pct = |a: Option<procstat::CpuSample>, b: Option<procstat::CpuSample>| {
                a.zip(b).map(|(a, b)| procstat::cpu_percent(a, b))
            };
            let target_cpu = pct(cpu0, cpu1);
            let loadgen_cpu = pct(self0, self1);
            let machine_cpu = pct(all0, all1);
            Usage {
                other_cpu_percent: machine_cpu
                    .map(|m| (m - target_cpu.unwrap_or(0.0) - loadgen_cpu.unwrap_or(0.0)).max(0.0)),
                machine_cpu_percent: machine_cpu,
                target: pid.map(|pid| TargetUsage {
                    pid,
                    cpu_percent: target_cpu,
                    rss_mib: mem.map(|m| mib(m.rss_kib)),
                    rss_max_mib: (rss_max > 0).then(|| mib(rss_max)),
                    hwm_mib: mem.map(|m| mib(m.hwm_kib)),
                }),
                loadgen_cpu_percent: loadgen_cpu,
            }
        });
        Self { stop, handle }
    }

    /// Ends the window and returns what was measured.
    pub(crate) async fn finish(self) -> Usage {
        let _ = self.stop.send(());
        self.handle.await.unwrap_or_default()
    }
}

/// Timing of repeated GETs of an exposition endpoint.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Scrape {
    /// URL fetched.
    pub(crate) url: String,
    /// HTTP status of the last response.
    pub(crate) status: u16,
    /// Body size of the last response.
    pub(crate) bytes: usize,
    /// Sample lines (not comments, not empty) of the last response.
    pub(crate) samples: usize,
    /// Each GET, request sent to last body byte, milliseconds.
    pub(crate) ms: Vec<f64>,
    /// Fastest GET, ms.
    pub(crate) min_ms: f64,
    /// Median GET, ms.
    pub(crate) median_ms: f64,
    /// Slowest GET, ms.
    pub(crate) max_ms: f64,
    /// Target CPU time per GET (all threads), ms, when a target pid is known.
    pub(crate) target_cpu_ms_per_get: Option<f64>,
    /// Target `VmRSS` after the GETs, MiB.
    pub(crate) target_rss_after_mib: Option<f64>,
    /// Target `VmHWM` (peak RSS since start) after the GETs, MiB.
    pub(crate) target_hwm_after_mib: Option<f64>,
}

/// GETs `url` `count` times in a row and times each full response; with `pid`, also
/// the target's CPU time per GET and its memory afterwards.
pub(crate) async fn scrape(url: &str, count: usize, pid: Option<u32>) -> anyhow::Result<Scrape> {
    let count = count.max(1);
    let cpu0 = pid.and_then(|p| procstat::cpu(p).ok());
    let uri: hyper::Uri = url
        .parse()
        .with_context(|| format!("invalid --scrape URL {url:?}"))?;
    let client: HttpClient<_, Empty<Bytes>> =
        HttpClient::builder(TokioExecutor::new()).build_http();
    let mut ms = Vec::with_capacity(count);
    let (mut status, mut bytes, mut samples) = (0, 0, 0);
    for _ in 0..count {
        let t0 = Instant::now();
        let resp = tokio::time::timeout(Duration::from_secs(30), client.get(uri.clone()))
            .await
            .with_context(|| format!("GET {url} timed out"))?
            .with_context(|| format!("GET {url}"))?;
        status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .with_context(|| format!("reading the body of {url}"))?
            .to_bytes();
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
        bytes = body.len();
        samples = body
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
            .count();
    }
    let cpu1 = pid.and_then(|p| procstat::cpu(p).ok());
    let mem = pid.and_then(|p| procstat::memory(p).ok());
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(Scrape {
        url: url.to_owned(),
        status,
        bytes,
        samples,
        min_ms: sorted.first().copied().unwrap_or(0.0),
        median_ms: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        max_ms: sorted.last().copied().unwrap_or(0.0),
        target_cpu_ms_per_get: cpu0
            .zip(cpu1)
            .map(|(a, b)| procstat::cpu_seconds(a, b) * 1e3 / count as f64),
        target_rss_after_mib: mem.map(|m| mib(m.rss_kib)),
        target_hwm_after_mib: mem.map(|m| mib(m.hwm_kib)),
        ms,
    })
}

/// The result of one run, as printed or serialised with `--json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// Name of the target.
    pub(crate) label: String,
    /// `grpc` or `http`.
    pub(crate) protocol: crate::send::Protocol,
    /// Where the load went.
    pub(crate) endpoint: String,
    /// Simulated workers.
    pub(crate) workers: usize,
    /// Series per worker.
    pub(crate) series: usize,
    /// Percent of series that are histograms.
    pub(crate) histogram_percent: u8,
    /// Whether series carry a per-worker attribute (stay distinct after aggregation).
    pub(crate) unique_per_worker: bool,
    /// Points per full request.
    pub(crate) points_per_request: usize,
    /// Requests in flight.
    pub(crate) concurrency: usize,
    /// Whether bodies were gzipped.
    pub(crate) gzip: bool,
    /// Target rate (points/s), if paced.
    pub(crate) target_rate: Option<f64>,
    /// Measured window, seconds.
    pub(crate) window_s: f64,
    /// Requests that succeeded in the window.
    pub(crate) requests_ok: u64,
    /// Requests that failed in the window.
    pub(crate) requests_failed: u64,
    /// Points sent in the window (completed requests).
    pub(crate) points_sent: u64,
    /// Points accepted in the window.
    pub(crate) points_accepted: u64,
    /// Accepted points per second over the window.
    pub(crate) accepted_points_per_s: f64,
    /// Successful requests per second.
    pub(crate) requests_per_s: f64,
    /// Mean encoded request size, bytes.
    pub(crate) request_bytes_avg: f64,
    /// Median latency of successful requests, ms.
    pub(crate) latency_p50_ms: f64,
    /// 99th percentile latency of successful requests, ms.
    pub(crate) latency_p99_ms: f64,
    /// Slowest successful request, ms.
    pub(crate) latency_max_ms: f64,
    /// Target and generator CPU/memory.
    pub(crate) usage: Usage,
    /// `/proc/loadavg` (1, 5, 15 min) when the run started.
    pub(crate) loadavg_at_start: String,
    /// First distinct errors.
    pub(crate) errors: Vec<String>,
    /// Exposition timing, if asked.
    pub(crate) scrape: Option<Scrape>,
    /// The traces sent alongside, if asked (`--traces-rate`).
    pub(crate) traces: Option<crate::traces::TracesReport>,
}

impl Report {
    /// Summarises the records that completed within `[from, to]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        label: &str,
        cfg: &SendConfig,
        shape: &Shape,
        concurrency: usize,
        tasks: &[TaskResult],
        from: Duration,
        to: Duration,
        usage: Usage,
        scrape: Option<Scrape>,
        loadavg_at_start: String,
    ) -> Self {
        let window = to.saturating_sub(from).as_secs_f64().max(1e-9);
        let (mut ok, mut failed, mut sent, mut accepted, mut bytes) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut lat = Vec::new();
        let mut errors = Vec::new();
        for t in tasks {
            for e in &t.errors {
                if errors.len() < 5 && !errors.contains(e) {
                    errors.push(e.clone());
                }
            }
            for r in t
                .records
                .iter()
                .filter(|r| r.done_at >= from && r.done_at <= to)
            {
                sent += u64::from(r.points);
                bytes += u64::from(r.bytes);
                if r.ok {
                    ok += 1;
                    accepted += u64::from(r.accepted);
                    lat.push(r.latency.as_secs_f64() * 1e3);
                } else {
                    failed += 1;
                }
            }
        }
        lat.sort_by(f64::total_cmp);
        let pct = |q: f64| -> f64 {
            if lat.is_empty() {
                return 0.0;
            }
            let i = ((q * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1;
            lat[i]
        };
        Self {
            label: label.to_owned(),
            protocol: cfg.protocol,
            endpoint: cfg.endpoint.clone(),
            workers: shape.workers,
            series: shape.series,
            histogram_percent: shape.histogram_percent,
            unique_per_worker: shape.unique_per_worker,
            points_per_request: shape.points_per_request,
            concurrency,
            gzip: cfg.gzip,
            target_rate: cfg.rate,
            window_s: window,
            requests_ok: ok,
            requests_failed: failed,
            points_sent: sent,
            points_accepted: accepted,
            accepted_points_per_s: accepted as f64 / window,
            requests_per_s: ok as f64 / window,
            request_bytes_avg: if ok + failed > 0 {
                bytes as f64 / (ok + failed) as f64
            } else {
                0.0
            },
            latency_p50_ms: pct(0.50),
            latency_p99_ms: pct(0.99),
            latency_max_ms: lat.last().copied().unwrap_or(0.0),
            usage,
            loadavg_at_start,
            errors,
            scrape,
            traces: None,
        }
    }

    /// Prints a short human summary.
    pub(crate) fn print_summary(&self) {
        let rate = self.target_rate.map_or_else(
            || "max rate".to_owned(),
            |r| format!("target {r:.0} points/s"),
        );
        println!(
            "{}: {:?}{} {} | {} workers x {} series, {} points/request, {} in flight, {}",
            self.label,
            self.protocol,
            if self.gzip { "+gzip" } else { "" },
            self.endpoint,
            self.workers,
            self.series,
            self.points_per_request,
            self.concurrency,
            rate
        );
        println!(
            "  accepted {:.0} points/s ({:.0} req/s, {:.0} KiB/req) over {:.1} s; {} ok, {} failed, {} points refused",
            self.accepted_points_per_s,
            self.requests_per_s,
            self.request_bytes_avg / 1024.0,
            self.window_s,
            self.requests_ok,
            self.requests_failed,
            self.points_sent.saturating_sub(self.points_accepted)
        );
        println!(
            "  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.latency_p50_ms, self.latency_p99_ms, self.latency_max_ms
        );
        let f = |v: Option<f64>, unit: &str| {
            v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1}{unit}"))
        };
        if let Some(t) = &self.usage.target {
            println!(
                "  target pid {}: CPU {} of one core, RSS {} (max in window {}, peak ever {})",
                t.pid,
                f(t.cpu_percent, "%"),
                f(t.rss_mib, " MiB"),
                f(t.rss_max_mib, " MiB"),
                f(t.hwm_mib, " MiB")
            );
        }
        println!(
            "  generator CPU {}; other work on the machine {} (load average at start {})",
            f(self.usage.loadgen_cpu_percent, "%"),
            f(self.usage.other_cpu_percent, "%"),
            self.loadavg_at_start
        );
        if let Some(s) = &self.scrape {
            println!(
                "  GET {} -> {}: {} bytes, {} samples; min {:.1} ms, median {:.1} ms, max {:.1} ms",
                s.url, s.status, s.bytes, s.samples, s.min_ms, s.median_ms, s.max_ms
            );
            if let Some(t) = &self.usage.target {
                println!(
                    "  target pid {} during the GETs: CPU {} per GET; RSS after {}, peak ever {}",
                    t.pid,
                    f(s.target_cpu_ms_per_get, " ms"),
                    f(s.target_rss_after_mib, " MiB"),
                    f(s.target_hwm_after_mib, " MiB")
                );
            }
        }
        if let Some(t) = &self.traces {
            println!(
                "  traces {:?} {}: target {:.0} spans/s ({} spans, {} B per request); accepted {:.0} spans/s; in the window {} spans sent, {} accepted, {} refused ({} requests failed); {} accepted over the run; p50 {:.2} ms",
                t.protocol,
                t.endpoint,
                t.target_spans_per_s,
                t.spans_per_request,
                t.request_bytes,
                t.accepted_spans_per_s,
                t.spans_sent,
                t.spans_accepted,
                t.spans_refused,
                t.requests_failed,
                t.spans_accepted_total,
                t.latency_p50_ms
            );
            for e in &t.errors {
                println!("  traces error: {e}");
            }
        }
        for e in &self.errors {
            println!("  error: {e}");
        }
    }
}
