//! The aggregation processor's settings (`processors.higgsmeter` in the YAML).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::duration as duration_serde;

/// How the fleet view combines one gauge's series from several sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GaugeAggregation {
    /// The sum over live sources (the serving engine conductor's rule): for counts of
    /// things each source holds (queue depths, pages, requests in flight).
    Sum,
    /// The largest value among live sources.
    Max,
    /// The smallest value among live sources.
    Min,
    /// The mean over live sources.
    Mean,
    /// The value most recently received from any live source.
    Last,
    /// Not aggregated: each live source's series stays in the fleet view with its
    /// identity labels (for gauges that describe one source, like `worker_current_state`).
    PerSource,
    /// Not in the fleet view at all: only in `/metrics/sources` (the default for a gauge
    /// that neither a rule nor the catalog says how to combine, since no combination can
    /// be justified without knowing what it measures).
    SourcesOnly,
}

impl GaugeAggregation {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            GaugeAggregation::Sum => "sum",
            GaugeAggregation::Max => "max",
            GaugeAggregation::Min => "min",
            GaugeAggregation::Mean => "mean",
            GaugeAggregation::Last => "last",
            GaugeAggregation::PerSource => "per_source",
            GaugeAggregation::SourcesOnly => "sources_only",
        }
    }

    /// The rule the catalog gives a family.
    pub(crate) fn from_catalog(fleet: higgsmeter_catalog::Fleet) -> GaugeAggregation {
        match fleet {
            higgsmeter_catalog::Fleet::Sum => GaugeAggregation::Sum,
            higgsmeter_catalog::Fleet::Max => GaugeAggregation::Max,
            higgsmeter_catalog::Fleet::Min => GaugeAggregation::Min,
            higgsmeter_catalog::Fleet::Mean => GaugeAggregation::Mean,
            higgsmeter_catalog::Fleet::PerSource => GaugeAggregation::PerSource,
        }
    }

    /// Whether the fleet view has a combined series for this gauge (not `per_source`,
    /// whose series stay as they are, nor `sources_only`).
    pub(crate) fn combines(self) -> bool {
        !matches!(
            self,
            GaugeAggregation::PerSource | GaugeAggregation::SourcesOnly
        )
    }

    /// Folds one source's `value` (received at `updated`) into the fleet accumulator:
    /// sum, max or min of the values, their sum and count for the mean, or the most
    /// recently updated one (`Last`). The accumulator keeps the latest update time.
    pub(crate) fn fold(self, acc: Option<GaugeAcc>, value: f64, updated: u64) -> GaugeAcc {
        let Some(a) = acc else {
            return GaugeAcc {
                value,
                updated,
                sources: 1,
            };
        };
        let value = match self {
            GaugeAggregation::Sum | GaugeAggregation::Mean => a.value + value,
            GaugeAggregation::Max => a.value.max(value),
            GaugeAggregation::Min => a.value.min(value),
            GaugeAggregation::Last
            | GaugeAggregation::PerSource
            | GaugeAggregation::SourcesOnly => {
                if updated >= a.updated {
                    value
                } else {
                    a.value
                }
            }
        };
        GaugeAcc {
            value,
            updated: a.updated.max(updated),
            sources: a.sources + 1,
        }
    }
}

/// A fleet gauge being combined over sources ([`GaugeAggregation::fold`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GaugeAcc {
    value: f64,
    updated: u64,
    sources: u32,
}

impl GaugeAcc {
    /// The combined value under `rule` and the latest update time.
    pub(crate) fn finish(self, rule: GaugeAggregation) -> (f64, u64) {
        match rule {
            GaugeAggregation::Mean => (self.value / f64::from(self.sources), self.updated),
            _ => (self.value, self.updated),
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

/// Series the budget gives each MiB of `memory_limit_mib`.
pub const SERIES_PER_MIB: u64 = 1024;

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
    /// Gauge rules, first match wins; then the catalog's rule for its families
    /// (`higgsmeter_catalog::Family::fleet`); then `default_gauge_aggregation`.
    pub gauges: Vec<GaugeRule>,
    /// The aggregation of gauges that neither a rule nor the catalog covers (default
    /// `sources_only`: in `/metrics/sources` only, absent from `/metrics`).
    pub default_gauge_aggregation: GaugeAggregation,
    /// Labels added to every exported series of both views (e.g. `model_name`).
    pub static_labels: BTreeMap<String, String>,
    /// The memory the series store may use, in MiB (default 1024): the series budget
    /// is [`SERIES_PER_MIB`] series a MiB (about 1 KiB a series: a held series was
    /// measured at 592 B of RSS in the 10,000-source soak; the rest is room for the
    /// checkpoint's copy, the render buffers and folded streams). See
    /// [`AggregateConfig::series_budget`].
    pub memory_limit_mib: u64,
    /// The series budget in series, overriding the one `memory_limit_mib` gives.
    pub max_series: Option<usize>,
    /// Most series one source may hold, all metrics together (default 16,384); past
    /// it, its new series fold into its overflow series of their metric.
    pub max_series_per_source: usize,
    /// Most series one source may hold of one metric (default 4,096, the SDK's own
    /// cap on operations); past it, its new series of that metric fold into its
    /// overflow series of the metric (`otel_metric_overflow="true"`).
    pub max_series_per_source_metric: usize,
    /// Series set aside for each source (default 64): a source is taken only while
    /// the budget has room for its reserve, and a source below its reserve always
    /// gets its new series, however full the budget is. The budget therefore takes
    /// at most `series_budget / reserved_series_per_source` sources (16,384 on the
    /// defaults); a new source past that is refused.
    pub reserved_series_per_source: usize,
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
            default_gauge_aggregation: GaugeAggregation::SourcesOnly,
            static_labels: BTreeMap::new(),
            memory_limit_mib: 1024,
            max_series: None,
            max_series_per_source: 16_384,
            max_series_per_source_metric: 4_096,
            reserved_series_per_source: 64,
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

    /// The aggregation for a gauge named `otel_name` (exported as `prom_name`): the
    /// first matching rule, else the catalog's, else `default_gauge_aggregation`.
    pub fn gauge_aggregation(&self, otel_name: &str, prom_name: &str) -> GaugeAggregation {
        self.gauge_rule(otel_name, prom_name)
            .unwrap_or(self.default_gauge_aggregation)
    }

    /// The aggregation a rule or the catalog gives a gauge; `None` when neither does.
    pub(crate) fn gauge_rule(&self, otel_name: &str, prom_name: &str) -> Option<GaugeAggregation> {
        if let Some(rule) = self
            .gauges
            .iter()
            .find(|r| r.matches(otel_name) || r.matches(prom_name))
        {
            return Some(rule.aggregation);
        }
        higgsmeter_catalog::find_instrument(otel_name)
            .filter(|f| f.kind == higgsmeter_catalog::Kind::Gauge)
            .map(|f| GaugeAggregation::from_catalog(f.fleet))
    }

    /// The series budget: most series held in all (per-source, overflow and fleet
    /// together), `max_series` when set, else `memory_limit_mib` × [`SERIES_PER_MIB`].
    pub fn series_budget(&self) -> usize {
        self.max_series.unwrap_or_else(|| {
            usize::try_from(self.memory_limit_mib.saturating_mul(SERIES_PER_MIB))
                .unwrap_or(usize::MAX)
        })
    }

    /// Most sources the budget takes: one reserve each.
    pub fn max_sources(&self) -> usize {
        self.series_budget() / self.reserved_series_per_source.max(1)
    }

    /// The limits' own checks (part of [`AggregateConfig::validate`]).
    fn validate_limits(&self) -> Result<(), (String, String)> {
        let key = |k: &str| format!("processors.higgsmeter.{k}");
        let budget = self.series_budget();
        if budget == 0 {
            let k = if self.max_series.is_some() {
                "max_series"
            } else {
                "memory_limit_mib"
            };
            return Err((key(k), "must be more than 0".into()));
        }
        for (k, v) in [
            ("max_series_per_source", self.max_series_per_source),
            (
                "max_series_per_source_metric",
                self.max_series_per_source_metric,
            ),
            (
                "reserved_series_per_source",
                self.reserved_series_per_source,
            ),
        ] {
            if v == 0 {
                return Err((key(k), "must be more than 0".into()));
            }
        }
        // A quota past the budget is simply bounded by it; a reserve past it would
        // take no source at all.
        if self.reserved_series_per_source > budget {
            return Err((
                key("reserved_series_per_source"),
                format!(
                    "{} is more than the whole series budget ({budget})",
                    self.reserved_series_per_source
                ),
            ));
        }
        if self.max_series_per_source_metric > self.max_series_per_source {
            return Err((
                key("max_series_per_source_metric"),
                format!(
                    "{} is more than max_series_per_source ({})",
                    self.max_series_per_source_metric, self.max_series_per_source
                ),
            ));
        }
        if self.reserved_series_per_source > self.max_series_per_source {
            return Err((
                key("reserved_series_per_source"),
                format!(
                    "{} is more than max_series_per_source ({})",
                    self.reserved_series_per_source, self.max_series_per_source
                ),
            ));
        }
        Ok(())
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
        self.validate_limits()?;
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
            GaugeAggregation::SourcesOnly
        );
        assert_eq!(c.gauge_rule("queue_depth", "queue_depth"), None);
    }

    #[test]
    fn the_catalog_says_how_for_its_gauges() {
        let c = AggregateConfig::default();
        for f in higgsmeter_catalog::ALL_FAMILY_GROUPS
            .iter()
            .flat_map(|g| g.iter())
        {
            if f.kind == higgsmeter_catalog::Kind::Gauge {
                assert_eq!(
                    c.gauge_aggregation(f.name, f.name),
                    GaugeAggregation::from_catalog(f.fleet),
                    "{}",
                    f.name
                );
            }
        }
        let pages = higgsmeter_catalog::MSTAR_KV_PAGES_USED.name;
        assert_eq!(c.gauge_aggregation(pages, pages), GaugeAggregation::Sum);
        let temp = higgsmeter_catalog::HW_GPU_TEMPERATURE.name;
        assert_eq!(c.gauge_aggregation(temp, temp), GaugeAggregation::PerSource);
    }

    #[test]
    fn mean_divides_by_the_sources_folded() {
        let rule = GaugeAggregation::Mean;
        let acc = [0.5, 1.0, 0.0]
            .iter()
            .fold(None, |acc, v| Some(rule.fold(acc, *v, 1)));
        assert_eq!(acc.map(|a| a.finish(rule)), Some((0.5, 1)));
    }

    #[test]
    fn session_gauges_are_per_source_by_default() {
        let c = AggregateConfig::default();
        for f in higgsmeter_catalog::SESSION_FAMILIES {
            if f.kind == higgsmeter_catalog::Kind::Gauge {
                assert_eq!(
                    c.gauge_aggregation(f.name, f.name),
                    GaugeAggregation::PerSource,
                    "{}",
                    f.name
                );
            }
        }
    }
}
