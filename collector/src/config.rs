//! The collector's configuration: built-in defaults, or a YAML file in the shape of the
//! OpenTelemetry Collector's (`receivers`, `processors`, `exporters`, `service`), with
//! its key names for the parts implemented here. Every key and default is documented
//! in `otel-config/README.md`; unknown keys are errors naming the key's path.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::aggregate::AggregateConfig;
pub use crate::auth::{AuthSettings, BearerTokenAuthConfig};
use crate::error::Error;
pub use crate::exporters::remote_write::RemoteWriteExporter;
pub use crate::storage::FileStorageConfig;
pub use crate::tls::{TlsClientSettings, TlsServerSettings};

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
    /// Missing: the default directory (`higgsmeter-data` in the working directory).
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

/// `receivers.otlp.protocols.grpc`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcReceiver {
    /// `host:port` to listen on (default `127.0.0.1:4317`; port 0 picks a free port).
    pub endpoint: String,
    /// Largest accepted message, MiB, after decompression (default 16).
    pub max_recv_msg_size_mib: u64,
    /// Most connections open at once (default 1024); more are closed at once, logged
    /// and counted (`higgsmeter_collector_connections_refused_total`).
    pub max_connections: usize,
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
    /// Most connections open at once (default 1024); more get a 503 and are closed,
    /// logged and counted (`higgsmeter_collector_connections_refused_total`).
    pub max_connections: usize,
    /// Longest wait for a request's headers, and for the next request on an idle
    /// keep-alive connection (default 10 s); then the connection is closed.
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
    /// (and `file_storage` on its defaults).
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
    /// gRPC: longest request.
    pub grpc_read_timeout: Duration,
    /// HTTP: most open connections.
    pub http_max_connections: usize,
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
            grpc_read_timeout: g.read_timeout,
            http_max_connections: h.max_connections,
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
                dir.join(crate::storage::STATE_FILE).display(),
                self.aggregate.checkpoint_interval
            ),
            None => "aggregation state: none (processors.higgsmeter.storage: none; a restart starts the fleet series over)".to_owned(),
        }
    }
}

fn config_error(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Config {
        path: path.into(),
        message: message.into(),
    }
}

fn resolve(path: &str, endpoint: &str) -> Result<SocketAddr, Error> {
    let mut addrs = endpoint.to_socket_addrs().map_err(|e| {
        config_error(
            path,
            format!("`{endpoint}` is not a host:port address ({e}); write e.g. 127.0.0.1:4317"),
        )
    })?;
    addrs
        .next()
        .ok_or_else(|| config_error(path, format!("`{endpoint}` resolves to no address")))
}

fn check_url(path: &str, url: &str) -> Result<(), Error> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| {
            config_error(path, format!("`{url}` must start with http:// or https://"))
        })?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || !authority.contains(':') {
        return Err(config_error(
            path,
            format!("`{url}` needs a host and a port, e.g. http://127.0.0.1:4317"),
        ));
    }
    Ok(())
}

impl Config {
    /// Reads and validates a YAML file.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadConfig {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses YAML text (not yet validated: see [`Config::plan`]).
    pub fn from_yaml(text: &str) -> Result<Config, Error> {
        let value: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| Error::Yaml {
            message: e.to_string(),
        })?;
        let value = if value.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            value
        };
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." {
                "(top level)".to_owned()
            } else {
                path
            };
            config_error(path, e.into_inner().to_string())
        })
    }

    /// Applies command-line settings.
    pub fn apply(&mut self, o: &Overrides) {
        let mut add_receiver = false;
        if let Some(ep) = &o.grpc {
            let otlp = self.receivers.otlp.get_or_insert_with(|| OtlpReceiver {
                protocols: Protocols::default(),
            });
            otlp.protocols
                .grpc
                .get_or_insert_with(GrpcReceiver::default)
                .endpoint = ep.clone();
            add_receiver = true;
        }
        if let Some(ep) = &o.http {
            let otlp = self.receivers.otlp.get_or_insert_with(|| OtlpReceiver {
                protocols: Protocols::default(),
            });
            otlp.protocols
                .http
                .get_or_insert_with(HttpReceiver::default)
                .endpoint = ep.clone();
            add_receiver = true;
        }
        if let Some(ep) = &o.prometheus {
            self.exporters
                .prometheus
                .get_or_insert_with(PrometheusExporter::default)
                .endpoint = ep.clone();
            self.add_to_pipeline(false, "prometheus");
        }
        for (ep, http) in [(&o.otlp_endpoint, false), (&o.otlphttp_endpoint, true)] {
            let Some(ep) = ep else { continue };
            let slot = if http {
                &mut self.exporters.otlphttp
            } else {
                &mut self.exporters.otlp
            };
            match slot {
                Some(e) => e.endpoint = ep.clone(),
                None => {
                    *slot = Some(OtlpExporter {
                        endpoint: ep.clone(),
                        tls: None,
                        headers: Headers::default(),
                        traces_endpoint: None,
                        interval: default_export_interval(),
                        timeout: default_timeout(),
                        compression: Compression::default(),
                        include_sources: false,
                        sending_queue: SendingQueue::default(),
                        retry_on_failure: RetryOnFailure::default(),
                    })
                }
            }
            self.add_to_pipeline(false, if http { "otlphttp" } else { "otlp" });
        }
        if add_receiver {
            self.add_to_pipeline(true, "otlp");
        }
        match o.storage.as_deref() {
            None => {}
            Some("none") => {
                if let Some(agg) = &mut self.processors.higgsmeter {
                    agg.storage = "none".to_owned();
                }
            }
            Some(dir) => {
                self.extensions
                    .file_storage
                    .get_or_insert_with(FileStorageConfig::default)
                    .directory = PathBuf::from(dir);
                if let Some(agg) = &mut self.processors.higgsmeter {
                    agg.storage = "file_storage".to_owned();
                }
                if let Some(list) = &mut self.service.extensions
                    && !list.iter().any(|e| e == "file_storage")
                {
                    list.push("file_storage".to_owned());
                }
            }
        }
    }

    fn add_to_pipeline(&mut self, receiver: bool, name: &str) {
        if let Some(p) = &mut self.service.pipelines.metrics {
            let list = if receiver {
                &mut p.receivers
            } else {
                &mut p.exporters
            };
            if !list.iter().any(|n| n == name) {
                list.push(name.to_owned());
            }
        }
    }

    /// Validates everything and resolves addresses, before anything starts.
    pub fn plan(&self) -> Result<Plan, Error> {
        let pipeline = self
            .service
            .pipelines
            .metrics
            .clone()
            .unwrap_or_else(|| Pipeline {
                receivers: self
                    .receivers
                    .otlp
                    .iter()
                    .map(|_| "otlp".to_owned())
                    .collect(),
                processors: vec!["higgsmeter".to_owned()],
                exporters: [
                    self.exporters.prometheus.as_ref().map(|_| "prometheus"),
                    self.exporters.otlp.as_ref().map(|_| "otlp"),
                    self.exporters.otlphttp.as_ref().map(|_| "otlphttp"),
                    self.exporters
                        .prometheusremotewrite
                        .as_ref()
                        .map(|_| "prometheusremotewrite"),
                ]
                .into_iter()
                .flatten()
                .map(String::from)
                .collect(),
            });
        let mut plan = Plan {
            grpc: None,
            http: None,
            prometheus: None,
            pushes: Vec::new(),
            remote_write: None,
            aggregate: AggregateConfig::default(),
            storage: None,
            limits: ReceiverLimits::default(),
            shutdown_timeout: self.service.shutdown_timeout,
            security: Security::default(),
            traces: Vec::new(),
        };
        if let Some(list) = &self.service.extensions {
            for (i, name) in list.iter().enumerate() {
                let configured = match name.as_str() {
                    "file_storage" => self.extensions.file_storage.is_some(),
                    "bearertokenauth" => self.extensions.bearertokenauth.is_some(),
                    _ => {
                        return Err(config_error(
                            format!("service.extensions[{i}]"),
                            format!(
                                "unknown extension `{name}`: this collector has `file_storage` and `bearertokenauth`"
                            ),
                        ));
                    }
                };
                if !configured {
                    return Err(config_error(
                        format!("service.extensions[{i}]"),
                        format!("extension `{name}` is not configured under `extensions`"),
                    ));
                }
            }
        }
        if self.service.shutdown_timeout.is_zero() {
            return Err(config_error(
                "service.shutdown_timeout",
                "must be more than 0",
            ));
        }
        for (i, name) in pipeline.receivers.iter().enumerate() {
            let path = format!("service.pipelines.metrics.receivers[{i}]");
            if name != "otlp" {
                return Err(config_error(
                    path,
                    format!("unknown receiver `{name}`: this collector has `otlp`"),
                ));
            }
            let Some(otlp) = &self.receivers.otlp else {
                return Err(config_error(
                    path,
                    "receiver `otlp` is not configured under `receivers`",
                ));
            };
            if otlp.protocols.grpc.is_none() && otlp.protocols.http.is_none() {
                return Err(config_error(
                    "receivers.otlp.protocols",
                    "turn on `grpc`, `http` or both",
                ));
            }
            if let Some(g) = &otlp.protocols.grpc {
                let addr = resolve("receivers.otlp.protocols.grpc.endpoint", &g.endpoint)?;
                if g.max_recv_msg_size_mib == 0 || g.max_recv_msg_size_mib > 4096 {
                    return Err(config_error(
                        "receivers.otlp.protocols.grpc.max_recv_msg_size_mib",
                        "must be 1 to 4096",
                    ));
                }
                plan.grpc = Some((addr, (g.max_recv_msg_size_mib * 1024 * 1024) as usize));
                if g.max_connections == 0 || g.read_timeout.is_zero() {
                    return Err(config_error(
                        "receivers.otlp.protocols.grpc",
                        "max_connections and read_timeout must be more than 0",
                    ));
                }
                plan.limits.grpc_max_connections = g.max_connections;
                plan.limits.grpc_read_timeout = g.read_timeout;
                plan.security.grpc_tls =
                    self.server_tls("receivers.otlp.protocols.grpc.tls", &g.tls)?;
                plan.security.grpc_auth =
                    self.authenticator("receivers.otlp.protocols.grpc.auth", &g.auth)?;
            }
            if let Some(h) = &otlp.protocols.http {
                let addr = resolve("receivers.otlp.protocols.http.endpoint", &h.endpoint)?;
                if h.max_request_body_size < 1024 {
                    return Err(config_error(
                        "receivers.otlp.protocols.http.max_request_body_size",
                        "must be at least 1024 bytes",
                    ));
                }
                plan.http = Some((
                    addr,
                    usize::try_from(h.max_request_body_size).unwrap_or(usize::MAX),
                ));
                if h.max_connections == 0
                    || h.read_header_timeout.is_zero()
                    || h.read_timeout.is_zero()
                {
                    return Err(config_error(
                        "receivers.otlp.protocols.http",
                        "max_connections, read_header_timeout and read_timeout must be more than 0",
                    ));
                }
                plan.limits.http_max_connections = h.max_connections;
                plan.limits.http_read_header_timeout = h.read_header_timeout;
                plan.limits.http_read_timeout = h.read_timeout;
                plan.security.http_tls =
                    self.server_tls("receivers.otlp.protocols.http.tls", &h.tls)?;
                plan.security.http_auth =
                    self.authenticator("receivers.otlp.protocols.http.auth", &h.auth)?;
            }
        }
        for (i, name) in pipeline.processors.iter().enumerate() {
            if name != "higgsmeter" {
                return Err(config_error(
                    format!("service.pipelines.metrics.processors[{i}]"),
                    format!(
                        "unknown processor `{name}`: this collector has `higgsmeter` (the aggregation)"
                    ),
                ));
            }
        }
        if let Some(agg) = &self.processors.higgsmeter {
            agg.validate().map_err(|(p, m)| config_error(p, m))?;
            plan.aggregate = agg.clone();
        }
        if plan.aggregate.storage == "file_storage" {
            if let Some(list) = &self.service.extensions
                && !list.iter().any(|e| e == "file_storage")
            {
                return Err(config_error(
                    "processors.higgsmeter.storage",
                    "`file_storage` is not listed in service.extensions: list it there, or write `storage: none`",
                ));
            }
            let dir = self
                .extensions
                .file_storage
                .clone()
                .unwrap_or_default()
                .directory;
            if dir.as_os_str().is_empty() {
                return Err(config_error(
                    "extensions.file_storage.directory",
                    "must name a directory",
                ));
            }
            plan.storage = Some(dir);
        }
        for (i, name) in pipeline.exporters.iter().enumerate() {
            let path = format!("service.pipelines.metrics.exporters[{i}]");
            let missing = || {
                config_error(
                    path.clone(),
                    format!("exporter `{name}` is not configured under `exporters`"),
                )
            };
            match name.as_str() {
                "prometheus" => {
                    let p = self.exporters.prometheus.as_ref().ok_or_else(missing)?;
                    plan.prometheus = Some((
                        resolve("exporters.prometheus.endpoint", &p.endpoint)?,
                        p.sources_view,
                    ));
                    plan.security.prometheus_tls =
                        self.server_tls("exporters.prometheus.tls", &p.tls)?;
                }
                "otlp" | "otlphttp" => {
                    let (e, proto) = if name == "otlp" {
                        (
                            self.exporters.otlp.as_ref().ok_or_else(missing)?,
                            PushProtocol::Grpc,
                        )
                    } else {
                        (
                            self.exporters.otlphttp.as_ref().ok_or_else(missing)?,
                            PushProtocol::Http,
                        )
                    };
                    check_url(&format!("exporters.{name}.endpoint"), &e.endpoint)?;
                    check_exporter_security(name, &e.endpoint, &e.tls, &e.headers)?;
                    check_push(
                        &format!("exporters.{name}"),
                        e.interval,
                        e.timeout,
                        &e.sending_queue,
                        &e.retry_on_failure,
                    )?;
                    plan.pushes.push((proto, e.clone()));
                }
                "prometheusremotewrite" => {
                    let e = self
                        .exporters
                        .prometheusremotewrite
                        .as_ref()
                        .ok_or_else(missing)?;
                    e.validate()?;
                    check_exporter_security(name, &e.endpoint, &e.tls, &e.headers)?;
                    plan.remote_write = Some(e.clone());
                }
                other => {
                    return Err(config_error(
                        path,
                        format!(
                            "unknown exporter `{other}`: this collector has `prometheus`, `otlp`, `otlphttp` and `prometheusremotewrite`"
                        ),
                    ));
                }
            }
        }
        if plan.grpc.is_none() && plan.http.is_none() {
            return Err(config_error(
                "service.pipelines.metrics.receivers",
                "no receiver: nothing could send data",
            ));
        }
        if let Some(traces) = &self.service.pipelines.traces {
            plan.traces = self.traces_plan(traces)?;
        }
        Ok(plan)
    }

    /// The traces pipeline: `otlp` in (the metrics receivers' listeners), `batch` the
    /// only processor (batching is always on), `otlp` / `otlphttp` out.
    fn traces_plan(&self, p: &Pipeline) -> Result<Vec<(PushProtocol, OtlpExporter)>, Error> {
        let path = "service.pipelines.traces";
        if p.receivers.is_empty() || p.exporters.is_empty() {
            return Err(config_error(
                path,
                "list `receivers: [otlp]` and at least one exporter (`otlp`, `otlphttp`)",
            ));
        }
        for (i, name) in p.receivers.iter().enumerate() {
            if name != "otlp" || self.receivers.otlp.is_none() {
                return Err(config_error(
                    format!("{path}.receivers[{i}]"),
                    format!("receiver `{name}`: traces come in on the configured `otlp` receiver"),
                ));
            }
        }
        for (i, name) in p.processors.iter().enumerate() {
            if name != "batch" {
                return Err(config_error(
                    format!("{path}.processors[{i}]"),
                    format!("unknown traces processor `{name}`: only `batch` (always on)"),
                ));
            }
        }
        let mut out = Vec::new();
        for (i, name) in p.exporters.iter().enumerate() {
            let epath = format!("{path}.exporters[{i}]");
            let (e, proto) = match name.as_str() {
                "otlp" => (&self.exporters.otlp, PushProtocol::Grpc),
                "otlphttp" => (&self.exporters.otlphttp, PushProtocol::Http),
                other => {
                    return Err(config_error(
                        epath,
                        format!("unknown traces exporter `{other}`: `otlp` or `otlphttp`"),
                    ));
                }
            };
            let Some(e) = e else {
                return Err(config_error(
                    epath,
                    format!("exporter `{name}` is not configured under `exporters`"),
                ));
            };
            check_url(&format!("exporters.{name}.endpoint"), &e.endpoint)?;
            if let Some(t) = &e.traces_endpoint {
                check_url(&format!("exporters.{name}.traces_endpoint"), t)?;
            }
            check_exporter_security(name, &e.endpoint, &e.tls, &e.headers)?;
            if e.sending_queue.traces_queue_mib == 0 || e.timeout.is_zero() {
                return Err(config_error(
                    format!("exporters.{name}.sending_queue.traces_queue_mib"),
                    "traces_queue_mib and timeout must be more than 0",
                ));
            }
            out.push((proto, e.clone()));
        }
        Ok(out)
    }

    /// Checks a listener's `tls` (files, key match, dates).
    fn server_tls(
        &self,
        path: &str,
        tls: &Option<TlsServerSettings>,
    ) -> Result<Option<TlsServerSettings>, Error> {
        if let Some(t) = tls {
            crate::tls::server_config(path, t, &[])?;
        }
        Ok(tls.clone())
    }

    /// Resolves a receiver's `auth.authenticator` to its configured extension and
    /// reads its token.
    fn authenticator(
        &self,
        path: &str,
        auth: &Option<AuthSettings>,
    ) -> Result<Option<BearerTokenAuthConfig>, Error> {
        let Some(auth) = auth else { return Ok(None) };
        let path = format!("{path}.authenticator");
        if auth.authenticator != "bearertokenauth" {
            return Err(config_error(
                path,
                format!(
                    "authenticator `{}` is not defined: this collector has `bearertokenauth` (configure it under extensions)",
                    auth.authenticator
                ),
            ));
        }
        let Some(cfg) = &self.extensions.bearertokenauth else {
            return Err(config_error(
                path,
                "authenticator `bearertokenauth` is not defined: configure extensions.bearertokenauth (token or filename)",
            ));
        };
        if let Some(list) = &self.service.extensions
            && !list.iter().any(|e| e == "bearertokenauth")
        {
            return Err(config_error(
                path,
                "`bearertokenauth` is not listed in service.extensions: list it there",
            ));
        }
        cfg.token()?;
        Ok(Some(cfg.clone()))
    }
}

/// A pushing exporter's `interval`, `timeout`, `sending_queue.queue_size` and
/// `retry_on_failure.initial_interval` (`prefix`: its key).
pub(crate) fn check_push(
    prefix: &str,
    interval: Duration,
    timeout: Duration,
    queue: &SendingQueue,
    retry: &RetryOnFailure,
) -> Result<(), Error> {
    if interval.is_zero() || timeout.is_zero() {
        return Err(config_error(
            format!("{prefix}.interval"),
            "interval and timeout must be more than 0",
        ));
    }
    if queue.queue_size == 0 {
        return Err(config_error(
            format!("{prefix}.sending_queue.queue_size"),
            "must be at least 1",
        ));
    }
    if retry.initial_interval.is_zero() {
        return Err(config_error(
            format!("{prefix}.retry_on_failure.initial_interval"),
            "must be more than 0",
        ));
    }
    Ok(())
}

/// An exporter's `tls` and `headers`: TLS only with `https://`, files checked, header
/// names and values sendable.
fn check_exporter_security(
    name: &str,
    endpoint: &str,
    tls: &Option<TlsClientSettings>,
    headers: &Headers,
) -> Result<(), Error> {
    let https = endpoint.starts_with("https://");
    let path = format!("exporters.{name}.tls");
    match tls {
        Some(t) if https && t.insecure => {
            return Err(config_error(
                format!("{path}.insecure"),
                "is true but the endpoint is https://: write http:// for plaintext, or drop insecure",
            ));
        }
        Some(t) if !https && !t.insecure && *t != TlsClientSettings::default() => {
            return Err(config_error(
                path,
                format!(
                    "is set but the endpoint `{endpoint}` is http:// (plaintext): write https://"
                ),
            ));
        }
        Some(t) if https => {
            crate::tls::client_config(&path, t, &[])?;
        }
        None if https => {
            crate::tls::client_config(&path, &TlsClientSettings::default(), &[])?;
        }
        _ => {}
    }
    for (k, v) in &headers.0 {
        let hpath = format!("exporters.{name}.headers.{k}");
        if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
            return Err(config_error(hpath, "is not a valid header name"));
        }
        if http::HeaderValue::from_str(v).is_err() {
            return Err(config_error(
                hpath,
                "is not a valid header value (visible ASCII)",
            ));
        }
    }
    Ok(())
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
