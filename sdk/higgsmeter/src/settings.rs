//! What `init()` resolves, once, from the builder's requests and the environment: the
//! resource, the OTLP metric push (endpoint, protocol, headers, TLS files, interval,
//! temporality), the Prometheus address and the trace settings. Every variable of the
//! crate docs' table is read here and nowhere else; each pipeline is handed its part.
//!
//! A leaf: it uses nothing of the crate but [`Error`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use higgsmeter_catalog::{JOB_ID_ATTRIBUTE, JOB_INCARNATION_ATTRIBUTE, STATUS_INTERVAL_S};
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::resource::EnvResourceDetector;

use crate::error::Error;

#[cfg(feature = "traces")]
mod traces;
#[cfg(not(feature = "traces"))]
#[path = "settings/traces_off.rs"]
mod traces;

pub(crate) use traces::{TraceRequests, TraceSettings};

/// The environment variable naming the in-process Prometheus endpoint's address.
const PROMETHEUS_ADDR_ENV: &str = "HIGGSMETER_PROMETHEUS_ADDR";

/// torchrun's `TORCHELASTIC_RUN_ID` when no `--rdzv-id` was given: every such job has
/// it, so it names none.
const TORCHRUN_DEFAULT_RUN_ID: &str = "none";

/// What this build can export, by the crate's features: asking for more is an error
/// from `init()`, before anything starts.
const BUILT_OTLP: bool = cfg!(feature = "otlp");
/// See [`BUILT_OTLP`].
const BUILT_PROMETHEUS: bool = cfg!(feature = "prometheus");

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP/gRPC (tonic), usually port 4317.
    Grpc,
    /// OTLP/HTTP with binary protobuf bodies, usually port 4318 (`/v1/metrics`).
    HttpProtobuf,
}

impl Protocol {
    fn parse(value: &str) -> Result<Protocol, Error> {
        match value.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            other => Err(Error::InvalidSetting {
                name: "OTEL_EXPORTER_OTLP_PROTOCOL",
                value: other.to_owned(),
                reason: "expected `grpc` or `http/protobuf`",
            }),
        }
    }

    /// The protocol of one signal's exporter: the builder's `chosen`, else the signal's
    /// variable (`OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, `…_TRACES_PROTOCOL`), else
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
    fn resolve(chosen: Option<Protocol>, read: bool, signal_var: &str) -> Result<Protocol, Error> {
        if let Some(p) = chosen {
            return Ok(p);
        }
        match env(read, signal_var).or_else(|| env(read, "OTEL_EXPORTER_OTLP_PROTOCOL")) {
            Some(v) => Protocol::parse(&v),
            None => Ok(Protocol::HttpProtobuf),
        }
    }
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
    pub(crate) fn any(&self) -> bool {
        self.certificate.is_some() || self.client_certificate.is_some() || self.client_key.is_some()
    }

    /// Each file: the one set here, else `OTEL_EXPORTER_OTLP_{SIGNAL}_{FILE}`, else
    /// `OTEL_EXPORTER_OTLP_{FILE}`.
    fn resolve(&self, read: bool, signal: &str) -> TlsFiles {
        let file = |set: &Option<PathBuf>, var: &str| {
            set.clone().or_else(|| {
                env(read, &format!("OTEL_EXPORTER_OTLP_{signal}_{var}"))
                    .or_else(|| env(read, &format!("OTEL_EXPORTER_OTLP_{var}")))
                    .map(PathBuf::from)
            })
        };
        TlsFiles {
            certificate: file(&self.certificate, "CERTIFICATE"),
            client_certificate: file(&self.client_certificate, "CLIENT_CERTIFICATE"),
            client_key: file(&self.client_key, "CLIENT_KEY"),
        }
    }
}

/// What the builder was asked for (its `with_*` setters), before the environment is
/// read: plain data, resolved once by [`Requests::resolve`].
#[derive(Debug)]
pub(crate) struct Requests {
    /// `service.name`.
    pub(crate) service_name: Option<String>,
    /// `service.name` when neither this builder nor the environment names one.
    pub(crate) default_service_name: Option<String>,
    /// Resource attributes that win over the environment's and the defaults.
    pub(crate) attributes: Vec<KeyValue>,
    /// The OTLP base endpoint (metrics; traces fall back on it).
    pub(crate) otlp_endpoint: Option<String>,
    /// The OTLP transport (metrics and traces).
    pub(crate) otlp_protocol: Option<Protocol>,
    /// Headers of every OTLP export (metrics and traces).
    pub(crate) otlp_headers: HashMap<String, String>,
    /// TLS files of the OTLP connections (metrics and traces).
    pub(crate) otlp_tls: TlsFiles,
    /// How often metrics are pushed.
    pub(crate) export_interval: Option<Duration>,
    /// The OTLP metrics' temporality.
    pub(crate) temporality: Option<Temporality>,
    /// Where the in-process Prometheus endpoint listens.
    pub(crate) prometheus_addr: Option<SocketAddr>,
    /// The trace settings (the `with_traces*` setters).
    pub(crate) traces: TraceRequests,
    /// Whether the environment is read at all.
    pub(crate) read_env: bool,
}

impl Default for Requests {
    fn default() -> Self {
        Requests {
            service_name: None,
            default_service_name: None,
            attributes: Vec::new(),
            otlp_endpoint: None,
            otlp_protocol: None,
            otlp_headers: HashMap::new(),
            otlp_tls: TlsFiles::default(),
            export_interval: None,
            temporality: None,
            prometheus_addr: None,
            traces: TraceRequests::default(),
            read_env: true,
        }
    }
}

/// The OTLP metric push, resolved.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(feature = "otlp"),
    allow(
        dead_code,
        reason = "read by the OTLP exporter; a build without it refuses an endpoint"
    )
)]
pub(crate) struct OtlpSettings {
    /// The endpoint the builder set (`/v1/metrics` appended for HTTP); `None`: the
    /// OTLP exporter reads the variables itself.
    pub(crate) endpoint: Option<String>,
    pub(crate) protocol: Protocol,
    pub(crate) headers: HashMap<String, String>,
    pub(crate) tls: TlsFiles,
    /// TLS is on: an `https://` endpoint, or a TLS file set.
    pub(crate) tls_on: bool,
    pub(crate) interval: Duration,
    pub(crate) temporality: Option<Temporality>,
}

/// Everything the pipelines need, resolved once; each pipeline takes its part.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// `OTEL_SDK_DISABLED=true`: track, export nothing.
    pub(crate) disabled: bool,
    /// The resource of metrics and spans.
    pub(crate) resource: Resource,
    /// The OTLP metric push, when an endpoint is set.
    pub(crate) otlp: Option<OtlpSettings>,
    /// The Prometheus endpoint's address, when set.
    pub(crate) prometheus_addr: Option<SocketAddr>,
    /// The trace pipeline's settings, when traces are on.
    pub(crate) traces: Option<TraceSettings>,
}

/// A variable's value, unless the environment is not read or the value is blank.
fn env(read: bool, name: &str) -> Option<String> {
    if !read {
        return None;
    }
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Reads `OTEL_TRACES_EXPORTER`: `Some(true)` for `otlp`, `Some(false)` for `none`.
fn exporter_from_env(read: bool) -> Result<Option<bool>, Error> {
    match env(read, "OTEL_TRACES_EXPORTER") {
        None => Ok(None),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "otlp" => Ok(Some(true)),
            "none" => Ok(Some(false)),
            _ => Err(Error::InvalidSetting {
                name: "OTEL_TRACES_EXPORTER",
                value: v,
                reason: "expected `otlp` (export spans over OTLP) or `none`",
            }),
        },
    }
}

impl Requests {
    /// Reads the environment (unless `read_env` is off) under the requests, checks
    /// every value, and says what each pipeline is to do.
    pub(crate) fn resolve(&self) -> Result<Resolved, Error> {
        let read = self.read_env;
        let disabled =
            env(read, "OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let otlp = self.otlp(read)?;
        let prometheus_addr = self.prometheus_addr(read)?;
        if !BUILT_PROMETHEUS && prometheus_addr.is_some() {
            return Err(Error::InvalidSetting {
                name: "HIGGSMETER_PROMETHEUS_ADDR",
                value: format!("{prometheus_addr:?}"),
                reason: "this build has no Prometheus endpoint: enable higgsmeter's `prometheus` feature",
            });
        }
        if !BUILT_OTLP && otlp.is_some() {
            return Err(Error::InvalidSetting {
                name: "OTEL_EXPORTER_OTLP_ENDPOINT",
                value: String::new(),
                reason: "this build has no OTLP exporter: enable higgsmeter's `otlp` feature",
            });
        }
        Ok(Resolved {
            disabled,
            resource: resource(self, read)?,
            otlp,
            prometheus_addr,
            traces: traces::resolve(self, read)?,
        })
    }

    /// The OTLP metric push: on when an endpoint is set (here or in the environment).
    fn otlp(&self, read: bool) -> Result<Option<OtlpSettings>, Error> {
        let endpoint_set = self.otlp_endpoint.is_some()
            || env(read, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some()
            || env(read, "OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        if !endpoint_set {
            return Ok(None);
        }
        let protocol = Protocol::resolve(
            self.otlp_protocol,
            read,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        )?;
        let interval = match (
            self.export_interval,
            env(read, "OTEL_METRIC_EXPORT_INTERVAL"),
        ) {
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
            self.temporality,
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
        let endpoint = self.otlp_endpoint.as_ref().map(|e| match protocol {
            Protocol::HttpProtobuf => http_metrics_url(e),
            Protocol::Grpc => e.clone(),
        });
        // The endpoint in effect (the OTLP exporter reads the variables itself).
        let https = self
            .otlp_endpoint
            .clone()
            .or_else(|| env(read, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
            .or_else(|| env(read, "OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some_and(|e| e.trim().to_ascii_lowercase().starts_with("https://"));
        let tls = self.otlp_tls.resolve(read, "METRICS");
        Ok(Some(OtlpSettings {
            endpoint,
            protocol,
            headers: self.otlp_headers.clone(),
            tls_on: https || tls.any(),
            tls,
            interval,
            temporality,
        }))
    }

    /// The Prometheus endpoint's address: the builder's, else `HIGGSMETER_PROMETHEUS_ADDR`.
    fn prometheus_addr(&self, read: bool) -> Result<Option<SocketAddr>, Error> {
        match (self.prometheus_addr, env(read, PROMETHEUS_ADDR_ENV)) {
            (Some(a), _) => Ok(Some(a)),
            (None, Some(v)) => {
                v.trim()
                    .parse::<SocketAddr>()
                    .map(Some)
                    .map_err(|_| Error::InvalidSetting {
                        name: "HIGGSMETER_PROMETHEUS_ADDR",
                        value: v.clone(),
                        reason: "expected IP:PORT, e.g. 127.0.0.1:9464",
                    })
            }
            (None, None) => Ok(None),
        }
    }
}

/// `http://host:4318` → `http://host:4318/v1/metrics`; a URL with a path is kept.
fn http_metrics_url(base: &str) -> String {
    let trimmed = base.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/metrics")
    }
}

fn resource(r: &Requests, read: bool) -> Result<Resource, Error> {
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
    let job = job_attributes(&from_env, |name| env(read, name))?;
    let service_name = r
        .service_name
        .clone()
        .or_else(|| env(read, "OTEL_SERVICE_NAME"))
        .or_else(|| {
            from_env
                .get(&opentelemetry::Key::from_static_str("service.name"))
                .map(|v| v.to_string())
        })
        .or_else(|| r.default_service_name.clone())
        .unwrap_or_else(exe_name);
    Ok(Resource::builder_empty()
        .with_attributes(
            from_env
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes(job)
        .with_attributes(r.attributes.iter().cloned())
        .with_service_name(service_name)
        .build())
}

/// The job's resource attributes, `job.id` and `job.incarnation`, each from the first
/// source that has it: `OTEL_RESOURCE_ATTRIBUTES` (in `detected`, the environment
/// detector's resource), then torchrun's variable (`TORCHELASTIC_RUN_ID`, unless it is
/// torchrun's default `none`; `TORCHELASTIC_RESTART_COUNT`), then higgsmeter's
/// (`HIGGSMETER_JOB_ID`, `HIGGSMETER_JOB_INCARNATION`). `var` reads a variable (blank
/// is unset): the environment, or a table in tests. The incarnation used must be a
/// whole number ≥ 0, else it is an error naming its source; it is returned as a
/// number, to replace a detected one's text. Sources after the one used are not read.
fn job_attributes(
    detected: &Resource,
    var: impl Fn(&'static str) -> Option<String>,
) -> Result<Vec<KeyValue>, Error> {
    let detected_value = |key: &'static str| {
        detected
            .get(&opentelemetry::Key::from_static_str(key))
            .map(|v| v.to_string())
            .filter(|v| !v.trim().is_empty())
    };
    let mut attributes = Vec::with_capacity(2);
    if detected_value(JOB_ID_ATTRIBUTE).is_none() {
        let id = var("TORCHELASTIC_RUN_ID")
            .filter(|v| v.trim() != TORCHRUN_DEFAULT_RUN_ID)
            .or_else(|| var("HIGGSMETER_JOB_ID"));
        if let Some(id) = id {
            attributes.push(KeyValue::new(JOB_ID_ATTRIBUTE, id.trim().to_owned()));
        }
    }
    let incarnation = match detected_value(JOB_INCARNATION_ATTRIBUTE) {
        Some(v) => Some((
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("{JOB_INCARNATION_ATTRIBUTE}={v}"),
            v,
        )),
        None => ["TORCHELASTIC_RESTART_COUNT", "HIGGSMETER_JOB_INCARNATION"]
            .into_iter()
            .find_map(|name| var(name).map(|v| (name, v.clone(), v))),
    };
    if let Some((name, shown, v)) = incarnation {
        let n = v
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|n| i64::try_from(n).ok())
            .ok_or(Error::InvalidSetting {
                name,
                value: shown,
                reason: "expected the job's incarnation, a whole number >= 0 (0 for the \
                         first start, one more per restart of the job)",
            })?;
        attributes.push(KeyValue::new(JOB_INCARNATION_ATTRIBUTE, n));
    }
    Ok(attributes)
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
fn instance_id() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_endpoints_get_the_metrics_path_once() {
        assert_eq!(
            http_metrics_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            http_metrics_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            http_metrics_url("http://h:4318/custom/path"),
            "http://h:4318/custom/path"
        );
    }

    #[test]
    fn the_default_service_name_yields_to_every_named_one() {
        let service = |r: &Requests| {
            resource(r, false)
                .expect("a resource")
                .get(&opentelemetry::Key::from_static_str("service.name"))
                .map(|v| v.to_string())
        };
        let mut r = Requests {
            read_env: false,
            ..Requests::default()
        };
        assert_eq!(service(&r), Some(exe_name()));
        r.default_service_name = Some("train".into());
        assert_eq!(service(&r).as_deref(), Some("train"));
        r.service_name = Some("named".into());
        assert_eq!(service(&r).as_deref(), Some("named"));
    }

    #[test]
    fn instance_ids_are_uuid_v4_and_differ() {
        let a = instance_id();
        let b = instance_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn bad_protocol_is_a_clear_error() {
        let err = Protocol::parse("http/json").unwrap_err().to_string();
        assert!(
            err.contains("grpc") && err.contains("http/protobuf"),
            "{err}"
        );
    }

    #[test]
    fn requests_resolve_without_the_environment() {
        let off = Requests {
            read_env: false,
            ..Requests::default()
        };
        let resolved = off.resolve().unwrap();
        assert!(!resolved.disabled);
        assert!(resolved.otlp.is_none());
        assert!(resolved.prometheus_addr.is_none());
        assert!(resolved.traces.is_none());
        let r = Requests {
            read_env: false,
            otlp_endpoint: Some("https://h:4318".to_owned()),
            ..Requests::default()
        };
        if !BUILT_OTLP {
            let err = r.resolve().unwrap_err().to_string();
            assert!(err.contains("`otlp` feature"), "{err}");
            return;
        }
        let otlp = r.resolve().unwrap().otlp.unwrap();
        assert_eq!(otlp.endpoint.as_deref(), Some("https://h:4318/v1/metrics"));
        assert_eq!(otlp.protocol, Protocol::HttpProtobuf);
        assert!(otlp.tls_on);
        assert_eq!(otlp.interval, Duration::from_secs_f64(STATUS_INTERVAL_S));
    }

    /// `job_attributes` over a table: `otel` is what `OTEL_RESOURCE_ATTRIBUTES` gave
    /// the detector, `vars` the other variables.
    fn job(otel: &[(&'static str, &str)], vars: &[(&str, &str)]) -> Result<Vec<KeyValue>, Error> {
        let detected = Resource::builder_empty()
            .with_attributes(otel.iter().map(|(k, v)| KeyValue::new(*k, v.to_string())))
            .build();
        let table: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        job_attributes(&detected, |name| {
            table.get(name).filter(|v| !v.trim().is_empty()).cloned()
        })
    }

    fn kv(id: Option<&str>, incarnation: Option<i64>) -> Vec<KeyValue> {
        let mut out = Vec::new();
        if let Some(id) = id {
            out.push(KeyValue::new(JOB_ID_ATTRIBUTE, id.to_owned()));
        }
        if let Some(n) = incarnation {
            out.push(KeyValue::new(JOB_INCARNATION_ATTRIBUTE, n));
        }
        out
    }

    #[test]
    fn job_identity_comes_from_each_source_in_order() {
        let all = [
            ("TORCHELASTIC_RUN_ID", "torch-run"),
            ("HIGGSMETER_JOB_ID", "hm-job"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
            ("HIGGSMETER_JOB_INCARNATION", "7"),
        ];
        // Nothing set: neither attribute.
        assert_eq!(job(&[], &[]).unwrap(), kv(None, None));
        // Each source alone.
        assert_eq!(job(&[], &all[1..2]).unwrap(), kv(Some("hm-job"), None));
        assert_eq!(job(&[], &all[3..]).unwrap(), kv(None, Some(7)));
        assert_eq!(job(&[], &all[..1]).unwrap(), kv(Some("torch-run"), None));
        assert_eq!(job(&[], &all[2..3]).unwrap(), kv(None, Some(2)));
        // torchrun's wins over higgsmeter's.
        assert_eq!(job(&[], &all).unwrap(), kv(Some("torch-run"), Some(2)));
        // OTEL_RESOURCE_ATTRIBUTES wins over both: its id stays as detected (nothing
        // returned replaces it), its incarnation comes back as a number.
        let otel = [
            (JOB_ID_ATTRIBUTE, "otel-job"),
            (JOB_INCARNATION_ATTRIBUTE, "5"),
        ];
        assert_eq!(job(&otel, &all).unwrap(), kv(None, Some(5)));
        assert_eq!(job(&otel[..1], &all).unwrap(), kv(None, Some(2)));
        assert_eq!(
            job(&otel[1..], &all).unwrap(),
            kv(Some("torch-run"), Some(5))
        );
        // torchrun's default run id names no job; blank values are unset.
        assert_eq!(
            job(
                &[],
                &[("TORCHELASTIC_RUN_ID", "none"), ("HIGGSMETER_JOB_ID", "hm")]
            )
            .unwrap(),
            kv(Some("hm"), None)
        );
        assert_eq!(
            job(&[], &[("TORCHELASTIC_RUN_ID", "none")]).unwrap(),
            kv(None, None)
        );
        assert_eq!(
            job(
                &[],
                &[
                    ("TORCHELASTIC_RESTART_COUNT", " "),
                    ("HIGGSMETER_JOB_INCARNATION", "0")
                ]
            )
            .unwrap(),
            kv(None, Some(0))
        );
    }

    #[test]
    fn a_bad_incarnation_is_an_error_naming_its_source() {
        for (otel, vars, name) in [
            (
                &[][..],
                &[("TORCHELASTIC_RESTART_COUNT", "-1")][..],
                "TORCHELASTIC_RESTART_COUNT",
            ),
            (
                &[],
                &[("HIGGSMETER_JOB_INCARNATION", "two")],
                "HIGGSMETER_JOB_INCARNATION",
            ),
            (
                &[],
                &[("HIGGSMETER_JOB_INCARNATION", "1.5")],
                "HIGGSMETER_JOB_INCARNATION",
            ),
            (
                &[],
                &[("HIGGSMETER_JOB_INCARNATION", "9223372036854775808")],
                "HIGGSMETER_JOB_INCARNATION",
            ),
            (
                &[(JOB_INCARNATION_ATTRIBUTE, "x")],
                &[("TORCHELASTIC_RESTART_COUNT", "1")],
                "OTEL_RESOURCE_ATTRIBUTES",
            ),
        ] {
            let err = job(otel, vars).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidSetting { name: n, .. } if *n == name),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(name) && text.contains(">= 0"), "{text}");
        }
        // A source after the one used is not read, so not checked.
        assert_eq!(
            job(
                &[],
                &[
                    ("TORCHELASTIC_RESTART_COUNT", "3"),
                    ("HIGGSMETER_JOB_INCARNATION", "bad")
                ]
            )
            .unwrap(),
            kv(None, Some(3))
        );
    }
}
