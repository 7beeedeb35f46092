//! The store's limits (ADR 0020): each source's quotas (`max_series_per_source_metric`,
//! `max_series_per_source`) and reserve (`reserved_series_per_source`) within the
//! series budget (`memory_limit_mib` or `max_series`); making room at the budget by
//! forgetting what is silent past `stale_after`; and forgetting what is silent past
//! `forget_after`.
//!
//! A series past a quota is never refused: its points fold into the source's overflow
//! series ([`overflow`](super::overflow)). What is refused is a new source the budget
//! has no room for (its reserve), and a stream past its source's fold quota.

use super::super::RefusalReason;
use super::{Quota, Store};

/// Eviction runs at most once a second: under a flood of new series or sources the
/// scan must not run per point.
const EVICTION_EVERY: u64 = 1_000_000_000;

impl Store {
    /// Whether the budget is spent (with the reserves still owed, and `extra` more).
    fn budget_spent(&self, extra: usize) -> bool {
        self.budget_used() + self.reserve_outstanding + extra >= self.budget
    }

    /// At the budget, forgets series (and sources without series) silent past
    /// `stale_after`, at most once a second: they are kept only for reset safety, and
    /// make room before anything live folds or a new source is refused.
    fn make_room(&mut self, now: u64) {
        if self.last_eviction != 0 && now.saturating_sub(self.last_eviction) < EVICTION_EVERY {
            return;
        }
        self.last_eviction = now.max(1);
        let forgotten = self.forget_silent(now, self.stale_after);
        if forgotten > 0 {
            tracing::warn!(
                forgotten,
                "series budget reached: forgot stale series early to make room"
            );
        }
    }

    /// Whether a new series of `metric` from `source` must fold into its overflow
    /// series, and why (`None`: it may be created). At the budget, room is made first.
    pub(super) fn must_fold(&mut self, source: u32, metric: u32, now: u64) -> Option<Quota> {
        match self.over_quota(source, metric) {
            Some(Quota::Budget) => {
                self.make_room(now);
                self.over_quota(source, metric)
            }
            other => other,
        }
    }

    /// Whether a new source fits: a limited source needs room in the budget for its
    /// reserve (room is made first); else it is refused, with the message.
    pub(super) fn admit_source(
        &mut self,
        limited: bool,
        now: u64,
    ) -> Result<(), (RefusalReason, String)> {
        let reserve = self.config.reserved_series_per_source;
        if !limited || !self.budget_spent(reserve.saturating_sub(1)) {
            return Ok(());
        }
        self.make_room(now);
        if !self.budget_spent(reserve.saturating_sub(1)) {
            return Ok(());
        }
        let held = self.sources.iter().flatten().count();
        let how = match self.config.max_series {
            Some(_) => "max_series".to_owned(),
            None => format!("memory_limit_mib = {}", self.config.memory_limit_mib),
        };
        Err((
            RefusalReason::Cardinality,
            format!(
                "new source refused: the collector holds {held} sources and its series budget \
                 ({} series, {how}) has no room for another source's reserve of {reserve} \
                 series; raise processors.higgsmeter.memory_limit_mib (or wait for silent \
                 sources to be forgotten)",
                self.budget
            ),
        ))
    }

    /// What a new series of `source` takes from its reserve: call after its count grew.
    pub(super) fn series_added(&mut self, source: u32, metric: u32) {
        let reserve = self.config.reserved_series_per_source;
        if let Some(src) = self.sources[source as usize].as_mut() {
            src.series += 1;
            *src.per_metric.entry(metric).or_insert(0) += 1;
            if src.limited && src.series <= reserve {
                self.reserve_outstanding = self.reserve_outstanding.saturating_sub(1);
            }
        }
    }

    /// What a forgotten series of `source` gives back to its reserve.
    fn series_removed(&mut self, source: u32, metric: u32) {
        let reserve = self.config.reserved_series_per_source;
        if let Some(src) = self.sources[source as usize].as_mut() {
            if src.limited && src.series <= reserve {
                self.reserve_outstanding += 1;
            }
            src.series -= 1;
            if let std::collections::hash_map::Entry::Occupied(mut n) = src.per_metric.entry(metric)
            {
                *n.get_mut() -= 1;
                if *n.get() == 0 {
                    n.remove();
                }
            }
        }
    }

    /// Forgets series (and sources) silent for longer than `forget_after`. Counted
    /// contributions stay in the fleet aggregates.
    pub(crate) fn sweep(&mut self, now: u64) {
        self.forget_silent(now, self.forget_after);
    }

    /// Forgets series, folded streams and then sources without series silent for
    /// longer than `horizon`; returns how many series went.
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
                self.series_removed(s.source, s.metric);
                if let Some(src) = self.sources[s.source as usize].as_mut() {
                    src.index.remove(s.hash, id as u32);
                }
                self.free_series.push(id as u32);
                self.layout = self.layout.wrapping_add(1);
                forgotten += 1;
            }
        }
        self.forget_folded(now, horizon);
        // Sets only the store holds (one a checkpoint's copy still holds goes at the
        // next sweep).
        self.attr_sets
            .retain(|set| std::sync::Arc::strong_count(set) > 1);
        let reserve = self.config.reserved_series_per_source;
        for id in 0..self.sources.len() {
            let forget = match &self.sources[id] {
                Some(s) => s.series == 0 && now.saturating_sub(s.last_seen()) > horizon,
                None => false,
            };
            if forget && let Some(s) = self.sources[id].take() {
                if s.awaited {
                    self.awaiting = self.awaiting.saturating_sub(1);
                }
                if s.limited {
                    self.reserve_outstanding = self.reserve_outstanding.saturating_sub(reserve);
                }
                self.source_by_key.remove(&s.key);
                self.free_sources.push(id as u32);
            }
        }
        forgotten
    }
}
