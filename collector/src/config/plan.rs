//! Validating a configuration into the [`Plan`] the collector runs: addresses resolved,
//! files and certificates read, pipelines checked, every error naming its key's path.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use super::*;

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

/// A per-peer cap: 1 to the receiver's `max_connections`; missing, the default (or
/// `max_connections` when that is lower).
fn check_per_peer(path: &str, per_peer: Option<usize>, max: usize) -> Result<usize, Error> {
    let Some(per_peer) = per_peer else {
        return Ok(DEFAULT_MAX_CONNECTIONS_PER_PEER.min(max));
    };
    if per_peer == 0 || per_peer > max {
        return Err(config_error(
            path,
            format!(
                "must be 1 to the receiver's max_connections ({max}); it is {per_peer} (default {DEFAULT_MAX_CONNECTIONS_PER_PEER})"
            ),
        ));
    }
    Ok(per_peer)
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
            // `.`: the document itself; empty: a key named "" at the top level.
            let path = if path == "." || path.is_empty() {
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
                    // Listed without a section: on with its defaults, as upstream.
                    "file_storage" => true,
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
                if g.max_connections == 0
                    || g.read_timeout.is_zero()
                    || g.handshake_timeout.is_zero()
                    || g.max_connection_idle.is_zero()
                {
                    return Err(config_error(
                        "receivers.otlp.protocols.grpc",
                        "max_connections, handshake_timeout, max_connection_idle and read_timeout must be more than 0",
                    ));
                }
                let grpc_per_peer = check_per_peer(
                    "receivers.otlp.protocols.grpc.max_connections_per_peer",
                    g.max_connections_per_peer,
                    g.max_connections,
                )?;
                plan.limits.grpc_max_connections = g.max_connections;
                plan.limits.grpc_max_connections_per_peer = grpc_per_peer;
                plan.limits.grpc_handshake_timeout = g.handshake_timeout;
                plan.limits.grpc_max_connection_idle = g.max_connection_idle;
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
                let http_per_peer = check_per_peer(
                    "receivers.otlp.protocols.http.max_connections_per_peer",
                    h.max_connections_per_peer,
                    h.max_connections,
                )?;
                plan.limits.http_max_connections = h.max_connections;
                plan.limits.http_max_connections_per_peer = http_per_peer;
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
        // `processors.higgsmeter.storage` decides, whether or not `service.extensions`
        // lists `file_storage` (an upstream-shaped list names only the extensions it
        // configures): the state lives in `extensions.file_storage.directory`, or its
        // default, and the start log and `--check-config` say where.
        if plan.aggregate.storage == "file_storage" {
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
