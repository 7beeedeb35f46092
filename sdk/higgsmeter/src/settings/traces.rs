//! The trace settings: what the `with_traces*` setters asked for, and what traces do
//! once the environment is read (`traces` feature).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use opentelemetry_sdk::trace::Sampler;
use tracing_subscriber::filter::Targets;

use super::{Protocol, Requests, TlsFiles, env, exporter_from_env};
use crate::error::Error;

/// Trace settings of a builder (the `with_traces*` setters).
#[derive(Default)]
pub(crate) struct TraceRequests {
    /// Traces on or off (else `OTEL_TRACES_EXPORTER`).
    pub(crate) enabled: Option<bool>,
    /// The spans' endpoint, used as given.
    pub(crate) endpoint: Option<String>,
    /// Which traces to keep.
    pub(crate) sampler: Option<Sampler>,
    /// The most ended spans held for export.
    pub(crate) max_queue_size: Option<usize>,
    /// The longest an ended span waits before it is pushed.
    pub(crate) export_delay: Option<Duration>,
    /// Which spans and events of the user's are traced.
    pub(crate) filter: Option<Targets>,
}

impl fmt::Debug for TraceRequests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TracesConfig")
            .field("enabled", &self.enabled)
            .field("endpoint", &self.endpoint)
            .field("sampler", &self.sampler)
            .finish_non_exhaustive()
    }
}

/// The resolved trace settings: present only when traces are on.
#[derive(Debug, Clone)]
pub(crate) struct TraceSettings {
    /// Where spans go; `None`: the OTLP exporter's own default and variables.
    pub(crate) endpoint: Option<String>,
    pub(crate) protocol: Protocol,
    /// CA and client certificate files (the builder's, then the `_TRACES_` variables,
    /// then the shared ones).
    pub(crate) tls: TlsFiles,
    /// TLS is on: an `https://` endpoint, or a TLS file set.
    pub(crate) tls_on: bool,
    pub(crate) headers: HashMap<String, String>,
    pub(crate) sampler: Sampler,
    pub(crate) max_queue_size: Option<usize>,
    pub(crate) export_delay: Option<Duration>,
    /// The user's filter (`None`: `INFO` and above, the exporter's crates left out).
    pub(crate) filter: Option<Targets>,
}

/// Traces on or off, and their settings; `None` when off (or when the sampler keeps
/// nothing).
pub(super) fn resolve(r: &Requests, read: bool) -> Result<Option<TraceSettings>, Error> {
    let t = &r.traces;
    let enabled = match t.enabled {
        Some(on) => on,
        None => exporter_from_env(read)?.unwrap_or(false),
    };
    if !enabled {
        return Ok(None);
    }
    let protocol = Protocol::resolve(r.otlp_protocol, read, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?;
    let endpoint = t
        .endpoint
        .clone()
        .or_else(|| r.otlp_endpoint.as_deref().map(|e| signal_url(e, protocol)))
        .or_else(|| env(read, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .or_else(|| env(read, "OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| signal_url(&e, protocol)));
    let https = endpoint
        .as_deref()
        .is_some_and(|e| e.trim().to_ascii_lowercase().starts_with("https://"));
    let tls = r.otlp_tls.resolve(read, "TRACES");
    let sampler = match &t.sampler {
        Some(s) => s.clone(),
        None => sampler_from_env(
            env(read, "OTEL_TRACES_SAMPLER").as_deref(),
            env(read, "OTEL_TRACES_SAMPLER_ARG").as_deref(),
        )?,
    };
    if matches!(sampler, Sampler::AlwaysOff) {
        return Ok(None);
    }
    Ok(Some(TraceSettings {
        endpoint,
        protocol,
        tls_on: https || tls.any(),
        tls,
        headers: r.otlp_headers.clone(),
        sampler,
        max_queue_size: t.max_queue_size,
        export_delay: t.export_delay,
        filter: t.filter.clone(),
    }))
}

/// `http://host:4318` → `http://host:4318/v1/traces` for HTTP; gRPC takes the base.
fn signal_url(base: &str, protocol: Protocol) -> String {
    match protocol {
        Protocol::Grpc => base.to_owned(),
        Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
    }
}

/// The sampler of `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, as the
/// OpenTelemetry specification names them.
fn sampler_from_env(name: Option<&str>, arg: Option<&str>) -> Result<Sampler, Error> {
    let ratio = || -> Result<f64, Error> {
        match arg {
            None => Ok(1.0),
            Some(a) => match a.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(Error::InvalidSetting {
                    name: "OTEL_TRACES_SAMPLER_ARG",
                    value: a.to_owned(),
                    reason: "expected a ratio from 0 to 1, e.g. 0.25",
                }),
            },
        }
    };
    let Some(name) = name else {
        return Ok(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));
    };
    Ok(match name.trim().to_ascii_lowercase().as_str() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio()?),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio()?)))
        }
        _ => {
            return Err(Error::InvalidSetting {
                name: "OTEL_TRACES_SAMPLER",
                value: name.to_owned(),
                reason: "expected always_on, always_off, traceidratio, \
                         parentbased_always_on, parentbased_always_off or \
                         parentbased_traceidratio",
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_follow_the_specification_names() {
        let s = |n: Option<&str>, a: Option<&str>| format!("{:?}", sampler_from_env(n, a));
        assert_eq!(s(None, None), s(Some("parentbased_always_on"), None));
        assert!(s(Some("always_off"), None).contains("AlwaysOff"));
        assert!(s(Some("traceidratio"), Some("0.25")).contains("0.25"));
        assert!(s(Some("parentbased_traceidratio"), None).contains("ParentBased"));
        let err = sampler_from_env(Some("traceidratio"), Some("2"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("OTEL_TRACES_SAMPLER_ARG"), "{err}");
        let err = sampler_from_env(Some("jaeger_remote"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("always_on"), "{err}");
    }

    fn requests(traces: TraceRequests) -> Requests {
        Requests {
            read_env: false,
            traces,
            ..Requests::default()
        }
    }

    #[test]
    fn settings_come_from_the_builder_and_default_to_off() {
        let on = || TraceRequests {
            enabled: Some(true),
            ..TraceRequests::default()
        };
        assert!(
            resolve(&requests(TraceRequests::default()), false)
                .unwrap()
                .is_none(),
            "off unless asked for"
        );
        let mut r = requests(on());
        r.otlp_endpoint = Some("http://h:4318".to_owned());
        let s = resolve(&r, false).unwrap().unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://h:4318/v1/traces"));
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert!(
            matches!(s.sampler, Sampler::ParentBased(_)),
            "{:?}",
            s.sampler
        );
        let mut own = requests(TraceRequests {
            endpoint: Some("http://traces:4317".to_owned()),
            ..on()
        });
        own.otlp_protocol = Some(Protocol::Grpc);
        own.otlp_endpoint = Some("http://metrics:4317".to_owned());
        let s = resolve(&own, false).unwrap().unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://traces:4317"));
        let off = requests(TraceRequests {
            sampler: Some(Sampler::AlwaysOff),
            ..on()
        });
        assert!(
            resolve(&off, false).unwrap().is_none(),
            "always_off builds nothing"
        );
    }

    #[test]
    fn http_endpoints_get_the_traces_path() {
        assert_eq!(
            signal_url("http://127.0.0.1:4318/", Protocol::HttpProtobuf),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            signal_url("http://127.0.0.1:4317", Protocol::Grpc),
            "http://127.0.0.1:4317"
        );
    }
}
