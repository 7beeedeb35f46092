//! A build without the `tls` feature: an `https://` endpoint or a TLS file is refused.

use crate::error::Error;
use crate::settings::TlsFiles;

/// Refuses: this build has no TLS.
pub(crate) fn grpc<B>(_b: B, _t: &TlsFiles, refused: impl FnOnce() -> Error) -> Result<B, Error> {
    Err(refused())
}

/// Refuses: this build has no TLS.
pub(crate) fn http<B>(_b: B, _t: &TlsFiles, refused: impl FnOnce() -> Error) -> Result<B, Error> {
    Err(refused())
}
