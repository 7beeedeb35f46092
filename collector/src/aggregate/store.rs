//! The series store: per-source state, reset-safe fleet aggregates, staleness.
//!
//! Time is passed in (nanoseconds on a monotonic clock) so tests can drive it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use opentelemetry_proto::tonic::common::v1::KeyValue;

use higgsmeter_catalog::{COLLECTOR_FAMILIES, Family, Kind};

use super::config::{AggregateConfig, GaugeAggregation};
use super::naming::{prometheus_name, render_labels, sanitize_label_name};
use super::wire::{Kv, MetricRef};
use super::{MetricKind, RefusalReason};
pub(crate) use jobs::{job_read, job_rows};
pub(crate) use read::{RenderCache, cluster_read, otlp_rows, rows};

mod accumulate;
mod checkpoint;
mod index;
mod jobs;
mod labels;
mod limits;
mod overflow;
mod points;
mod read;

pub(crate) use accumulate::Hist;
use index::{SeriesIndex, attrs_equal, attrs_hash, canonical, salted, stream_key};
pub(crate) use labels::value_string;
use labels::{SeriesLabels, SourceLabels, series_labels, source_labels};

pub(crate) use checkpoint::{CheckpointError, RestoreCount, StateFile, StoreCopy};
use overflow::{Folds, Quota, is_overflow, new_folds};

/// OTLP's `DataPointFlags.NO_RECORDED_VALUE`.
const FLAG_NO_RECORDED_VALUE: u32 = 1;

/// How long after a source's first point its new series can be baselines (the
/// requests of one export arrive back to back).
const BASELINE_WINDOW: u64 = 1_000_000_000;

/// Names the collector exports itself; received metrics may not use them.
pub(crate) const TARGET_INFO: &str = "target_info";

/// Where a point goes: see [`Store::locate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// Its series.
    Series(u32),
    /// Folded into its source's overflow series of the metric: the stream's key
    /// (the hash of its attributes).
    Fold(u64),
    /// A new series, decided under the write lock ([`Store::series_for`]).
    New,
}

/// What became of one request's points.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Points read.
    pub(crate) received: u64,
    /// Points refused, per reason.
    pub(crate) refused: [u64; RefusalReason::COUNT],
    /// The first refusal's message, for the OTLP partial-success `error_message`.
    pub(crate) first_message: Option<String>,
}

impl Outcome {
    pub(crate) fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }

    pub(crate) fn refuse(
        &mut self,
        reason: RefusalReason,
        n: u64,
        message: impl FnOnce() -> String,
    ) {
        self.refused[reason as usize] += n;
        if self.first_message.is_none() && n > 0 {
            self.first_message = Some(message());
        }
    }
}

pub(crate) struct Metric {
    otel_name: String,
    /// Other OpenTelemetry names merged into this family: they map to the same
    /// Prometheus name with the same kind and a compatible unit (ADR 0013). A name's
    /// index here plus one is its [`NameIx`]; `otel_name` is 0.
    aliases: Vec<String>,
    prom_name: String,
    kind: MetricKind,
    help: String,
    unit: String,
    gauge_agg: GaugeAggregation,
    series: usize,
    /// The histogram bounds its series and fleet entries last took: equal bounds are one
    /// `Arc`, so a scrape's encoder sees the same bounds again by pointer instead of
    /// reading each series' copy (a cache miss per histogram series).
    bounds: Option<std::sync::Arc<[f64]>>,
}

pub(crate) struct Source {
    /// Shared, so a checkpoint copies it by reference under the lock.
    resource: std::sync::Arc<[KeyValue]>,
    key: Vec<(String, String)>,
    /// Sanitised labels every per-source series of this source carries.
    labels: Vec<(String, String)>,
    /// Rendered `target_info` labels.
    target_info: std::sync::Arc<str>,
    /// `job`, kept in the fleet view unless `service.name` is summed over.
    fleet_job: Option<String>,
    /// Monotonic ns of its last request: set by ingest under the store's read lock.
    last_seen: AtomicU64,
    series: usize,
    /// Its series per metric (the `max_series_per_source_metric` quota).
    per_metric: HashMap<u32, u32>,
    /// Its quotas and reserve apply (not to a lower collector's fleet export, which
    /// that collector's own quotas bound).
    limited: bool,
    /// Its folded streams, per overflowing metric (behind its own lock: folding runs
    /// under the store's read lock).
    folds: Mutex<Folds>,
    /// This source's series by the hash of their metric and attributes. Per source, not
    /// one map for the store: a request's points are a few sources' series, so their
    /// look-ups stay in a few small maps the cache holds (one store-wide map of 500,000
    /// series missed the cache on every point: a quarter of the ingest CPU).
    index: SeriesIndex,
    /// Until when (monotonic ns) a new cumulative series of this source that started
    /// before the state's origin is a baseline: the source's first export, when its
    /// series were counted by nobody here. 0 for a source restored from a checkpoint.
    baseline_until: u64,
    /// Restored from a checkpoint, live then, and not heard from since: the views wait
    /// for it (see [`Store::ready`]).
    awaited: bool,
    /// Forwarded by a lower collector with `include_sources` (its resource carries
    /// [`FORWARDED_BY`]): kept in the per-source view, never summed into the fleet (the
    /// forwarder's own aggregate already holds it). ADR 0009.
    forwarded: bool,
    /// A lower collector's fleet export (resource [`ROLE`] = [`ROLE_AGGREGATE`]): its
    /// points keep their own `job` and `instance`; the source is labelled
    /// `higgsmeter_collector` (its instance id) instead. ADR 0009.
    aggregate: bool,
}

pub(crate) use crate::labels::{FORWARDED_BY, ROLE, ROLE_AGGREGATE};

pub(crate) enum Value {
    Counter { value: f64 },
    Gauge { value: f64, updated: u64 },
    Histogram(Hist),
}

/// A series' identity is fixed when it is created (under the store's write lock); what
/// its points change is behind its own mutex, so requests of different sources apply
/// their points in parallel under the store's read lock.
pub(crate) struct Series {
    source: u32,
    metric: u32,
    /// Which of its metric's OpenTelemetry names created it (ADR 0013): points of the
    /// same source and attributes under another name of the family are refused.
    name: NameIx,
    fleet: u32,
    hash: u64,
    /// Shared, so a checkpoint copies it by reference under the lock.
    attrs: std::sync::Arc<[(String, String)]>,
    /// Rendered per-source labels (source labels, point labels, static labels).
    labels: std::sync::Arc<str>,
    /// Summed into the fleet (false for a forwarded source's series).
    counted: bool,
    /// Its source's overflow series of its metric: points reach it folded, never as
    /// its own stream.
    overflow: bool,
    state: Mutex<SeriesState>,
}

/// What a series' points change.
pub(crate) struct SeriesState {
    last_seen: u64,
    start: u64,
    time: u64,
    /// No point admitted yet.
    fresh: bool,
    value: Value,
}

impl Series {
    /// Its points' state (a poisoned lock is taken over: every update leaves the
    /// state whole before anything that can panic).
    pub(crate) fn state(&self) -> MutexGuard<'_, SeriesState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When a point of it was last received (monotonic ns).
    pub(crate) fn last_seen(&self) -> u64 {
        self.state().last_seen
    }

    /// The value of point attribute `key`.
    pub(crate) fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.attrs[i].1.as_str())
    }

    /// The point attributes, shared.
    pub(crate) fn attrs_shared(&self) -> std::sync::Arc<[(String, String)]> {
        self.attrs.clone()
    }
}

/// A fleet entry's value, to create one.
pub(crate) enum FleetValue {
    Counter(f64),
    Gauge,
    Histogram(Hist),
}

/// A fleet entry's value as it is kept: updated by every counted source's points under
/// the store's read lock, a counter without a lock.
enum FleetCell {
    /// The sum's `f64` bits.
    Counter(AtomicU64),
    /// Combined over live sources when read.
    Gauge,
    Histogram(Mutex<Hist>),
}

/// A fleet entry's value, read.
pub(crate) enum FleetRead<'a> {
    Counter(f64),
    Gauge,
    Histogram(MutexGuard<'a, Hist>),
}

pub(crate) struct Fleet {
    metric: u32,
    /// Shared, so a checkpoint copies it by reference under the lock.
    label_pairs: std::sync::Arc<[(String, String)]>,
    labels: std::sync::Arc<str>,
    value: FleetCell,
    warned_bounds: AtomicBool,
}

impl Fleet {
    fn new(
        metric: u32,
        label_pairs: std::sync::Arc<[(String, String)]>,
        labels: std::sync::Arc<str>,
        value: FleetValue,
    ) -> Fleet {
        let value = match value {
            FleetValue::Counter(v) => FleetCell::Counter(AtomicU64::new(v.to_bits())),
            FleetValue::Gauge => FleetCell::Gauge,
            FleetValue::Histogram(h) => FleetCell::Histogram(Mutex::new(h)),
        };
        Fleet {
            metric,
            label_pairs,
            labels,
            value,
            warned_bounds: AtomicBool::new(false),
        }
    }

    /// Its accumulated value (a poisoned lock is taken over, as for [`Series::state`]).
    pub(crate) fn value(&self) -> FleetRead<'_> {
        match &self.value {
            FleetCell::Counter(bits) => {
                FleetRead::Counter(f64::from_bits(bits.load(Ordering::Relaxed)))
            }
            FleetCell::Gauge => FleetRead::Gauge,
            FleetCell::Histogram(h) => {
                FleetRead::Histogram(h.lock().unwrap_or_else(PoisonError::into_inner))
            }
        }
    }

    /// Adds `increment` to a counter entry.
    fn add(&self, increment: f64) {
        if let FleetCell::Counter(bits) = &self.value {
            // The closure never refuses, so the update always succeeds.
            let _ = bits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + increment).to_bits())
            });
        }
    }
}

impl Source {
    /// When it last sent a request (monotonic ns).
    pub(crate) fn last_seen(&self) -> u64 {
        self.last_seen.load(Ordering::Relaxed)
    }
}

/// The whole aggregation state, behind the aggregator's read-write lock.
///
/// Ingest takes the read lock: finding a source, a metric and a series is a lookup,
/// and a point changes only its series' state and its fleet entry, each behind its
/// own mutex, so requests apply in parallel. Creating a source, a metric or a series
/// (and anything that forgets one) takes the write lock.
pub(crate) struct Store {
    config: AggregateConfig,
    stale_after: u64,
    forget_after: u64,
    metrics: Vec<Metric>,
    /// Every OpenTelemetry name received: its metric and which of its names it is.
    metric_by_name: HashMap<String, (u32, NameIx)>,
    prom_names: HashMap<String, u32>,
    sources: Vec<Option<Source>>,
    free_sources: Vec<u32>,
    source_by_key: HashMap<Vec<(String, String)>, u32>,
    series: Vec<Option<Series>>,
    free_series: Vec<u32>,
    /// Every series' point attributes, each distinct set once (the same `op="..."`
    /// recurs in every source and metric): a series holds an `Arc` to its set. Sets no
    /// series holds any more go at the next sweep.
    attr_sets: HashSet<std::sync::Arc<[(String, String)]>>,
    series_held: usize,
    /// The series budget ([`AggregateConfig::series_budget`]).
    budget: usize,
    /// Series still reserved for held sources below their reserve: the sum over
    /// limited sources of `reserved_series_per_source - series` (where positive).
    reserve_outstanding: usize,
    /// Folded streams held by all sources (see [`overflow`]); changed under the read lock.
    folded: AtomicU64,
    fleet: Vec<Fleet>,
    fleet_index: HashMap<(u32, String), u32>,
    static_labels: Vec<(String, String)>,
    sum_over: Vec<String>,
    /// When series were last forgotten early to make room (0: never).
    last_eviction: u64,
    /// Changes whenever a series or fleet entry is created or forgotten: what the
    /// render order (by name, then labels) depends on.
    layout: u64,
    /// The render order of each view and the last output sizes, kept between scrapes.
    render_cache: RenderCache,
    /// Unix ns: a new source's cumulative series that started before this are a
    /// baseline (their value so far was counted by no fleet here); 0: never.
    baseline_before: u64,
    /// Restored sources not yet heard from again, and until when (monotonic ns) the
    /// views wait for them.
    awaiting: usize,
    hold_until: u64,
}

/// Which of a metric's OpenTelemetry names (0: the first, `otel_name`; `i + 1`:
/// `aliases[i]`).
pub(crate) type NameIx = u16;

/// Whether a metric of unit `b` may join a family of unit `a` that has the same
/// Prometheus name and kind: the same unit, or either side without one (its name, being
/// the same Prometheus name, already ends in the unit's suffix). ADR 0013.
fn units_merge(a: &str, b: &str) -> bool {
    a == b || a.is_empty() || b.is_empty()
}

fn family_kind_matches(family: &Family, kind: MetricKind) -> bool {
    matches!(
        (family.kind, kind),
        (Kind::Counter, MetricKind::Counter)
            | (Kind::Gauge, MetricKind::Gauge)
            | (Kind::Histogram, MetricKind::Histogram)
    )
}

fn is_reserved(prom_name: &str) -> bool {
    prom_name == TARGET_INFO || COLLECTOR_FAMILIES.iter().any(|f| f.name == prom_name)
}

impl Store {
    pub(crate) fn new(config: AggregateConfig) -> Store {
        let stale_after =
            u64::try_from(config.effective_stale_after().as_nanos()).unwrap_or(u64::MAX);
        let forget_after = u64::try_from(config.forget_after.as_nanos())
            .unwrap_or(u64::MAX)
            .max(stale_after);
        let static_labels = config
            .static_labels
            .iter()
            .map(|(k, v)| (sanitize_label_name(k), v.clone()))
            .collect::<Vec<_>>();
        let sum_over = config.sum_over.clone();
        let budget = config.series_budget();
        Store {
            config,
            budget,
            reserve_outstanding: 0,
            folded: AtomicU64::new(0),
            stale_after,
            forget_after,
            metrics: Vec::new(),
            metric_by_name: HashMap::new(),
            prom_names: HashMap::new(),
            sources: Vec::new(),
            free_sources: Vec::new(),
            source_by_key: HashMap::new(),
            series: Vec::new(),
            free_series: Vec::new(),
            attr_sets: HashSet::new(),
            series_held: 0,
            fleet: Vec::new(),
            fleet_index: HashMap::new(),
            static_labels,
            sum_over,
            last_eviction: 0,
            layout: 0,
            render_cache: RenderCache::default(),
            baseline_before: 0,
            awaiting: 0,
            hold_until: 0,
        }
    }

    /// Sets the baseline rule's threshold: the state's origin (unix ns; 0: off).
    pub(crate) fn set_baseline_before(&mut self, unix_nanos: u64) {
        self.baseline_before = unix_nanos;
    }

    /// Whether the fleet values are whole: not waiting for restored sources to report
    /// again (a restored counter read before its sources' next points would show
    /// Prometheus or an upstream a drop, i.e. a counter reset).
    pub(crate) fn ready(&self, now: u64) -> bool {
        self.awaiting == 0 || now >= self.hold_until
    }

    /// Restored sources the views still wait for.
    pub(crate) fn awaiting(&self) -> usize {
        self.awaiting
    }

    /// Whether something last seen at `seen` is still live at `now`.
    pub(crate) fn is_live(&self, seen: u64, now: u64) -> bool {
        now.saturating_sub(seen) <= self.stale_after
    }

    /// Per-source series held (live and remembered).
    pub(crate) fn series_held(&self) -> usize {
        self.series_held
    }

    /// Sources heard from within `stale_after`.
    pub(crate) fn live_sources(&self, now: u64) -> usize {
        self.sources
            .iter()
            .flatten()
            .filter(|s| self.is_live(s.last_seen(), now))
            .count()
    }

    /// The source of resource `attrs` when it is known and not awaited (the read
    /// lock's part of [`Store::source_for`]), marked seen.
    pub(crate) fn find_source(&self, attrs: &[Kv<'_>], now: u64) -> Option<u32> {
        let key = canonical(attrs);
        let id = *self.source_by_key.get(&key)?;
        let s = self.sources[id as usize].as_ref()?;
        if s.awaited {
            return None;
        }
        s.last_seen.fetch_max(now, Ordering::Relaxed);
        Some(id)
    }

    /// The source of resource `attrs`, added when it is new and the budget has room for
    /// its reserve (else refused: see [`Store::admit_source`]).
    pub(crate) fn source_for(
        &mut self,
        attrs: &[Kv<'_>],
        now: u64,
    ) -> Result<u32, (RefusalReason, String)> {
        self.find_or_add_source(attrs, now, true)
    }

    /// The source of resource `attrs`, added when it is new; `admit`: only if the
    /// budget has room for it (a restored source is always taken back).
    fn find_or_add_source(
        &mut self,
        attrs: &[Kv<'_>],
        now: u64,
        admit: bool,
    ) -> Result<u32, (RefusalReason, String)> {
        let key = canonical(attrs);
        if let Some(&id) = self.source_by_key.get(&key) {
            if let Some(s) = self.sources[id as usize].as_mut() {
                s.last_seen.fetch_max(now, Ordering::Relaxed);
                if s.awaited {
                    s.awaited = false;
                    self.awaiting = self.awaiting.saturating_sub(1);
                }
            }
            return Ok(id);
        }
        let SourceLabels {
            labels,
            target_info,
            fleet_job,
            aggregate,
        } = source_labels(&key, &self.sum_over, &self.static_labels);
        let limited = !aggregate;
        if admit {
            self.admit_source(limited, now)?;
        }
        let forwarded = key.iter().any(|(k, _)| k == FORWARDED_BY);
        let source = Source {
            resource: attrs
                .iter()
                .map(|kv| KeyValue {
                    key: kv.key.to_owned(),
                    value: Some(kv.val.to_proto()),
                    ..Default::default()
                })
                .collect(),
            key: key.clone(),
            labels,
            target_info: target_info.into(),
            fleet_job,
            last_seen: AtomicU64::new(now),
            series: 0,
            per_metric: HashMap::new(),
            limited,
            folds: new_folds(),
            index: SeriesIndex::default(),
            baseline_until: now.saturating_add(BASELINE_WINDOW),
            awaited: false,
            forwarded,
            aggregate,
        };
        let id = match self.free_sources.pop() {
            Some(id) => {
                self.sources[id as usize] = Some(source);
                id
            }
            None => {
                self.sources.push(Some(source));
                (self.sources.len() - 1) as u32
            }
        };
        self.source_by_key.insert(key, id);
        if limited {
            self.reserve_outstanding += self.config.reserved_series_per_source;
        }
        Ok(id)
    }

    /// The id of a metric already known (the read lock's part of
    /// [`Store::metric_id`]): `None` when it is new.
    pub(crate) fn find_metric(
        &self,
        m: &MetricRef<'_>,
        kind: MetricKind,
    ) -> Option<Result<(u32, NameIx), (RefusalReason, String)>> {
        let &(id, name) = self.metric_by_name.get(m.name)?;
        let metric = &self.metrics[id as usize];
        if metric.kind != kind {
            return Some(Err((
                RefusalReason::TypeConflict,
                format!(
                    "metric `{}` is a {} here but was first received as a {}",
                    m.name,
                    kind.as_str(),
                    metric.kind.as_str()
                ),
            )));
        }
        Some(Ok((id, name)))
    }

    /// The metric `m` belongs to, and which of its names it is: a known name's, a new
    /// family, or (ADR 0013) the family of another name that maps to the same
    /// Prometheus name with the same kind and a compatible unit.
    pub(crate) fn metric_id(
        &mut self,
        m: &MetricRef<'_>,
        kind: MetricKind,
    ) -> Result<(u32, NameIx), (RefusalReason, String)> {
        if let Some(found) = self.find_metric(m, kind) {
            return found;
        }
        if m.name.is_empty() {
            return Err((
                RefusalReason::Invalid,
                "a metric has an empty name".to_owned(),
            ));
        }
        let family = higgsmeter_catalog::find_instrument(m.name);
        if let Some(f) = family
            && !family_kind_matches(f, kind)
        {
            return Err((
                RefusalReason::TypeConflict,
                format!(
                    "metric `{}` is a {} in the higgsmeter catalog but was sent as a {}",
                    m.name,
                    f.kind.as_str(),
                    kind.as_str()
                ),
            ));
        }
        let prom_name = prometheus_name(m.name, m.unit, kind, family);
        if is_reserved(&prom_name)
            || family.is_some_and(|f| COLLECTOR_FAMILIES.iter().any(|c| c.name == f.name))
        {
            return Err((
                RefusalReason::TypeConflict,
                format!("metric name `{prom_name}` is reserved for the collector's own metrics"),
            ));
        }
        if let Some(&other) = self.prom_names.get(&prom_name) {
            let family = &mut self.metrics[other as usize];
            if family.kind == kind
                && units_merge(&family.unit, m.unit)
                && family.aliases.len() < usize::from(NameIx::MAX)
            {
                family.aliases.push(m.name.to_owned());
                let name = family.aliases.len() as NameIx;
                self.metric_by_name.insert(m.name.to_owned(), (other, name));
                return Ok((other, name));
            }
            return Err((
                RefusalReason::TypeConflict,
                format!(
                    "metric `{}` ({} `{}`) would be exported as `{prom_name}`, which metric `{}` ({} `{}`) already uses",
                    m.name,
                    kind.as_str(),
                    m.unit,
                    self.metrics[other as usize].otel_name,
                    self.metrics[other as usize].kind.as_str(),
                    self.metrics[other as usize].unit
                ),
            ));
        }
        if self.metrics.len() >= self.budget {
            return Err((
                RefusalReason::Cardinality,
                format!("too many metric names (the series budget: {})", self.budget),
            ));
        }
        let help = match family {
            Some(f) => f.help.to_owned(),
            None if m.description.is_empty() => m.name.to_owned(),
            None => m.description.to_owned(),
        };
        let unit = family.map_or_else(|| m.unit.to_owned(), |f| f.unit.to_owned());
        let gauge_agg = self.config.gauge_aggregation(m.name, &prom_name);
        if kind == MetricKind::Gauge
            && gauge_agg == GaugeAggregation::SourcesOnly
            && self.config.gauge_rule(m.name, &prom_name).is_none()
        {
            // Once per metric: it is created once (and again only after a restart).
            tracing::info!(
                metric = %prom_name,
                "gauge `{prom_name}` has no fleet rule: it is served per source on \
                 /metrics/sources and left out of /metrics; to combine it across sources add \
                 processors.higgsmeter.gauges: [{{match: {prom_name}, aggregation: sum|max|min|mean|last|per_source}}] \
                 (otel-config/README.md)"
            );
        }
        let id = self.metrics.len() as u32;
        self.metrics.push(Metric {
            otel_name: m.name.to_owned(),
            aliases: Vec::new(),
            prom_name: prom_name.clone(),
            kind,
            help,
            unit,
            gauge_agg,
            series: 0,
            bounds: None,
        });
        self.metric_by_name.insert(m.name.to_owned(), (id, 0));
        self.prom_names.insert(prom_name, id);
        Ok((id, 0))
    }

    /// `bounds` as one `Arc` with the last equal bounds of `metric`'s histograms.
    fn shared_bounds(&mut self, metric: u32, bounds: &[f64]) -> std::sync::Arc<[f64]> {
        let Some(m) = self.metrics.get_mut(metric as usize) else {
            return bounds.into();
        };
        match &m.bounds {
            Some(last) if **last == *bounds => last.clone(),
            _ => {
                let shared: std::sync::Arc<[f64]> = bounds.into();
                m.bounds = Some(shared.clone());
                shared
            }
        }
    }

    /// `Err` with the refusal when series `id` was created by another of its metric's
    /// names than `name` (ADR 0013): one source sending the same series under two
    /// names of one family would interleave two cumulative streams.
    pub(crate) fn check_series_name(
        &self,
        id: u32,
        name: NameIx,
    ) -> Result<(), (RefusalReason, String)> {
        let Some(series) = self.series[id as usize].as_ref() else {
            return Ok(());
        };
        if series.name == name {
            return Ok(());
        }
        let metric = &self.metrics[series.metric as usize];
        let named = |ix: NameIx| match ix {
            0 => metric.otel_name.as_str(),
            i => metric.aliases[usize::from(i) - 1].as_str(),
        };
        Err((
            RefusalReason::TypeConflict,
            format!(
                "metric `{}` is exported as `{}`, as is `{}`, which this source already sends with the same attributes",
                named(name),
                metric.prom_name,
                named(series.name)
            ),
        ))
    }

    /// The per-source series of `attrs` when it exists.
    pub(crate) fn find_series(&self, source: u32, metric: u32, attrs: &[Kv<'_>]) -> Option<u32> {
        self.find_hashed(source, metric, attrs, attrs_hash(source, metric, attrs))
    }

    fn find_hashed(&self, source: u32, metric: u32, attrs: &[Kv<'_>], hash: u64) -> Option<u32> {
        self.sources
            .get(source as usize)?
            .as_ref()?
            .index
            .find(hash, |id| {
                self.series[id as usize].as_ref().is_some_and(|s| {
                    s.source == source && s.metric == metric && attrs_equal(&s.attrs, attrs)
                })
            })
    }

    /// Where a point of `attrs` goes (the read lock's part of [`Store::series_for`]):
    /// its series, its source's overflow series (a stream folded before, a point
    /// marked as overflow, or a new stream past a quota), or `New`: decided under the
    /// write lock.
    pub(crate) fn locate(&self, source: u32, metric: u32, attrs: &[Kv<'_>]) -> Found {
        let key = stream_key(attrs);
        if let Some(id) = self.find_hashed(source, metric, attrs, salted(key, source, metric)) {
            return match self.series[id as usize].as_ref() {
                Some(s) if s.overflow => Found::Fold(key),
                _ => Found::Series(id),
            };
        }
        let (overflowing, folded) = self.folded(source, metric, key);
        if folded
            || (overflowing && (is_overflow(attrs) || self.over_quota(source, metric).is_some()))
        {
            return Found::Fold(key);
        }
        Found::New
    }

    /// The shared copy of an attribute set (added when it is new).
    fn attr_set(&mut self, attrs: Vec<(String, String)>) -> std::sync::Arc<[(String, String)]> {
        if let Some(set) = self.attr_sets.get(attrs.as_slice()) {
            return set.clone();
        }
        let set: std::sync::Arc<[(String, String)]> = attrs.into();
        self.attr_sets.insert(set.clone());
        set
    }

    /// Finds or creates the per-source series of `attrs` (`bounds` for histograms), or
    /// says the point folds into its source's overflow series (created here when it
    /// is the first): a point marked as overflow, or past its source's quota.
    pub(crate) fn series_for(
        &mut self,
        source: u32,
        metric: u32,
        name: NameIx,
        attrs: &[Kv<'_>],
        bounds: Option<&[f64]>,
        now: u64,
    ) -> Result<Found, (RefusalReason, String)> {
        let found = self.locate(source, metric, attrs);
        if !matches!(found, Found::New) {
            return Ok(found);
        }
        let why = if is_overflow(attrs) {
            Some(Quota::Marked)
        } else {
            self.must_fold(source, metric, now)
        };
        if let Some(why) = why {
            self.overflow_series(source, metric, name, bounds, now, why)?;
            return Ok(Found::Fold(stream_key(attrs)));
        }
        self.create_series(source, metric, name, attrs, bounds, now, false)
            .map(Found::Series)
    }

    /// A restored series: created within its source's quotas (past them, or past the
    /// budget, it is left out), an overflow series always.
    pub(super) fn restore_series(
        &mut self,
        source: u32,
        metric: u32,
        name: NameIx,
        attrs: &[Kv<'_>],
        bounds: Option<&[f64]>,
        now: u64,
    ) -> Result<u32, (RefusalReason, String)> {
        if let Some(id) = self.find_series(source, metric, attrs) {
            return Ok(id);
        }
        if is_overflow(attrs) {
            return self.create_series(source, metric, name, attrs, bounds, now, true);
        }
        if let Some(why) = self.over_quota(source, metric) {
            return Err((RefusalReason::Cardinality, format!("{why:?}")));
        }
        self.create_series(source, metric, name, attrs, bounds, now, false)
    }

    /// Creates the per-source series of `attrs` (not there yet); `overflow` for its
    /// source's overflow series of the metric.
    #[allow(clippy::too_many_arguments)]
    fn create_series(
        &mut self,
        source: u32,
        metric: u32,
        name: NameIx,
        attrs: &[Kv<'_>],
        bounds: Option<&[f64]>,
        now: u64,
        overflow: bool,
    ) -> Result<u32, (RefusalReason, String)> {
        let hash = attrs_hash(source, metric, attrs);
        let attrs_key = canonical(attrs);
        let Some(src) = self.sources[source as usize].as_ref() else {
            return Err((RefusalReason::Invalid, "source vanished".to_owned()));
        };
        let src_forwarded = src.forwarded;
        let SeriesLabels {
            labels,
            fleet_pairs,
        } = series_labels(
            &src.labels,
            src.aggregate,
            src.fleet_job.as_deref(),
            &attrs_key,
            &self.sum_over,
            &self.static_labels,
        );
        let labels: std::sync::Arc<str> = labels.into();
        let fleet_rendered = render_labels(&fleet_pairs);
        let kind = self.metrics[metric as usize].kind;
        let fleet = match self.fleet_index.get(&(metric, fleet_rendered.clone())) {
            Some(&f) => {
                let differs = match (bounds, self.fleet[f as usize].value()) {
                    (Some(b), FleetRead::Histogram(h)) => *h.bounds != *b,
                    _ => false,
                };
                if differs {
                    return Err(self.bounds_refusal(f, metric));
                }
                f
            }
            None => {
                let value = match kind {
                    MetricKind::Counter => FleetValue::Counter(0.0),
                    MetricKind::Gauge => FleetValue::Gauge,
                    MetricKind::Histogram => FleetValue::Histogram(Hist::empty_shared(
                        self.shared_bounds(metric, bounds.unwrap_or(&[])),
                    )),
                };
                let f = self.fleet.len() as u32;
                self.fleet.push(Fleet::new(
                    metric,
                    fleet_pairs.into(),
                    fleet_rendered.as_str().into(),
                    value,
                ));
                self.fleet_index.insert((metric, fleet_rendered), f);
                f
            }
        };
        let value = match kind {
            MetricKind::Counter => Value::Counter { value: 0.0 },
            MetricKind::Gauge => Value::Gauge {
                value: 0.0,
                updated: now,
            },
            MetricKind::Histogram => Value::Histogram(Hist::empty_shared(
                self.shared_bounds(metric, bounds.unwrap_or(&[])),
            )),
        };
        let series = Series {
            source,
            metric,
            name,
            fleet,
            hash,
            attrs: self.attr_set(attrs_key),
            labels,
            counted: !src_forwarded,
            overflow,
            state: Mutex::new(SeriesState {
                last_seen: now,
                start: 0,
                time: 0,
                fresh: true,
                value,
            }),
        };
        let id = match self.free_series.pop() {
            Some(id) => {
                self.series[id as usize] = Some(series);
                id
            }
            None => {
                self.series.push(Some(series));
                (self.series.len() - 1) as u32
            }
        };
        self.series_held += 1;
        self.layout = self.layout.wrapping_add(1);
        self.metrics[metric as usize].series += 1;
        self.series_added(source, metric);
        if let Some(s) = self.sources[source as usize].as_mut() {
            s.index.insert(hash, id);
        }
        Ok(id)
    }
}

#[cfg(test)]
impl Store {
    /// Distinct point attribute sets held (tests).
    pub(crate) fn attr_sets_held(&self) -> usize {
        self.attr_sets.len()
    }

    /// The sum of the fleet counters of metric `name` (tests).
    pub(crate) fn fleet_counter(&self, name: &str) -> f64 {
        self.fleet
            .iter()
            .filter(|f| self.metrics[f.metric as usize].otel_name == name)
            .map(|f| match f.value() {
                FleetRead::Counter(v) => v,
                _ => 0.0,
            })
            .sum()
    }

    /// Forgets the render order kept between reads (tests).
    pub(crate) fn reset_render_cache(&self) {
        self.render_cache.reset();
    }
}
