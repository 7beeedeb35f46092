//! Exporters: the Prometheus endpoint (both views), OTLP push to an upstream, and
//! Prometheus remote write.

pub(crate) mod client;
pub(crate) mod cluster;
pub(crate) mod cluster_json;
mod connect;
pub(crate) mod exposition;
mod format;
pub(crate) mod otlp;
pub(crate) mod otlp_request;
pub(crate) mod prometheus;
pub(crate) mod push;
pub(crate) mod remote_write;
pub(crate) mod traces;

#[cfg(test)]
mod push_tests;
