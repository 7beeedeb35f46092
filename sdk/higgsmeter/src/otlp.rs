//! The OTLP push exporter (gRPC via tonic, or HTTP/protobuf).

use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{MetricExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::metrics::PeriodicReader;

use crate::error::Error;
use crate::telemetry::{OtlpSettings, Protocol};

/// A periodic reader pushing to the configured OTLP endpoint. Must run inside the
/// export runtime's context (tonic connects lazily on it).
pub(crate) fn reader(s: &OtlpSettings) -> Result<PeriodicReader<MetricExporter>, Error> {
    let endpoint_label = s
        .endpoint
        .clone()
        .unwrap_or_else(|| "the OTEL_EXPORTER_OTLP_* endpoint".to_owned());
    let exporter = match s.protocol {
        Protocol::Grpc => {
            let mut b = MetricExporter::builder().with_tonic();
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                let mut map = MetadataMap::new();
                for (k, v) in &s.headers {
                    let key = k
                        .parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>()
                        .map_err(|_| Error::InvalidSetting {
                            name: "otlp header",
                            value: k.clone(),
                            reason: "not a valid gRPC metadata key (lowercase ASCII)",
                        })?;
                    let value = v
                        .parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>()
                        .map_err(|_| Error::InvalidSetting {
                            name: "otlp header",
                            value: v.clone(),
                            reason: "not a valid gRPC metadata value (visible ASCII)",
                        })?;
                    map.insert(key, value);
                }
                b = b.with_metadata(map);
            }
            if let Some(t) = s.temporality {
                b = b.with_temporality(t);
            }
            b.build()
        }
        Protocol::HttpProtobuf => {
            let mut b = MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                b = b.with_headers(s.headers.clone());
            }
            if let Some(t) = s.temporality {
                b = b.with_temporality(t);
            }
            b.build()
        }
    }
    .map_err(|source| Error::Otlp {
        endpoint: endpoint_label,
        source,
    })?;
    Ok(PeriodicReader::builder(exporter)
        .with_interval(s.interval)
        .build())
}
