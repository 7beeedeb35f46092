//! The cluster view's read model: every source's identity, current state, seconds per
//! state since it started, GPU utilisation and staleness, read under the aggregator's
//! lock (`store::cluster_read`). The history and the JSON the page reads are built from these
//! readings after the lock is released (`views::cluster_json`).

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
    /// Seconds per (state, operation), in first-seen order: the cluster timeline
    /// (`exporters::cluster_timeline`) tells the operation of each second from their growth.
    pub(crate) seconds_by_operation: Vec<(String, String, f64)>,
    /// Mean `hw.gpu.utilization` (ratio 0..1) over the source's devices, if any.
    pub(crate) gpu_utilization: Option<f64>,
    /// GPUs with a utilisation reading.
    pub(crate) gpu_devices: usize,
    /// Nanoseconds since the source last pushed.
    pub(crate) since_seen: u64,
    /// Whether the source pushed within `stale_after`.
    pub(crate) live: bool,
    /// Metrics whose new series this source folds into its overflow series (past its
    /// quota), with the points folded: `(exposition name, points)`.
    pub(crate) overflow: Vec<(String, u64)>,
}

/// A source's identity as the cluster page's JSON documents show it, first in each
/// source's object (`#[serde(flatten)]`).
#[derive(Debug, serde::Serialize)]
pub(crate) struct SourceIdentity<'a> {
    rank: Option<&'a str>,
    #[serde(rename = "service.name")]
    service_name: Option<&'a str>,
    #[serde(rename = "service.instance.id")]
    service_instance_id: Option<&'a str>,
    #[serde(rename = "host.name")]
    host_name: Option<&'a str>,
}

impl SourceReading {
    /// Its identity, borrowed.
    pub(crate) fn identity(&self) -> SourceIdentity<'_> {
        SourceIdentity {
            rank: self.rank.as_deref(),
            service_name: self.service_name.as_deref(),
            service_instance_id: self.service_instance_id.as_deref(),
            host_name: self.host_name.as_deref(),
        }
    }
}

/// The collector's own times, as the cluster page shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CollectorClock {
    /// Nanoseconds since this collector process started.
    pub(crate) uptime: u64,
    /// When this process started (unix ns).
    pub(crate) started_unix_nanos: u64,
    /// Since when the fleet series have counted (unix ns): this process's start, or
    /// the start of the aggregation state it restored from a checkpoint.
    pub(crate) counting_since_unix_nanos: u64,
    /// Whether the aggregation state was restored from a checkpoint.
    pub(crate) restored: bool,
}

/// Every source the store knows, read at `now` (the aggregator's clock, nanoseconds).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClusterReading {
    /// When the reading was taken, on the aggregator's internal monotonic clock (it
    /// starts far from 0: only differences between readings mean anything).
    pub(crate) now: u64,
    /// The collector's uptime and start times at `now`.
    pub(crate) clock: CollectorClock,
    /// Sources, ordered by rank (numerically where it is a number), then identity.
    pub(crate) sources: Vec<SourceReading>,
}

pub(crate) fn rank_order(a: &SourceReading, b: &SourceReading) -> std::cmp::Ordering {
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
