//! The store's limits: the cardinality caps (`max_series_per_metric`, `max_series`),
//! making room at them by forgetting series silent past `stale_after`, and forgetting
//! what is silent past `forget_after`.

use super::super::RefusalReason;
use super::Store;

impl Store {
    /// Whether one more series of `metric` fits: at a limit, series silent past
    /// `stale_after` (kept only for reset safety) are forgotten first, at most once a
    /// second; then a series that still does not fit is refused with the limit's name.
    pub(super) fn check_limits(
        &mut self,
        metric: u32,
        now: u64,
    ) -> Result<(), (RefusalReason, String)> {
        let full = |st: &Store| {
            st.metrics[metric as usize].series >= st.config.max_series_per_metric
                || st.series_held + st.fleet.len() >= st.config.max_series
        };
        // At most once a second: under a flood of new series the scan must not run per point.
        if full(self)
            && (self.last_eviction == 0 || now.saturating_sub(self.last_eviction) >= 1_000_000_000)
        {
            self.last_eviction = now.max(1);
            // Series silent past `stale_after` are kept only for reset safety; at the
            // limit they make room before anything live is refused.
            let forgotten = self.forget_silent(now, self.stale_after);
            if forgotten > 0 {
                tracing::warn!(
                    forgotten,
                    "series limit reached: forgot stale series early to make room"
                );
            }
        }
        let m = &self.metrics[metric as usize];
        if m.series >= self.config.max_series_per_metric {
            return Err((
                RefusalReason::Cardinality,
                format!(
                    "metric `{}` has {} series, the max_series_per_metric limit",
                    m.otel_name, m.series
                ),
            ));
        }
        if self.series_held + self.fleet.len() >= self.config.max_series {
            return Err((
                RefusalReason::Cardinality,
                format!(
                    "the collector holds {} series, the max_series limit",
                    self.config.max_series
                ),
            ));
        }
        Ok(())
    }

    /// Forgets series (and sources) silent for longer than `forget_after`. Counted
    /// contributions stay in the fleet aggregates.
    pub(crate) fn sweep(&mut self, now: u64) {
        self.forget_silent(now, self.forget_after);
    }

    /// Forgets series (and then sources) silent for longer than `horizon`; returns how
    /// many series went.
    fn forget_silent(&mut self, now: u64, horizon: u64) -> usize {
        let mut forgotten = 0;
        for id in 0..self.series.len() {
            let forget = match &self.series[id] {
                Some(s) => now.saturating_sub(s.last_seen()) > horizon,
                None => false,
            };
            if !forget {
                continue;
            }
            if let Some(s) = self.series[id].take() {
                self.series_held -= 1;
                self.metrics[s.metric as usize].series -= 1;
                if let Some(src) = self.sources[s.source as usize].as_mut() {
                    src.series -= 1;
                    src.index.remove(s.hash, id as u32);
                }
                self.free_series.push(id as u32);
                self.layout = self.layout.wrapping_add(1);
                forgotten += 1;
            }
        }
        // Sets only the store holds (one a checkpoint's copy still holds goes at the
        // next sweep).
        self.attr_sets
            .retain(|set| std::sync::Arc::strong_count(set) > 1);
        for id in 0..self.sources.len() {
            let forget = match &self.sources[id] {
                Some(s) => s.series == 0 && now.saturating_sub(s.last_seen()) > self.forget_after,
                None => false,
            };
            if forget && let Some(s) = self.sources[id].take() {
                if s.awaited {
                    self.awaiting = self.awaiting.saturating_sub(1);
                }
                self.source_by_key.remove(&s.key);
                self.free_sources.push(id as u32);
            }
        }
        forgotten
    }
}
