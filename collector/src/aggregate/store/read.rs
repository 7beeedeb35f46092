//! The store's read side: under the aggregator's lock, the rows of a Prometheus view,
//! of the OTLP push and of the cluster page (`views::rows`, `views::cluster`),
//! copied out for the encoders (`exporters/`) to format after the lock is released.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use higgsmeter_catalog::{
    COLLECTOR_OVERFLOW_POINTS, COLLECTOR_SERIES, COLLECTOR_SERIES_BUDGET, COLLECTOR_SOURCES,
    Family, WORKER_CURRENT_STATE, WORKER_SOURCES_IN_STATE,
};

use super::super::config::{GaugeAcc, GaugeAggregation};
use super::super::naming::render_labels;
use super::super::{MetricKind, View};
use super::{FleetRead, Store, TARGET_INFO, Value, value_string};
use crate::self_metrics::SelfMetrics;
use crate::views::cluster::{ClusterReading, CollectorClock, SourceReading, rank_order};
use crate::views::rows::{Attrs, FamilyKind, MetricHead, OtlpPoint, OtlpRows, RowValue, Rows};

/// One row of a view, before liveness and value checks.
#[derive(Clone, Copy)]
enum Entry {
    /// A per-source series.
    Series(u32),
    /// A fleet aggregate.
    Fleet(u32),
}

/// A view's entries in exposition order (metric name, then labels), valid while the
/// store's `layout` is `layout`.
#[derive(Default)]
struct Order {
    layout: Option<u64>,
    entries: Vec<Entry>,
    /// How many rows each family had, how many bucket counts and how much label text
    /// the view held the last time it was read: the next read sizes its buffers from
    /// them instead of growing them by doubling.
    family_rows: Vec<usize>,
    counts: usize,
    text: usize,
}

/// What reading keeps between scrapes (in the [`Store`]): sorting 100k label strings
/// on every GET cost more than formatting them. One lock per view: views are read under
/// the store's read lock, so the two can be read at once.
#[derive(Default)]
pub(crate) struct RenderCache {
    fleet: Mutex<Order>,
    sources: Mutex<Order>,
}

#[cfg(test)]
impl RenderCache {
    /// Forgets both orders.
    pub(crate) fn reset(&self) {
        for order in [&self.fleet, &self.sources] {
            *order
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Order::default();
        }
    }
}

impl Order {
    fn refresh(&mut self, store: &Store, view: View) {
        if self.layout == Some(store.layout) {
            return;
        }
        let series = store
            .series
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s)));
        self.entries.clear();
        match view {
            View::Fleet => {
                self.entries.extend(
                    series
                        .filter(|(_, s)| {
                            s.counted
                                && store.metrics[s.metric as usize].gauge_agg
                                    == GaugeAggregation::PerSource
                        })
                        .map(|(i, _)| Entry::Series(i)),
                );
                self.entries
                    .extend((0..store.fleet.len() as u32).map(Entry::Fleet));
            }
            View::Sources => self.entries.extend(series.map(|(i, _)| Entry::Series(i))),
        }
        // The order the exposition has always had: metrics by name (then id); within
        // one, labels, then per-source series before fleet entries, then id.
        let key = |e: &Entry| -> (&str, u32, &str, u8, u32) {
            let (metric, labels, rank, i) = match *e {
                Entry::Series(i) => store.series[i as usize]
                    .as_ref()
                    .map_or((u32::MAX, "", 0, i), |s| (s.metric, &*s.labels, 0, i)),
                Entry::Fleet(i) => {
                    let f = &store.fleet[i as usize];
                    (f.metric, &*f.labels, 1, i)
                }
            };
            let name = store
                .metrics
                .get(metric as usize)
                .map_or("", |m| m.prom_name.as_str());
            (name, metric, labels, rank, i)
        };
        self.entries.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        self.layout = Some(store.layout);
    }
}

/// The rows of `view` at `now` (run under the aggregator's lock).
pub(crate) fn rows(store: &Store, view: View, now: u64, stats: &SelfMetrics) -> Rows {
    let mut rows = Rows::default();
    let out = &mut rows;
    // The same view being read at once by another reader keeps the cache: this one
    // sorts for itself.
    let mut spare = Order::default();
    let mut cached = match view {
        View::Fleet => store.render_cache.fleet.try_lock(),
        View::Sources => store.render_cache.sources.try_lock(),
    };
    let order = match cached.as_deref_mut() {
        Ok(order) => order,
        Err(_) => &mut spare,
    };
    order.refresh(store, view);
    let gauges = match view {
        View::Fleet => fleet_gauges(store, now),
        View::Sources => Vec::new(),
    };
    out.families.reserve(order.family_rows.len() + 16);
    out.counts.reserve(order.counts);
    out.text.reserve(order.text);
    let mut current: Option<u32> = None;
    for entry in &order.entries {
        let (metric, labels, value) = match *entry {
            Entry::Series(i) => {
                let Some(s) = store.series.get(i as usize).and_then(Option::as_ref) else {
                    continue;
                };
                let state = s.state();
                if !store.is_live(state.last_seen, now) {
                    continue;
                }
                let value = match (&state.value, view) {
                    (Value::Gauge { value, .. }, View::Fleet) => RowValue::Number(*value),
                    (_, View::Fleet) => continue,
                    (Value::Counter { value } | Value::Gauge { value, .. }, View::Sources) => {
                        RowValue::Number(*value)
                    }
                    (Value::Histogram(h), View::Sources) => h.row(out),
                };
                (s.metric, &s.labels, value)
            }
            Entry::Fleet(i) => {
                let Some(f) = store.fleet.get(i as usize) else {
                    continue;
                };
                let value = match f.value() {
                    FleetRead::Counter(v) => RowValue::Number(v),
                    FleetRead::Histogram(h) => h.row(out),
                    FleetRead::Gauge => match gauges.get(i as usize).copied().flatten() {
                        Some((v, _)) => RowValue::Number(v),
                        None => continue,
                    },
                };
                (f.metric, &f.labels, value)
            }
        };
        let Some(m) = store.metrics.get(metric as usize) else {
            continue;
        };
        if current != Some(metric) {
            current = Some(metric);
            let hint = order.family_rows.get(out.families.len()).copied();
            out.push_family(&m.prom_name, &m.help, m.kind.into(), hint.unwrap_or(0));
        }
        out.push_row(labels, value);
    }
    order.family_rows.clear();
    order
        .family_rows
        .extend(out.families.iter().map(|f| f.rows.len()));
    order.counts = out.counts.len();
    order.text = out.text.len();
    if view == View::Fleet {
        sources_in_state(store, now, out);
        self_metrics(store, now, stats, out);
    }
    target_info(store, now, out);
    rows
}

/// Fleet gauges combined over live sources, by fleet entry.
pub(crate) fn fleet_gauges(store: &Store, now: u64) -> Vec<Option<(f64, u64)>> {
    let mut acc: Vec<Option<GaugeAcc>> = vec![None; store.fleet.len()];
    for s in store.series.iter().flatten() {
        let metric = &store.metrics[s.metric as usize];
        if metric.kind != MetricKind::Gauge || !metric.gauge_agg.combines() || !s.counted {
            continue;
        }
        let state = s.state();
        if !store.is_live(state.last_seen, now) {
            continue;
        }
        let Value::Gauge { value, updated } = state.value else {
            continue;
        };
        let a = &mut acc[s.fleet as usize];
        *a = Some(metric.gauge_agg.fold(*a, value, updated));
    }
    acc.iter()
        .zip(&store.fleet)
        .map(|(a, f)| {
            let rule = store.metrics[f.metric as usize].gauge_agg;
            a.map(|a| a.finish(rule))
        })
        .collect()
}

pub(super) fn with_static(store: &Store, pairs: &[(&str, &str)]) -> String {
    let mut labels: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.extend(store.static_labels.iter().cloned());
    labels.sort();
    render_labels(&labels)
}

fn sources_in_state(store: &Store, now: u64, out: &mut Rows) {
    let Some(metric) = store
        .metrics
        .iter()
        .position(|m| m.otel_name == WORKER_CURRENT_STATE.name)
    else {
        return;
    };
    let mut counts = [0u64; 7];
    for s in store.series.iter().flatten() {
        if s.metric as usize != metric || !s.counted {
            continue;
        }
        let state = s.state();
        if !store.is_live(state.last_seen, now) {
            continue;
        }
        if let Value::Gauge { value, .. } = state.value
            && (0.0..7.0).contains(&value)
        {
            counts[value as usize] += 1;
        }
    }
    let f = WORKER_SOURCES_IN_STATE;
    out.push_family(
        f.name,
        f.help,
        f.kind.into(),
        higgsmeter_catalog::STATES.len(),
    );
    for state in higgsmeter_catalog::STATES {
        out.push_row(
            &with_static(store, &[(f.labels[0], state.name)]),
            RowValue::Number(counts[usize::from(state.code)] as f64),
        );
    }
}

/// The collector's own families, with the two the store derives (series held and
/// live sources), in name order.
fn self_metrics(store: &Store, now: u64, stats: &SelfMetrics, out: &mut Rows) {
    let mut families: Vec<(&'static Family, Vec<(String, f64)>)> = Vec::new();
    let mut add = |family: &'static Family, values: &[&str], value: f64| {
        let pairs: Vec<(&str, &str)> = family
            .labels
            .iter()
            .copied()
            .zip(values.iter().copied())
            .collect();
        let row = (with_static(store, &pairs), value);
        match families.last_mut() {
            Some((f, rows)) if f.name == family.name => rows.push(row),
            _ => families.push((family, vec![row])),
        }
    };
    stats.read(&mut add);
    add(&COLLECTOR_SERIES, &["fleet"], store.fleet.len() as f64);
    add(&COLLECTOR_SERIES, &["source"], store.series_held() as f64);
    add(&COLLECTOR_SOURCES, &[], store.live_sources(now) as f64);
    add(&COLLECTOR_SERIES_BUDGET, &[], store.budget as f64);
    // Which source overflowed: its identity labels, and the metric.
    let overflow: Vec<(String, f64)> = store
        .overflow_counts()
        .into_iter()
        .map(|(source, metric, points)| {
            let mut pairs: Vec<(&str, &str)> = source
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            pairs.push((COLLECTOR_OVERFLOW_POINTS.labels[0], metric));
            (with_static(store, &pairs), points as f64)
        })
        .collect();
    if !overflow.is_empty() {
        families.push((&COLLECTOR_OVERFLOW_POINTS, overflow));
    }
    families.sort_by_key(|(f, _)| f.name);
    for (family, rows) in families {
        out.push_family(family.name, family.help, family.kind.into(), rows.len());
        for (labels, value) in rows {
            out.push_row(&labels, RowValue::Number(value));
        }
    }
}

fn target_info(store: &Store, now: u64, out: &mut Rows) {
    let mut live: Vec<&Arc<str>> = store
        .sources
        .iter()
        .flatten()
        .filter(|s| store.is_live(s.last_seen(), now))
        .map(|s| &s.target_info)
        .collect();
    if live.is_empty() {
        return;
    }
    live.sort_unstable();
    live.dedup();
    out.push_family(TARGET_INFO, "Target metadata", FamilyKind::Info, live.len());
    for labels in live {
        out.push_row(labels, RowValue::Number(1.0));
    }
}

/// The OTLP push's rows at `now` (run under the aggregator's lock).
pub(crate) fn otlp_rows(store: &Store, now: u64, include_sources: bool) -> OtlpRows {
    let mut counts = Rows::default();
    let metrics = store
        .metrics
        .iter()
        .map(|m| MetricHead {
            name: m.otel_name.clone(),
            help: m.help.clone(),
            unit: m.unit.clone(),
            kind: m.kind,
        })
        .collect();
    let mut fleet = Vec::new();
    for s in store.series.iter().flatten() {
        let metric = &store.metrics[s.metric as usize];
        if metric.kind != MetricKind::Gauge || !s.counted {
            continue;
        }
        let state = s.state();
        if !store.is_live(state.last_seen, now) {
            continue;
        }
        let Value::Gauge { value, .. } = state.value else {
            continue;
        };
        if metric.gauge_agg == GaugeAggregation::PerSource {
            let source = store.sources[s.source as usize]
                .as_ref()
                .map(|src| src.labels.clone())
                .unwrap_or_default();
            fleet.push(OtlpPoint {
                metric: s.metric,
                attrs: Attrs::SourceGauge {
                    source,
                    point: s.attrs_shared(),
                },
                value: RowValue::Number(value),
            });
        }
    }
    let gauges = fleet_gauges(store, now);
    for (i, f) in store.fleet.iter().enumerate() {
        let value = match f.value() {
            FleetRead::Counter(v) => RowValue::Number(v),
            FleetRead::Histogram(h) => h.row(&mut counts),
            FleetRead::Gauge => match gauges[i] {
                Some((v, _)) => RowValue::Number(v),
                None => continue,
            },
        };
        fleet.push(OtlpPoint {
            metric: f.metric,
            attrs: Attrs::Shared(f.label_pairs.clone()),
            value,
        });
    }
    let mut sources = Vec::new();
    if include_sources {
        let mut per_source: std::collections::BTreeMap<u32, Vec<OtlpPoint>> = Default::default();
        for s in store.series.iter().flatten() {
            let state = s.state();
            if !store.is_live(state.last_seen, now) {
                continue;
            }
            let value = match &state.value {
                Value::Counter { value } | Value::Gauge { value, .. } => RowValue::Number(*value),
                Value::Histogram(h) => h.row(&mut counts),
            };
            per_source.entry(s.source).or_default().push(OtlpPoint {
                metric: s.metric,
                attrs: Attrs::Shared(s.attrs_shared()),
                value,
            });
        }
        for (source, points) in per_source {
            if let Some(src) = store.sources[source as usize].as_ref() {
                sources.push((src.resource.to_vec(), points));
            }
        }
    }
    OtlpRows {
        metrics,
        fleet,
        sources,
        counts: counts.counts,
        static_labels: store.static_labels.clone(),
    }
}

/// Reads every source of `store` at `now`.
pub(crate) fn cluster_read(store: &Store, now: u64) -> ClusterReading {
    let activity = higgsmeter_catalog::WORKER_ACTIVITY_TIME.name;
    let current = higgsmeter_catalog::WORKER_CURRENT_STATE.name;
    let gpu = higgsmeter_catalog::HW_GPU_UTILIZATION_INSTRUMENT;
    // Which metric ids matter: 0 activity, 1 current state, 2 GPU utilisation.
    let role: Vec<Option<u8>> = store
        .metrics
        .iter()
        .map(|m| match m.otel_name.as_str() {
            n if n == activity => Some(0),
            n if n == current => Some(1),
            n if n == gpu || n == higgsmeter_catalog::HW_GPU_UTILIZATION.name => Some(2),
            _ => None,
        })
        .collect();
    let mut by_id: HashMap<u32, (SourceReading, f64)> = HashMap::new();
    for (id, src) in store.sources.iter().enumerate() {
        let Some(src) = src else { continue };
        let Ok(id) = u32::try_from(id) else { continue };
        let mut attrs: Vec<(String, String)> = src
            .resource
            .iter()
            .map(|kv| (kv.key.clone(), value_string(kv.value.as_ref()).into_owned()))
            .collect();
        attrs.sort();
        let get = |k: &str| {
            attrs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let reading = SourceReading {
            key: attrs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("\u{1f}"),
            rank: get("rank"),
            service_name: get("service.name"),
            service_instance_id: get("service.instance.id"),
            host_name: get("host.name"),
            state_code: None,
            seconds_by_state: Vec::new(),
            seconds_by_operation: Vec::new(),
            gpu_utilization: None,
            gpu_devices: 0,
            since_seen: now.saturating_sub(src.last_seen()),
            live: store.is_live(src.last_seen(), now),
            overflow: store.overflow_of(src),
        };
        by_id.insert(id, (reading, 0.0));
    }
    for s in store.series.iter().flatten() {
        let Some(Some(role)) = role.get(s.metric as usize) else {
            continue;
        };
        let Some((entry, gpu_sum)) = by_id.get_mut(&s.source) else {
            continue;
        };
        match (role, &s.state().value) {
            (0, Value::Counter { value }) => {
                // An overflow series' seconds have lost their state: shown as such.
                let state = if s.overflow {
                    "overflow"
                } else {
                    s.attr("state").unwrap_or("")
                };
                match entry.seconds_by_state.iter_mut().find(|(k, _)| k == state) {
                    Some((_, v)) => *v += value,
                    None => entry.seconds_by_state.push((state.to_owned(), *value)),
                }
                let operation = s.attr("operation").unwrap_or("");
                match entry
                    .seconds_by_operation
                    .iter_mut()
                    .find(|(k, o, _)| k == state && o == operation)
                {
                    Some((_, _, v)) => *v += value,
                    None => entry.seconds_by_operation.push((
                        state.to_owned(),
                        operation.to_owned(),
                        *value,
                    )),
                }
            }
            (1, Value::Gauge { value, .. }) if value.is_finite() => {
                entry.state_code = Some(*value as i64);
            }
            // The kernels' utilisation only: the NVML meter also reports the encoder's
            // and decoder's under hw.gpu.task (OTel hardware conventions).
            (2, Value::Gauge { value, .. })
                if value.is_finite() && s.attr("hw.gpu.task").is_none_or(|t| t == "general") =>
            {
                *gpu_sum += value;
                entry.gpu_devices += 1;
            }
            _ => {}
        }
    }
    let mut sources: Vec<SourceReading> = by_id
        .into_values()
        .map(|(mut r, gpu_sum)| {
            if r.gpu_devices > 0 {
                r.gpu_utilization = Some(gpu_sum / r.gpu_devices as f64);
            }
            r
        })
        .collect();
    sources.sort_by(rank_order);
    ClusterReading {
        now,
        clock: CollectorClock::default(),
        sources,
    }
}
