//! TLS for the OTLP exporters (`tls` feature, rustls): the CA file's certificates only,
//! or the system's roots, and a client certificate for mutual TLS.

use opentelemetry_otlp::{WithHttpConfig, WithTonicConfig};

use crate::error::Error;
use crate::settings::TlsFiles;

/// Sets a gRPC exporter's TLS from the files (`refused` is for builds without TLS).
pub(crate) fn grpc<B: WithTonicConfig>(
    b: B,
    t: &TlsFiles,
    _refused: impl FnOnce() -> Error,
) -> Result<B, Error> {
    Ok(b.with_tls_config(tonic_config(t)?))
}

/// Gives an HTTP exporter a client with the files' TLS (`refused` is for builds
/// without TLS).
pub(crate) fn http<B: WithHttpConfig>(
    b: B,
    t: &TlsFiles,
    _refused: impl FnOnce() -> Error,
) -> Result<B, Error> {
    Ok(b.with_http_client(http_client(t)?))
}

fn read(name: &'static str, path: &std::path::Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::TlsFile {
        name,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// A client certificate's PEM and its key's.
type Pems = (Vec<u8>, Vec<u8>);

/// The client certificate and key, both or neither.
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
fn tonic_config(t: &TlsFiles) -> Result<tonic::transport::ClientTlsConfig, Error> {
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
fn http_client(t: &TlsFiles) -> Result<reqwest::blocking::Client, Error> {
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
