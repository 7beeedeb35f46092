//! What the end-to-end tests of higgsmeter know that no other test does:
//!
//! - [`Workload`]: the known per-rank workloads the `e2e-worker` binary runs and the
//!   tests check against, [`GroundTruth`], what each worker writes at exit, and
//!   [`SyntheticGpu`], the GPU readings each reports;
//! - [`rules`]: the rule files' two flavours (scrape, remote write), rendered from one
//!   source;
//! - [`dashboard_exprs`] and [`grafana_to_promql`]: the Grafana dashboard's queries, made
//!   runnable.
//!
//! The processes, waits, the collector, Prometheus and its query client are the
//! workspace's test kit (`higgsmeter-testkit`).

pub mod rules;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `service.name` every e2e worker reports (Prometheus: `exported_job`).
pub const SERVICE_NAME: &str = "e2e-worker";

/// The workers' OTLP push interval.
pub const EXPORT_INTERVAL: Duration = Duration::from_millis(200);

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
