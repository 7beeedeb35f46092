//! Exporters: the Prometheus endpoint (both views) and OTLP push to an upstream.

pub(crate) mod cluster;
pub(crate) mod cluster_json;
mod connect;
pub(crate) mod exposition;
mod format;
pub(crate) mod otlp;
pub(crate) mod otlp_request;
pub(crate) mod prometheus;
