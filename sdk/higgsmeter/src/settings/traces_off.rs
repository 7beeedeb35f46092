//! The trace settings of a build without the `traces` feature: none to ask for, and
//! `OTEL_TRACES_EXPORTER=otlp` is an error.

use super::{Requests, exporter_from_env};
use crate::error::Error;

/// Trace settings of a builder: none without the `traces` feature.
#[derive(Debug, Default)]
pub(crate) struct TraceRequests {}

/// Never made without the `traces` feature.
#[derive(Debug, Clone)]
pub(crate) enum TraceSettings {}

/// `OTEL_TRACES_EXPORTER=otlp` in a build without the `traces` feature is an error.
pub(super) fn resolve(_r: &Requests, read: bool) -> Result<Option<TraceSettings>, Error> {
    if exporter_from_env(read)? == Some(true) {
        return Err(Error::InvalidSetting {
            name: "OTEL_TRACES_EXPORTER",
            value: "otlp".to_owned(),
            reason: "this build exports no traces: enable higgsmeter's `traces` feature",
        });
    }
    Ok(None)
}
