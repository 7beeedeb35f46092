//! Overflow: a point past its source's quota is folded into that source's overflow
//! series of its metric (attributes collapsed to `otel.metric.overflow=true`, as the
//! OpenTelemetry metrics SDK does past its cardinality limit), so counter, histogram
//! and summed-gauge totals stay exact while the series count stays bounded (ADR 0020).
//!
//! A folded stream keeps only what reset-safe accumulation needs (its start, last
//! time and last value, about 60 bytes against a series' 600), in a table per source
//! and metric behind the source's own mutex: folding runs under the store's read lock.
//! What a stream adds is what the series would have added to the fleet; it is added to
//! the overflow series and to the overflow series' fleet entry alike.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::super::naming::render_labels;
use super::super::wire::{HistPoint, Kv, Val};
use super::super::{MetricKind, RefusalReason};
use super::accumulate::{self, Hist, Point};
use super::checkpoint::FoldedCopy;
use super::index::IdMap;
use super::{FleetRead, GaugeAggregation, Outcome, Source, Store, StoreCopy, Value};

/// The attribute an overflow series carries (the OpenTelemetry SDK specification's
/// `otel.metric.overflow`); rendered as the label `otel_metric_overflow="true"`.
pub(crate) const OVERFLOW_ATTR: &str = "otel.metric.overflow";

/// The same attribute as a label: what a lower collector's export carries.
const OVERFLOW_LABEL: &str = "otel_metric_overflow";

/// A folded stream costs this fraction of a series in the budget (about 60 bytes
/// against a series' 1 KiB budget share).
pub(super) const FOLDED_PER_SERIES: u64 = 16;

/// Streams one source may have folded, as a multiple of `max_series_per_source`
/// (8 × 16,384 × about 60 B: 8 MB at most for a source whose labels run away).
pub(super) const FOLDED_PER_SOURCE_QUOTA: usize = 8;

/// Whether point attributes `attrs` are an overflow series' (`otel.metric.overflow`
/// or its label form `otel_metric_overflow`, true): an SDK's or a lower collector's
/// overflow, folded like any stream past the quota (never mixed into our own overflow
/// series as a cumulative stream of its own).
pub(crate) fn is_overflow(attrs: &[Kv<'_>]) -> bool {
    attrs.iter().any(|kv| {
        (kv.key == OVERFLOW_ATTR || kv.key == OVERFLOW_LABEL)
            && matches!(kv.val, Val::Bool(true) | Val::Str("true"))
    })
}

/// One source's folded streams, per metric.
#[derive(Default)]
pub(crate) struct Folds {
    pub(super) metrics: Vec<Overflow>,
    /// Streams held in all the source's tables.
    pub(super) streams: usize,
}

/// A source's overflow of one metric.
pub(crate) struct Overflow {
    pub(super) metric: u32,
    /// Its overflow series.
    pub(super) series: u32,
    /// Folded streams by the hash of their source, metric and attributes.
    streams: IdMap<Folded>,
    /// Points folded (the `higgsmeter_collector_overflow_points_total` counter).
    pub(super) points: u64,
}

/// What a folded stream keeps between its points.
struct Folded {
    start: u64,
    time: u64,
    last_seen: u64,
    value: FoldedValue,
}

enum FoldedValue {
    Number(f64),
    Histogram(Hist),
}

/// Why a source's new series folds, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quota {
    /// `max_series_per_source_metric`.
    PerMetric,
    /// `max_series_per_source`.
    PerSource,
    /// The series budget (`memory_limit_mib` or `max_series`).
    Budget,
    /// The point is an overflow series' already.
    Marked,
}

impl Quota {
    fn describe(self, store: &Store) -> String {
        let c = &store.config;
        match self {
            Quota::PerMetric => format!(
                "it holds {} series of the metric (max_series_per_source_metric)",
                c.max_series_per_source_metric
            ),
            Quota::PerSource => format!(
                "it holds {} series (max_series_per_source)",
                c.max_series_per_source
            ),
            Quota::Budget => format!(
                "the collector's series budget ({} series) is spent",
                store.budget
            ),
            Quota::Marked => "its points are marked otel.metric.overflow".to_owned(),
        }
    }
}

impl Source {
    /// Its folded streams (a poisoned lock is taken over: every update leaves the
    /// table whole before anything that can panic).
    pub(super) fn folds(&self) -> MutexGuard<'_, Folds> {
        self.folds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its folded streams, under the store's write lock.
    pub(super) fn folds_mut(&mut self) -> &mut Folds {
        self.folds.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A new, empty fold table's lock.
pub(super) fn new_folds() -> Mutex<Folds> {
    Mutex::new(Folds::default())
}

impl Store {
    /// Series the budget counts as used: per-source and overflow series, fleet entries,
    /// and folded streams at [`FOLDED_PER_SERIES`] a series.
    pub(super) fn budget_used(&self) -> usize {
        let folded = self.folded.load(Ordering::Relaxed) / FOLDED_PER_SERIES;
        self.series_held + self.fleet.len() + usize::try_from(folded).unwrap_or(usize::MAX)
    }

    /// Whether a new series of `metric` from `source` must fold, and why: its source's
    /// quotas, then (past its reserve) the budget. `None`: it may be created.
    pub(super) fn over_quota(&self, source: u32, metric: u32) -> Option<Quota> {
        let src = self.sources[source as usize].as_ref()?;
        let c = &self.config;
        if src.limited {
            let of_metric = src.per_metric.get(&metric).copied().unwrap_or(0);
            if of_metric as usize >= c.max_series_per_source_metric {
                return Some(Quota::PerMetric);
            }
            if src.series >= c.max_series_per_source {
                return Some(Quota::PerSource);
            }
            if src.series < c.reserved_series_per_source {
                return None;
            }
        }
        (self.budget_used() + self.reserve_outstanding >= self.budget).then_some(Quota::Budget)
    }

    /// Whether `source` already folds streams of `metric`, and `hash` is one of them.
    /// `(overflowing, folded)`.
    pub(super) fn folded(&self, source: u32, metric: u32, hash: u64) -> (bool, bool) {
        let Some(src) = self.sources[source as usize].as_ref() else {
            return (false, false);
        };
        let folds = src.folds();
        match folds.metrics.iter().find(|o| o.metric == metric) {
            Some(o) => (true, o.streams.contains_key(&hash)),
            None => (false, false),
        }
    }

    /// The overflow series of `metric` for `source`, created (and the start of its
    /// overflow logged) when it has none.
    pub(super) fn overflow_series(
        &mut self,
        source: u32,
        metric: u32,
        name: super::NameIx,
        bounds: Option<&[f64]>,
        now: u64,
        why: Quota,
    ) -> Result<u32, (RefusalReason, String)> {
        if let Some(src) = self.sources[source as usize].as_mut()
            && let Some(o) = src.folds_mut().metrics.iter().find(|o| o.metric == metric)
        {
            return Ok(o.series);
        }
        let attrs = [Kv {
            key: OVERFLOW_ATTR,
            val: Val::Str("true"),
        }];
        let id = match self.find_series(source, metric, &attrs) {
            Some(id) => id,
            None => self.create_series(source, metric, name, &attrs, bounds, now, true)?,
        };
        let why = why.describe(self);
        let metric_name = self.metrics[metric as usize].prom_name.clone();
        let Some(src) = self.sources[source as usize].as_mut() else {
            return Err((RefusalReason::Invalid, "source vanished".to_owned()));
        };
        tracing::warn!(
            source = %render_labels(&src.labels),
            metric = %metric_name,
            "a source's new series of `{metric_name}` fold into its overflow series \
             (otel_metric_overflow=\"true\"): {why}; totals stay exact, its label detail \
             is lost. A label with unbounded values (a request id?) is the usual cause."
        );
        src.folds_mut().metrics.push(Overflow {
            metric,
            series: id,
            streams: IdMap::default(),
            points: 0,
        });
        Ok(id)
    }

    /// The overflow series `id` restored from a checkpoint (its streams follow).
    pub(super) fn restored_overflow(&mut self, source: u32, metric: u32, id: u32) {
        if let Some(src) = self.sources[source as usize].as_mut() {
            let folds = src.folds_mut();
            if !folds.metrics.iter().any(|o| o.metric == metric) {
                folds.metrics.push(Overflow {
                    metric,
                    series: id,
                    streams: IdMap::default(),
                    points: 0,
                });
            }
        }
    }

    /// A folded stream restored from a checkpoint: `(start, time, value, histogram)`
    /// as it was last. `false` when its source has no overflow of `metric` (left out).
    pub(super) fn restore_folded(
        &mut self,
        source: u32,
        metric: u32,
        key: u64,
        (start, time, value, hist): (u64, u64, f64, Option<Hist>),
        last_seen: u64,
    ) -> bool {
        let Some(src) = self.sources[source as usize].as_mut() else {
            return false;
        };
        let folds = src.folds_mut();
        let Some(o) = folds.metrics.iter_mut().find(|o| o.metric == metric) else {
            return false;
        };
        let value = match hist {
            Some(h) => FoldedValue::Histogram(h),
            None => FoldedValue::Number(value),
        };
        let folded = Folded {
            start,
            time,
            last_seen,
            value,
        };
        if o.streams.insert(key, folded).is_none() {
            folds.streams += 1;
            self.folded.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Copies `src`'s folded streams into a checkpoint's copy (`source`: its index
    /// there). Under the write lock.
    pub(super) fn copy_folded(
        &self,
        src: &Source,
        source: u32,
        now: u64,
        out: &mut Vec<FoldedCopy>,
        hists: &mut Vec<u8>,
    ) {
        let folds = src.folds();
        for o in &folds.metrics {
            for (&key, f) in &o.streams {
                let (value, hist) = match &f.value {
                    FoldedValue::Number(v) => (*v, None),
                    FoldedValue::Histogram(h) => (
                        0.0,
                        Some((h.bounds.clone(), StoreCopy::copy_hist(hists, h))),
                    ),
                };
                out.push(FoldedCopy {
                    source,
                    metric: o.metric,
                    key,
                    start: f.start,
                    time: f.time,
                    age: now.saturating_sub(f.last_seen),
                    value,
                    hist,
                });
            }
        }
    }

    /// Folds a number point of stream `hash` into its source's overflow series of
    /// `metric` (created before). Runs under the read lock.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fold_number(
        &self,
        source: u32,
        metric: u32,
        hash: u64,
        delta: bool,
        (start, time, v): (u64, u64, f64),
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(src) = self.sources[source as usize].as_ref() else {
            return;
        };
        let mut folds = src.folds();
        let Some((o, first)) = self.stream(&mut folds, src, metric, hash, now, out) else {
            return;
        };
        let Some(f) = o.streams.get_mut(&hash) else {
            return;
        };
        let Some(baseline) =
            self.admit_folded(f, metric, source, first, delta, (start, time), now, out)
        else {
            return;
        };
        let m = &self.metrics[metric as usize];
        let FoldedValue::Number(last) = &mut f.value else {
            return;
        };
        let change = match m.kind {
            MetricKind::Counter => {
                let p = Point {
                    prev_start: f.start,
                    start,
                    delta,
                    baseline,
                };
                Change::Add(accumulate::counter(last, p, v))
            }
            MetricKind::Gauge if delta => Change::Add(v),
            MetricKind::Gauge if m.gauge_agg == GaugeAggregation::Sum => {
                // A gauge is its current value: a new stream adds all of it.
                let inc = if first { v } else { v - *last };
                *last = v;
                Change::Add(inc)
            }
            _ => Change::Set(v),
        };
        f.start = start;
        f.time = f.time.max(time);
        o.points += 1;
        let Some(series) = self.series[o.series as usize].as_ref() else {
            return;
        };
        let mut state = series.state();
        let s = &mut *state;
        s.last_seen = s.last_seen.max(now);
        s.time = s.time.max(time);
        if s.fresh {
            s.fresh = false;
            s.start = start;
        }
        match (&mut s.value, change) {
            (Value::Counter { value }, Change::Add(inc)) => {
                *value += inc;
                if series.counted {
                    self.fleet[series.fleet as usize].add(inc);
                }
            }
            (Value::Gauge { value, updated }, change) => {
                match change {
                    Change::Add(inc) => *value += inc,
                    Change::Set(v) => *value = v,
                }
                *updated = now;
            }
            _ => {}
        }
    }

    /// Folds a histogram point (checked by [`Store::histogram_valid`]) of stream `hash`
    /// into its source's overflow series of `metric`. Runs under the read lock.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fold_histogram(
        &self,
        source: u32,
        metric: u32,
        hash: u64,
        delta: bool,
        p: &HistPoint<'_>,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(src) = self.sources[source as usize].as_ref() else {
            return;
        };
        let mut folds = src.folds();
        let Some(series_id) = folds
            .metrics
            .iter()
            .find(|o| o.metric == metric)
            .map(|o| o.series)
        else {
            return;
        };
        let Some(series) = self.series[series_id as usize].as_ref() else {
            return;
        };
        let bounds = &*p.bounds;
        {
            let state = series.state();
            let Value::Histogram(h) = &state.value else {
                return;
            };
            if *h.bounds != *bounds {
                drop(state);
                let (reason, msg) = self.bounds_refusal(series.fleet, metric);
                out.refuse(reason, 1, || msg);
                return;
            }
        }
        let Some((o, first)) = self.stream(&mut folds, src, metric, hash, now, out) else {
            return;
        };
        let Some(f) = o.streams.get_mut(&hash) else {
            return;
        };
        let Some(baseline) =
            self.admit_folded(f, metric, source, first, delta, (p.start, p.time), now, out)
        else {
            return;
        };
        if first {
            f.value = FoldedValue::Histogram(Hist::empty(bounds));
        }
        let FoldedValue::Histogram(last) = &mut f.value else {
            return;
        };
        if *last.bounds != *bounds {
            // The stream changed its bounds: it starts over as a new stream would.
            *last = Hist::empty(bounds);
        }
        let single = [p.count];
        let counts: &[u64] = if p.counts.is_empty() {
            &single
        } else {
            &p.counts
        };
        let mut added = Hist::empty(bounds);
        let point = Point {
            prev_start: f.start,
            start: p.start,
            delta,
            baseline,
        };
        accumulate::histogram(
            last,
            &mut added,
            point,
            counts,
            p.count,
            p.sum.unwrap_or(0.0),
        );
        f.start = p.start;
        f.time = f.time.max(p.time);
        o.points += 1;
        // The series' state, then its fleet entry's: the one lock order.
        let mut state = series.state();
        let s = &mut *state;
        s.last_seen = s.last_seen.max(now);
        s.time = s.time.max(p.time);
        if s.fresh {
            s.fresh = false;
            s.start = p.start;
        }
        let Value::Histogram(h) = &mut s.value else {
            return;
        };
        h.add(&added.counts, added.count, added.sum);
        if series.counted
            && let FleetRead::Histogram(mut fleet) = self.fleet[series.fleet as usize].value()
            && *fleet.bounds == *bounds
        {
            fleet.add(&added.counts, added.count, added.sum);
        }
    }

    /// The folded stream `hash` of `metric` in `folds` (added when new, unless its
    /// source is at its fold quota: refused), with whether it is new.
    fn stream<'f>(
        &self,
        folds: &'f mut Folds,
        src: &Source,
        metric: u32,
        hash: u64,
        now: u64,
        out: &mut Outcome,
    ) -> Option<(&'f mut Overflow, bool)> {
        let cap = self
            .config
            .max_series_per_source
            .saturating_mul(FOLDED_PER_SOURCE_QUOTA);
        let Folds { metrics, streams } = folds;
        let o = metrics.iter_mut().find(|o| o.metric == metric)?;
        let first = !o.streams.contains_key(&hash);
        if first {
            if *streams >= cap {
                let name = &self.metrics[metric as usize].prom_name;
                out.refuse(RefusalReason::Cardinality, 1, || {
                    format!(
                        "metric `{name}`: source {{{}}} has {cap} streams folded into overflow \
                         series, the most one source may (8 x max_series_per_source); its new \
                         streams are refused until silent ones are forgotten (forget_after)",
                        render_labels(&src.labels)
                    )
                });
                return None;
            }
            *streams += 1;
            self.folded.fetch_add(1, Ordering::Relaxed);
        }
        let f = o.streams.entry(hash).or_insert(Folded {
            start: 0,
            time: 0,
            last_seen: now,
            value: FoldedValue::Number(0.0),
        });
        f.last_seen = f.last_seen.max(now);
        Some((o, first))
    }

    /// Whether a folded stream's point is new data (as [`Store::admit`] for a series):
    /// `Some(baseline)` when it is.
    #[allow(clippy::too_many_arguments)]
    fn admit_folded(
        &self,
        f: &Folded,
        metric: u32,
        source: u32,
        first: bool,
        delta: bool,
        (start, time): (u64, u64),
        now: u64,
        out: &mut Outcome,
    ) -> Option<bool> {
        let stale = if delta {
            !first && time != 0 && time == f.time && start == f.start
        } else {
            time != 0 && f.time != 0 && time < f.time
        };
        if stale {
            return None;
        }
        if !delta && start != 0 && f.start != 0 && start < f.start {
            let name = &self.metrics[metric as usize].otel_name;
            out.refuse(RefusalReason::OutOfOrder, 1, || {
                format!(
                    "metric `{name}`: a cumulative point started before its stream's current start \
                     (a late point of an earlier incarnation)"
                )
            });
            return None;
        }
        Some(first && self.is_baseline(source, delta, start, now))
    }

    /// Forgets folded streams silent for longer than `horizon`, and the tables of
    /// overflow series that are gone. Under the write lock.
    pub(super) fn forget_folded(&mut self, now: u64, horizon: u64) {
        let mut gone = 0u64;
        for id in 0..self.sources.len() {
            let Some(src) = self.sources[id].as_mut() else {
                continue;
            };
            let folds = src.folds.get_mut().unwrap_or_else(PoisonError::into_inner);
            if folds.metrics.is_empty() {
                continue;
            }
            let series = &self.series;
            folds.metrics.retain(|o| {
                series[o.series as usize]
                    .as_ref()
                    .is_some_and(|s| s.overflow && s.source == id as u32)
            });
            let mut held = 0;
            for o in &mut folds.metrics {
                o.streams
                    .retain(|_, f| now.saturating_sub(f.last_seen) <= horizon);
                held += o.streams.len();
            }
            gone += (folds.streams - held) as u64;
            folds.streams = held;
        }
        self.folded.fetch_sub(gone, Ordering::Relaxed);
    }

    /// The metrics `src` folds, with the points folded: `(exposition name, points)`.
    pub(crate) fn overflow_of(&self, src: &Source) -> Vec<(String, u64)> {
        src.folds()
            .metrics
            .iter()
            .map(|o| (self.metrics[o.metric as usize].prom_name.clone(), o.points))
            .collect()
    }

    /// Each overflowing source's points folded, per metric.
    pub(crate) fn overflow_counts(&self) -> Vec<OverflowCount<'_>> {
        let mut out = Vec::new();
        for src in self.sources.iter().flatten() {
            let folds = src.folds();
            for o in &folds.metrics {
                let name = self.metrics[o.metric as usize].prom_name.as_str();
                out.push((src.labels.as_slice(), name, o.points));
            }
        }
        out
    }
}

/// Points folded into one source's overflow series of one metric: `(the source's
/// labels, the metric's exposition name, points)`.
pub(crate) type OverflowCount<'s> = (&'s [(String, String)], &'s str, u64);

/// What a folded point does to its overflow series.
enum Change {
    /// Adds to it (counters, summed gauges, delta gauges).
    Add(f64),
    /// Sets it (gauges of other rules: the last folded point's value).
    Set(f64),
}
