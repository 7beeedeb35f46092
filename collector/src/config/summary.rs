//! What `--check-config` prints: the effective pipelines (receivers -> processors ->
//! exporters), where the state lives and the limits, as lines a person reads. Never a
//! secret: tokens and headers are not printed.

use std::time::Duration;

use super::{Plan, PushProtocol};

/// `1s`, `100ms`, `1h`: a duration as the config writes it.
fn dur(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        format!("{d:?}")
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `16 MiB`, `512 KiB`, `100 B`.
fn bytes(n: usize) -> String {
    const MIB: usize = 1 << 20;
    const KIB: usize = 1 << 10;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} B")
    }
}

impl Plan {
    /// The effective configuration in readable lines (what `--check-config` prints):
    /// each pipeline as `receivers -> processors -> exporters`, then every component
    /// with its address and settings, where the aggregation state lives, the limits,
    /// and how each listener is secured.
    pub fn summary(&self) -> Vec<String> {
        let mut receivers = Vec::new();
        if let Some((addr, _)) = self.grpc {
            receivers.push(format!("otlp/grpc {addr}"));
        }
        if let Some((addr, _)) = self.http {
            receivers.push(format!("otlp/http {addr}"));
        }
        let mut exporters = Vec::new();
        if let Some((addr, _)) = self.prometheus {
            exporters.push(format!("prometheus {addr}"));
        }
        for (protocol, e) in &self.pushes {
            exporters.push(format!("{} {}", push_name(*protocol), e.endpoint));
        }
        if let Some(rw) = &self.remote_write {
            exporters.push(format!("prometheusremotewrite {}", rw.endpoint));
        }
        let list = |items: &[String]| {
            if items.is_empty() {
                "(none)".to_owned()
            } else {
                items.join(", ")
            }
        };
        let mut lines = vec![
            "pipelines:".to_owned(),
            format!(
                "  metrics: {} -> higgsmeter -> {}",
                list(&receivers),
                list(&exporters)
            ),
        ];
        if self.traces.is_empty() {
            lines.push("  traces: off (spans are refused: no traces exporter)".to_owned());
        } else {
            let to: Vec<String> = self
                .traces
                .iter()
                .map(|(p, e)| {
                    let endpoint = e.traces_endpoint.as_deref().unwrap_or(&e.endpoint);
                    format!("{} {endpoint}", push_name(*p))
                })
                .collect();
            lines.push(format!(
                "  traces: {} -> (forwarded as received) -> {}",
                list(&receivers),
                list(&to)
            ));
        }
        lines.push("receivers:".to_owned());
        let l = &self.limits;
        if let Some((addr, max)) = self.grpc {
            lines.push(format!(
                "  otlp/grpc on {addr}: messages up to {}, at most {} connections, a request times out after {}",
                bytes(max),
                l.grpc_max_connections,
                dur(l.grpc_read_timeout)
            ));
        }
        if let Some((addr, max)) = self.http {
            lines.push(format!(
                "  otlp/http on {addr}: bodies up to {}, at most {} connections, headers within {}, a body within {}",
                bytes(max),
                l.http_max_connections,
                dur(l.http_read_header_timeout),
                dur(l.http_read_timeout)
            ));
        }
        if self.grpc.is_none() && self.http.is_none() {
            lines.push("  (none)".to_owned());
        }
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
        if let Some((addr, sources)) = self.prometheus {
            lines.push(format!(
                "  prometheus on {addr}: /metrics (fleet){}, / and /api/cluster (cluster page)",
                if sources {
                    ", /metrics/sources (per source)"
                } else {
                    ""
                }
            ));
        }
        for (protocol, e) in &self.pushes {
            lines.push(format!(
                "  {} to {}: every {}, timeout {}, per-source series {}",
                push_name(*protocol),
                e.endpoint,
                dur(e.interval),
                dur(e.timeout),
                if e.include_sources {
                    "included"
                } else {
                    "not included"
                }
            ));
        }
        if let Some(rw) = &self.remote_write {
            lines.push(format!(
                "  prometheusremotewrite to {}: every {}, timeout {}",
                rw.endpoint,
                dur(rw.interval),
                dur(rw.timeout)
            ));
        }
        if exporters.is_empty() {
            lines.push("  (none)".to_owned());
        }
        lines.push(self.state_summary());
        lines.push(format!(
            "limits: {} series in all, {} per metric; shutdown within {}",
            a.max_series,
            a.max_series_per_metric,
            dur(self.shutdown_timeout)
        ));
        lines.extend(self.security.summary());
        lines
    }
}

fn push_name(protocol: PushProtocol) -> &'static str {
    match protocol {
        PushProtocol::Grpc => "otlp",
        PushProtocol::Http => "otlphttp",
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
            "  metrics: otlp/grpc 127.0.0.1:4317, otlp/http 127.0.0.1:4318 -> higgsmeter -> prometheus 127.0.0.1:9464, otlp http://127.0.0.1:14317",
            "  otlp/http on 127.0.0.1:4318: bodies up to 16 MiB",
            "a source is stale after 5s of silence and forgotten after 1h",
            "  gauges: no rules; the catalog's rule for its families; else sources_only",
            "  otlp to http://127.0.0.1:14317: every 1s",
            "aggregation state: none",
            "limits: 200000 series in all, 50000 per metric; shutdown within 10s",
            "OTLP/gRPC receiver: plaintext",
        ] {
            assert!(text.contains(want), "no `{want}` in:\n{text}");
        }
        assert!(!text.contains('{'), "a debug dump: {text}");
    }
}
