//! Loading a state file into an empty store ([`Store::restore`]).

use std::sync::PoisonError;

use prost::Message as _;

use super::super::super::MetricKind;
use super::super::super::naming::render_labels;
use super::super::super::wire::{self, DataKind, Kv, MetricRef, Val};
use super::super::{Fleet, FleetValue, NameIx, Store, Value};
use super::{CheckpointError, HistState, StateFile, hist};

impl Store {
    /// Loads a checkpoint into this empty store. `now` is the monotonic time, and
    /// `elapsed` how long ago (ns) the file was written. Sources live when it was
    /// written are awaited: the views hold until each has reported again, or for at
    /// most `stale_after`. Returns how many series were restored; what the current
    /// configuration refuses (a limit, a type conflict) is left out and counted.
    pub(crate) fn restore(
        &mut self,
        state: &StateFile,
        now: u64,
        elapsed: u64,
    ) -> Result<RestoreCount, CheckpointError> {
        let at = |age: u64| now.saturating_sub(elapsed.saturating_add(age)).max(1);
        let mut count = RestoreCount::default();
        let mut metric_ids = Vec::with_capacity(state.metrics.len());
        for m in &state.metrics {
            let kind = match m.kind {
                0 => MetricKind::Counter,
                1 => MetricKind::Gauge,
                2 => MetricKind::Histogram,
                _ => return Err(CheckpointError::Decode("unknown metric kind".into())),
            };
            let data = match kind {
                MetricKind::Counter => DataKind::Sum {
                    monotonic: true,
                    delta: false,
                },
                MetricKind::Gauge => DataKind::Gauge,
                MetricKind::Histogram => DataKind::Histogram { delta: false },
            };
            let r = MetricRef {
                name: &m.name,
                description: &m.help,
                unit: &m.unit,
                kind: data,
                points: Vec::new(),
            };
            let Ok((id, _)) = self.metric_id(&r, kind) else {
                metric_ids.push(None);
                continue;
            };
            // The merged names again, in their order, so that each gets its index back.
            let mut names: Vec<Option<NameIx>> = vec![Some(0)];
            for alias in &m.aliases {
                let r = MetricRef {
                    name: alias,
                    description: &m.help,
                    unit: &m.unit,
                    kind: data,
                    points: Vec::new(),
                };
                let got = self.metric_id(&r, kind).ok();
                names.push(got.filter(|(a, _)| *a == id).map(|(_, n)| n));
            }
            metric_ids.push(Some((id, names)));
        }
        for f in &state.fleet {
            let Some(Some(&(metric, _))) = metric_ids.get(f.metric as usize).map(|m| m.as_ref())
            else {
                count.left_out += 1;
                continue;
            };
            let label_pairs: std::sync::Arc<[(String, String)]> = f
                .labels
                .iter()
                .map(|p| (p.key.clone(), p.value.clone()))
                .collect();
            let labels = render_labels(&label_pairs);
            let value = match (&f.hist, self.metrics[metric as usize].kind) {
                (Some(h), MetricKind::Histogram) => FleetValue::Histogram(hist(h)?),
                // Never below 0 and never NaN (it may have overflowed to +inf).
                (None, MetricKind::Counter) if f.counter >= 0.0 => FleetValue::Counter(f.counter),
                (None, MetricKind::Counter) => {
                    return Err(CheckpointError::Decode(format!(
                        "a fleet counter is {}",
                        f.counter
                    )));
                }
                _ => {
                    count.left_out += 1;
                    continue;
                }
            };
            if self.fleet_index.contains_key(&(metric, labels.clone())) {
                return Err(CheckpointError::Decode(
                    "a fleet series appears twice".into(),
                ));
            }
            let id = self.fleet.len() as u32;
            self.fleet.push(Fleet::new(
                metric,
                label_pairs,
                labels.as_str().into(),
                value,
            ));
            self.fleet_index.insert((metric, labels), id);
            self.layout = self.layout.wrapping_add(1);
        }
        let mut source_ids = Vec::with_capacity(state.sources.len());
        let mut raw = Vec::new();
        for s in &state.sources {
            raw.clear();
            raw.extend(s.resource.iter().map(|kv| kv.encode_to_vec()));
            let kvs = raw
                .iter()
                .map(|b| wire::key_value(b))
                .collect::<Result<Vec<Kv<'_>>, _>>()
                .map_err(|e| CheckpointError::Decode(e.to_string()))?;
            let id = self
                .find_or_add_source(&kvs, now, false)
                .map_err(|(_, msg)| CheckpointError::Decode(msg))?;
            let live = self.is_live(at(s.age), now);
            if let Some(src) = self.sources[id as usize].as_mut() {
                *src.last_seen.get_mut() = at(s.age);
                src.baseline_until = 0;
                if live && !src.awaited {
                    src.awaited = true;
                    self.awaiting += 1;
                }
            }
            source_ids.push(id);
        }
        self.hold_until = now.saturating_add(self.stale_after);
        for s in &state.series {
            let (Some(&source), Some(Some((metric, names)))) = (
                source_ids.get(s.source as usize),
                metric_ids.get(s.metric as usize),
            ) else {
                count.left_out += 1;
                continue;
            };
            let (metric, Some(Some(name))) = (*metric, names.get(s.name as usize).copied()) else {
                count.left_out += 1;
                continue;
            };
            let kvs: Vec<Kv<'_>> = s
                .attrs
                .iter()
                .map(|p| Kv {
                    key: &p.key,
                    val: Val::Str(&p.value),
                })
                .collect();
            let kind = self.metrics[metric as usize].kind;
            // Ingest keeps only finite values, and counters not below 0.
            if s.hist.is_none()
                && (!s.value.is_finite() || (kind == MetricKind::Counter && s.value < 0.0))
            {
                return Err(CheckpointError::Decode(format!(
                    "a series' value is {}",
                    s.value
                )));
            }
            let value = match (kind, &s.hist) {
                (MetricKind::Counter, None) => Value::Counter { value: s.value },
                (MetricKind::Gauge, None) => Value::Gauge {
                    value: s.value,
                    updated: at(s.updated_age),
                },
                (MetricKind::Histogram, Some(h)) => {
                    let bounds = state
                        .fleet
                        .get(s.fleet as usize)
                        .and_then(|f| f.hist.as_ref())
                        .map(|f| f.bounds.clone())
                        .ok_or_else(|| {
                            CheckpointError::Decode("a histogram without its fleet entry".into())
                        })?;
                    Value::Histogram(hist(&HistState {
                        bounds,
                        counts: h.counts.clone(),
                        count: h.count,
                        sum: h.sum,
                    })?)
                }
                _ => {
                    count.left_out += 1;
                    continue;
                }
            };
            let bounds = match &value {
                Value::Histogram(h) => Some(h.bounds.clone()),
                _ => None,
            };
            let Ok(id) = self.restore_series(source, metric, name, &kvs, bounds.as_deref(), now)
            else {
                count.left_out += 1;
                continue;
            };
            if let Some(series) = self.series[id as usize].as_mut() {
                let series = series
                    .state
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner);
                if !series.fresh {
                    return Err(CheckpointError::Decode("a series appears twice".into()));
                }
                series.fresh = false;
                series.start = s.start;
                series.time = s.time;
                series.last_seen = at(s.age);
                series.value = value;
                count.series += 1;
            }
            if self.series[id as usize]
                .as_ref()
                .is_some_and(|s| s.overflow)
            {
                self.restored_overflow(source, metric, id);
            }
        }
        for f in &state.folded {
            let (Some(&source), Some(Some((metric, _)))) = (
                source_ids.get(f.source as usize),
                metric_ids.get(f.metric as usize),
            ) else {
                count.left_out += 1;
                continue;
            };
            let hist = f.hist.as_ref().map(hist).transpose()?;
            let last = (f.start, f.time, f.value, hist);
            if !self.restore_folded(source, *metric, f.key, last, at(f.age)) {
                count.left_out += 1;
            }
        }
        count.sources = source_ids.len();
        Ok(count)
    }
}

/// What a restore brought back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestoreCount {
    /// Sources.
    pub(crate) sources: usize,
    /// Per-source series.
    pub(crate) series: usize,
    /// Entries the current configuration refuses (limits, type conflicts).
    pub(crate) left_out: usize,
}
