//! The `bearertokenauth` extension, in the OpenTelemetry Collector's key names: a
//! receiver whose `auth.authenticator` names it accepts only requests whose
//! `Authorization` header is `Bearer <token>`. The token comes from the config
//! (`token`) or a file (`filename`, trailing newline trimmed, re-read when it changes so
//! a rotated token needs no restart). Tokens are compared in constant time.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use subtle::ConstantTimeEq as _;
use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// `extensions.bearertokenauth`: exactly one of `token` and `filename`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BearerTokenAuthConfig {
    /// The scheme before the token in the `Authorization` header (default `Bearer`,
    /// matched without regard to case).
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// The token.
    #[serde(default)]
    pub token: Option<String>,
    /// A file holding the token (its trailing newline trimmed), re-read within a second
    /// of a change.
    #[serde(default)]
    pub filename: Option<PathBuf>,
}

fn default_scheme() -> String {
    "Bearer".to_owned()
}

impl fmt::Debug for BearerTokenAuthConfig {
    /// Never prints the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokenAuthConfig")
            .field("scheme", &self.scheme)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("filename", &self.filename)
            .finish()
    }
}

/// `auth` of a receiver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// The extension that authenticates requests: `bearertokenauth`.
    pub authenticator: String,
}

const PATH: &str = "extensions.bearertokenauth";

fn config_error(path: &str, message: impl Into<String>) -> Error {
    Error::Config {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn read_token(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read the token file {}: {e}", file.display()))?;
    let token = text.trim_end_matches(['\n', '\r']).to_owned();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", file.display()));
    }
    Ok(token)
}

impl BearerTokenAuthConfig {
    /// Checks the settings and reads the token (what `--check-config` runs).
    pub(crate) fn token(&self) -> Result<String, Error> {
        if self.scheme.is_empty() || self.scheme.contains(char::is_whitespace) {
            return Err(config_error(
                &format!("{PATH}.scheme"),
                "must be one word, e.g. Bearer",
            ));
        }
        match (&self.token, &self.filename) {
            (Some(t), None) if !t.is_empty() => Ok(t.clone()),
            (Some(_), None) => Err(config_error(&format!("{PATH}.token"), "is empty")),
            (None, Some(file)) => {
                read_token(file).map_err(|m| config_error(&format!("{PATH}.filename"), m))
            }
            (Some(_), Some(_)) => Err(config_error(PATH, "set `token` or `filename`, not both")),
            (None, None) => Err(config_error(
                PATH,
                "set `token` (the token itself) or `filename` (a file holding it)",
            )),
        }
    }
}

/// A running authenticator.
pub(crate) struct BearerAuth {
    scheme: String,
    token: RwLock<Arc<[u8]>>,
    file: Option<PathBuf>,
}

impl fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerAuth")
            .field("scheme", &self.scheme)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl BearerAuth {
    /// Reads the token; with `filename`, re-reads it when the file changes until
    /// `cancel`.
    pub(crate) fn start(
        cfg: &BearerTokenAuthConfig,
        cancel: CancellationToken,
    ) -> Result<Arc<BearerAuth>, Error> {
        let token = cfg.token()?;
        let auth = Arc::new(BearerAuth {
            scheme: cfg.scheme.clone(),
            token: RwLock::new(Arc::from(token.into_bytes())),
            file: cfg.filename.clone(),
        });
        if let Some(file) = cfg.filename.clone() {
            tokio::spawn(watch(Arc::downgrade(&auth), file, cancel));
        }
        Ok(auth)
    }

    /// Whether an `Authorization` header value carries the token. The token is
    /// compared in constant time (its length is not secret).
    pub(crate) fn check(&self, header: Option<&http::HeaderValue>) -> bool {
        let Some(value) = header else { return false };
        let value = value.as_bytes();
        let Some(space) = value.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, rest) = value.split_at(space);
        if !scheme.eq_ignore_ascii_case(self.scheme.as_bytes()) {
            return false;
        }
        let given = rest.trim_ascii_start();
        let expected = self
            .token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        bool::from(given.ct_eq(&expected))
    }
}

/// The file's modification time and length, to notice a change.
fn stamp(file: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(file).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Re-reads the token file within a second of a change; a file that cannot be read
/// (mid-rotation, removed) keeps the previous token, logged once per change.
async fn watch(auth: std::sync::Weak<BearerAuth>, file: PathBuf, cancel: CancellationToken) {
    let mut last = stamp(&file);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = stamp(&file);
        if now == last {
            continue;
        }
        let Some(auth) = auth.upgrade() else { return };
        let f = file.clone();
        let read = tokio::task::spawn_blocking(move || read_token(&f))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        match read {
            Ok(token) => {
                *auth.token.write().unwrap_or_else(PoisonError::into_inner) =
                    Arc::from(token.into_bytes());
                tracing::info!(file = %file.display(), "re-read the bearer token file");
            }
            Err(e) => {
                tracing::warn!(error = %e, "keeping the previous bearer token");
            }
        }
        last = now;
    }
}
