//! Export failures that say what and where: the OTLP metric exporter wrapped so that
//! the first failed export logs at once (one warning, until an export succeeds again)
//! the endpoint, the protocol, the cause and the likely fix. The SDK's own reports come
//! only at a flush or at exit, as an `InternalFailure` that names neither.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_otlp::MetricExporter;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

use crate::settings::Protocol;

/// The OTLP metric exporter, reporting its first failure (and its recovery).
pub(crate) struct Reported {
    inner: MetricExporter,
    endpoint: String,
    protocol: Protocol,
    failing: AtomicBool,
}

impl Reported {
    /// Wraps `inner`, which pushes to `endpoint` over `protocol`.
    pub(crate) fn new(inner: MetricExporter, endpoint: String, protocol: Protocol) -> Reported {
        Reported {
            inner,
            endpoint,
            protocol,
            failing: AtomicBool::new(false),
        }
    }
}

impl PushMetricExporter for Reported {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        match &result {
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    let cause = e.to_string();
                    tracing::warn!(
                        target: "higgsmeter",
                        endpoint = %self.endpoint,
                        protocol = protocol_name(self.protocol),
                        "metric export to {} over {} failed: {cause}. {} \
                         (logged once until an export succeeds)",
                        self.endpoint,
                        protocol_name(self.protocol),
                        hint(&self.endpoint, self.protocol, &cause)
                    );
                }
            }
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        target: "higgsmeter",
                        endpoint = %self.endpoint,
                        "metric export to {} succeeds again",
                        self.endpoint
                    );
                }
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The name `OTEL_EXPORTER_OTLP_PROTOCOL` gives a protocol.
pub(crate) fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Grpc => "grpc",
        Protocol::HttpProtobuf => "http/protobuf",
    }
}

/// The port of an endpoint URL (`http://host:4317/v1/metrics` → 4317), if it names one.
fn port(endpoint: &str) -> Option<u16> {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let (_, port) = authority.rsplit_once(':')?;
    port.parse().ok()
}

/// The likely fix for a failed export to `endpoint` over `protocol` with `cause`.
pub(crate) fn hint(endpoint: &str, protocol: Protocol, cause: &str) -> String {
    let lower = cause.to_ascii_lowercase();
    match (protocol, port(endpoint)) {
        (Protocol::HttpProtobuf, Some(4317)) => {
            return "4317 is the OTLP/gRPC port: set OTEL_EXPORTER_OTLP_PROTOCOL=grpc, or \
                    point OTEL_EXPORTER_OTLP_ENDPOINT at the HTTP port (4318)"
                .to_owned();
        }
        (Protocol::Grpc, Some(4318)) => {
            return "4318 is the OTLP/HTTP port: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, \
                    or point OTEL_EXPORTER_OTLP_ENDPOINT at the gRPC port (4317)"
                .to_owned();
        }
        _ => {}
    }
    if lower.contains("refused")
        || lower.contains("tcp connect")
        || lower.contains("connect error")
        || lower.contains("network error")
    {
        format!(
            "Nothing accepts connections at {endpoint}: is the collector running, and is \
             this its address?"
        )
    } else if lower.contains("certificate")
        || lower.contains("tls")
        || lower.contains("handshake")
        || lower.contains("invalidcontenttype")
    {
        "A TLS problem: an https:// endpoint needs a server certificate this worker trusts \
         (OTEL_EXPORTER_OTLP_CERTIFICATE), and a plaintext collector an http:// endpoint"
            .to_owned()
    } else if lower.contains("timed out") || lower.contains("timeout") || lower.contains("deadline")
    {
        format!("{endpoint} did not answer in time: a firewall, or an overloaded collector")
    } else if lower.contains("401") || lower.contains("403") || lower.contains("unauthenticated") {
        "The collector refuses this worker's credentials: check OTEL_EXPORTER_OTLP_HEADERS \
         (e.g. authorization=Bearer …)"
            .to_owned()
    } else {
        format!(
            "Check that a collector listens at {endpoint} and speaks OTLP over {}",
            protocol_name(protocol)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_name_the_likely_fix() {
        let h = hint(
            "http://127.0.0.1:4317/v1/metrics",
            Protocol::HttpProtobuf,
            "Operation failed: reqwest error",
        );
        assert!(h.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"), "{h}");
        let h = hint(
            "http://127.0.0.1:4318",
            Protocol::Grpc,
            "status Unavailable",
        );
        assert!(h.contains("http/protobuf"), "{h}");
        let h = hint(
            "http://127.0.0.1:9/v1/metrics",
            Protocol::HttpProtobuf,
            "error sending request: tcp connect error: Connection refused (os error 111)",
        );
        assert!(
            h.contains("Nothing accepts connections at http://127.0.0.1:9/v1/metrics"),
            "{h}"
        );
        let h = hint(
            "https://c:4317",
            Protocol::Grpc,
            "transport error: invalid peer certificate: UnknownIssuer",
        );
        assert!(h.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"), "{h}");
        let h = hint("http://c:4317", Protocol::Grpc, "something else");
        assert!(h.contains("speaks OTLP over grpc"), "{h}");
        let h = hint(
            "http://127.0.0.1:9/v1/metrics",
            Protocol::HttpProtobuf,
            "Operation failed: HTTP export failed: network error",
        );
        assert!(h.starts_with("Nothing accepts connections"), "{h}");
        assert_eq!(port("http://[::1]:4318/v1/metrics"), Some(4318));
        assert_eq!(port("http://host"), None);
    }
}
