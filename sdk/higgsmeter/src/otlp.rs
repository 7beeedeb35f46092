//! The OTLP push exporter (gRPC via tonic, or HTTP/protobuf), over TLS (rustls) for
//! an `https://` endpoint or when TLS files are set.

use std::collections::HashMap;

use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{MetricExporter, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::metrics::PeriodicReader;

use crate::error::Error;
#[cfg(feature = "tls")]
use crate::telemetry::TlsFiles;
use crate::telemetry::{OtlpSettings, Protocol};

#[cfg(feature = "tls")]
fn read(name: &'static str, path: &std::path::Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::TlsFile {
        name,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// A client certificate's PEM and its key's.
#[cfg(feature = "tls")]
type Pems = (Vec<u8>, Vec<u8>);

/// The client certificate and key, both or neither.
#[cfg(feature = "tls")]
fn identity(t: &TlsFiles) -> Result<Option<Pems>, Error> {
    match (&t.client_certificate, &t.client_key) {
        (Some(c), Some(k)) => Ok(Some((
            read("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", c)?,
            read("OTEL_EXPORTER_OTLP_CLIENT_KEY", k)?,
        ))),
        (None, None) => Ok(None),
        (Some(p), None) | (None, Some(p)) => Err(Error::TlsFile {
            name: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE / OTEL_EXPORTER_OTLP_CLIENT_KEY",
            path: p.clone(),
            reason: "a client certificate needs its key: set both, or neither".to_owned(),
        }),
    }
}

/// tonic's TLS config: the CA file's certificates only, or the system's roots.
#[cfg(feature = "tls")]
pub(crate) fn tonic_tls(t: &TlsFiles) -> Result<tonic::transport::ClientTlsConfig, Error> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let mut config = match &t.certificate {
        Some(ca) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ca,
        )?)),
        None => ClientTlsConfig::new().with_native_roots(),
    };
    if let Some((cert, key)) = identity(t)? {
        config = config.identity(Identity::from_pem(cert, key));
    }
    Ok(config)
}

/// A blocking HTTP client with the CA file's certificates only (or the system's roots)
/// and the client certificate, for the HTTP exporter.
#[cfg(feature = "tls")]
pub(crate) fn http_client(t: &TlsFiles) -> Result<reqwest::blocking::Client, Error> {
    // opentelemetry-otlp's own client's timeout (OTEL_EXPORTER_OTLP_TIMEOUT's default).
    let mut builder =
        reqwest::blocking::Client::builder().timeout(std::time::Duration::from_secs(10));
    if let Some(ca) = &t.certificate {
        let certs =
            reqwest::Certificate::from_pem_bundle(&read("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)?)
                .map_err(|e| Error::TlsFile {
                    name: "OTEL_EXPORTER_OTLP_CERTIFICATE",
                    path: ca.clone(),
                    reason: format!("not a PEM certificate file: {e}"),
                })?;
        builder = builder.tls_certs_only(certs);
    }
    if let Some((mut cert, key)) = identity(t)? {
        cert.push(b'\n');
        cert.extend_from_slice(&key);
        let identity = reqwest::Identity::from_pem(&cert).map_err(|e| Error::TlsFile {
            name: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            path: t.client_certificate.clone().unwrap_or_default(),
            reason: format!("not a PEM certificate and key: {e}"),
        })?;
        builder = builder.identity(identity);
    }
    builder.build().map_err(|e| Error::TlsFile {
        name: "OTEL_EXPORTER_OTLP_CERTIFICATE",
        path: t.certificate.clone().unwrap_or_default(),
        reason: e.to_string(),
    })
}

/// Refuses TLS settings in a build without the `tls` feature.
#[cfg(not(feature = "tls"))]
fn no_tls(s: &OtlpSettings) -> Result<(), Error> {
    if s.https || s.tls.any() {
        return Err(Error::InvalidSetting {
            name: "OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_CERTIFICATE",
            value: s.endpoint.clone().unwrap_or_default(),
            reason: "this build has no TLS: enable higgsmeter's `tls` feature",
        });
    }
    Ok(())
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

/// A periodic reader pushing to the configured OTLP endpoint. Must run inside the
/// export runtime's context (tonic connects lazily on it).
pub(crate) fn reader(s: &OtlpSettings) -> Result<PeriodicReader<MetricExporter>, Error> {
    let endpoint_label = s
        .endpoint
        .clone()
        .unwrap_or_else(|| "the OTEL_EXPORTER_OTLP_* endpoint".to_owned());
    #[cfg(not(feature = "tls"))]
    no_tls(s)?;
    #[cfg(feature = "tls")]
    let tls = s.https || s.tls.any();
    let exporter = match s.protocol {
        Protocol::Grpc => {
            let mut b = MetricExporter::builder().with_tonic();
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                b = b.with_metadata(metadata(&s.headers)?);
            }
            if let Some(t) = s.temporality {
                b = b.with_temporality(t);
            }
            #[cfg(feature = "tls")]
            if tls {
                b = b.with_tls_config(tonic_tls(&s.tls)?);
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
            #[cfg(feature = "tls")]
            if tls {
                b = b.with_http_client(http_client(&s.tls)?);
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
