//! The OTLP metric push (gRPC via tonic, or HTTP/protobuf), over TLS (rustls) for an
//! `https://` endpoint or when TLS files are set; and what the span exporter shares
//! with it (headers as gRPC metadata, TLS).

use std::collections::HashMap;

use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{
    MetricExporter, RetryPolicy, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, Temporality};

use crate::error::Error;
use crate::settings::{OtlpSettings, Protocol};

#[cfg(not(feature = "tls"))]
#[path = "otlp/no_tls.rs"]
pub(crate) mod tls;
#[cfg(feature = "tls")]
pub(crate) mod tls;

mod report;

/// The error of a build without the `tls` feature asked for TLS.
pub(crate) fn no_tls(name: &'static str, value: String) -> Error {
    Error::InvalidSetting {
        name,
        value,
        reason: "this build has no TLS: enable higgsmeter's `tls` feature",
    }
}

/// OTLP headers as gRPC metadata (the metric and the span exporters').
pub(crate) fn metadata(headers: &HashMap<String, String>) -> Result<MetadataMap, Error> {
    use tonic::metadata::{Ascii, MetadataKey, MetadataValue};
    let mut map = MetadataMap::new();
    for (k, v) in headers {
        let key = k
            .parse::<MetadataKey<Ascii>>()
            .map_err(|_| Error::InvalidSetting {
                name: "otlp header",
                value: k.clone(),
                reason: "not a valid gRPC metadata key (lowercase ASCII)",
            })?;
        let value = v
            .parse::<MetadataValue<Ascii>>()
            .map_err(|_| Error::InvalidSetting {
                name: "otlp header",
                value: v.clone(),
                reason: "not a valid gRPC metadata value (visible ASCII)",
            })?;
        map.insert(key, value);
    }
    Ok(map)
}

/// Adds a periodic reader pushing to the configured OTLP endpoint to the meter
/// provider. Must run inside the export runtime's context (tonic connects lazily on
/// it).
pub(crate) fn with_reader(
    builder: MeterProviderBuilder,
    s: &OtlpSettings,
) -> Result<MeterProviderBuilder, Error> {
    Ok(builder.with_reader(reader(s)?))
}

fn reader(s: &OtlpSettings) -> Result<PeriodicReader<report::Reported>, Error> {
    let endpoint_label = endpoint_label(s);
    let refused = || {
        no_tls(
            "OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_CERTIFICATE",
            s.endpoint.clone().unwrap_or_default(),
        )
    };
    let retry = retry_policy(s.temporality);
    let exporter = match s.protocol {
        Protocol::Grpc => {
            let mut b = MetricExporter::builder()
                .with_tonic()
                .with_retry_policy(retry);
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                b = b.with_metadata(metadata(&s.headers)?);
            }
            if let Some(t) = s.temporality {
                b = b.with_temporality(t);
            }
            if s.tls_on {
                b = tls::grpc(b, &s.tls, refused)?;
            }
            b.build()
        }
        Protocol::HttpProtobuf => {
            let mut b = MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_retry_policy(retry);
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                b = b.with_headers(s.headers.clone());
            }
            if let Some(t) = s.temporality {
                b = b.with_temporality(t);
            }
            if s.tls_on {
                b = tls::http(b, &s.tls, refused)?;
            }
            b.build()
        }
    }
    .map_err(|source| Error::Otlp {
        endpoint: endpoint_label.clone(),
        source,
    })?;
    let exporter = report::Reported::new(exporter, endpoint_label, s.protocol);
    Ok(PeriodicReader::builder(exporter)
        .with_interval(s.interval)
        .build())
}

/// How often one export is retried. A cumulative export carries every total so far, so
/// the next periodic export makes up for a failed one: one quick retry for a blip, not
/// the recommended three, which held a worker's exit (a flush, then the final export)
/// for 2.5 s when nothing listened. A delta export's increments are lost with it: those
/// keep the recommended policy.
fn retry_policy(temporality: Option<Temporality>) -> RetryPolicy {
    match temporality {
        None | Some(Temporality::Cumulative) => RetryPolicy::recommended().with_max_retries(1),
        Some(_) => RetryPolicy::recommended(),
    }
}

/// Where the OTLP metric push goes, for messages.
pub(crate) fn endpoint_label(s: &OtlpSettings) -> String {
    s.endpoint
        .clone()
        .unwrap_or_else(|| default_endpoint(s.protocol))
}

/// Where the OTLP exporter pushes when the builder set no endpoint: what the
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` variables say
/// (read by the exporter itself; read here only to name it in messages), else the
/// protocol's default.
fn default_endpoint(protocol: Protocol) -> String {
    [
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    .unwrap_or_else(|| match protocol {
        Protocol::Grpc => "http://localhost:4317".to_owned(),
        Protocol::HttpProtobuf => "http://localhost:4318/v1/metrics".to_owned(),
    })
}
