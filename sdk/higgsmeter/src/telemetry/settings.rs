//! What `init()` reads from the builder and the environment: the resource, the OTLP
//! endpoint and its TLS files, the Prometheus address and the trace settings.

use super::*;

#[derive(Debug, Clone)]
#[cfg_attr(
    not(feature = "otlp"),
    allow(
        dead_code,
        reason = "read by the OTLP exporter; without it an endpoint is an error"
    )
)]
pub(crate) struct OtlpSettings {
    pub(crate) endpoint: Option<String>,
    pub(crate) protocol: Protocol,
    pub(crate) headers: HashMap<String, String>,
    /// Whether the endpoint in effect is `https://`.
    pub(crate) https: bool,
    pub(crate) tls: TlsFiles,
    pub(crate) interval: Duration,
    pub(crate) temporality: Option<Temporality>,
}

pub(super) struct Settings {
    pub(super) disabled: bool,
    pub(super) resource: Resource,
    pub(super) otlp: Option<OtlpSettings>,
    pub(super) prometheus_addr: Option<SocketAddr>,
    pub(super) traces: Option<crate::traces::TraceSettings>,
}

/// The OTLP connection's TLS files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// CA certificate(s) verifying the endpoint.
    pub(crate) certificate: Option<PathBuf>,
    /// Client certificate (mutual TLS).
    pub(crate) client_certificate: Option<PathBuf>,
    /// The client certificate's key.
    pub(crate) client_key: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether any file is set.
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub(crate) fn any(&self) -> bool {
        self.certificate.is_some() || self.client_certificate.is_some() || self.client_key.is_some()
    }
}

pub(crate) fn env(read: bool, name: &str) -> Option<String> {
    if !read {
        return None;
    }
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Settings {
    pub(super) fn resolve(b: &TelemetryBuilder) -> Result<Settings, Error> {
        let read = b.read_env;
        let disabled =
            env(read, "OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));

        let endpoint_set = b.otlp_endpoint.is_some()
            || env(read, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some()
            || env(read, "OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let otlp = if endpoint_set {
            let protocol =
                Protocol::resolve(b.otlp_protocol, read, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")?;
            let interval = match (b.export_interval, env(read, "OTEL_METRIC_EXPORT_INTERVAL")) {
                (Some(i), _) => i,
                (None, Some(v)) => match v.trim().parse::<u64>() {
                    Ok(ms) if ms > 0 => Duration::from_millis(ms),
                    _ => {
                        return Err(Error::InvalidSetting {
                            name: "OTEL_METRIC_EXPORT_INTERVAL",
                            value: v,
                            reason: "expected a positive number of milliseconds",
                        });
                    }
                },
                (None, None) => Duration::from_secs_f64(STATUS_INTERVAL_S),
            };
            let temporality = match (
                b.temporality,
                env(read, "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"),
            ) {
                (Some(t), _) => Some(t),
                (None, Some(v)) => Some(match v.trim().to_ascii_lowercase().as_str() {
                    "cumulative" => Temporality::Cumulative,
                    "delta" => Temporality::Delta,
                    "lowmemory" => Temporality::LowMemory,
                    _ => {
                        return Err(Error::InvalidSetting {
                            name: "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                            value: v,
                            reason: "expected `cumulative`, `delta` or `lowmemory`",
                        });
                    }
                }),
                (None, None) => None,
            };
            let endpoint = b.otlp_endpoint.as_ref().map(|e| match protocol {
                Protocol::HttpProtobuf => http_metrics_url(e),
                Protocol::Grpc => e.clone(),
            });
            // The endpoint in effect (the OTLP exporter reads the variables itself).
            let https = b
                .otlp_endpoint
                .clone()
                .or_else(|| env(read, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
                .or_else(|| env(read, "OTEL_EXPORTER_OTLP_ENDPOINT"))
                .is_some_and(|e| e.trim().to_ascii_lowercase().starts_with("https://"));
            let file = |set: &Option<PathBuf>, var: &str| {
                set.clone().or_else(|| {
                    env(read, &format!("OTEL_EXPORTER_OTLP_METRICS_{var}"))
                        .or_else(|| env(read, &format!("OTEL_EXPORTER_OTLP_{var}")))
                        .map(PathBuf::from)
                })
            };
            let t = &b.otlp_tls;
            let tls = TlsFiles {
                certificate: file(&t.certificate, "CERTIFICATE"),
                client_certificate: file(&t.client_certificate, "CLIENT_CERTIFICATE"),
                client_key: file(&t.client_key, "CLIENT_KEY"),
            };
            Some(OtlpSettings {
                endpoint,
                protocol,
                headers: b.otlp_headers.clone(),
                https,
                tls,
                interval,
                temporality,
            })
        } else {
            None
        };

        let prometheus_addr = match (b.prometheus_addr, env(read, PROMETHEUS_ADDR_ENV)) {
            (Some(a), _) => Some(a),
            (None, Some(v)) => {
                Some(
                    v.trim()
                        .parse::<SocketAddr>()
                        .map_err(|_| Error::InvalidSetting {
                            name: "HIGGSMETER_PROMETHEUS_ADDR",
                            value: v.clone(),
                            reason: "expected IP:PORT, e.g. 127.0.0.1:9464",
                        })?,
                )
            }
            (None, None) => None,
        };
        #[cfg(not(feature = "prometheus"))]
        if prometheus_addr.is_some() {
            return Err(Error::InvalidSetting {
                name: "HIGGSMETER_PROMETHEUS_ADDR",
                value: format!("{prometheus_addr:?}"),
                reason: "this build has no Prometheus endpoint: enable higgsmeter's `prometheus` feature",
            });
        }
        #[cfg(not(feature = "otlp"))]
        if otlp.is_some() {
            return Err(Error::InvalidSetting {
                name: "OTEL_EXPORTER_OTLP_ENDPOINT",
                value: String::new(),
                reason: "this build has no OTLP exporter: enable higgsmeter's `otlp` feature",
            });
        }

        Ok(Settings {
            disabled,
            resource: resource(b, read)?,
            otlp,
            prometheus_addr,
            traces: crate::traces::resolve(b, read)?,
        })
    }
}

/// `http://host:4318` → `http://host:4318/v1/metrics`; a URL with a path is kept.
pub(super) fn http_metrics_url(base: &str) -> String {
    let trimmed = base.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/metrics")
    }
}

fn resource(b: &TelemetryBuilder, read: bool) -> Result<Resource, Error> {
    let mut defaults = vec![
        KeyValue::new("service.instance.id", instance_id()),
        KeyValue::new("host.name", host_name()),
        KeyValue::new("process.pid", i64::from(std::process::id())),
        KeyValue::new("telemetry.sdk.name", "higgsmeter"),
        KeyValue::new("telemetry.sdk.language", "rust"),
        KeyValue::new("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ];
    for (var, key) in [
        ("RANK", "rank"),
        ("WORLD_SIZE", "world_size"),
        ("LOCAL_RANK", "local_rank"),
    ] {
        if let Some(v) = env(read, var) {
            let n = v.trim().parse::<i64>().map_err(|_| Error::InvalidSetting {
                name: match var {
                    "RANK" => "RANK",
                    "WORLD_SIZE" => "WORLD_SIZE",
                    _ => "LOCAL_RANK",
                },
                value: v.clone(),
                reason: "expected a whole number",
            })?;
            defaults.push(KeyValue::new(key, n));
        }
    }
    let mut builder = Resource::builder_empty().with_attributes(defaults);
    if read {
        builder = builder.with_detector(Box::new(EnvResourceDetector::new()));
    }
    let from_env = builder.build();
    let service_name = b
        .service_name
        .clone()
        .or_else(|| env(read, "OTEL_SERVICE_NAME"))
        .or_else(|| {
            from_env
                .get(&opentelemetry::Key::from_static_str("service.name"))
                .map(|v| v.to_string())
        })
        .unwrap_or_else(exe_name);
    Ok(Resource::builder_empty()
        .with_attributes(
            from_env
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes(b.attributes.iter().cloned())
        .with_service_name(service_name)
        .build())
}

fn exe_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown_service".to_owned())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// A random (version 4) UUID for `service.instance.id`.
pub(super) fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(seed);
        h.write_u32(std::process::id());
        h.write_usize(i);
        *w = h.finish();
    }
    let hi = (words[0] & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    let lo = (words[1] & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}
