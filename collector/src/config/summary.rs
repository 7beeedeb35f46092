//! What `--check-config` prints: the effective pipelines (receivers -> processors ->
//! exporters), where the state lives and the limits, as lines a person reads. Never a
//! secret: tokens and headers are not printed.

use super::Plan;
use crate::duration::show as dur;

impl Plan {
    /// The effective configuration in readable lines (what `--check-config` prints):
    /// each pipeline as `receivers -> processors -> exporters`, then every component
    /// with its address and settings (each component says its own line), where the
    /// aggregation state lives, the limits, and how each listener is secured.
    pub fn summary(&self) -> Vec<String> {
        let list = |items: Vec<String>| {
            if items.is_empty() {
                "(none)".to_owned()
            } else {
                items.join(", ")
            }
        };
        let receivers = list(self.receivers.iter().map(|r| r.describe()).collect());
        let mut lines = vec![
            "pipelines:".to_owned(),
            format!(
                "  metrics: {receivers} -> higgsmeter -> {}",
                list(self.exporters.iter().map(|e| e.describe()).collect())
            ),
        ];
        if self.traces.is_empty() {
            lines.push("  traces: off (spans are refused: no traces exporter)".to_owned());
        } else {
            let to: Vec<String> = self
                .traces
                .iter()
                .map(|p| {
                    let e = p.settings();
                    let endpoint = e.traces_endpoint.as_deref().unwrap_or(&e.endpoint);
                    format!("{} {endpoint}", p.id())
                })
                .collect();
            lines.push(format!(
                "  traces: {receivers} -> (forwarded as received) -> {}",
                list(to)
            ));
        }
        lines.push("receivers:".to_owned());
        lines.extend(self.receivers.iter().map(|r| r.summary()));
        let a = &self.aggregate;
        lines.push("processors:".to_owned());
        lines.push(format!(
            "  higgsmeter: the fleet view sums over [{}]; a source is stale after {} of silence and forgotten after {}",
            a.sum_over.join(", "),
            dur(a.effective_stale_after()),
            dur(a.forget_after)
        ));
        let rules: Vec<String> = a
            .gauges
            .iter()
            .map(|r| format!("{} -> {}", r.pattern, r.aggregation.as_str()))
            .collect();
        let rules = if rules.is_empty() {
            "no rules".to_owned()
        } else {
            format!("{}, then", rules.join(", "))
        };
        lines.push(format!(
            "  gauges: {rules}; the catalog's rule for its families; else {}",
            a.default_gauge_aggregation.as_str()
        ));
        if !a.static_labels.is_empty() {
            let labels: Vec<String> = a
                .static_labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            lines.push(format!("  static labels: {}", labels.join(", ")));
        }
        lines.push("exporters:".to_owned());
        lines.extend(self.exporters.iter().map(|e| e.summary()));
        if self.exporters.is_empty() {
            lines.push("  (none)".to_owned());
        }
        lines.push(self.state_summary());
        lines.push(format!(
            "limits: a budget of {} series ({}), so at most {} sources; each source holds up to {} series, {} of one metric, and {} are kept for it; past a quota its new series fold into one overflow series per metric",
            a.series_budget(),
            match a.max_series {
                Some(_) => "max_series".to_owned(),
                None => format!(
                    "memory_limit_mib {} at {} series a MiB",
                    a.memory_limit_mib,
                    crate::aggregate::SERIES_PER_MIB
                ),
            },
            a.max_sources(),
            a.max_series_per_source,
            a.max_series_per_source_metric,
            a.reserved_series_per_source,
        ));
        lines.push(format!("shutdown within {}", dur(self.shutdown_timeout)));
        lines.extend(self.receivers.iter().map(|r| r.security()));
        lines.extend(self.exporters.iter().filter_map(|e| e.security()));
        lines
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    #[test]
    fn the_default_plan_reads_as_pipelines() {
        let mut config = Config::default();
        config.apply(&Overrides {
            otlp_endpoint: Some("http://127.0.0.1:14317".into()),
            storage: Some("none".into()),
            ..Default::default()
        });
        let text = config.plan().expect("plan").summary().join("\n");
        for want in [
            "  metrics: otlp grpc 127.0.0.1:4317, otlp http 127.0.0.1:4318 -> higgsmeter -> otlp http://127.0.0.1:14317, prometheus 127.0.0.1:9464",
            "  otlp http on 127.0.0.1:4318: bodies up to 16 MiB",
            "a source is stale after 5s of silence and forgotten after 1h",
            "  gauges: no rules; the catalog's rule for its families; else sources_only",
            "  otlp to http://127.0.0.1:14317: every 1s",
            "aggregation state: none",
            "limits: a budget of 1048576 series (memory_limit_mib 1024 at 1024 series a MiB), so at most 16384 sources; each source holds up to 16384 series, 4096 of one metric, and 64 are kept for it; past a quota its new series fold into one overflow series per metric",
            "shutdown within 10s",
            "OTLP/gRPC receiver otlp: plaintext",
        ] {
            assert!(text.contains(want), "no `{want}` in:\n{text}");
        }
        assert!(!text.contains('{'), "a debug dump: {text}");
    }
}
