//! The cluster view's read model: every source's identity, current state, seconds per
//! state since it started, GPU utilisation and staleness, read under the aggregator's
//! lock ([`read`]). The history and the JSON the page reads are built from these
//! readings after the lock is released (`exporters::cluster_json`).

use std::collections::HashMap;

use super::Aggregator;
use super::store::{Store, Value, value_string};

/// One source as read from the store at one instant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SourceReading {
    /// Every resource attribute, sorted, as `key=value` joined by `\u{1f}`: tells
    /// sources apart across readings (store ids are reused after a source is forgotten).
    pub(crate) key: String,
    /// The `rank` resource attribute.
    pub(crate) rank: Option<String>,
    /// `service.name`.
    pub(crate) service_name: Option<String>,
    /// `service.instance.id`.
    pub(crate) service_instance_id: Option<String>,
    /// `host.name`.
    pub(crate) host_name: Option<String>,
    /// The `worker_current_state` code, if reported.
    pub(crate) state_code: Option<i64>,
    /// Seconds per state (summed over operations), in first-seen order.
    pub(crate) seconds_by_state: Vec<(String, f64)>,
    /// Mean `hw.gpu.utilization` (ratio 0..1) over the source's devices, if any.
    pub(crate) gpu_utilization: Option<f64>,
    /// GPUs with a utilisation reading.
    pub(crate) gpu_devices: usize,
    /// Nanoseconds since the source last pushed.
    pub(crate) since_seen: u64,
    /// Whether the source pushed within `stale_after`.
    pub(crate) live: bool,
}

/// Every source the store knows, read at `now` (the aggregator's clock, nanoseconds).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClusterReading {
    /// When the reading was taken (nanoseconds since the collector started).
    pub(crate) now: u64,
    /// Sources, ordered by rank (numerically where it is a number), then identity.
    pub(crate) sources: Vec<SourceReading>,
}

fn rank_order(a: &SourceReading, b: &SourceReading) -> std::cmp::Ordering {
    let num = |s: &SourceReading| s.rank.as_deref().and_then(|r| r.parse::<i64>().ok());
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.rank.cmp(&b.rank),
    }
    .then_with(|| a.service_name.cmp(&b.service_name))
    .then_with(|| a.service_instance_id.cmp(&b.service_instance_id))
    .then_with(|| a.key.cmp(&b.key))
}

/// Reads every source of `store` at `now`.
pub(crate) fn read(store: &Store, now: u64) -> ClusterReading {
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
            gpu_utilization: None,
            gpu_devices: 0,
            since_seen: now.saturating_sub(src.last_seen),
            live: store.is_live(src.last_seen, now),
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
        match (role, &s.value) {
            (0, Value::Counter { value }) => {
                let state = s.attr("state").unwrap_or("");
                match entry.seconds_by_state.iter_mut().find(|(k, _)| k == state) {
                    Some((_, v)) => *v += value,
                    None => entry.seconds_by_state.push((state.to_owned(), *value)),
                }
            }
            (1, Value::Gauge { value, .. }) if value.is_finite() => {
                entry.state_code = Some(*value as i64);
            }
            (2, Value::Gauge { value, .. }) if value.is_finite() => {
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
    ClusterReading { now, sources }
}

impl Aggregator {
    /// Every source's identity, state, seconds per state, GPU utilisation and staleness.
    pub(crate) fn cluster_reading(&self) -> ClusterReading {
        let now = self.now();
        let store = self.lock();
        read(&store, now)
    }
}
