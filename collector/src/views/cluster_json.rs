//! The cluster view's JSON (`GET /api/cluster`): every source's identity, current state,
//! seconds per state since it started, its share per state over the last minute, GPU
//! utilisation and staleness, encoded from the readings `views::cluster` takes
//! under the lock.
//!
//! "Last minute" needs history the store does not keep (it holds only each counter's
//! latest value). [`ClusterHistory`] keeps a small ring per live source of
//! `(time, seconds per state)` samples, taken about once a second; the share over the
//! last minute is the growth of each state's seconds between the newest sample that is
//! at least [`WINDOW`] old (or the oldest held) and now, over the growth of all of them.
//! Memory is bounded: at most [`RING_CAPACITY`] samples per source, samples closer
//! than [`MIN_SPACING`] are not kept, and a source that is no longer live loses its ring.

use std::collections::{HashMap, HashSet, VecDeque};

use higgsmeter_catalog::{
    STATE_CPU, STATE_GPU, STATE_IDLE, STATE_IO, STATE_SHUTDOWN, STATE_STARTUP, STATE_WARMUP,
};
use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::cluster::{ClusterReading, SourceIdentity, SourceReading};

const NANOS: f64 = 1e9;

/// The span the "last minute" share covers, in nanoseconds.
pub(crate) const WINDOW: u64 = 60_000_000_000;

/// Samples closer together than this (nanoseconds) are not kept.
pub(crate) const MIN_SPACING: u64 = 500_000_000;

/// Samples kept per source: enough for [`WINDOW`] at [`MIN_SPACING`] plus a baseline.
pub(crate) const RING_CAPACITY: usize = (WINDOW / MIN_SPACING) as usize + 2;

/// The order the page stacks states in; names not listed here follow, in first-seen order.
const STATE_ORDER: [&str; 7] = [
    STATE_GPU.name,
    STATE_IO.name,
    STATE_CPU.name,
    STATE_IDLE.name,
    STATE_WARMUP.name,
    STATE_STARTUP.name,
    STATE_SHUTDOWN.name,
];

/// One kept sample of a source: when, and its seconds per state then (by the index
/// of the state in its ring's `names`; missing at the end for states seen later).
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    at: u64,
    seconds: Vec<f64>,
}

/// One source's recent samples. State names are held once per ring, not per sample.
#[derive(Debug, Default)]
struct Ring {
    names: Vec<String>,
    samples: VecDeque<Sample>,
}

impl Ring {
    /// `sample` as `(state, seconds)` pairs.
    fn pairs(&self, sample: &Sample) -> Vec<(String, f64)> {
        self.names
            .iter()
            .zip(&sample.seconds)
            .map(|(n, v)| (n.clone(), *v))
            .collect()
    }

    /// Keeps `seconds` as the sample at `at`.
    fn push(&mut self, at: u64, seconds: &[(String, f64)]) {
        let mut values = vec![0.0; self.names.len()];
        for (state, v) in seconds {
            match self.names.iter().position(|n| n == state) {
                Some(i) => values[i] += v,
                None => {
                    self.names.push(state.clone());
                    values.push(*v);
                }
            }
        }
        self.samples.push_back(Sample {
            at,
            seconds: values,
        });
    }
}

/// Per-source rings of recent samples, for the share over the last minute.
#[derive(Debug, Default)]
pub(crate) struct ClusterHistory {
    rings: HashMap<String, Ring>,
}

fn seconds_of(seconds: &[(String, f64)], state: &str) -> f64 {
    seconds
        .iter()
        .filter(|(k, _)| k == state)
        .map(|(_, v)| *v)
        .sum()
}

/// Whether seconds per state went from `base` to `now` by a restart: a state's seconds
/// went down, or a state that had time is gone.
fn restarted(base: &[(String, f64)], now: &[(String, f64)]) -> bool {
    now.iter().any(|(k, v)| *v < seconds_of(base, k) - 1e-9)
        || base
            .iter()
            .any(|(k, v)| *v > 0.0 && !now.iter().any(|(n, _)| n == k))
}

/// The share per state of the growth from `base` to `now`; `None` when nothing grew
/// or a counter went down (the source restarted).
pub(crate) fn share_between(
    base: &[(String, f64)],
    now: &[(String, f64)],
) -> Option<Vec<(String, f64)>> {
    if restarted(base, now) {
        return None;
    }
    let mut growth = Vec::with_capacity(now.len());
    let mut total = 0.0;
    for (state, v) in now {
        let d = v - seconds_of(base, state);
        if !d.is_finite() {
            return None;
        }
        let d = d.max(0.0);
        total += d;
        growth.push((state.clone(), d));
    }
    if total <= 0.0 {
        return None;
    }
    Some(growth.into_iter().map(|(s, d)| (s, d / total)).collect())
}

impl ClusterHistory {
    /// Keeps `reading` as a sample of every live source (dropping samples past the
    /// window and the rings of sources no longer live).
    pub(crate) fn record(&mut self, reading: &ClusterReading) {
        let now = reading.now;
        // A set, not a scan of the reading per ring: 10,000 sources made that
        // 10^8 string comparisons a second.
        // A source without state seconds (not a higgsmeter worker) has no share to
        // keep a history of: no ring (10,000 such sources held 20 MB of them).
        let kept = |s: &&SourceReading| s.live && !s.seconds_by_state.is_empty();
        let live: HashSet<&str> = reading
            .sources
            .iter()
            .filter(kept)
            .map(|s| s.key.as_str())
            .collect();
        self.rings.retain(|key, _| live.contains(key.as_str()));
        for s in reading.sources.iter().filter(kept) {
            let ring = self.rings.entry(s.key.clone()).or_default();
            // A restart (a counter went down) starts the ring over.
            if let Some(last) = ring.samples.back()
                && restarted(&ring.pairs(last), &s.seconds_by_state)
            {
                *ring = Ring::default();
            }
            if ring
                .samples
                .back()
                .is_some_and(|last| now.saturating_sub(last.at) < MIN_SPACING)
            {
                continue;
            }
            ring.push(now, &s.seconds_by_state);
            let samples = &mut ring.samples;
            // Keep one sample at least WINDOW old (the baseline), none older.
            while samples.len() > 1
                && samples
                    .get(1)
                    .is_some_and(|next| now.saturating_sub(next.at) >= WINDOW)
            {
                samples.pop_front();
            }
            while samples.len() > RING_CAPACITY {
                samples.pop_front();
            }
        }
    }

    /// Samples held, over all sources.
    #[cfg(test)]
    pub(crate) fn samples_held(&self) -> usize {
        self.rings.values().map(|r| r.samples.len()).sum()
    }

    /// The share per state over the last minute for `source` read at `now`, and the
    /// seconds that share covers (less than a minute while history builds up).
    pub(crate) fn last_minute(
        &self,
        source: &SourceReading,
        now: u64,
    ) -> Option<(Vec<(String, f64)>, f64)> {
        let ring = self.rings.get(&source.key)?;
        let cutoff = now.saturating_sub(WINDOW);
        // The newest sample at least WINDOW old, else the oldest one.
        let base = ring
            .samples
            .iter()
            .rev()
            .find(|s| s.at <= cutoff)
            .or_else(|| ring.samples.front())?;
        if base.at >= now {
            return None;
        }
        let share = share_between(&ring.pairs(base), &source.seconds_by_state)?;
        Some((share, (now - base.at) as f64 / NANOS))
    }
}

/// The name of a `worker_current_state` code.
fn state_name(code: Option<i64>) -> Option<&'static str> {
    code.and_then(|c| u64::try_from(c).ok())
        .and_then(higgsmeter_catalog::state_by_code)
        .map(|s| s.name)
}

fn finite(v: f64) -> Json {
    serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number)
}

fn object(pairs: &[(String, f64)]) -> Json {
    Json::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), finite(*v)))
            .collect::<Map<_, _>>(),
    )
}

/// One source in `/api/cluster`.
#[derive(Debug, Serialize)]
struct SourceJson<'a> {
    #[serde(flatten)]
    identity: SourceIdentity<'a>,
    state: Option<&'static str>,
    state_code: Option<i64>,
    seconds_by_state: Json,
    share_last_minute: Json,
    last_minute_s: Json,
    gpu_utilization: Json,
    gpu_devices: usize,
    seen_s_ago: Json,
    live: bool,
    /// Metrics this source folds into its overflow series, with the points folded
    /// (empty when it is within its quotas).
    overflow: Map<String, Json>,
}

/// Adds `pairs` into `into`, keeping first-seen order.
fn add_into(into: &mut Vec<(String, f64)>, pairs: &[(String, f64)], weight: f64) {
    for (k, v) in pairs {
        match into.iter_mut().find(|(n, _)| n == k) {
            Some((_, x)) => *x += v * weight,
            None => into.push((k.clone(), v * weight)),
        }
    }
}

/// The `/api/cluster` document for `reading`, with last-minute shares from `history`.
///
/// Times: `uptime_s` is seconds since this collector process started;
/// `started_at_unix_s` when it started and `counting_since_unix_s` since when the fleet
/// series have counted (earlier when `restored`: the state came from a checkpoint),
/// both in seconds since the Unix epoch; `seen_s_ago` and `last_minute_s` are spans.
///
/// `sources` lists every source the collector still holds (live ones and stale ones
/// not yet forgotten, with `live: false`); `fleet` sums over live sources.
pub(crate) fn cluster_json(reading: &ClusterReading, history: &ClusterHistory) -> Json {
    let clock = &reading.clock;
    let uptime_s = clock.uptime as f64 / NANOS;
    let mut states: Vec<String> = STATE_ORDER.iter().map(|s| (*s).to_owned()).collect();
    let mut sources = Vec::with_capacity(reading.sources.len());
    let mut fleet_seconds: Vec<(String, f64)> = Vec::new();
    let mut fleet_growth: Vec<(String, f64)> = Vec::new();
    let mut in_state: Vec<(String, f64)> = Vec::new();
    let (mut live, mut gpu_sum, mut gpu_n) = (0usize, 0.0, 0usize);
    for s in &reading.sources {
        for (k, _) in &s.seconds_by_state {
            if !states.contains(k) {
                states.push(k.clone());
            }
        }
        let last = if s.live {
            history.last_minute(s, reading.now)
        } else {
            None
        };
        let state = state_name(s.state_code);
        if s.live {
            live += 1;
            add_into(&mut fleet_seconds, &s.seconds_by_state, 1.0);
            if let Some((share, span)) = &last {
                add_into(&mut fleet_growth, share, *span);
            }
            let name = state.map_or_else(|| "unknown".to_owned(), str::to_owned);
            add_into(&mut in_state, &[(name, 1.0)], 1.0);
            if let Some(g) = s.gpu_utilization {
                gpu_sum += g;
                gpu_n += 1;
            }
        }
        sources.push(SourceJson {
            identity: s.identity(),
            state,
            state_code: s.state_code,
            seconds_by_state: object(&s.seconds_by_state),
            share_last_minute: last.as_ref().map_or(Json::Null, |(sh, _)| object(sh)),
            last_minute_s: last.as_ref().map_or(Json::Null, |(_, span)| finite(*span)),
            gpu_utilization: s.gpu_utilization.map_or(Json::Null, finite),
            gpu_devices: s.gpu_devices,
            seen_s_ago: finite(s.since_seen as f64 / NANOS),
            live: s.live,
            overflow: s
                .overflow
                .iter()
                .map(|(m, n)| (m.clone(), Json::from(*n)))
                .collect(),
        });
    }
    let growth_total: f64 = fleet_growth.iter().map(|(_, v)| v).sum();
    let fleet_share = if growth_total > 0.0 {
        object(
            &fleet_growth
                .iter()
                .map(|(k, v)| (k.clone(), v / growth_total))
                .collect::<Vec<_>>(),
        )
    } else {
        Json::Null
    };
    serde_json::json!({
        "uptime_s": finite(uptime_s),
        "started_at_unix_s": finite(clock.started_unix_nanos as f64 / NANOS),
        "counting_since_unix_s": finite(clock.counting_since_unix_nanos as f64 / NANOS),
        "restored": clock.restored,
        "window_s": WINDOW as f64 / NANOS,
        "states": states,
        "sources": sources,
        "fleet": {
            "sources": reading.sources.len(),
            "live": live,
            "in_state": in_state
                .iter()
                .map(|(k, v)| (k.clone(), Json::from(*v as u64)))
                .collect::<Map<_, _>>(),
            "seconds_by_state": object(&fleet_seconds),
            "share_last_minute": fleet_share,
            "gpu_utilization_mean": if gpu_n > 0 { finite(gpu_sum / gpu_n as f64) } else { Json::Null },
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use std::sync::Arc;

    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{
        AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        metric::Data, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    use super::*;
    use crate::aggregate::{AggregateConfig, Aggregator};
    use crate::self_metrics::{SelfMetrics, Transport};
    use crate::views::cluster::CollectorClock;

    const S: u64 = 1_000_000_000;

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn point(v: f64, attrs: Vec<KeyValue>) -> NumberDataPoint {
        NumberDataPoint {
            attributes: attrs,
            start_time_unix_nano: 1,
            time_unix_nano: 2,
            value: Some(number_data_point::Value::AsDouble(v)),
            ..Default::default()
        }
    }

    /// One rank's push: seconds per state, the current state code, GPU readings.
    fn push(
        rank: &str,
        seconds: &[(&str, f64)],
        code: f64,
        gpus: &[f64],
    ) -> ExportMetricsServiceRequest {
        let activity = Metric {
            name: "worker_activity_time_seconds_total".into(),
            unit: "s".into(),
            data: Some(Data::Sum(Sum {
                data_points: seconds
                    .iter()
                    .map(|(s, v)| point(*v, vec![kv("state", s), kv("operation", "op")]))
                    .collect(),
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        };
        let current = Metric {
            name: "worker_current_state".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![point(code, vec![])],
            })),
            ..Default::default()
        };
        let mut metrics = vec![activity, current];
        if !gpus.is_empty() {
            metrics.push(Metric {
                name: "hw.gpu.utilization".into(),
                unit: "1".into(),
                data: Some(Data::Gauge(Gauge {
                    data_points: gpus
                        .iter()
                        .enumerate()
                        .map(|(i, g)| point(*g, vec![kv("hw.id", &format!("GPU-{i}"))]))
                        .collect(),
                })),
                ..Default::default()
            });
        }
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", "trainer"),
                        kv("service.instance.id", &format!("inst-{rank}")),
                        kv("host.name", "node-a"),
                        kv("rank", rank),
                    ],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn aggregator() -> Aggregator {
        Aggregator::new(AggregateConfig::default(), Arc::new(SelfMetrics::default()))
    }

    fn pairs(p: &[(&str, f64)]) -> Vec<(String, f64)> {
        p.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn reading(now: u64, seconds: &[(&str, f64)]) -> ClusterReading {
        ClusterReading {
            now,
            clock: CollectorClock {
                uptime: now,
                ..CollectorClock::default()
            },
            sources: vec![SourceReading {
                key: "rank=0".into(),
                rank: Some("0".into()),
                service_name: None,
                service_instance_id: None,
                host_name: None,
                state_code: Some(3),
                seconds_by_state: pairs(seconds),
                seconds_by_operation: Vec::new(),
                gpu_utilization: None,
                gpu_devices: 0,
                since_seen: 0,
                live: true,
                overflow: Vec::new(),
            }],
        }
    }

    #[test]
    fn share_between_is_growth_over_total_growth() {
        let share = share_between(
            &pairs(&[("gpu", 10.0), ("io", 5.0)]),
            &pairs(&[("gpu", 40.0), ("io", 15.0), ("idle", 20.0)]),
        )
        .unwrap();
        assert_eq!(
            share,
            pairs(&[("gpu", 0.5), ("io", 1.0 / 6.0), ("idle", 1.0 / 3.0)])
        );
        // A counter that went down, or a state that vanished, is a restart: no share.
        assert_eq!(
            share_between(&pairs(&[("gpu", 10.0)]), &pairs(&[("gpu", 5.0)])),
            None
        );
        assert_eq!(
            share_between(&pairs(&[("io", 1.0)]), &pairs(&[("gpu", 5.0)])),
            None
        );
        // Nothing grew: no share (not a division by zero).
        assert_eq!(
            share_between(&pairs(&[("gpu", 1.0)]), &pairs(&[("gpu", 1.0)])),
            None
        );
        assert_eq!(share_between(&[], &pairs(&[("gpu", f64::NAN)])), None);
    }

    #[test]
    fn last_minute_uses_the_sample_a_minute_old() {
        let mut h = ClusterHistory::default();
        // 1 s of gpu per second for the first 30 s, then 1 s of idle per second.
        for t in 0..=120u64 {
            let gpu = t.min(30) as f64;
            let idle = t.saturating_sub(30) as f64;
            h.record(&reading(t * S, &[("gpu", gpu), ("idle", idle)]));
        }
        let r = reading(120 * S, &[("gpu", 30.0), ("idle", 90.0)]);
        let (share, span) = h.last_minute(&r.sources[0], r.now).unwrap();
        assert_eq!(span, 60.0);
        assert_eq!(share, pairs(&[("gpu", 0.0), ("idle", 1.0)]));
        // At 70 s: the window 10..70 s holds 20 s of gpu and 40 s of idle.
        let mut h = ClusterHistory::default();
        for t in 0..=70u64 {
            let gpu = t.min(30) as f64;
            let idle = t.saturating_sub(30) as f64;
            h.record(&reading(t * S, &[("gpu", gpu), ("idle", idle)]));
        }
        let r = reading(70 * S, &[("gpu", 30.0), ("idle", 40.0)]);
        let (share, span) = h.last_minute(&r.sources[0], r.now).unwrap();
        assert_eq!(span, 60.0);
        assert!((share[0].1 - 1.0 / 3.0).abs() < 1e-12, "{share:?}");
        assert!((share[1].1 - 2.0 / 3.0).abs() < 1e-12, "{share:?}");
    }

    #[test]
    fn history_is_bounded_and_builds_up() {
        let mut h = ClusterHistory::default();
        h.record(&reading(0, &[("gpu", 0.0)]));
        // One sample only: the newest reading is compared with it.
        let r = reading(5 * S, &[("gpu", 2.0), ("io", 3.0)]);
        let (share, span) = h.last_minute(&r.sources[0], r.now).unwrap();
        assert_eq!(span, 5.0);
        assert_eq!(share, pairs(&[("gpu", 0.4), ("io", 0.6)]));
        // Many samples, closely spaced: bounded.
        for i in 0..10_000u64 {
            h.record(&reading(i * S / 10, &[("gpu", i as f64 / 10.0)]));
        }
        assert!(h.samples_held() <= RING_CAPACITY, "{}", h.samples_held());
        assert!(
            h.samples_held() >= (WINDOW / S) as usize,
            "{}",
            h.samples_held()
        );
        // A source that goes stale loses its ring.
        let mut stale = reading(2000 * S, &[("gpu", 1000.0)]);
        stale.sources[0].live = false;
        h.record(&stale);
        assert_eq!(h.samples_held(), 0);
        assert_eq!(h.last_minute(&stale.sources[0], stale.now), None);
    }

    #[test]
    fn sources_without_state_seconds_keep_no_history() {
        let mut h = ClusterHistory::default();
        for t in 0..10u64 {
            h.record(&reading(t * S, &[]));
        }
        assert_eq!(h.samples_held(), 0);
        // Once it reports states, its history starts.
        h.record(&reading(10 * S, &[("gpu", 1.0)]));
        h.record(&reading(11 * S, &[("gpu", 2.0)]));
        assert_eq!(h.samples_held(), 2);
        // And a source that stops reporting them loses it.
        h.record(&reading(12 * S, &[]));
        assert_eq!(h.samples_held(), 0);
    }

    #[test]
    fn states_first_seen_later_count_from_zero() {
        let mut h = ClusterHistory::default();
        h.record(&reading(0, &[("gpu", 0.0)]));
        h.record(&reading(S, &[("gpu", 1.0), ("io", 0.0)]));
        h.record(&reading(2 * S, &[("gpu", 1.0), ("io", 1.0), ("cpu", 2.0)]));
        let r = reading(4 * S, &[("gpu", 1.0), ("io", 1.0), ("cpu", 2.0)]);
        let (share, span) = h.last_minute(&r.sources[0], r.now).unwrap();
        assert_eq!(span, 4.0);
        assert_eq!(share, pairs(&[("gpu", 0.25), ("io", 0.25), ("cpu", 0.5)]));
    }

    #[test]
    fn a_restart_starts_the_ring_over() {
        let mut h = ClusterHistory::default();
        for t in 0..10u64 {
            h.record(&reading(t * S, &[("gpu", 100.0 + t as f64)]));
        }
        h.record(&reading(10 * S, &[("gpu", 0.0)]));
        assert_eq!(h.samples_held(), 1);
        let r = reading(12 * S, &[("gpu", 1.0), ("io", 1.0)]);
        let (share, span) = h.last_minute(&r.sources[0], r.now).unwrap();
        assert_eq!(span, 2.0);
        assert_eq!(share, pairs(&[("gpu", 0.5), ("io", 0.5)]));
    }

    #[test]
    fn gpu_utilization_is_the_kernels_not_the_video_engines() {
        let agg = aggregator();
        let mut req = push("0", &[("gpu", 1.0)], 3.0, &[0.5, 0.7]);
        let metrics = &mut req.resource_metrics[0].scope_metrics[0].metrics;
        if let Some(Data::Gauge(gauge)) = &mut metrics[2].data {
            for (task, value) in [("general", 0.9), ("encoder", 0.0), ("decoder", 0.1)] {
                gauge.data_points.push(point(
                    value,
                    vec![kv("hw.id", "GPU-2"), kv("hw.gpu.task", task)],
                ));
            }
        }
        agg.ingest(&req, Transport::Grpc);
        let r = agg.cluster_reading();
        // GPU-0 and GPU-1 (no task label) and GPU-2's general series: (0.5+0.7+0.9)/3.
        assert_eq!(r.sources[0].gpu_devices, 3);
        assert!((r.sources[0].gpu_utilization.unwrap() - 0.7).abs() < 1e-12);
    }

    #[test]
    fn reading_and_json_from_ingested_pushes() {
        let agg = aggregator();
        agg.ingest(
            &push("1", &[("io", 2.0), ("gpu", 6.0)], 3.0, &[0.5, 0.7]),
            Transport::Grpc,
        );
        agg.ingest(&push("0", &[("idle", 4.0)], 0.0, &[]), Transport::Grpc);
        agg.ingest(&push("10", &[("cpu", 1.0)], 2.0, &[]), Transport::Grpc);
        let r = agg.cluster_reading();
        let ranks: Vec<_> = r
            .sources
            .iter()
            .map(|s| s.rank.as_deref().unwrap())
            .collect();
        assert_eq!(ranks, ["0", "1", "10"], "numeric rank order");
        let one = &r.sources[1];
        assert_eq!(one.state_code, Some(3));
        assert_eq!(one.seconds_by_state, pairs(&[("io", 2.0), ("gpu", 6.0)]));
        let by_op = [("io", "op", 2.0), ("gpu", "op", 6.0)]
            .map(|(s, o, v)| (s.to_owned(), o.to_owned(), v))
            .to_vec();
        assert_eq!(one.seconds_by_operation, by_op, "per (state, operation)");
        assert_eq!(one.gpu_devices, 2);
        assert!((one.gpu_utilization.unwrap() - 0.6).abs() < 1e-12);
        assert!(one.live);

        let mut h = ClusterHistory::default();
        // A baseline 10 s before `r`, as if sampled then.
        let mut base = r.clone();
        let r = ClusterReading {
            now: r.now + 10 * S,
            ..r
        };
        base.sources[1].seconds_by_state = pairs(&[("io", 1.0), ("gpu", 2.0)]);
        h.record(&base);
        let json = cluster_json(&r, &h);
        let s1 = &json["sources"][1];
        assert_eq!(s1["rank"], "1");
        assert_eq!(s1["service.name"], "trainer");
        assert_eq!(s1["service.instance.id"], "inst-1");
        assert_eq!(s1["host.name"], "node-a");
        assert_eq!(s1["state"], "gpu");
        assert_eq!(s1["state_code"], 3);
        assert_eq!(s1["seconds_by_state"]["gpu"], 6.0);
        assert_eq!(s1["share_last_minute"]["gpu"], 0.8);
        assert_eq!(s1["share_last_minute"]["io"], 0.2);
        assert_eq!(s1["gpu_devices"], 2);
        assert!((s1["gpu_utilization"].as_f64().unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(s1["live"], true);
        assert!(s1["seen_s_ago"].as_f64().unwrap() >= 0.0);
        let s0 = &json["sources"][0];
        assert_eq!(s0["state"], "idle");
        assert_eq!(s0["gpu_utilization"], Json::Null);
        // Rank 0 and 10 have one sample only, taken at the same instant: no share yet.
        assert_eq!(s0["share_last_minute"], Json::Null);
        let fleet = &json["fleet"];
        assert_eq!(fleet["sources"], 3);
        assert_eq!(fleet["live"], 3);
        assert_eq!(fleet["in_state"]["gpu"], 1);
        assert_eq!(fleet["in_state"]["idle"], 1);
        assert_eq!(fleet["in_state"]["cpu"], 1);
        assert_eq!(fleet["seconds_by_state"]["gpu"], 6.0);
        assert_eq!(fleet["seconds_by_state"]["idle"], 4.0);
        assert!((fleet["share_last_minute"]["gpu"].as_f64().unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(s1["last_minute_s"], 10.0);
        assert!((fleet["gpu_utilization_mean"].as_f64().unwrap() - 0.6).abs() < 1e-12);
        // Seconds since the aggregator was built (not its internal clock, which starts
        // at 2^60 ns): well under a minute in a unit test, however slow the machine.
        let uptime = json["uptime_s"].as_f64().unwrap();
        assert_eq!(uptime, r.clock.uptime as f64 / 1e9);
        assert!((0.0..60.0).contains(&uptime), "{uptime}");
        assert_eq!(json["restored"], false);
        let since = json["counting_since_unix_s"].as_f64().unwrap();
        assert_eq!(since, json["started_at_unix_s"].as_f64().unwrap());
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(since <= wall && since > wall - 60.0, "{since} vs {wall}");
        assert_eq!(json["states"][0], "gpu");
    }

    #[test]
    fn a_stale_source_is_listed_but_not_counted() {
        let mut h = ClusterHistory::default();
        let mut two = reading(0, &[("gpu", 1.0)]);
        let mut other = two.sources[0].clone();
        other.key = "rank=1".into();
        other.rank = Some("1".into());
        other.state_code = Some(1);
        other.seconds_by_state = pairs(&[("io", 5.0)]);
        other.gpu_utilization = Some(0.9);
        other.gpu_devices = 1;
        two.sources.push(other);
        h.record(&two);
        two.now = 3 * S;
        two.sources[0].seconds_by_state = pairs(&[("gpu", 4.0)]);
        two.sources[1].live = false;
        two.sources[1].since_seen = 3 * S;
        let json = cluster_json(&two, &h);
        let stale = &json["sources"][1];
        assert_eq!(stale["live"], false);
        assert_eq!(stale["share_last_minute"], Json::Null);
        assert_eq!(stale["seen_s_ago"], 3.0);
        assert_eq!(json["fleet"]["sources"], 2);
        assert_eq!(json["fleet"]["live"], 1);
        assert_eq!(json["fleet"]["in_state"], serde_json::json!({ "gpu": 1 }));
        assert_eq!(
            json["fleet"]["seconds_by_state"],
            serde_json::json!({ "gpu": 4.0 })
        );
        assert_eq!(
            json["fleet"]["share_last_minute"],
            serde_json::json!({ "gpu": 1.0 })
        );
        assert_eq!(json["fleet"]["gpu_utilization_mean"], Json::Null);
        assert_eq!(json["sources"][0]["last_minute_s"], 3.0);
        // Its ring is dropped at the next sample.
        h.record(&two);
        assert_eq!(h.rings.len(), 1);
    }

    #[test]
    fn unknown_codes_and_odd_values_do_not_break_the_document() {
        let agg = aggregator();
        agg.ingest(&push("x", &[("gpu", 1.0)], 42.0, &[]), Transport::Http);
        let r = agg.cluster_reading();
        let json = cluster_json(&r, &ClusterHistory::default());
        assert_eq!(json["sources"][0]["state"], Json::Null);
        assert_eq!(json["sources"][0]["state_code"], 42);
        assert_eq!(json["fleet"]["in_state"]["unknown"], 1);
        assert!(serde_json::to_string(&json).is_ok());
    }
}
