//! The aggregation processor's settings (`processors.higgsmeter` in the YAML).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::config::duration_serde;

/// The catalog's GPU gauges whose fleet sum means something (memory, power); every
/// other GPU gauge (utilization, temperature, clocks, peaks) describes one device and
/// stays per source.
pub(crate) const SUMMABLE_GPU_GAUGES: &[&str] = &[
    higgsmeter_catalog::HW_GPU_MEMORY_USAGE.name,
    higgsmeter_catalog::HW_GPU_MEMORY_LIMIT.name,
    higgsmeter_catalog::HW_POWER.name,
    higgsmeter_catalog::HW_GPU_PROCESS_MEMORY_USAGE.name,
];

/// How the fleet view combines one gauge's series from several sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GaugeAggregation {
    /// The sum over live sources (the serving engine conductor's rule; the default).
    Sum,
    /// The largest value among live sources.
    Max,
    /// The smallest value among live sources.
    Min,
    /// The value most recently received from any live source.
    Last,
    /// Not aggregated: each live source's series stays in the fleet view with its
    /// identity labels (for gauges that describe one source, like `worker_current_state`).
    PerSource,
}

impl GaugeAggregation {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            GaugeAggregation::Sum => "sum",
            GaugeAggregation::Max => "max",
            GaugeAggregation::Min => "min",
            GaugeAggregation::Last => "last",
            GaugeAggregation::PerSource => "per_source",
        }
    }

    /// Folds one source's `(value, updated)` into the fleet accumulator: sum, max or
    /// min of the values, or the most recently updated one (`Last`, and `PerSource`,
    /// whose fleet series is never read). The accumulator keeps the latest update time.
    pub(crate) fn fold(self, acc: Option<(f64, u64)>, value: f64, updated: u64) -> (f64, u64) {
        match (acc, self) {
            (None, _) => (value, updated),
            (Some((a, t)), GaugeAggregation::Sum) => (a + value, t.max(updated)),
            (Some((a, t)), GaugeAggregation::Max) => (a.max(value), t.max(updated)),
            (Some((a, t)), GaugeAggregation::Min) => (a.min(value), t.max(updated)),
            (Some((a, t)), _) => {
                if updated >= t {
                    (value, updated)
                } else {
                    (a, t)
                }
            }
        }
    }
}

/// One gauge rule: metrics whose name matches `match` (exact, or a glob with `*`) are
/// combined with `aggregation`. The first matching rule wins.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GaugeRule {
    /// The metric name (OTLP name or exported Prometheus name), `*` matching any run
    /// of characters.
    #[serde(rename = "match")]
    pub pattern: String,
    /// How the fleet view combines the matching gauges.
    pub aggregation: GaugeAggregation,
}

impl GaugeRule {
    /// Whether `name` matches this rule's pattern.
    pub fn matches(&self, name: &str) -> bool {
        glob_match(&self.pattern, name)
    }
}

fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(pos) => rest = &rest[pos + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// The aggregation processor's settings; every field has a default (see
/// `otel-config/README.md`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AggregateConfig {
    /// Resource attributes (and point attributes) the fleet view sums over: the
    /// per-worker identity. In the per-source view the resource attributes among them
    /// become labels (dots become `_`). Default: `service.instance.id`, `host.name`,
    /// `rank`, `local_rank`. Add `service.name` to sum over services as well (the fleet
    /// view then drops `job`).
    pub sum_over: Vec<String>,
    /// How often sources are expected to push (default 1 s, the SDK's interval).
    #[serde(with = "duration_serde")]
    pub expected_interval: Duration,
    /// A source (or one of its series) silent this long leaves the gauges and the
    /// per-source view (default: 5 × `expected_interval`).
    #[serde(with = "duration_serde::option")]
    pub stale_after: Option<Duration>,
    /// How long a silent source's counter and histogram state is remembered, so that a
    /// source that comes back with the same identity is not counted twice (default 1 h).
    #[serde(with = "duration_serde")]
    pub forget_after: Duration,
    /// Gauge rules, first match wins; then the built-in rules (`worker_current_state`
    /// and the catalog's per-device GPU gauges: `per_source`); then
    /// `default_gauge_aggregation`.
    pub gauges: Vec<GaugeRule>,
    /// The aggregation of gauges no rule matches (default `sum`).
    pub default_gauge_aggregation: GaugeAggregation,
    /// Labels added to every exported series of both views (e.g. `model_name`).
    pub static_labels: BTreeMap<String, String>,
    /// Most per-source series one metric may have (default 50,000); beyond it new
    /// series are refused (partial success, reason `cardinality`).
    pub max_series_per_metric: usize,
    /// Most series held in all (default 200,000), per-source and fleet together.
    pub max_series: usize,
    /// Where the aggregation state is checkpointed: `file_storage` (the default: the
    /// `extensions.file_storage` directory) or `none` (no state: a restart starts the
    /// fleet series over from about 0, as one clean counter reset).
    pub storage: String,
    /// How often the state is checkpointed (default 5 s); also on shutdown.
    #[serde(with = "duration_serde")]
    pub checkpoint_interval: Duration,
}

impl Default for AggregateConfig {
    fn default() -> Self {
        AggregateConfig {
            sum_over: ["service.instance.id", "host.name", "rank", "local_rank"]
                .map(String::from)
                .to_vec(),
            expected_interval: Duration::from_secs(1),
            stale_after: None,
            forget_after: Duration::from_secs(3600),
            gauges: Vec::new(),
            default_gauge_aggregation: GaugeAggregation::Sum,
            static_labels: BTreeMap::new(),
            max_series_per_metric: 50_000,
            max_series: 200_000,
            storage: "file_storage".to_owned(),
            checkpoint_interval: Duration::from_secs(5),
        }
    }
}

impl AggregateConfig {
    /// `stale_after`, or its default of 5 × `expected_interval`.
    pub fn effective_stale_after(&self) -> Duration {
        self.stale_after.unwrap_or(self.expected_interval * 5)
    }

    /// The aggregation for a gauge named `otel_name` (exported as `prom_name`).
    pub fn gauge_aggregation(&self, otel_name: &str, prom_name: &str) -> GaugeAggregation {
        if let Some(rule) = self
            .gauges
            .iter()
            .find(|r| r.matches(otel_name) || r.matches(prom_name))
        {
            return rule.aggregation;
        }
        let family = higgsmeter_catalog::find_instrument(otel_name);
        if family.is_some_and(|f| f.name == higgsmeter_catalog::WORKER_CURRENT_STATE.name) {
            return GaugeAggregation::PerSource;
        }
        let gpu_gauge = family.is_some_and(|f| {
            f.kind == higgsmeter_catalog::Kind::Gauge
                && higgsmeter_catalog::GPU_FAMILIES
                    .iter()
                    .any(|g| g.name == f.name)
                && !SUMMABLE_GPU_GAUGES.contains(&f.name)
        });
        if gpu_gauge {
            return GaugeAggregation::PerSource;
        }
        // A lab session's gauges (time to first SLEAP process, best frame count, epochs,
        // loss) describe one session: summing them over sessions means nothing.
        let session_gauge = family.is_some_and(|f| {
            f.kind == higgsmeter_catalog::Kind::Gauge
                && higgsmeter_catalog::SESSION_FAMILIES
                    .iter()
                    .any(|g| g.name == f.name)
        });
        if session_gauge {
            return GaugeAggregation::PerSource;
        }
        self.default_gauge_aggregation
    }

    /// Checks values that serde cannot: returns `(key path, message)` on error.
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        if self.expected_interval.is_zero() {
            return Err((
                "processors.higgsmeter.expected_interval".into(),
                "must be more than 0".into(),
            ));
        }
        if self.effective_stale_after().is_zero() {
            return Err((
                "processors.higgsmeter.stale_after".into(),
                "must be more than 0".into(),
            ));
        }
        if self.checkpoint_interval.is_zero() {
            return Err((
                "processors.higgsmeter.checkpoint_interval".into(),
                "must be more than 0".into(),
            ));
        }
        if self.storage != "none" && self.storage != "file_storage" {
            return Err((
                "processors.higgsmeter.storage".into(),
                format!(
                    "unknown storage `{}`: write `file_storage` (the extensions.file_storage directory) or `none`",
                    self.storage
                ),
            ));
        }
        if self.forget_after < self.effective_stale_after() {
            return Err((
                "processors.higgsmeter.forget_after".into(),
                format!(
                    "must be at least stale_after ({:?})",
                    self.effective_stale_after()
                ),
            ));
        }
        if self.max_series == 0 || self.max_series_per_metric == 0 {
            return Err((
                "processors.higgsmeter.max_series".into(),
                "series limits must be more than 0".into(),
            ));
        }
        for k in self.static_labels.keys() {
            let ok = !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && !k.starts_with("__");
            if !ok {
                return Err((
                    format!("processors.higgsmeter.static_labels.{k}"),
                    "a label name must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __".into(),
                ));
            }
        }
        for (i, rule) in self.gauges.iter().enumerate() {
            if rule.pattern.is_empty() {
                return Err((
                    format!("processors.higgsmeter.gauges[{i}].match"),
                    "must not be empty".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("gpu_*", "gpu_temperature"));
        assert!(glob_match("*_bytes", "kv_bytes"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXcYYb"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn current_state_is_per_source_by_default() {
        let c = AggregateConfig::default();
        assert_eq!(
            c.gauge_aggregation("worker_current_state", "worker_current_state"),
            GaugeAggregation::PerSource
        );
        assert_eq!(
            c.gauge_aggregation("queue_depth", "queue_depth"),
            GaugeAggregation::Sum
        );
    }

    #[test]
    fn session_gauges_are_per_source_by_default() {
        let c = AggregateConfig::default();
        for f in higgsmeter_catalog::SESSION_FAMILIES {
            let want = if f.kind == higgsmeter_catalog::Kind::Gauge {
                GaugeAggregation::PerSource
            } else {
                c.default_gauge_aggregation
            };
            assert_eq!(c.gauge_aggregation(f.name, f.name), want, "{}", f.name);
        }
    }
}
