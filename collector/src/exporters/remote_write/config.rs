//! `exporters.prometheusremotewrite`: the key names of the OpenTelemetry Collector's
//! Prometheus remote write exporter, for the parts implemented here.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::duration as duration_serde;
use crate::error::Error;
use crate::exporters::settings::{Headers, RetryOnFailure, SendingQueue, check_push};
use crate::tls::TlsClientSettings;

/// The label the per-source series carry when [`RemoteWriteExporter::include_sources`]
/// is on (value `sources`), so that a PromQL `sum` can tell the views apart: select the
/// fleet with `{higgsmeter_view=""}`.
pub(crate) const SOURCES_VIEW_LABEL: &str = "higgsmeter_view";

/// `exporters.prometheusremotewrite` (and `prometheusremotewrite/NAME`): Prometheus
/// remote write 1.0 (snappy-compressed
/// protobuf `WriteRequest`s) of the fleet view, as a scrape of `/metrics` reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteWriteExporter {
    /// The receiver's whole URL, path included: e.g.
    /// `http://127.0.0.1:9090/api/v1/write` (Prometheus), `https://mimir/api/v1/push`;
    /// `https://` for TLS. Required.
    pub endpoint: String,
    /// TLS settings for an `https://` endpoint (default: the system's roots).
    #[serde(default)]
    pub tls: Option<TlsClientSettings>,
    /// Headers sent with every request, e.g. `authorization: "Bearer ..."` or
    /// `X-Scope-OrgID` (Mimir, Cortex tenants). Never printed.
    #[serde(default)]
    pub headers: Headers,
    /// Labels added to every series that does not carry the name already (as
    /// Prometheus' own `external_labels`), e.g. `cluster: a`.
    #[serde(default)]
    pub external_labels: BTreeMap<String, String>,
    /// How often the view is read and sent (default 10 s); each sample is
    /// timestamped when its view was read.
    #[serde(default = "default_interval", with = "duration_serde")]
    pub interval: Duration,
    /// Per-request timeout (default 5 s).
    #[serde(default = "default_timeout", with = "duration_serde")]
    pub timeout: Duration,
    /// Also send the per-source view (`/metrics/sources`), each series with the label
    /// `higgsmeter_view="sources"` (default false).
    #[serde(default)]
    pub include_sources: bool,
    /// Largest uncompressed `WriteRequest`, bytes (default 3000000, as the
    /// OpenTelemetry Collector's): a larger view is sent as several requests.
    #[serde(default = "default_max_batch")]
    pub max_batch_size_bytes: usize,
    /// The bounded queue of pending sends, in views read (default 8); when full the
    /// oldest is dropped and its samples counted.
    #[serde(default)]
    pub sending_queue: SendingQueue,
    /// Retries with exponential backoff on 5xx, 429 and network errors; a
    /// `Retry-After` of the receiver wins over the backoff (up to 5 min).
    #[serde(default)]
    pub retry_on_failure: RetryOnFailure,
}

fn default_interval() -> Duration {
    Duration::from_secs(10)
}

fn default_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_max_batch() -> usize {
    3_000_000
}

fn error(path: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Config {
        path: path.into(),
        message: message.into(),
    }
}

/// Whether `name` is a valid Prometheus label name that a user may set.
fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

impl RemoteWriteExporter {
    /// Checks what `tls`/`headers` checks do not: the endpoint, the labels, the
    /// intervals and sizes. Errors name the exporter's key (`key`:
    /// `exporters.prometheusremotewrite[/NAME]`).
    pub(crate) fn validate(&self, key: &str) -> Result<(), Error> {
        let path = format!("{key}.endpoint");
        let url = &self.endpoint;
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| {
                error(
                    &path,
                    format!("`{url}` must start with http:// or https://"),
                )
            })?;
        let uri = url
            .parse::<http::Uri>()
            .map_err(|e| error(&path, format!("`{url}` is not a URL: {e}")))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(error(&path, format!("`{url}` has no host")));
        }
        if !rest.contains('/') || uri.path() == "/" {
            return Err(error(
                &path,
                format!(
                    "`{url}` has no path: write the receiver's, e.g. http://127.0.0.1:9090/api/v1/write (Prometheus), /api/v1/push (Mimir, Cortex), /api/v1/receive (Thanos)"
                ),
            ));
        }
        for (name, value) in &self.external_labels {
            let p = format!("{key}.external_labels.{name}");
            if !valid_label_name(name) {
                return Err(error(
                    p,
                    "is not a label name a user may set ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
                ));
            }
            if value.is_empty() {
                return Err(error(
                    p,
                    "is empty: an empty label is no label in Prometheus",
                ));
            }
        }
        if self.max_batch_size_bytes < 1024 {
            return Err(error(
                format!("{key}.max_batch_size_bytes"),
                "must be at least 1024",
            ));
        }
        check_push(
            key,
            self.interval,
            self.timeout,
            &self.sending_queue,
            &self.retry_on_failure,
        )
    }
}
