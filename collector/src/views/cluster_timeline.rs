//! The cluster page's per-rank state timeline (`GET /api/cluster/timeline?window=SECS`):
//! for every source, the states it reported over the last `window` seconds (15 minutes
//! by default, at most an hour) with the operation of each, the current state, its GPU
//! utilisation where the NVML meter reports it, and whether it stalled or fell behind
//! its peers.
//!
//! The store keeps only each series' latest value, so the history lives here, recorded
//! on the cluster view's once-a-second sampling of the store (`exporters::cluster`), not
//! on ingest: ingest pays nothing for it. Each source has a [`Lane`] of compact
//! transitions `(time, state code, operation id)`, appended only when the state or the
//! operation changes; the state is the `worker_current_state` gauge at that second (a
//! sample of the rank at one instant, so over many seconds the colours' shares are the
//! shares of time), and the operation is the one whose
//! `worker_activity_time_seconds_total{state, operation}` grew most in that state since
//! the previous second. A source that stops pushing gets a `silent` transition, dated
//! when it last pushed.
//!
//! Memory is bounded per source ([`MAX_LANE_BYTES`], 88 KiB): at most
//! [`TRANSITIONS_PER_SOURCE`] transitions (16 bytes each; an hour at one change every
//! second fits), [`GPU_POINTS_PER_SOURCE`] GPU points (one every [`GPU_EVERY`]: over an
//! hour), [`OPERATIONS_PER_SOURCE`] operation names of at most [`OPERATION_BYTES`] bytes
//! (later ones are shown as `(other)`) and [`PREVIOUS_PER_SOURCE`] counters remembered
//! for the growth. When a lane is full its oldest entries go. A source the store forgets
//! loses its lane.

use std::collections::{HashMap, HashSet, VecDeque};

use higgsmeter_catalog::{STATE_GPU, STATES, state_by_code, state_by_name};
use serde::Serialize;

use super::cluster::{ClusterReading, SourceIdentity, SourceReading};

const NANOS: u64 = 1_000_000_000;

/// Transitions kept per source: an hour at one change every second, and some.
pub(crate) const TRANSITIONS_PER_SOURCE: usize = 4096;

/// GPU utilisation points kept per source: over an hour at one every [`GPU_EVERY`].
pub(crate) const GPU_POINTS_PER_SOURCE: usize = 1024;

/// Nanoseconds between two kept GPU utilisation points of a source.
pub(crate) const GPU_EVERY: u64 = 4 * NANOS;

/// Operation names kept per source; later ones are shown as `(other)`.
pub(crate) const OPERATIONS_PER_SOURCE: usize = 64;

/// The longest operation name kept, in bytes (longer ones are cut at a char boundary).
pub(crate) const OPERATION_BYTES: usize = 48;

/// `(state, operation)` counters remembered per source to tell which one grew.
pub(crate) const PREVIOUS_PER_SOURCE: usize = 256;

/// The most heap one source's lane holds (88 KiB), besides its identity key.
pub(crate) const MAX_LANE_BYTES: usize = TRANSITIONS_PER_SOURCE * size_of::<Transition>()
    + GPU_POINTS_PER_SOURCE * size_of::<GpuPoint>()
    + OPERATIONS_PER_SOURCE * (size_of::<Box<str>>() + OPERATION_BYTES)
    + PREVIOUS_PER_SOURCE * size_of::<Previous>();

/// The window the page shows unless told otherwise: 15 minutes, in seconds.
pub(crate) const DEFAULT_WINDOW_S: u64 = 900;

/// The widest window served: an hour, in seconds.
pub(crate) const MAX_WINDOW_S: u64 = 3600;

/// The narrowest window served, in seconds.
pub(crate) const MIN_WINDOW_S: u64 = 10;

/// A live rank in one (state, operation) this long while a peer of its service moved
/// on is marked stalled (nanoseconds).
pub(crate) const STALL_AFTER: u64 = 20 * NANOS;

/// A rank is behind when `1 - its gpu share / its service's best gpu share` over the
/// window exceeds this: the straggler rule of `otel-config/rules` (`rank_straggler`).
pub(crate) const BEHIND_RATIO: f64 = 0.5;

/// The state code of a source that stopped pushing.
const SILENT: u8 = 7;
/// The state code of a state the catalog does not know, or of none reported.
const UNKNOWN: u8 = 8;
/// Names of the codes, in code order: the catalog's seven, `silent`, `unknown`.
const NAMES: [&str; 9] = [
    STATES[0].name,
    STATES[1].name,
    STATES[2].name,
    STATES[3].name,
    STATES[4].name,
    STATES[5].name,
    STATES[6].name,
    "silent",
    "unknown",
];

/// The operation id of no operation (none reported, or none grew).
const NO_OP: u16 = u16::MAX;
/// The operation id of every operation past [`OPERATIONS_PER_SOURCE`].
const OTHER_OP: u16 = u16::MAX - 1;

/// From this instant (aggregator clock, ns) on, the source was in `state` doing `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transition {
    at: u64,
    op: u16,
    state: u8,
}

/// A source's mean GPU utilisation at `at`, in thousandths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GpuPoint {
    at: u64,
    permille: u16,
}

/// One `(state, operation)` counter's seconds at the previous sample.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Previous {
    seconds: f64,
    op: u16,
    state: u8,
}

/// One source's history: transitions, GPU points and the names its operations use.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    transitions: VecDeque<Transition>,
    gpu: VecDeque<GpuPoint>,
    operations: Vec<Box<str>>,
    previous: Vec<Previous>,
    /// When the previous live sample was taken (aggregator clock, ns).
    sampled_at: Option<u64>,
}

/// The catalog code of a `state` label value, or [`UNKNOWN`].
fn code_of_name(name: &str) -> u8 {
    state_by_name(name).map_or(UNKNOWN, |s| s.code)
}

/// The catalog code of a `worker_current_state` value, or [`UNKNOWN`].
fn code_of_gauge(value: i64) -> u8 {
    u64::try_from(value)
        .ok()
        .and_then(state_by_code)
        .map_or(UNKNOWN, |s| s.code)
}

/// `name` cut to at most [`OPERATION_BYTES`] bytes at a char boundary.
fn cut(name: &str) -> &str {
    if name.len() <= OPERATION_BYTES {
        return name;
    }
    let mut end = OPERATION_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

impl Lane {
    /// The id of operation `name`, adding it while there is room ("" is [`NO_OP`]).
    fn operation_id(&mut self, name: &str) -> u16 {
        if name.is_empty() {
            return NO_OP;
        }
        let name = cut(name);
        if let Some(i) = self.operations.iter().position(|n| &**n == name) {
            return u16::try_from(i).unwrap_or(OTHER_OP);
        }
        if self.operations.len() >= OPERATIONS_PER_SOURCE {
            return OTHER_OP;
        }
        self.operations.push(name.into());
        u16::try_from(self.operations.len() - 1).unwrap_or(OTHER_OP)
    }

    /// The name of operation `op`.
    fn operation_name(&self, op: u16) -> &str {
        match op {
            NO_OP => "",
            OTHER_OP => "(other)",
            i => self.operations.get(usize::from(i)).map_or("", |n| n),
        }
    }

    /// Appends a transition unless the lane is already in `(state, op)`; drops the
    /// oldest when full.
    fn push(&mut self, at: u64, state: u8, op: u16) {
        if self
            .transitions
            .back()
            .is_some_and(|last| last.state == state && last.op == op)
        {
            return;
        }
        let at = self.transitions.back().map_or(at, |last| at.max(last.at));
        if self.transitions.len() >= TRANSITIONS_PER_SOURCE {
            self.transitions.pop_front();
        }
        self.transitions.push_back(Transition { at, op, state });
    }

    /// Takes `source`, read at `now`, as this second's sample.
    fn observe(&mut self, now: u64, source: &SourceReading) {
        if !source.live {
            // Silent since it last pushed; its counters are kept for when it is back.
            self.push(now.saturating_sub(source.since_seen), SILENT, NO_OP);
            self.sampled_at = None;
            return;
        }
        // Growth per (state, operation) since the previous sample: which operation
        // of which state took the time.
        let mut best: [(u16, f64); 9] = [(NO_OP, 0.0); 9];
        for (state, operation, seconds) in &source.seconds_by_operation {
            let code = code_of_name(state);
            let op = self.operation_id(operation);
            let growth = match self
                .previous
                .iter_mut()
                .find(|p| p.state == code && p.op == op)
            {
                Some(p) => {
                    let g = seconds - p.seconds;
                    p.seconds = *seconds;
                    g
                }
                None => {
                    if self.previous.len() < PREVIOUS_PER_SOURCE {
                        self.previous.push(Previous {
                            seconds: *seconds,
                            op,
                            state: code,
                        });
                    }
                    // A series first seen now: its seconds are new only if the lane
                    // was sampled before (else they are the time before we looked).
                    if self.sampled_at.is_some() {
                        *seconds
                    } else {
                        0.0
                    }
                }
            };
            let slot = &mut best[usize::from(code)];
            if growth.is_finite() && growth > slot.1 {
                *slot = (op, growth);
            }
        }
        let last = self.transitions.back().copied();
        let state = match source.state_code {
            Some(v) => code_of_gauge(v),
            // No gauge: the state whose time grew most.
            None => best
                .iter()
                .enumerate()
                .filter(|(_, (_, g))| *g > 0.0)
                .max_by(|a, b| a.1.1.total_cmp(&b.1.1))
                .and_then(|(i, _)| u8::try_from(i).ok())
                .unwrap_or(UNKNOWN),
        };
        let (op, grew) = best[usize::from(state)];
        let op = if grew > 0.0 {
            op
        } else {
            match last {
                Some(l) if l.state == state => l.op,
                _ => NO_OP,
            }
        };
        self.push(now, state, op);
        self.sampled_at = Some(now);
        if let Some(g) = source.gpu_utilization.filter(|g| g.is_finite()) {
            let due = self
                .gpu
                .back()
                .is_none_or(|p| now.saturating_sub(p.at) >= GPU_EVERY);
            if due {
                if self.gpu.len() >= GPU_POINTS_PER_SOURCE {
                    self.gpu.pop_front();
                }
                self.gpu.push_back(GpuPoint {
                    at: now,
                    permille: (g.clamp(0.0, 1.0) * 1000.0).round() as u16,
                });
            }
        }
    }

    /// The heap this lane holds, by the capacity of what it keeps (not its key).
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.transitions.capacity() * size_of::<Transition>()
            + self.gpu.capacity() * size_of::<GpuPoint>()
            + self.operations.capacity() * size_of::<Box<str>>()
            + self.operations.iter().map(|n| n.len()).sum::<usize>()
            + self.previous.capacity() * size_of::<Previous>()
    }
}

/// Every source's lane, keyed by the source's identity (`SourceReading::key`).
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    lanes: HashMap<String, Lane>,
}

impl Timeline {
    /// Takes `reading` as a sample of every source it holds (live or silent); lanes of
    /// sources the store no longer holds are dropped.
    pub(crate) fn record(&mut self, reading: &ClusterReading) {
        let held: HashSet<&str> = reading.sources.iter().map(|s| s.key.as_str()).collect();
        self.lanes.retain(|key, _| held.contains(key.as_str()));
        for s in &reading.sources {
            match self.lanes.get_mut(&s.key) {
                Some(lane) => lane.observe(reading.now, s),
                None => {
                    let mut lane = Lane::default();
                    lane.observe(reading.now, s);
                    self.lanes.insert(s.key.clone(), lane);
                }
            }
        }
    }

    /// The lane of `key`, if any.
    #[cfg(test)]
    pub(crate) fn lane(&self, key: &str) -> Option<&Lane> {
        self.lanes.get(key)
    }
}

/// The window (seconds) asked for by a query string such as `window=900`: the
/// default when absent or unreadable, clamped to [`MIN_WINDOW_S`]..=[`MAX_WINDOW_S`].
pub(crate) fn window_from_query(query: Option<&str>) -> u64 {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.strip_prefix("window="))
        .find_map(|v| v.parse::<f64>().ok().filter(|v| v.is_finite()))
        .map_or(DEFAULT_WINDOW_S, |v| {
            (v.round().max(0.0) as u64).clamp(MIN_WINDOW_S, MAX_WINDOW_S)
        })
}

/// Seconds from `now` to `at` (≤ 0), to a tenth of a second.
fn offset(at: u64, now: u64) -> f64 {
    let ns = i128::from(at) - i128::from(now);
    (ns as f64 / 1e8).round() / 10.0
}

/// One lane in the timeline document.
#[derive(Debug, Serialize)]
struct LaneJson<'a> {
    #[serde(flatten)]
    identity: SourceIdentity<'a>,
    live: bool,
    /// The current state (the last transition's), `silent` when not live.
    state: &'static str,
    /// The current operation ("" when unknown).
    operation: &'a str,
    /// Seconds in the current (state, operation).
    since_s: f64,
    /// Seconds of the window the lane covers (from its first transition in it).
    covered_s: f64,
    /// Share of the covered seconds in `gpu`.
    gpu_share: Option<f64>,
    stalled: bool,
    silent: bool,
    behind: bool,
    /// Past its series quota in some metric: its new series fold into overflow series.
    overflow: bool,
    /// Operation names the segments refer to, by index.
    operations: Vec<&'a str>,
    /// `[start, state, operation]`: start in seconds from now (≤ 0, clipped to the
    /// window), state as an index into `states`, operation into `operations` (-1: none).
    /// Each runs until the next one starts, the last one until now.
    segments: Vec<(f64, u8, i32)>,
    /// `[time, utilisation]`: seconds from now, mean utilisation 0..1.
    gpu: Vec<(f64, f64)>,
}

/// What one lane contributes before peers are compared.
struct Summary<'a> {
    json: LaneJson<'a>,
    service: Option<&'a str>,
    /// When the current run began, i.e. the lane last changed (aggregator clock, ns).
    run_since: u64,
}

fn summarize<'a>(source: &'a SourceReading, lane: &'a Lane, now: u64, window: u64) -> Summary<'a> {
    let from = now.saturating_sub(window);
    let mut operations: Vec<&str> = Vec::new();
    let mut op_ids: Vec<u16> = Vec::new();
    let mut segments = Vec::new();
    let (mut covered, mut gpu_ns) = (0u64, 0u64);
    let ts = &lane.transitions;
    // The first transition that still reaches into the window.
    let first = ts.partition_point(|t| t.at <= from).saturating_sub(1);
    for (i, t) in ts.iter().enumerate().skip(first) {
        let end = ts.get(i + 1).map_or(now, |n| n.at).min(now);
        let start = t.at.max(from);
        if end <= from || (start >= now && i + 1 < ts.len()) {
            continue;
        }
        let span = end.saturating_sub(start);
        covered += span;
        if t.state == STATE_GPU.code {
            gpu_ns += span;
        }
        let op = if t.op == NO_OP {
            -1
        } else {
            let idx = match op_ids.iter().position(|o| *o == t.op) {
                Some(idx) => idx,
                None => {
                    op_ids.push(t.op);
                    operations.push(lane.operation_name(t.op));
                    op_ids.len() - 1
                }
            };
            i32::try_from(idx).unwrap_or(-1)
        };
        segments.push((offset(start, now), t.state, op));
    }
    let gpu = lane
        .gpu
        .iter()
        .filter(|p| p.at >= from)
        .map(|p| (offset(p.at, now), f64::from(p.permille) / 1000.0))
        .collect();
    let last = ts.back().copied();
    let run_since = last.map_or(now, |l| l.at);
    let state = if source.live {
        last.map_or(UNKNOWN, |l| l.state)
    } else {
        SILENT
    };
    Summary {
        json: LaneJson {
            identity: source.identity(),
            live: source.live,
            state: NAMES[usize::from(state)],
            operation: last.map_or("", |l| lane.operation_name(l.op)),
            since_s: now.saturating_sub(run_since) as f64 / NANOS as f64,
            covered_s: covered as f64 / NANOS as f64,
            gpu_share: (covered > 0).then(|| gpu_ns as f64 / covered as f64),
            stalled: false,
            silent: !source.live,
            behind: false,
            overflow: !source.overflow.is_empty(),
            operations,
            segments,
            gpu,
        },
        service: source.service_name.as_deref(),
        run_since,
    }
}

/// The timeline document.
#[derive(Debug, Serialize)]
struct TimelineJson<'a> {
    window_s: u64,
    max_window_s: u64,
    /// The collector's wall clock now, for the axis' labels (seconds since the epoch).
    now_unix_s: f64,
    /// Names of the state indexes the segments use.
    states: [&'static str; 9],
    stall_after_s: u64,
    behind_ratio: f64,
    gpu_every_s: u64,
    /// The most memory one source's history takes (bytes).
    max_bytes_per_source: usize,
    lanes: Vec<LaneJson<'a>>,
}

/// The `/api/cluster/timeline` document: a lane per source of `reading` (in its rank
/// order) over the last `window_s` seconds, with stalls and stragglers marked.
///
/// A lane is `stalled` when it is live and has been in one (state, operation) for
/// [`STALL_AFTER`] while a live peer (same `service.name`) changed within that time,
/// or when it stopped pushing (`silent`). It is `behind` when, over the window, its
/// share of time in `gpu` is less than [`BEHIND_RATIO`] of the best live peer's.
pub(crate) fn timeline_json(
    reading: &ClusterReading,
    timeline: &Timeline,
    window_s: u64,
    now_unix_s: f64,
) -> serde_json::Value {
    let now = reading.now;
    let window = window_s.saturating_mul(NANOS);
    let mut lanes: Vec<Summary<'_>> = reading
        .sources
        .iter()
        .filter_map(|s| {
            let lane = timeline.lanes.get(&s.key)?;
            Some(summarize(s, lane, now, window))
        })
        .collect();
    let n = lanes.len();
    for i in 0..n {
        let me = &lanes[i];
        let peers = || {
            lanes
                .iter()
                .enumerate()
                .filter(move |(j, p)| *j != i && p.json.live && p.service == me.service)
                .map(|(_, p)| p)
        };
        let long = me.json.live && now.saturating_sub(me.run_since) >= STALL_AFTER;
        let moved_on = peers().any(|p| p.run_since > me.run_since);
        let stalled = me.json.silent || long && moved_on;
        let best = peers()
            .filter_map(|p| p.json.gpu_share)
            .fold(0.0_f64, f64::max);
        let behind = me.json.live
            && best > 0.0
            && me
                .json
                .gpu_share
                .is_some_and(|own| 1.0 - own / best > BEHIND_RATIO);
        let me = &mut lanes[i].json;
        me.stalled = stalled;
        me.behind = behind;
    }
    serde_json::to_value(TimelineJson {
        window_s,
        max_window_s: MAX_WINDOW_S,
        now_unix_s,
        states: NAMES,
        stall_after_s: STALL_AFTER / NANOS,
        behind_ratio: BEHIND_RATIO,
        gpu_every_s: GPU_EVERY / NANOS,
        max_bytes_per_source: MAX_LANE_BYTES,
        lanes: lanes.into_iter().map(|l| l.json).collect(),
    })
    .unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use crate::views::cluster::CollectorClock;

    const S: u64 = NANOS;

    fn source(rank: &str, code: i64, ops: &[(&str, &str, f64)]) -> SourceReading {
        SourceReading {
            key: format!("rank={rank}"),
            rank: Some(rank.into()),
            service_name: Some("trainer".into()),
            service_instance_id: None,
            host_name: None,
            state_code: Some(code),
            seconds_by_state: Vec::new(),
            seconds_by_operation: ops
                .iter()
                .map(|(s, o, v)| ((*s).to_owned(), (*o).to_owned(), *v))
                .collect(),
            gpu_utilization: None,
            gpu_devices: 0,
            since_seen: 0,
            live: true,
            overflow: Vec::new(),
        }
    }

    fn reading(now: u64, sources: Vec<SourceReading>) -> ClusterReading {
        ClusterReading {
            now,
            clock: CollectorClock::default(),
            sources,
        }
    }

    #[test]
    fn transitions_hold_state_and_the_operation_that_grew() {
        let mut t = Timeline::default();
        let mut secs = [0.0f64; 3]; // gpu/forward, gpu/backward, io/load
        for i in 0..30u64 {
            // 0..10 s gpu forward, 10..20 s gpu backward, 20..30 s io load.
            let (code, k) = match i {
                0..10 => (3, 0),
                10..20 => (3, 1),
                _ => (1, 2),
            };
            secs[k] += 1.0;
            let src = source(
                "0",
                code,
                &[
                    ("gpu", "forward", secs[0]),
                    ("gpu", "backward", secs[1]),
                    ("io", "load", secs[2]),
                ],
            );
            t.record(&reading((100 + i) * S, vec![src]));
        }
        let lane = t.lane("rank=0").unwrap();
        let got: Vec<_> = lane
            .transitions
            .iter()
            .map(|tr| {
                (
                    tr.at / S,
                    NAMES[usize::from(tr.state)],
                    lane.operation_name(tr.op),
                )
            })
            .collect();
        // The first sample has no growth to go by: gpu with no operation yet.
        assert_eq!(
            got,
            [
                (100, "gpu", ""),
                (101, "gpu", "forward"),
                (110, "gpu", "backward"),
                (120, "io", "load")
            ]
        );
        let src = source("0", 1, &[("io", "load", secs[2])]);
        let r = reading(130 * S, vec![src]);
        let doc = timeline_json(&r, &t, 20, 0.0);
        let lane = &doc["lanes"][0];
        assert_eq!(lane["state"], "io");
        assert_eq!(lane["operation"], "load");
        assert_eq!(lane["since_s"], 10.0);
        assert_eq!(lane["covered_s"], 20.0);
        assert_eq!(lane["gpu_share"], 0.5);
        assert_eq!(
            lane["segments"],
            serde_json::json!([[-20.0, 3, 0], [-10.0, 1, 1]])
        );
        assert_eq!(lane["operations"], serde_json::json!(["backward", "load"]));
        assert_eq!(doc["states"][3], "gpu");
        assert_eq!(doc["window_s"], 20);
        assert_eq!(doc["max_bytes_per_source"], 88 * 1024);
    }

    #[test]
    fn a_stall_a_straggler_and_a_silent_rank_are_marked() {
        let mut t = Timeline::default();
        let mut last = reading(0, Vec::new());
        for i in 0..60u64 {
            let flip = i % 2 == 0;
            let busy = |rank: &str| {
                source(
                    rank,
                    if flip { 3 } else { 1 },
                    &[
                        ("gpu", "step", (i / 2) as f64),
                        ("io", "load", (i / 2) as f64),
                    ],
                )
            };
            let mut stuck = source("2", 1, &[("io", "hold", i as f64)]);
            stuck.gpu_utilization = Some(0.05);
            let mut gone = busy("3");
            if i >= 40 {
                gone.live = false;
                gone.since_seen = (i - 39) * S;
            }
            last = reading(i * S, vec![busy("0"), busy("1"), stuck, gone]);
            t.record(&last);
        }
        let doc = timeline_json(&last, &t, 900, 0.0);
        let lanes = doc["lanes"].as_array().unwrap();
        let flags: Vec<_> = lanes
            .iter()
            .map(|l| {
                (
                    l["rank"].as_str().unwrap(),
                    l["stalled"] == true,
                    l["behind"] == true,
                )
            })
            .collect();
        assert_eq!(
            flags,
            [
                ("0", false, false),
                ("1", false, false),
                ("2", true, true),
                ("3", true, false)
            ]
        );
        assert_eq!(lanes[2]["state"], "io");
        assert_eq!(lanes[2]["operation"], "hold");
        assert_eq!(lanes[3]["state"], "silent");
        assert_eq!(lanes[3]["silent"], true);
        // Silent from when it last pushed (39 s), not from when it went stale.
        let segs = lanes[3]["segments"].as_array().unwrap();
        assert_eq!(segs.last().unwrap()[0], -20.0);
        assert_eq!(segs.last().unwrap()[1], SILENT);
        // GPU points every GPU_EVERY, where reported.
        let gpu = lanes[2]["gpu"].as_array().unwrap();
        assert_eq!(gpu.len(), 15);
        assert_eq!(gpu[0], serde_json::json!([-59.0, 0.05]));
        assert_eq!(lanes[0]["gpu"], serde_json::json!([]));
    }

    #[test]
    fn memory_per_source_is_bounded() {
        let mut t = Timeline::default();
        // Ten times the transitions a lane keeps, each with a new, long operation
        // name, and GPU readings every second: ten times its GPU points too.
        let n = 10 * TRANSITIONS_PER_SOURCE as u64;
        for i in 0..n {
            let code = (i % 7) as i64;
            let state = STATES[(i % 7) as usize].name;
            let op = format!("operation-{i}-{}", "x".repeat(100));
            let mut src = source("0", code, &[(state, &op, i as f64)]);
            src.gpu_utilization = Some((i % 100) as f64 / 100.0);
            t.record(&reading(i * GPU_EVERY, vec![src]));
        }
        let lane = t.lane("rank=0").unwrap();
        assert_eq!(lane.transitions.len(), TRANSITIONS_PER_SOURCE);
        assert_eq!(lane.gpu.len(), GPU_POINTS_PER_SOURCE);
        assert_eq!(lane.operations.len(), OPERATIONS_PER_SOURCE);
        assert!(lane.operations.iter().all(|o| o.len() <= OPERATION_BYTES));
        assert!(lane.previous.len() <= PREVIOUS_PER_SOURCE);
        assert!(
            lane.heap_bytes() <= MAX_LANE_BYTES,
            "{} > {MAX_LANE_BYTES}",
            lane.heap_bytes()
        );
        assert_eq!(MAX_LANE_BYTES, 88 * 1024, "the bound the docs state");
        // The newest transitions are the ones kept.
        assert_eq!(lane.transitions.back().unwrap().at, (n - 1) * GPU_EVERY);
        // Operations past the table are "(other)", still told apart from none.
        let doc = timeline_json(
            &reading(n * GPU_EVERY, vec![source("0", 0, &[])]),
            &t,
            MAX_WINDOW_S,
            0.0,
        );
        assert_eq!(doc["lanes"][0]["operation"], "(other)");
        // A source the store no longer holds loses its lane.
        t.record(&reading((n + 1) * GPU_EVERY, Vec::new()));
        assert!(t.lane("rank=0").is_none());
    }

    #[test]
    fn the_window_comes_from_the_query() {
        assert_eq!(window_from_query(None), DEFAULT_WINDOW_S);
        assert_eq!(window_from_query(Some("window=60")), 60);
        assert_eq!(window_from_query(Some("x=1&window=300.4")), 300);
        assert_eq!(window_from_query(Some("window=99999")), MAX_WINDOW_S);
        assert_eq!(window_from_query(Some("window=0")), MIN_WINDOW_S);
        assert_eq!(window_from_query(Some("window=NaN")), DEFAULT_WINDOW_S);
        assert_eq!(window_from_query(Some("window=abc")), DEFAULT_WINDOW_S);
    }

    #[test]
    fn long_operation_names_are_cut_at_a_char_boundary() {
        let name = "é".repeat(40);
        let cut = cut(&name);
        assert!(cut.len() <= OPERATION_BYTES && cut.chars().all(|c| c == 'é'));
    }
}
