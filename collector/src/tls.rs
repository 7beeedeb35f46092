//! TLS with rustls (aws-lc-rs, no OpenSSL): the settings of the receivers, the
//! Prometheus endpoint and the OTLP exporters in the OpenTelemetry Collector's key
//! names, their checks (`--check-config` runs them: files readable, PEM parseable, key
//! matching certificate, certificate in its validity period), the server side (a
//! handshake per accepted connection, failures logged at most once a minute and
//! counted; the certificate, key and client CA re-read when their files change, a
//! broken new set keeping the old one) and the client side (a connector for the
//! upstream exporters).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::self_metrics::{Listener, SelfMetrics};

/// `tls` of a receiver (`receivers.otlp.protocols.grpc.tls`, `.http.tls`) or of the
/// Prometheus endpoint (`exporters.prometheus.tls`). When set, the endpoint is
/// TLS-only: a plaintext client fails its handshake.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerSettings {
    /// The server's certificate chain, PEM (leaf first). Re-read within a second of a
    /// change (with `key_file` and `client_ca_file`): a rotated certificate needs no
    /// restart; files that do not load keep the previous ones (logged).
    pub cert_file: PathBuf,
    /// The certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// CA certificates, PEM, that client certificates must chain to: mutual TLS. A
    /// client without a certificate signed by one of them is refused at the handshake.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

/// `tls` of an OTLP exporter (`exporters.otlp.tls`, `exporters.otlphttp.tls`). TLS is
/// used when the endpoint is `https://`; without `ca_file` the system's roots verify
/// the upstream.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsClientSettings {
    /// CA certificates, PEM, that the upstream's certificate must chain to (default:
    /// the system's roots).
    pub ca_file: Option<PathBuf>,
    /// This collector's client certificate, PEM, for an upstream that asks for one
    /// (mutual TLS); with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key, PEM.
    pub key_file: Option<PathBuf>,
    /// Accept any certificate from the upstream (default false). Encrypts but does not
    /// authenticate the upstream: for tests only.
    pub insecure_skip_verify: bool,
    /// `true`: plaintext, as in the OpenTelemetry Collector (an `http://` endpoint is
    /// plaintext anyway; with `https://` this is an error).
    pub insecure: bool,
    /// The name the upstream's certificate must carry, when it is not the endpoint's
    /// host (e.g. the endpoint is an IP address).
    pub server_name_override: Option<String>,
}

/// The one crypto provider every TLS config here is built with.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn config_error(path: &str, message: impl Into<String>) -> Error {
    Error::Config {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn read(path: &str, file: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(file)
        .map_err(|e| config_error(path, format!("cannot read {}: {e}", file.display())))
}

/// Every certificate in a PEM file (at least one).
fn certificates(path: &str, file: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read(path, file)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            config_error(
                path,
                format!("{} is not a PEM certificate file: {e}", file.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(config_error(
            path,
            format!(
                "{} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
                file.display()
            ),
        ));
    }
    for cert in &certs {
        check_validity(path, file, cert)?;
    }
    Ok(certs)
}

/// Refuses a certificate outside its validity period.
fn check_validity(path: &str, file: &Path, cert: &CertificateDer<'_>) -> Result<(), Error> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| {
        config_error(
            path,
            format!("{}: a certificate is not valid X.509: {e}", file.display()),
        )
    })?;
    let validity = parsed.validity();
    let now = x509_parser::time::ASN1Time::now();
    let subject = parsed.subject().to_string();
    if validity.not_after < now {
        return Err(config_error(
            path,
            format!(
                "{}: the certificate `{subject}` expired on {} (renew it)",
                file.display(),
                validity.not_after
            ),
        ));
    }
    if validity.not_before > now {
        return Err(config_error(
            path,
            format!(
                "{}: the certificate `{subject}` is not valid before {} (check the clock)",
                file.display(),
                validity.not_before
            ),
        ));
    }
    Ok(())
}

fn private_key(path: &str, file: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let pem = read(path, file)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        config_error(
            path,
            format!(
                "{} holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
                file.display()
            ),
        )
    })
}

/// A certificate chain and its key, checked to belong together.
fn certified_key(
    prefix: &str,
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, Error> {
    let certs = certificates(&format!("{prefix}.cert_file"), cert_file)?;
    let key_path = format!("{prefix}.key_file");
    let key = private_key(&key_path, key_file)?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| config_error(&key_path, format!("{}: {e}", key_file.display())))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(|_| {
        config_error(
            &key_path,
            format!(
                "the key in {} does not match the certificate in {} ({prefix}.cert_file)",
                key_file.display(),
                cert_file.display()
            ),
        )
    })?;
    Ok(Arc::new(certified))
}

fn roots(path: &str, file: &Path) -> Result<RootCertStore, Error> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path, file)? {
        store.add(cert).map_err(|e| {
            config_error(
                path,
                format!("{}: not a usable CA certificate: {e}", file.display()),
            )
        })?;
    }
    Ok(store)
}

/// A server config from `s` (`prefix` is its key path, for errors), offering `alpn`.
pub(crate) fn server_config(
    prefix: &str,
    s: &TlsServerSettings,
    alpn: &[&[u8]],
) -> Result<Arc<ServerConfig>, Error> {
    let provider = provider();
    let key = certified_key(prefix, &s.cert_file, &s.key_file, &provider)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(prefix, e.to_string()))?;
    let builder = match &s.client_ca_file {
        Some(file) => {
            let path = format!("{prefix}.client_ca_file");
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(&path, file)?),
                provider,
            )
            .build()
            .map_err(|e| config_error(&path, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// A client config for an upstream (`prefix`: the exporter's `tls` key), offering
/// `alpn`.
pub(crate) fn client_config(
    prefix: &str,
    s: &TlsClientSettings,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(prefix, e.to_string()))?;
    let builder = if s.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipVerify(provider.clone())))
    } else {
        let store = match &s.ca_file {
            Some(file) => roots(&format!("{prefix}.ca_file"), file)?,
            None => {
                let found = rustls_native_certs::load_native_certs();
                let mut store = RootCertStore::empty();
                let (added, _) = store.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(config_error(
                        &format!("{prefix}.ca_file"),
                        "no system CA certificates were found: name the upstream's CA in ca_file",
                    ));
                }
                store
            }
        };
        builder.with_root_certificates(store)
    };
    let mut config = match (&s.cert_file, &s.key_file) {
        (Some(cert), Some(key)) => {
            let key = certified_key(prefix, cert, key, &provider)?;
            builder.with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)))
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(config_error(
                prefix,
                "cert_file and key_file go together (a client certificate needs its key)",
            ));
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// `insecure_skip_verify`: any certificate is accepted; signatures are still checked,
/// so the connection is encrypted to whoever holds the key it presented.
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The server side of one listener: its acceptor, and failed handshakes counted and
/// logged at most once a minute (a plaintext client on a TLS port, an untrusted
/// client certificate, a port scanner).
pub(crate) struct TlsListener {
    /// The config handshakes use now; swapped when its files change.
    config: RwLock<Arc<ServerConfig>>,
    /// What it was built from (re-read when the files change).
    settings: TlsServerSettings,
    alpn: Vec<Vec<u8>>,
    /// The listener, in logs and the self-metric.
    listener: Listener,
    /// What the config calls it, in logs.
    key: String,
    stats: Arc<SelfMetrics>,
    last_log: Mutex<Option<Instant>>,
    unlogged: AtomicU64,
}

impl fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsListener")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// A listener's TLS from its settings (`key`: their path in the config); failed
    /// handshakes are counted in `stats`.
    pub(crate) fn new(
        listener: Listener,
        key: &str,
        s: &TlsServerSettings,
        alpn: &[&[u8]],
        stats: Arc<SelfMetrics>,
    ) -> Result<TlsListener, Error> {
        Ok(TlsListener {
            config: RwLock::new(server_config(key, s, alpn)?),
            settings: s.clone(),
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
            listener,
            key: key.to_owned(),
            stats,
            last_log: Mutex::new(None),
            unlogged: AtomicU64::new(0),
        })
    }

    /// The handshake on an accepted connection, bounded by `timeout`; `None` (counted,
    /// logged at most once a minute) when it fails.
    pub(crate) async fn handshake<IO>(
        &self,
        io: IO,
        timeout: Duration,
    ) -> Option<tokio_rustls::server::TlsStream<IO>>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(
            self.config
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        );
        let error = match tokio::time::timeout(timeout, acceptor.accept(io)).await {
            Ok(Ok(stream)) => return Some(stream),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no handshake within {timeout:?}"),
        };
        crate::self_metrics::add(&self.stats.tls_handshakes_failed[self.listener], 1);
        let mut last = self.last_log.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(Instant::now());
            let more = self.unlogged.swap(0, Ordering::Relaxed);
            tracing::warn!(
                listener = self.listener.as_str(),
                error = %error,
                unlogged_since_last = more,
                "a TLS handshake failed ({} is TLS-only: is the client using plaintext, or a certificate this collector does not trust?); counted in higgsmeter_collector_tls_handshakes_failed_total, logged at most once a minute",
                self.key
            );
        } else {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
        }
        None
    }
}

impl TlsListener {
    /// Re-reads the certificate, key and client CA files within a second of a change
    /// (as the token file is), until `cancel`: new handshakes use the new files once
    /// they load and check (key matching certificate, in date); files that do not
    /// (half-written mid-rotation, mismatched, expired) keep the previous ones, with a
    /// warning saying why, once per change.
    pub(crate) fn watch(self: &Arc<Self>, cancel: CancellationToken) {
        tokio::spawn(watch(Arc::downgrade(self), cancel));
    }

    fn files(&self) -> Vec<PathBuf> {
        let s = &self.settings;
        [
            Some(&s.cert_file),
            Some(&s.key_file),
            s.client_ca_file.as_ref(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }

    /// The files' modification times and lengths, to notice a change.
    fn stamps(&self) -> Vec<Option<(SystemTime, u64)>> {
        self.files()
            .iter()
            .map(|f| {
                let meta = std::fs::metadata(f).ok()?;
                Some((meta.modified().ok()?, meta.len()))
            })
            .collect()
    }

    /// Builds a config from the files as they are now and swaps it in.
    fn reload(&self) -> Result<(), Error> {
        let alpn: Vec<&[u8]> = self.alpn.iter().map(Vec::as_slice).collect();
        let config = server_config(&self.key, &self.settings, &alpn)?;
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config;
        Ok(())
    }
}

async fn watch(listener: std::sync::Weak<TlsListener>, cancel: CancellationToken) {
    let Some(mut last) = listener.upgrade().map(|l| l.stamps()) else {
        return;
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(l) = listener.upgrade() else { return };
        let now = l.stamps();
        if now == last {
            continue;
        }
        last = now;
        let reloading = l.clone();
        let result = tokio::task::spawn_blocking(move || reloading.reload())
            .await
            .unwrap_or_else(|e| Err(config_error(&l.key, format!("reloading failed: {e}"))));
        match result {
            Ok(()) => tracing::info!(
                listener = l.listener.as_str(),
                "reloaded the TLS certificate and key of {} (new handshakes use them)",
                l.key
            ),
            Err(e) => tracing::warn!(
                listener = l.listener.as_str(),
                error = %e,
                "keeping the previous TLS certificate of {}: its files changed but do not load (retried at their next change)",
                l.key
            ),
        }
    }
}

/// The ALPN protocol of gRPC.
/// How a listener with `tls` is secured: `plaintext`, `TLS` or `mutual TLS`.
pub(crate) fn describe(tls: &Option<TlsServerSettings>) -> &'static str {
    match tls {
        Some(t) if t.client_ca_file.is_some() => "mutual TLS",
        Some(_) => "TLS",
        None => "plaintext",
    }
}

/// Checks a listener's `tls` at `key` (the files read, the key matching, the dates).
pub(crate) fn check_server(key: &str, tls: &Option<TlsServerSettings>) -> Result<(), Error> {
    if let Some(t) = tls {
        server_config(key, t, &[])?;
    }
    Ok(())
}

/// A listener's TLS (`None` without `tls`), its files read again here (a file changed
/// since the plan fails the start, clearly), and watched until `stopped` so that a
/// rotated certificate is picked up without a restart.
pub(crate) fn start_listener(
    listener: Listener,
    key: &str,
    tls: &Option<TlsServerSettings>,
    alpn: &[&[u8]],
    stats: &Arc<SelfMetrics>,
    stopped: &CancellationToken,
) -> Result<Option<Arc<TlsListener>>, Error> {
    let Some(settings) = tls else { return Ok(None) };
    let l = Arc::new(TlsListener::new(
        listener,
        key,
        settings,
        alpn,
        stats.clone(),
    )?);
    l.watch(stopped.clone());
    Ok(Some(l))
}

pub(crate) const ALPN_H2: &[u8] = b"h2";
/// The ALPN protocol of HTTP/1.1.
pub(crate) const ALPN_HTTP1: &[u8] = b"http/1.1";
