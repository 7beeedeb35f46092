//! What every pushing exporter's settings share (`headers`, `compression`,
//! `sending_queue`, `retry_on_failure`) and the checks of an upstream's URL, TLS,
//! headers and schedule; errors name the exporter's key (`exporters.otlp/primary`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::duration as duration_serde;
use crate::error::Error;
use crate::tls::TlsClientSettings;

fn config_error(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Config {
        path: path.into(),
        message: message.into(),
    }
}

/// Headers of an exporter's pushes. Their values are never printed (they hold tokens).
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct Headers(pub BTreeMap<String, String>);

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// The engine catalog's status interval (1 s): an agent tier adds at most about one
/// interval of delay.
pub(crate) fn default_export_interval() -> Duration {
    Duration::from_secs_f64(higgsmeter_catalog::STATUS_INTERVAL_S)
}

pub(crate) fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

/// Compression of OTLP pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// gzip (the default).
    #[default]
    Gzip,
    /// None.
    None,
}

/// `sending_queue`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SendingQueue {
    /// Pending pushes held while the upstream is down or slow (default 8); when full the
    /// oldest is dropped and its points counted.
    pub queue_size: usize,
    /// Traces pipeline: MiB of spans held for this exporter while the upstream is down
    /// or slow (default 64); when full, senders are told to retry (`UNAVAILABLE` /
    /// 503), so nothing is dropped here.
    pub traces_queue_mib: u64,
}

impl Default for SendingQueue {
    fn default() -> Self {
        SendingQueue {
            queue_size: 8,
            traces_queue_mib: 64,
        }
    }
}

/// `retry_on_failure`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryOnFailure {
    /// First wait after a failed push (default 200 ms); doubles after each failure.
    #[serde(with = "duration_serde")]
    pub initial_interval: Duration,
    /// Longest wait between attempts (default 30 s).
    #[serde(with = "duration_serde")]
    pub max_interval: Duration,
}

impl Default for RetryOnFailure {
    fn default() -> Self {
        RetryOnFailure {
            initial_interval: Duration::from_millis(200),
            max_interval: Duration::from_secs(30),
        }
    }
}

/// An exporter's URL: `http://` or `https://` with a host.
pub(crate) fn check_url(path: &str, url: &str) -> Result<(), Error> {
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
pub(crate) fn check_security(
    key: &str,
    endpoint: &str,
    tls: &Option<TlsClientSettings>,
    headers: &Headers,
) -> Result<(), Error> {
    let https = endpoint.starts_with("https://");
    let path = format!("{key}.tls");
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
        let hpath = format!("{key}.headers.{k}");
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
