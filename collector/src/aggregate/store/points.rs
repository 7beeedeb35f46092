//! Applying points: checking a number or histogram point, admitting it into its series
//! (stale, out of order, first), and accumulating it into the series and its fleet
//! entry. Runs under the store's read lock: each series' state and each fleet
//! histogram is behind its own mutex, fleet counters are atomic (ADR 0010).

use std::sync::atomic::Ordering;

use super::super::wire::{HistPoint, NumberPoint};
use super::super::{MetricKind, RefusalReason};
use super::accumulate::{self, Point};
use super::{FLAG_NO_RECORDED_VALUE, FleetRead, Outcome, SeriesState, Store, Value};

impl Store {
    pub(super) fn bounds_refusal(&self, fleet: u32, metric: u32) -> (RefusalReason, String) {
        let f = &self.fleet[fleet as usize];
        let name = &self.metrics[metric as usize].otel_name;
        if !f.warned_bounds.swap(true, Ordering::Relaxed) {
            tracing::warn!(metric = %name, series = %f.labels, "histogram points with bucket bounds that differ from the series' bounds are refused");
        }
        (
            RefusalReason::HistogramBounds,
            format!(
                "histogram `{name}` {{{}}}: bucket bounds differ from the bounds this series already has; refused, never mixed",
                f.labels
            ),
        )
    }

    /// Whether a point for a series (its state `s`, of `metric`) is new data, marking
    /// the series seen. A cumulative point older than the series' last one (a retried
    /// or reordered export) changes nothing, nor does a delta point repeating the last;
    /// a cumulative point that started before the series' current start is refused as
    /// out of order. `Some(first)` when admitted, `first` when it is the series' first
    /// point.
    fn admit(
        &self,
        s: &mut SeriesState,
        metric: u32,
        delta: bool,
        (start, time): (u64, u64),
        now: u64,
        out: &mut Outcome,
    ) -> Option<bool> {
        s.last_seen = s.last_seen.max(now);
        let stale = if delta {
            time != 0 && time == s.time && start == s.start
        } else {
            time != 0 && s.time != 0 && time < s.time
        };
        if stale {
            return None;
        }
        if !delta && start != 0 && s.start != 0 && start < s.start {
            let name = &self.metrics[metric as usize].otel_name;
            out.refuse(RefusalReason::OutOfOrder, 1, || {
                format!(
                    "metric `{name}`: a cumulative point started before the series' current start: a late point of an \
                     earlier incarnation, or several processes sharing one resource (give each its own service.instance.id)"
                )
            });
            return None;
        }
        Some(s.fresh)
    }

    /// Whether the first point of a series of `source` is a baseline: a cumulative
    /// series, new here, of a source first seen just now, that started before the
    /// state's origin. What it counted before this collector (or its restored state)
    /// knew of it was never part of the fleet; adding it now would show a jump.
    pub(super) fn is_baseline(&self, source: u32, delta: bool, start: u64, now: u64) -> bool {
        !delta
            && start != 0
            && start < self.baseline_before
            && self.sources[source as usize]
                .as_ref()
                .is_some_and(|src| now <= src.baseline_until)
    }

    /// The value of a number point of `metric`, or why it is refused (`None`, counted
    /// in `out`; also `None`, uncounted, for a point without a recorded value).
    pub(crate) fn number_value(
        &self,
        metric: u32,
        kind: MetricKind,
        p: &NumberPoint<'_>,
        out: &mut Outcome,
    ) -> Option<f64> {
        if p.flags & FLAG_NO_RECORDED_VALUE != 0 {
            return None;
        }
        let name = || &self.metrics[metric as usize].otel_name;
        let Some(v) = p.value else {
            out.refuse(RefusalReason::Invalid, 1, || {
                format!("metric `{}`: a data point has no value", name())
            });
            return None;
        };
        if !v.is_finite() {
            out.refuse(RefusalReason::NonFinite, 1, || {
                format!("metric `{}`: value {v} is not a finite number", name())
            });
            return None;
        }
        if kind == MetricKind::Counter && v < 0.0 {
            out.refuse(RefusalReason::NegativeCounter, 1, || {
                format!("metric `{}`: monotonic sum value {v} is negative", name())
            });
            return None;
        }
        Some(v)
    }

    /// Applies a number point (its start, time and value `v`) to series `id` of
    /// `source` and to its fleet entry. Runs under the read lock.
    pub(crate) fn number_point(
        &self,
        source: u32,
        id: u32,
        delta: bool,
        (start, time, v): (u64, u64, f64),
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(series) = self.series[id as usize].as_ref() else {
            return;
        };
        let mut state = series.state();
        let s = &mut *state;
        let Some(first) = self.admit(s, series.metric, delta, (start, time), now, out) else {
            return;
        };
        let baseline = first && self.is_baseline(source, delta, start, now);
        s.fresh = false;
        let increment = match &mut s.value {
            Value::Counter { value } => Some(accumulate::counter(
                value,
                Point {
                    prev_start: s.start,
                    start,
                    delta,
                    baseline,
                },
                v,
            )),
            Value::Gauge { value, updated } => {
                if delta {
                    *value += v;
                } else {
                    *value = v;
                }
                *updated = now;
                None
            }
            Value::Histogram(_) => None,
        };
        s.start = start;
        s.time = time;
        if !series.counted {
            return;
        }
        if let Some(inc) = increment {
            self.fleet[series.fleet as usize].add(inc);
        }
    }

    /// Whether a histogram point of `metric` is well-formed (refusals counted in
    /// `out`; a point without a recorded value is skipped, uncounted).
    pub(crate) fn histogram_valid(
        &self,
        metric: u32,
        p: &HistPoint<'_>,
        out: &mut Outcome,
    ) -> bool {
        if p.flags & FLAG_NO_RECORDED_VALUE != 0 {
            return false;
        }
        let name = &self.metrics[metric as usize].otel_name;
        let bounds = &p.bounds;
        let buckets_ok = if bounds.is_empty() {
            p.counts.len() <= 1
        } else {
            p.counts.len() == bounds.len() + 1
        };
        if !buckets_ok
            || bounds.windows(2).any(|w| w[0] >= w[1])
            || bounds.iter().any(|b| !b.is_finite())
        {
            out.refuse(RefusalReason::Invalid, 1, || {
                format!(
                    "histogram `{name}`: {} bucket counts for {} bounds (needs bounds + 1), or bounds not finite and increasing",
                    p.counts.len(),
                    bounds.len()
                )
            });
            return false;
        }
        if !p.counts.is_empty()
            && p.counts.iter().fold(0u64, |a, b| a.saturating_add(*b)) != p.count
        {
            out.refuse(RefusalReason::Invalid, 1, || {
                format!(
                    "histogram `{name}`: bucket counts do not add up to the count {}",
                    p.count
                )
            });
            return false;
        }
        let sum = p.sum.unwrap_or(0.0);
        if !sum.is_finite() {
            out.refuse(RefusalReason::NonFinite, 1, || {
                format!("histogram `{name}`: sum {sum} is not a finite number")
            });
            return false;
        }
        true
    }

    /// Applies a histogram point, checked by [`Store::histogram_valid`], to series `id`
    /// of `source` and to its fleet entry. Runs under the read lock.
    pub(crate) fn histogram_point(
        &self,
        source: u32,
        id: u32,
        delta: bool,
        p: &HistPoint<'_>,
        now: u64,
        out: &mut Outcome,
    ) {
        let Some(series) = self.series[id as usize].as_ref() else {
            return;
        };
        let single = [p.count];
        let counts: &[u64] = if p.counts.is_empty() {
            &single
        } else {
            &p.counts
        };
        let sum = p.sum.unwrap_or(0.0);
        // The series' state, then its fleet entry's: the one lock order.
        let mut state = series.state();
        let FleetRead::Histogram(mut fleet_value) = self.fleet[series.fleet as usize].value()
        else {
            return;
        };
        let s = &mut *state;
        let bounds = &*p.bounds;
        let same_bounds = matches!(
            &s.value,
            Value::Histogram(h) if *h.bounds == *bounds && *fleet_value.bounds == *bounds
        );
        if !same_bounds {
            drop(fleet_value);
            drop(state);
            let (reason, msg) = self.bounds_refusal(series.fleet, series.metric);
            out.refuse(reason, 1, || msg);
            return;
        }
        let (start, time) = (p.start, p.time);
        let Some(first) = self.admit(s, series.metric, delta, (start, time), now, out) else {
            return;
        };
        let baseline = first && self.is_baseline(source, delta, start, now);
        s.fresh = false;
        let Value::Histogram(h) = &mut s.value else {
            return;
        };
        let fleet = &mut *fleet_value;
        // A forwarded source's series accumulate as ever; the fleet's entry does not.
        let mut uncounted;
        let f = if series.counted {
            fleet
        } else {
            uncounted = fleet.clone();
            &mut uncounted
        };
        accumulate::histogram(
            h,
            f,
            Point {
                prev_start: s.start,
                start,
                delta,
                baseline,
            },
            counts,
            p.count,
            sum,
        );
        s.start = start;
        s.time = time;
    }
}
