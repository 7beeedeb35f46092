//! The collector's configuration: built-in defaults, or a YAML file in the shape of the
//! OpenTelemetry Collector's (`receivers`, `processors`, `exporters`, `service`), with
//! its key names for the parts implemented here. Every key and default is documented
//! in `otel-config/README.md`; unknown keys are errors naming the key's path.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::aggregate::AggregateConfig;
pub use crate::auth::{AuthSettings, BearerTokenAuthConfig};
use crate::error::Error;
pub use crate::exporters::remote_write::RemoteWriteExporter;
pub use crate::storage::FileStorageConfig;
pub use crate::tls::{TlsClientSettings, TlsServerSettings};

mod plan;
mod summary;
pub(crate) use plan::check_push;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where data comes in. Missing: OTLP gRPC and HTTP on their default endpoints.
    #[serde(default = "Receivers::builtin")]
    pub receivers: Receivers,
    /// The aggregation (`higgsmeter`). Missing: the defaults.
    #[serde(default)]
    pub processors: Processors,
    /// Where data goes. Missing: the Prometheus endpoint only.
    #[serde(default = "Exporters::builtin")]
    pub exporters: Exporters,
    /// Extensions (`file_storage`). Missing: `file_storage` on its defaults.
    #[serde(default)]
    pub extensions: Extensions,
    /// Which components run. Missing: every configured component.
    #[serde(default)]
    pub service: Service,
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
            receivers: Receivers::builtin(),
            processors: Processors::default(),
            exporters: Exporters::builtin(),
            extensions: Extensions::default(),
            service: Service::default(),
        }
    }
}

/// Deserialises `key:` (YAML null) as the component's defaults, as the OpenTelemetry
/// Collector does.
fn null_is_default<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

/// `receivers`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receivers {
    /// `receivers.otlp`.
    #[serde(default, deserialize_with = "null_is_default")]
    pub otlp: Option<OtlpReceiver>,
}

impl Receivers {
    fn builtin() -> Receivers {
        Receivers {
            otlp: Some(OtlpReceiver {
                protocols: Protocols {
                    grpc: Some(GrpcReceiver::default()),
                    http: Some(HttpReceiver::default()),
                },
            }),
        }
    }
}

/// `receivers.otlp`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpReceiver {
    /// `receivers.otlp.protocols`: each protocol present is on.
    pub protocols: Protocols,
}

impl Default for OtlpReceiver {
    fn default() -> Self {
        Receivers::builtin().otlp.unwrap_or(OtlpReceiver {
            protocols: Protocols::default(),
        })
    }
}

/// `receivers.otlp.protocols`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    /// OTLP/gRPC.
    #[serde(default, deserialize_with = "null_is_default")]
    pub grpc: Option<GrpcReceiver>,
    /// OTLP/HTTP.
    #[serde(default, deserialize_with = "null_is_default")]
    pub http: Option<HttpReceiver>,
}

/// The default `max_connections_per_peer` of both receivers (or their
/// `max_connections` when that is lower): an eighth of the default `max_connections`,
/// room for a node's ranks and exporters many times over.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 128;

/// `receivers.otlp.protocols.grpc`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcReceiver {
    /// `host:port` to listen on (default `127.0.0.1:4317`; port 0 picks a free port).
    pub endpoint: String,
    /// Largest accepted message, MiB, after decompression (default 16).
    pub max_recv_msg_size_mib: u64,
    /// Most connections open at once (default 1024). When all are taken, a new
    /// connection takes the place of the newest one that has not finished its opening,
    /// or else of the newest idle one; when every one is busy it is closed at once,
    /// logged and counted (`higgsmeter_collector_connections_refused_total`).
    pub max_connections: usize,
    /// Most connections open at once from one peer address (1 to `max_connections`;
    /// default 128, or `max_connections` when that is lower); past it the peer's newest
    /// unfinished or idle connection makes room, or the new one is refused.
    pub max_connections_per_peer: Option<usize>,
    /// Longest from accept to a finished opening: the TLS handshake (with `tls`), then
    /// the HTTP/2 preface and SETTINGS (default 10 s); then the connection is closed and
    /// counted (`higgsmeter_collector_connections_closed_total{reason="opening_timeout"}`).
    #[serde(with = "duration_serde")]
    pub handshake_timeout: Duration,
    /// Longest a connection may stay open with no request in flight (default 2 m);
    /// then it is closed and counted (`reason="idle_timeout"`).
    #[serde(with = "duration_serde")]
    pub max_connection_idle: Duration,
    /// Longest a request may take to arrive and be answered (default 30 s).
    #[serde(with = "duration_serde")]
    pub read_timeout: Duration,
    /// TLS (the port is then TLS-only; `client_ca_file`: mutual TLS).
    pub tls: Option<TlsServerSettings>,
    /// `auth.authenticator: bearertokenauth`: requests without the token are refused
    /// (`UNAUTHENTICATED`).
    pub auth: Option<AuthSettings>,
}

impl Default for GrpcReceiver {
    fn default() -> Self {
        GrpcReceiver {
            endpoint: "127.0.0.1:4317".into(),
            max_recv_msg_size_mib: 16,
            max_connections: 1024,
            max_connections_per_peer: None,
            handshake_timeout: Duration::from_secs(10),
            max_connection_idle: Duration::from_secs(120),
            read_timeout: Duration::from_secs(30),
            tls: None,
            auth: None,
        }
    }
}

/// `receivers.otlp.protocols.http`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpReceiver {
    /// `host:port` to listen on (default `127.0.0.1:4318`).
    pub endpoint: String,
    /// Largest accepted body, bytes, before and after decompression (default 16 MiB).
    pub max_request_body_size: u64,
    /// Most connections open at once (default 1024). When all are taken, a new
    /// connection takes the place of the newest one that has not sent its first
    /// request's headers, or else of the newest idle one; when every one is busy it
    /// gets a 503 and is closed, logged and counted
    /// (`higgsmeter_collector_connections_refused_total`).
    pub max_connections: usize,
    /// Most connections open at once from one peer address (1 to `max_connections`;
    /// default 128, or `max_connections` when that is lower); past it the peer's newest
    /// unfinished or idle connection makes room, or the new one gets a 503.
    pub max_connections_per_peer: Option<usize>,
    /// Longest from accept to the first request's headers (the TLS handshake
    /// included), and longest wait for the next request on an idle keep-alive
    /// connection (default 10 s); then the connection is closed and counted
    /// (`higgsmeter_collector_connections_closed_total{reason}`).
    #[serde(with = "duration_serde")]
    pub read_header_timeout: Duration,
    /// Longest wait for a request's whole body (default 30 s); then 408.
    #[serde(with = "duration_serde")]
    pub read_timeout: Duration,
    /// TLS (the port is then TLS-only; `client_ca_file`: mutual TLS).
    pub tls: Option<TlsServerSettings>,
    /// `auth.authenticator: bearertokenauth`: requests without the token are refused
    /// (401).
    pub auth: Option<AuthSettings>,
}

impl Default for HttpReceiver {
    fn default() -> Self {
        HttpReceiver {
            endpoint: "127.0.0.1:4318".into(),
            max_request_body_size: 16 * 1024 * 1024,
            max_connections: 1024,
            max_connections_per_peer: None,
            read_header_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            tls: None,
            auth: None,
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

/// `exporters`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exporters {
    /// `exporters.prometheus`.
    #[serde(default, deserialize_with = "null_is_default")]
    pub prometheus: Option<PrometheusExporter>,
    /// `exporters.otlp`: OTLP/gRPC push.
    #[serde(default)]
    pub otlp: Option<OtlpExporter>,
    /// `exporters.otlphttp`: OTLP/HTTP push.
    #[serde(default)]
    pub otlphttp: Option<OtlpExporter>,
    /// `exporters.prometheusremotewrite`: Prometheus remote write 1.0.
    #[serde(default)]
    pub prometheusremotewrite: Option<RemoteWriteExporter>,
}

impl Exporters {
    fn builtin() -> Exporters {
        Exporters {
            prometheus: Some(PrometheusExporter::default()),
            otlp: None,
            otlphttp: None,
            prometheusremotewrite: None,
        }
    }
}

/// `exporters.prometheus`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusExporter {
    /// `host:port` serving `/metrics` (default `127.0.0.1:9464`).
    pub endpoint: String,
    /// Whether `/metrics/sources` (the per-source view) is served (default true).
    pub sources_view: bool,
    /// TLS: `/metrics` over https only.
    pub tls: Option<TlsServerSettings>,
}

impl Default for PrometheusExporter {
    fn default() -> Self {
        PrometheusExporter {
            endpoint: "127.0.0.1:9464".into(),
            sources_view: true,
            tls: None,
        }
    }
}

/// `exporters.otlp` / `exporters.otlphttp`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpExporter {
    /// The upstream: `http://host:4317` (gRPC) or `http://host:4318` (HTTP; `/v1/metrics`
    /// is appended unless the URL has a path); `https://` for TLS. Required.
    pub endpoint: String,
    /// TLS settings for an `https://` endpoint (default: the system's roots).
    #[serde(default)]
    pub tls: Option<TlsClientSettings>,
    /// Headers sent with every push, e.g. `authorization: "Bearer ..."`.
    #[serde(default)]
    pub headers: Headers,
    /// `otlphttp` only: where traces go (default: `endpoint` with `/v1/traces`, or the
    /// endpoint as written when it has a path other than `/v1/metrics`).
    #[serde(default)]
    pub traces_endpoint: Option<String>,
    /// How often the aggregate is pushed (default 1 s, the catalog's `STATUS_INTERVAL_S`).
    #[serde(default = "default_export_interval", with = "duration_serde")]
    pub interval: Duration,
    /// Per-attempt timeout (default 5 s).
    #[serde(default = "default_timeout", with = "duration_serde")]
    pub timeout: Duration,
    /// `gzip` (default) or `none`.
    #[serde(default)]
    pub compression: Compression,
    /// Also push every live source's series, with its own resource (default false).
    #[serde(default)]
    pub include_sources: bool,
    /// The bounded queue of pending pushes.
    #[serde(default)]
    pub sending_queue: SendingQueue,
    /// Retries with exponential backoff.
    #[serde(default)]
    pub retry_on_failure: RetryOnFailure,
}

/// Headers of an exporter's pushes. Their values are never printed (they hold tokens).
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct Headers(pub BTreeMap<String, String>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// The engine catalog's status interval (1 s): an agent tier adds at most about one
/// interval of delay.
fn default_export_interval() -> Duration {
    Duration::from_secs_f64(higgsmeter_catalog::STATUS_INTERVAL_S)
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

/// Compression of OTLP pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// gzip (the default).
    #[default]
    Gzip,
    /// None.
    None,
}

/// `sending_queue`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SendingQueue {
    /// Pending pushes held while the upstream is down or slow (default 8); when full the
    /// oldest is dropped and its points counted.
    pub queue_size: usize,
    /// Traces pipeline: MiB of spans held for this exporter while the upstream is down
    /// or slow (default 64); when full, senders are told to retry (`UNAVAILABLE` /
    /// 503), so nothing is dropped here.
    pub traces_queue_mib: u64,
}

impl Default for SendingQueue {
    fn default() -> Self {
        SendingQueue {
            queue_size: 8,
            traces_queue_mib: 64,
        }
    }
}

/// `retry_on_failure`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryOnFailure {
    /// First wait after a failed push (default 200 ms); doubles after each failure.
    #[serde(with = "duration_serde")]
    pub initial_interval: Duration,
    /// Longest wait between attempts (default 30 s).
    #[serde(with = "duration_serde")]
    pub max_interval: Duration,
}

impl Default for RetryOnFailure {
    fn default() -> Self {
        RetryOnFailure {
            initial_interval: Duration::from_millis(200),
            max_interval: Duration::from_secs(30),
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
    /// Receiver names (`otlp`).
    #[serde(default)]
    pub receivers: Vec<String>,
    /// Processor names (`higgsmeter`; the aggregation runs whether listed or not).
    #[serde(default)]
    pub processors: Vec<String>,
    /// Exporter names (`prometheus`, `otlp`, `otlphttp`, `prometheusremotewrite`).
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

/// Which OTLP transport an exporter pushes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushProtocol {
    /// `exporters.otlp`.
    Grpc,
    /// `exporters.otlphttp`.
    Http,
}

/// The validated plan: what to start, where.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The gRPC receiver's address and message limit, bytes.
    pub grpc: Option<(SocketAddr, usize)>,
    /// The HTTP receiver's address and body limit, bytes.
    pub http: Option<(SocketAddr, usize)>,
    /// The Prometheus endpoint's address and whether `/metrics/sources` is served.
    pub prometheus: Option<(SocketAddr, bool)>,
    /// OTLP pushes.
    pub pushes: Vec<(PushProtocol, OtlpExporter)>,
    /// Prometheus remote write.
    pub remote_write: Option<RemoteWriteExporter>,
    /// The aggregation.
    pub aggregate: AggregateConfig,
    /// Where the aggregation state is checkpointed (`None`: storage off).
    pub storage: Option<PathBuf>,
    /// Connection limits and timeouts of the receivers.
    pub limits: ReceiverLimits,
    /// `service.shutdown_timeout`.
    pub shutdown_timeout: Duration,
    /// TLS and authentication of the listeners.
    pub security: Security,
    /// The traces pipeline's exporters (empty: traces are refused).
    pub traces: Vec<(PushProtocol, OtlpExporter)>,
}

/// TLS and authentication of the listeners, checked by [`Config::plan`]: the files
/// read, the certificates in date and matching their keys, the authenticator defined
/// and its token read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Security {
    /// `receivers.otlp.protocols.grpc.tls`.
    pub grpc_tls: Option<TlsServerSettings>,
    /// `receivers.otlp.protocols.http.tls`.
    pub http_tls: Option<TlsServerSettings>,
    /// `exporters.prometheus.tls`.
    pub prometheus_tls: Option<TlsServerSettings>,
    /// The authenticator of the gRPC receiver.
    pub grpc_auth: Option<BearerTokenAuthConfig>,
    /// The authenticator of the HTTP receiver.
    pub http_auth: Option<BearerTokenAuthConfig>,
}

impl Security {
    /// One line per secured listener (what `--check-config` prints).
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, tls, auth) in [
            ("OTLP/gRPC receiver", &self.grpc_tls, &self.grpc_auth),
            ("OTLP/HTTP receiver", &self.http_tls, &self.http_auth),
            ("Prometheus endpoint", &self.prometheus_tls, &None),
        ] {
            let tls = match tls {
                Some(t) if t.client_ca_file.is_some() => "mutual TLS",
                Some(_) => "TLS",
                None => "plaintext",
            };
            let auth = if auth.is_some() {
                ", bearer token required"
            } else {
                ""
            };
            lines.push(format!("{name}: {tls}{auth}"));
        }
        lines
    }
}

/// Connection limits and timeouts of the receivers (see [`GrpcReceiver`] and
/// [`HttpReceiver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverLimits {
    /// gRPC: most open connections.
    pub grpc_max_connections: usize,
    /// gRPC: most open connections from one peer address.
    pub grpc_max_connections_per_peer: usize,
    /// gRPC: longest from accept to the end of the TLS handshake and HTTP/2 preface.
    pub grpc_handshake_timeout: Duration,
    /// gRPC: longest a connection may stay open with no request in flight.
    pub grpc_max_connection_idle: Duration,
    /// gRPC: longest request.
    pub grpc_read_timeout: Duration,
    /// HTTP: most open connections.
    pub http_max_connections: usize,
    /// HTTP: most open connections from one peer address.
    pub http_max_connections_per_peer: usize,
    /// HTTP: longest wait for headers (and idle keep-alive).
    pub http_read_header_timeout: Duration,
    /// HTTP: longest wait for a body.
    pub http_read_timeout: Duration,
}

impl Default for ReceiverLimits {
    fn default() -> Self {
        let (g, h) = (GrpcReceiver::default(), HttpReceiver::default());
        ReceiverLimits {
            grpc_max_connections: g.max_connections,
            grpc_max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER.min(g.max_connections),
            grpc_handshake_timeout: g.handshake_timeout,
            grpc_max_connection_idle: g.max_connection_idle,
            grpc_read_timeout: g.read_timeout,
            http_max_connections: h.max_connections,
            http_max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER.min(h.max_connections),
            http_read_header_timeout: h.read_header_timeout,
            http_read_timeout: h.read_timeout,
        }
    }
}

impl Plan {
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

/// Durations written as `200ms`, `5s`, `2m`, `1h` (also `us`, `ns`).
pub(crate) mod duration_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error as _};

    pub(crate) fn parse(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("`{text}` is not a duration; write e.g. 500ms, 5s, 1m or 1h"))?;
        let secs = match unit.trim() {
            "ns" => n / 1e9,
            "us" | "µs" => n / 1e6,
            "ms" => n / 1e3,
            "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            _ => {
                return Err(format!(
                    "`{text}` has no known unit; write e.g. 500ms, 5s, 1m or 1h"
                ));
            }
        };
        Duration::try_from_secs_f64(secs).map_err(|_| format!("`{text}` is out of range"))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(D::Error::custom)
    }

    pub(crate) mod option {
        use super::*;

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Duration>, D::Error> {
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(s) => super::parse(&s).map(Some).map_err(D::Error::custom),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_config_has_both_receivers_and_prometheus() {
        let plan = Config::default().plan().unwrap();
        assert_eq!(plan.grpc.unwrap().0, "127.0.0.1:4317".parse().unwrap());
        assert_eq!(plan.http.unwrap().1, 16 * 1024 * 1024);
        assert_eq!(
            plan.prometheus.unwrap(),
            ("127.0.0.1:9464".parse().unwrap(), true)
        );
        assert!(plan.pushes.is_empty());
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
        assert!(plan.grpc.is_some());
        assert!(plan.http.is_none(), "only the protocols listed are on");
    }

    #[test]
    fn shipped_config_is_valid() {
        let text = include_str!("../../otel-config/collector.yaml");
        let plan = Config::from_yaml(text).unwrap().plan().unwrap();
        assert!(plan.grpc.is_some() && plan.http.is_some() && plan.prometheus.is_some());
        // The built-in defaults, written out.
        assert_eq!(plan.limits, ReceiverLimits::default());
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
        let l = plan.limits;
        assert_eq!(l.grpc_max_connections_per_peer, 128);
        assert_eq!(l.http_max_connections_per_peer, 128);
        assert!(l.grpc_max_connections_per_peer < l.grpc_max_connections / 4);
        assert_eq!(l.grpc_handshake_timeout, Duration::from_secs(10));
        assert_eq!(l.grpc_max_connection_idle, Duration::from_secs(120));
        assert!(l.http_read_header_timeout <= Duration::from_secs(10));
        let c = Config::from_yaml(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        max_connections_per_peer: 8\n        handshake_timeout: 2s\n        max_connection_idle: 30s\n      http:\n        max_connections_per_peer: 4\n",
        )
        .unwrap();
        let l = c.plan().unwrap().limits;
        assert_eq!(l.grpc_max_connections_per_peer, 8);
        assert_eq!(l.grpc_handshake_timeout, Duration::from_secs(2));
        assert_eq!(l.grpc_max_connection_idle, Duration::from_secs(30));
        assert_eq!(l.http_max_connections_per_peer, 4);
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
        assert_eq!(c.plan().unwrap().limits.http_max_connections_per_peer, 4);
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
        assert_eq!(plan.grpc.unwrap().0.port(), 0);
        assert_eq!(plan.pushes.len(), 1);
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
