//! The collector's configuration: built-in defaults, or a YAML file in the shape of the
//! OpenTelemetry Collector's (`receivers`, `processors`, `exporters`, `service`), with
//! its key names for the parts implemented here. Every key and default is documented
//! in `otel-config/README.md`; unknown keys are errors naming the key's path.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub use crate::aggregate::AggregateConfig;
pub use crate::auth::{AuthSettings, BearerTokenAuthConfig};
use crate::component::null_is_default;
pub use crate::component::{ComponentId, Components};
use crate::duration as duration_serde;
use crate::error::Error;
pub use crate::exporters::settings::{Compression, Headers, RetryOnFailure, SendingQueue};
pub use crate::exporters::{
    ExporterConfig, ExporterPlan, OtlpExporter, OtlpPlan, PrometheusExporter, PrometheusPlan,
    PushProtocol, RemoteWriteExporter, RemoteWritePlan,
};
pub use crate::receivers::{
    DEFAULT_MAX_CONNECTIONS_PER_PEER, GrpcReceiver, HttpReceiver, OtlpReceiver, Protocols,
    ReceiverConfig, ReceiverPlan,
};
pub use crate::storage::FileStorageConfig;
pub use crate::tls::{TlsClientSettings, TlsServerSettings};

mod plan;
mod summary;

/// `receivers`: each instance under `type` or `type/name` (`otlp`, `otlp/internal`).
pub type Receivers = Components<ReceiverConfig>;

/// `exporters`: each instance under `type` or `type/name` (`otlp/primary`,
/// `prometheusremotewrite/tenant-a`).
pub type Exporters = Components<ExporterConfig>;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where data comes in. Missing: OTLP gRPC and HTTP on their default endpoints.
    #[serde(default = "builtin_receivers")]
    pub receivers: Receivers,
    /// The aggregation (`higgsmeter`). Missing: the defaults.
    #[serde(default)]
    pub processors: Processors,
    /// Where data goes. Missing: the Prometheus endpoint only.
    #[serde(default = "builtin_exporters")]
    pub exporters: Exporters,
    /// Extensions (`file_storage`). Missing: `file_storage` on its defaults.
    #[serde(default)]
    pub extensions: Extensions,
    /// Which components run. Missing: every configured component.
    #[serde(default)]
    pub service: Service,
}

/// `otlp` on both protocols' default endpoints.
fn builtin_receivers() -> Receivers {
    Components(
        [(
            ComponentId::new("otlp"),
            ReceiverConfig::Otlp(OtlpReceiver::default()),
        )]
        .into(),
    )
}

/// `prometheus` on its default endpoint.
fn builtin_exporters() -> Exporters {
    Components(
        [(
            ComponentId::new("prometheus"),
            ExporterConfig::Prometheus(PrometheusExporter::default()),
        )]
        .into(),
    )
}

/// `extensions`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extensions {
    /// `extensions.file_storage`: where the aggregation state is checkpointed.
    /// Missing (or listed in `service.extensions` without a section): the default
    /// directory (`higgsmeter-data` in the working directory). Whether state is kept
    /// is `processors.higgsmeter.storage`'s to say, listed in `service.extensions` or
    /// not.
    #[serde(default, deserialize_with = "null_is_default")]
    pub file_storage: Option<FileStorageConfig>,
    /// `extensions.bearertokenauth`: the token a receiver's `auth` asks for.
    #[serde(default)]
    pub bearertokenauth: Option<BearerTokenAuthConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            receivers: builtin_receivers(),
            processors: Processors::default(),
            exporters: builtin_exporters(),
            extensions: Extensions::default(),
            service: Service::default(),
        }
    }
}

/// `processors`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Processors {
    /// `processors.higgsmeter`: the aggregation.
    #[serde(default = "some_default", deserialize_with = "null_is_default")]
    pub higgsmeter: Option<AggregateConfig>,
}

fn some_default<T: Default>() -> Option<T> {
    Some(T::default())
}

impl Default for Processors {
    fn default() -> Self {
        Processors {
            higgsmeter: Some(AggregateConfig::default()),
        }
    }
}

/// `service`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// `service.extensions`: the extensions that run. Missing: every configured one
    /// (and `file_storage` on its defaults). `file_storage` may be listed without a
    /// section (its defaults); a list without it keeps the storage that
    /// `processors.higgsmeter.storage` names (default: `file_storage`).
    #[serde(default)]
    pub extensions: Option<Vec<String>>,
    /// `service.pipelines`.
    #[serde(default)]
    pub pipelines: Pipelines,
    /// `service.shutdown_timeout`: on SIGTERM/SIGINT, the longest the collector takes
    /// to stop accepting, finish in-flight requests, flush upstream, write its final
    /// checkpoint and exit, whatever clients do (default 10 s).
    #[serde(default = "default_shutdown_timeout", with = "duration_serde")]
    pub shutdown_timeout: Duration,
}

fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(10)
}

impl Default for Service {
    fn default() -> Self {
        Service {
            extensions: None,
            pipelines: Pipelines::default(),
            shutdown_timeout: default_shutdown_timeout(),
        }
    }
}

/// `service.pipelines`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipelines {
    /// `service.pipelines.metrics`; missing: every configured component.
    #[serde(default)]
    pub metrics: Option<Pipeline>,
    /// `service.pipelines.traces`: OTLP traces in, forwarded unchanged to `otlp` /
    /// `otlphttp`; missing: traces are refused (`UNIMPLEMENTED` / 501).
    #[serde(default)]
    pub traces: Option<Pipeline>,
}

/// `service.pipelines.metrics`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// Receiver keys (`otlp`, `otlp/NAME`).
    #[serde(default)]
    pub receivers: Vec<String>,
    /// Processor names (`higgsmeter`; the aggregation runs whether listed or not).
    #[serde(default)]
    pub processors: Vec<String>,
    /// Exporter keys (`prometheus`, `otlp`, `otlphttp`, `prometheusremotewrite`, each
    /// optionally `/NAME`).
    #[serde(default)]
    pub exporters: Vec<String>,
}

/// Command-line settings that win over the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `receivers.otlp.protocols.grpc.endpoint` (turns gRPC on).
    pub grpc: Option<String>,
    /// `receivers.otlp.protocols.http.endpoint` (turns HTTP on).
    pub http: Option<String>,
    /// `exporters.prometheus.endpoint` (turns the endpoint on).
    pub prometheus: Option<String>,
    /// `exporters.otlp.endpoint` (turns the gRPC push on).
    pub otlp_endpoint: Option<String>,
    /// `exporters.otlphttp.endpoint` (turns the HTTP push on).
    pub otlphttp_endpoint: Option<String>,
    /// `none` (`processors.higgsmeter.storage: none`) or a directory
    /// (`extensions.file_storage.directory`, storage on).
    pub storage: Option<String>,
}

/// The validated plan: what to start, where; each component's part checked by its own
/// module.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The receivers' listeners (each `otlp` receiver: its gRPC and HTTP ones).
    pub receivers: Vec<ReceiverPlan>,
    /// The metrics pipeline's exporters.
    pub exporters: Vec<ExporterPlan>,
    /// The traces pipeline's exporters (empty: traces are refused).
    pub traces: Vec<OtlpPlan>,
    /// The aggregation.
    pub aggregate: AggregateConfig,
    /// Where the aggregation state is checkpointed (`None`: storage off).
    pub storage: Option<PathBuf>,
    /// `service.shutdown_timeout`.
    pub shutdown_timeout: Duration,
}

impl Plan {
    /// The first OTLP/gRPC listener.
    pub fn grpc(&self) -> Option<&ReceiverPlan> {
        self.receivers
            .iter()
            .find(|r| r.transport() == crate::Transport::Grpc)
    }

    /// The first OTLP/HTTP listener.
    pub fn http(&self) -> Option<&ReceiverPlan> {
        self.receivers
            .iter()
            .find(|r| r.transport() == crate::Transport::Http)
    }

    /// The first Prometheus endpoint.
    pub fn prometheus(&self) -> Option<&PrometheusPlan> {
        self.exporters.iter().find_map(|e| match e {
            ExporterPlan::Prometheus(p) => Some(p),
            _ => None,
        })
    }

    /// The OTLP pushes of the metrics pipeline.
    pub fn pushes(&self) -> impl Iterator<Item = &OtlpPlan> {
        self.exporters.iter().filter_map(|e| match e {
            ExporterPlan::Otlp(p) => Some(p),
            _ => None,
        })
    }

    /// The remote-write exporters.
    pub fn remote_writes(&self) -> impl Iterator<Item = &RemoteWritePlan> {
        self.exporters.iter().filter_map(|e| match e {
            ExporterPlan::RemoteWrite(p) => Some(p),
            _ => None,
        })
    }

    /// One line saying where the aggregation state lives (what `--check-config` prints).
    pub fn state_summary(&self) -> String {
        match &self.storage {
            Some(dir) => format!(
                "aggregation state: {} (checkpoint every {:?} and on shutdown)",
                // Relative to the working directory: say which.
                std::path::absolute(dir.join(crate::storage::STATE_FILE))
                    .unwrap_or_else(|_| dir.join(crate::storage::STATE_FILE))
                    .display(),
                self.aggregate.checkpoint_interval
            ),
            None => "aggregation state: none (processors.higgsmeter.storage: none; a restart starts the fleet series over)".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_config_has_both_receivers_and_prometheus() {
        let plan = Config::default().plan().unwrap();
        assert_eq!(plan.grpc().unwrap().addr, "127.0.0.1:4317".parse().unwrap());
        assert_eq!(plan.http().unwrap().max_size, 16 * 1024 * 1024);
        let prometheus = plan.prometheus().unwrap();
        assert_eq!(prometheus.addr, "127.0.0.1:9464".parse().unwrap());
        assert!(prometheus.sources_view);
        assert_eq!(plan.pushes().count(), 0);
        assert_eq!(Config::from_yaml("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_name_their_path() {
        let err = Config::from_yaml(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpont: x\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("receivers.otlp.protocols.grpc"), "{text}");
        assert!(text.contains("endpont"), "{text}");
        let err = Config::from_yaml("processors:\n  higgsmeter:\n    stale_afterr: 5s\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("processors.higgsmeter") && err.contains("stale_afterr"),
            "{err}"
        );
    }

    #[test]
    fn null_sections_mean_defaults() {
        let c = Config::from_yaml("receivers:\n  otlp:\n    protocols:\n      grpc:\n").unwrap();
        let plan = c.plan().unwrap();
        assert!(plan.grpc().is_some());
        assert!(plan.http().is_none(), "only the protocols listed are on");
    }

    #[test]
    fn shipped_config_is_valid() {
        let text = include_str!("../../otel-config/collector.yaml");
        let plan = Config::from_yaml(text).unwrap().plan().unwrap();
        // The built-in defaults, written out.
        assert_eq!(plan.receivers, Config::default().plan().unwrap().receivers);
        assert!(plan.prometheus().is_some());
    }

    #[test]
    fn bad_values_are_clear() {
        let err = Config::from_yaml("processors:\n  higgsmeter:\n    stale_after: 5 parsecs\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("stale_after") && err.contains("500ms"),
            "{err}"
        );
        let c = Config::from_yaml("exporters:\n  otlp:\n    endpoint: 127.0.0.1:4317\n").unwrap();
        let err = c.plan().unwrap_err().to_string();
        assert!(
            err.contains("exporters.otlp.endpoint") && err.contains("http://"),
            "{err}"
        );
        let c = Config::from_yaml("service:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [kafka]\n").unwrap();
        let err = c.plan().unwrap_err().to_string();
        assert!(
            err.contains("kafka") && err.contains("exporters[0]"),
            "{err}"
        );
        assert!(Config::from_yaml("receivers: [1, 2").is_err());
    }

    #[test]
    fn connection_limits_have_defaults_and_are_checked() {
        let plan = Config::default().plan().unwrap();
        let (g, h) = (plan.grpc().unwrap().limits, plan.http().unwrap().limits);
        assert_eq!(g.per_peer, 128);
        assert_eq!(h.per_peer, 128);
        assert!(g.per_peer < g.max / 4);
        assert_eq!(g.opening, Duration::from_secs(10));
        assert_eq!(g.idle, Duration::from_secs(120));
        assert!(h.opening <= Duration::from_secs(10));
        let c = Config::from_yaml(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        max_connections_per_peer: 8\n        handshake_timeout: 2s\n        max_connection_idle: 30s\n      http:\n        max_connections_per_peer: 4\n",
        )
        .unwrap();
        let plan = c.plan().unwrap();
        let (g, h) = (plan.grpc().unwrap().limits, plan.http().unwrap().limits);
        assert_eq!(g.per_peer, 8);
        assert_eq!(g.opening, Duration::from_secs(2));
        assert_eq!(g.idle, Duration::from_secs(30));
        assert_eq!(h.per_peer, 4);
        for (yaml, key) in [
            (
                "grpc:\n        max_connections: 10\n        max_connections_per_peer: 11\n",
                "receivers.otlp.protocols.grpc.max_connections_per_peer",
            ),
            (
                "http:\n        max_connections_per_peer: 0\n",
                "receivers.otlp.protocols.http.max_connections_per_peer",
            ),
            (
                "grpc:\n        handshake_timeout: 0s\n",
                "receivers.otlp.protocols.grpc",
            ),
            (
                "grpc:\n        max_connection_idle: 0s\n",
                "receivers.otlp.protocols.grpc",
            ),
        ] {
            let c = Config::from_yaml(&format!(
                "receivers:\n  otlp:\n    protocols:\n      {yaml}"
            ))
            .unwrap();
            let err = c.plan().unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
        let err = Config::from_yaml(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        handshake_timeout: 2s\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("handshake_timeout"), "{err}");
        // A small max_connections lowers the default per-peer cap with it.
        let c = Config::from_yaml(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        max_connections: 4\n",
        )
        .unwrap();
        assert_eq!(c.plan().unwrap().http().unwrap().limits.per_peer, 4);
    }

    /// Every YAML snippet in the config reference parses; those that configure the
    /// receivers and name no files on the operator's machine also pass every check
    /// (the others are fragments to merge into a config).
    #[test]
    fn the_config_reference_snippets_are_valid() {
        let text = include_str!("../../otel-config/README.md");
        let mut snippets = Vec::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            match (&mut current, line.trim_start()) {
                (None, "```yaml") => current = Some(String::new()),
                (Some(_), "```") => snippets.extend(current.take()),
                (Some(s), _) => {
                    s.push_str(line);
                    s.push('\n');
                }
                (None, _) => {}
            }
        }
        assert!(snippets.len() >= 4, "{snippets:?}");
        let mut planned = 0;
        for snippet in &snippets {
            let config = Config::from_yaml(snippet)
                .unwrap_or_else(|e| panic!("{e}\nin the snippet:\n{snippet}"));
            if snippet.contains("receivers:") && !snippet.contains("/etc/") {
                config
                    .plan()
                    .unwrap_or_else(|e| panic!("{e}\nin the snippet:\n{snippet}"));
                planned += 1;
            }
        }
        assert!(planned >= 1);
    }

    #[test]
    fn overrides_turn_components_on() {
        let mut c =
            Config::from_yaml("receivers:\n  otlp:\n    protocols:\n      http:\n").unwrap();
        c.apply(&Overrides {
            grpc: Some("127.0.0.1:0".into()),
            otlp_endpoint: Some("http://127.0.0.1:1".into()),
            ..Default::default()
        });
        let plan = c.plan().unwrap();
        assert_eq!(plan.grpc().unwrap().addr.port(), 0);
        assert_eq!(plan.pushes().count(), 1);
    }

    #[test]
    fn file_storage_listed_without_a_section_uses_its_defaults() {
        // The TLS example of otel-config/README.md, as users copy it.
        let c = Config::from_yaml(
            "extensions:\n  bearertokenauth:\n    token: t\nservice:\n  extensions: [file_storage, bearertokenauth]\n",
        )
        .unwrap();
        let plan = c.plan().unwrap();
        assert_eq!(plan.storage, Some(PathBuf::from("higgsmeter-data")));
    }

    #[test]
    fn extensions_without_file_storage_keep_the_storage_key_s_choice() {
        let base = "extensions:\n  bearertokenauth:\n    token: t\nservice:\n  extensions: [bearertokenauth]\n";
        let plan = Config::from_yaml(base).unwrap().plan().unwrap();
        assert_eq!(plan.storage, Some(PathBuf::from("higgsmeter-data")));
        assert!(plan.state_summary().contains("higgsmeter-data"));
        let with_dir = "extensions:\n  bearertokenauth:\n    token: t\n  file_storage:\n    directory: /srv/x\nservice:\n  extensions: [bearertokenauth]\n";
        let plan = Config::from_yaml(with_dir).unwrap().plan().unwrap();
        assert_eq!(plan.storage, Some(PathBuf::from("/srv/x")));
        let none = format!("{base}processors:\n  higgsmeter:\n    storage: none\n");
        let plan = Config::from_yaml(&none).unwrap().plan().unwrap();
        assert_eq!(plan.storage, None);
    }

    #[test]
    fn durations() {
        assert_eq!(
            duration_serde::parse("200ms").unwrap(),
            Duration::from_millis(200)
        );
        assert_eq!(
            duration_serde::parse("1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            duration_serde::parse("2m").unwrap(),
            Duration::from_secs(120)
        );
        assert!(duration_serde::parse("5").is_err());
        assert!(duration_serde::parse("-1s").is_err());
    }
}
