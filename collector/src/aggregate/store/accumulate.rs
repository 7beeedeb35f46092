//! Reset-safe accumulation, as pure functions: what one point adds to the fleet, given
//! the series' previous point. A cumulative point adds what the series grew by since
//! its previous point, all of its value when the source restarted (a new start time,
//! or a value below the previous), nothing when it is a baseline; a delta point adds
//! itself. So a fleet accumulator never decreases and counts each increment once.

/// What is known of a point besides its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Point {
    /// The series' start time before this point (0: none yet, or unknown).
    pub(super) prev_start: u64,
    /// This point's start time (0: unknown).
    pub(super) start: u64,
    /// Delta temporality.
    pub(super) delta: bool,
    /// The series' first point, from a source whose past no fleet here counted.
    pub(super) baseline: bool,
}

impl Point {
    /// A new start time: the source restarted.
    fn new_start(self) -> bool {
        self.start != 0 && self.prev_start != 0 && self.start != self.prev_start
    }
}

/// Applies counter point `v` to the series' last value; returns what the fleet adds.
pub(super) fn counter(value: &mut f64, p: Point, v: f64) -> f64 {
    if p.baseline {
        *value = v;
        0.0
    } else if p.delta {
        *value += v;
        v
    } else {
        let restarted = p.new_start() || v < *value;
        let inc = if restarted { v } else { v - *value };
        *value = v;
        inc
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hist {
    /// Shared between a fleet entry and its series (and a checkpoint's copy).
    pub(crate) bounds: std::sync::Arc<[f64]>,
    pub(crate) counts: Box<[u64]>,
    pub(crate) count: u64,
    pub(crate) sum: f64,
}

impl Hist {
    /// Its row in a view's read model (the counts copied into the rows' buffer).
    pub(crate) fn row(&self, rows: &mut crate::views::rows::Rows) -> crate::views::rows::RowValue {
        rows.hist(&self.bounds, &self.counts, self.count, self.sum)
    }

    pub(super) fn empty(bounds: &[f64]) -> Hist {
        Hist::empty_shared(bounds.into())
    }

    /// An empty histogram over `bounds`, shared with others.
    pub(super) fn empty_shared(bounds: std::sync::Arc<[f64]>) -> Hist {
        Hist {
            counts: vec![0; bounds.len() + 1].into_boxed_slice(),
            bounds,
            count: 0,
            sum: 0.0,
        }
    }

    pub(super) fn add(&mut self, counts: &[u64], count: u64, sum: f64) {
        for (a, b) in self.counts.iter_mut().zip(counts) {
            *a = a.saturating_add(*b);
        }
        self.count = self.count.saturating_add(count);
        self.sum += sum;
    }
}

/// Applies a histogram point (`counts` per bucket, `count`, `sum`) to the series' last
/// histogram `series`, adding what it contributes to the fleet's `fleet`. Bounds are
/// equal (checked before).
pub(super) fn histogram(
    series: &mut Hist,
    fleet: &mut Hist,
    p: Point,
    counts: &[u64],
    count: u64,
    sum: f64,
) {
    let restarted = p.delta
        || p.new_start()
        || count < series.count
        || counts.iter().zip(&series.counts).any(|(a, b)| a < b);
    if p.baseline {
        // Counted by nobody here so far, and not counted now: only what it adds.
    } else if restarted {
        // The whole point counts (a delta, or a restarted source's new histogram).
        fleet.add(counts, count, sum);
    } else {
        for ((fc, new), old) in fleet.counts.iter_mut().zip(counts).zip(&series.counts) {
            *fc = fc.saturating_add(new - old);
        }
        fleet.count = fleet.count.saturating_add(count - series.count);
        fleet.sum += sum - series.sum;
    }
    if p.delta {
        series.add(counts, count, sum);
    } else {
        series.counts.copy_from_slice(counts);
        series.count = count;
        series.sum = sum;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// One source's points: (restart before it, amount it adds).
    fn incarnations() -> impl Strategy<Value = Vec<(bool, u32)>> {
        prop::collection::vec((prop::bool::weighted(0.15), 0..1000u32), 1..60)
    }

    proptest! {
        /// A cumulative counter with restarts, retries skipped: the fleet total never
        /// decreases and equals the true sum of what the source added (after its
        /// baseline, when the first point is one).
        #[test]
        fn counters_never_decrease_and_never_double_count(
            points in incarnations(),
            baseline_first in any::<bool>(),
            delta in any::<bool>(),
        ) {
            let mut value = 0.0;
            let mut fleet = 0.0f64;
            let mut truth = 0u64;
            let (mut start, mut prev_start, mut cumulative) = (1u64, 0u64, 0u64);
            let mut first = true;
            for (restart, add) in points {
                if restart {
                    start += 1;
                    cumulative = 0;
                }
                cumulative += u64::from(add);
                let baseline = first && baseline_first && !delta;
                let v = if delta { f64::from(add) } else { cumulative as f64 };
                let p = Point { prev_start, start, delta, baseline };
                let before = fleet;
                fleet += counter(&mut value, p, v);
                prop_assert!(fleet >= before);
                if !baseline {
                    truth += u64::from(add);
                } else {
                    // The baseline's value is what was counted before: not ours.
                }
                prev_start = start;
                first = false;
                prop_assert_eq!(fleet, truth as f64);
            }
        }

        /// Histograms: every bucket of the fleet never decreases and equals the true
        /// sum of the observations the source added; count and sum alike.
        #[test]
        fn histograms_never_decrease_and_never_double_count(
            steps in prop::collection::vec((prop::bool::weighted(0.15), prop::collection::vec(0..50u64, 3)), 1..40),
            delta in any::<bool>(),
        ) {
            let bounds = [1.0, 2.0];
            let mut series = Hist::empty(&bounds);
            let mut fleet = Hist::empty(&bounds);
            let mut truth = [0u64; 3];
            let mut cumulative = [0u64; 3];
            let (mut start, mut prev_start) = (1u64, 0u64);
            for (restart, add) in steps {
                if restart {
                    start += 1;
                    cumulative = [0; 3];
                }
                for i in 0..3 {
                    cumulative[i] += add[i];
                    truth[i] += add[i];
                }
                let point: Vec<u64> = if delta { add.clone() } else { cumulative.to_vec() };
                let count = point.iter().sum();
                let before = fleet.counts.clone();
                histogram(
                    &mut series,
                    &mut fleet,
                    Point { prev_start, start, delta, baseline: false },
                    &point,
                    count,
                    count as f64,
                );
                prev_start = start;
                for i in 0..3 {
                    prop_assert!(fleet.counts[i] >= before[i]);
                    prop_assert_eq!(fleet.counts[i], truth[i]);
                }
                prop_assert_eq!(fleet.count, truth.iter().sum::<u64>());
                prop_assert_eq!(fleet.sum, truth.iter().sum::<u64>() as f64);
            }
        }
    }
}
