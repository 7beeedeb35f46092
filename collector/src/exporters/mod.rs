//! Exporters: the Prometheus endpoint (both views and the cluster page), OTLP push to
//! an upstream (gRPC and HTTP), and Prometheus remote write; the traces pipeline's
//! forwarding to OTLP upstreams.
//!
//! Each type owns its settings, their checks into a plan, and its start in its module.
//! [`ExporterConfig`] is the registry of types: adding one is a variant there and its
//! line in each `match` below (ADR 0016).

pub(crate) mod client;
pub(crate) mod cluster;
mod connect;
pub(crate) mod otlp;
pub(crate) mod prometheus;
pub(crate) mod push;
pub(crate) mod remote_write;
pub(crate) mod settings;
pub(crate) mod traces;

#[cfg(test)]
mod push_tests;

use serde::de::MapAccess;

use crate::component::{ComponentId, Context, Registry, Started, defaults_if_null, required};
use crate::error::Error;
pub use otlp::{OtlpExporter, OtlpPlan, PushProtocol};
pub use prometheus::{PrometheusExporter, PrometheusPlan};
pub use remote_write::{RemoteWriteExporter, RemoteWritePlan};

/// One configured exporter's settings, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum ExporterConfig {
    /// `prometheus`: the scrape endpoint.
    Prometheus(PrometheusExporter),
    /// `otlp`: OTLP/gRPC push.
    Otlp(OtlpExporter),
    /// `otlphttp`: OTLP/HTTP push.
    OtlpHttp(OtlpExporter),
    /// `prometheusremotewrite`: Prometheus remote write 1.0.
    PrometheusRemoteWrite(RemoteWriteExporter),
}

impl Registry for ExporterConfig {
    const WHAT: &'static str = "exporter";
    const TYPES: &'static [&'static str] =
        &["prometheus", "otlp", "otlphttp", "prometheusremotewrite"];

    fn read<'de, A: MapAccess<'de>>(id: &ComponentId, map: &mut A) -> Result<Self, A::Error> {
        Ok(match id.kind() {
            "prometheus" => ExporterConfig::Prometheus(defaults_if_null(map)?),
            "otlp" => ExporterConfig::Otlp(required(id, "endpoint", map)?),
            "otlphttp" => ExporterConfig::OtlpHttp(required(id, "endpoint", map)?),
            _ => ExporterConfig::PrometheusRemoteWrite(required(id, "endpoint", map)?),
        })
    }
}

impl ExporterConfig {
    /// Checks the settings of exporter `id` in the metrics pipeline.
    pub(crate) fn plan(&self, id: &ComponentId) -> Result<ExporterPlan, Error> {
        Ok(match self {
            ExporterConfig::Prometheus(e) => ExporterPlan::Prometheus(e.plan(id)?),
            ExporterConfig::Otlp(e) => ExporterPlan::Otlp(e.plan(id, PushProtocol::Grpc)?),
            ExporterConfig::OtlpHttp(e) => ExporterPlan::Otlp(e.plan(id, PushProtocol::Http)?),
            ExporterConfig::PrometheusRemoteWrite(e) => ExporterPlan::RemoteWrite(e.plan(id)?),
        })
    }

    /// Checks the settings of exporter `id` in the traces pipeline (`None`: this type
    /// carries no traces).
    pub(crate) fn plan_traces(&self, id: &ComponentId) -> Option<Result<OtlpPlan, Error>> {
        match self {
            ExporterConfig::Otlp(e) => Some(e.plan_traces(id, PushProtocol::Grpc)),
            ExporterConfig::OtlpHttp(e) => Some(e.plan_traces(id, PushProtocol::Http)),
            _ => None,
        }
    }
}

/// A checked exporter of the metrics pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum ExporterPlan {
    /// The Prometheus endpoint.
    Prometheus(PrometheusPlan),
    /// An OTLP push (gRPC or HTTP).
    Otlp(OtlpPlan),
    /// Prometheus remote write.
    RemoteWrite(RemoteWritePlan),
}

impl ExporterPlan {
    /// The exporter in a pipeline line (`otlp/primary http://...`).
    pub(crate) fn describe(&self) -> String {
        match self {
            ExporterPlan::Prometheus(p) => p.describe(),
            ExporterPlan::Otlp(p) => p.describe(),
            ExporterPlan::RemoteWrite(p) => p.describe(),
        }
    }

    /// Its line under `exporters:` in `--check-config`.
    pub(crate) fn summary(&self) -> String {
        match self {
            ExporterPlan::Prometheus(p) => p.summary(),
            ExporterPlan::Otlp(p) => p.summary(),
            ExporterPlan::RemoteWrite(p) => p.summary(),
        }
    }

    /// How its listener is secured, for one that listens.
    pub(crate) fn security(&self) -> Option<String> {
        match self {
            ExporterPlan::Prometheus(p) => Some(p.security()),
            _ => None,
        }
    }

    /// Binds it (where it listens) and readies it to run.
    pub(crate) async fn start(self, ctx: &Context) -> Result<Started, Error> {
        match self {
            ExporterPlan::Prometheus(p) => p.start(ctx).await,
            ExporterPlan::Otlp(p) => Ok(p.start(ctx)),
            ExporterPlan::RemoteWrite(p) => Ok(p.start(ctx)),
        }
    }
}
