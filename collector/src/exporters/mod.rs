//! Exporters: the Prometheus endpoint (both views and the cluster page), OTLP push to
//! an upstream (gRPC and HTTP), and Prometheus remote write; the traces pipeline's
//! forwarding to OTLP upstreams.
//!
//! Each type owns its settings, their checks into a plan ([`ExporterSettings`]), and its
//! start ([`Exporter`]) in its module. [`ExporterConfig`] is the registry of types:
//! adding one is its module plus its line there (and a line in `exporter_plans!` when
//! its plan is a new type; ADR 0016).

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

use crate::component::{ComponentId, Context, Started};
use crate::error::Error;
pub use otlp::{OtlpExporter, OtlpPlan, PushProtocol};
pub use prometheus::{PrometheusExporter, PrometheusPlan};
pub use remote_write::{RemoteWriteExporter, RemoteWritePlan};

crate::component::registry! {
    /// One configured exporter's settings, by type.
    pub enum ExporterConfig: "exporter", dyn ExporterSettings {
        /// `prometheus`: the scrape endpoint.
        "prometheus" => Prometheus(PrometheusExporter),
        /// `otlp`: OTLP/gRPC push.
        "otlp" => Otlp(OtlpExporter),
        /// `otlphttp`: OTLP/HTTP push.
        "otlphttp" => OtlpHttp(OtlpExporter),
        /// `prometheusremotewrite`: Prometheus remote write 1.0.
        "prometheusremotewrite" => PrometheusRemoteWrite(RemoteWriteExporter),
    }
}

/// What an exporter type's settings do once read: their checks, into a plan.
pub(crate) trait ExporterSettings {
    /// Checks the settings of exporter `id` in the metrics pipeline.
    fn metrics_plan(&self, id: &ComponentId) -> Result<ExporterPlan, Error>;

    /// Checks the settings of exporter `id` in the traces pipeline (`None`: this type
    /// carries no traces).
    fn traces_plan(&self, _id: &ComponentId) -> Option<Result<OtlpPlan, Error>> {
        None
    }
}

/// What a checked exporter does: how `--check-config` shows it, and its start.
pub(crate) trait Exporter {
    /// The exporter in a pipeline line (`otlp/primary http://...`).
    fn describe(&self) -> String;

    /// Its line under `exporters:` in `--check-config`.
    fn summary(&self) -> String;

    /// How its listener is secured, for one that listens.
    fn security(&self) -> Option<String> {
        None
    }

    /// Binds it (where it listens) and readies it to run.
    async fn start(self, ctx: &Context) -> Result<Started, Error>;
}

/// Declares the plan types, one line each, and [`ExporterPlan`]'s dispatch to their
/// [`Exporter`] impls.
macro_rules! exporter_plans {
    ($($(#[$vmeta:meta])* $variant:ident($plan:ty),)+) => {
        /// A checked exporter of the metrics pipeline.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ExporterPlan {
            $($(#[$vmeta])* $variant($plan),)+
        }

        impl ExporterPlan {
            /// See [`Exporter::describe`].
            pub(crate) fn describe(&self) -> String {
                match self {
                    $(ExporterPlan::$variant(p) => p.describe(),)+
                }
            }

            /// See [`Exporter::summary`].
            pub(crate) fn summary(&self) -> String {
                match self {
                    $(ExporterPlan::$variant(p) => p.summary(),)+
                }
            }

            /// See [`Exporter::security`].
            pub(crate) fn security(&self) -> Option<String> {
                match self {
                    $(ExporterPlan::$variant(p) => p.security(),)+
                }
            }

            /// See [`Exporter::start`].
            pub(crate) async fn start(self, ctx: &Context) -> Result<Started, Error> {
                match self {
                    $(ExporterPlan::$variant(p) => p.start(ctx).await,)+
                }
            }
        }
    };
}

exporter_plans! {
    /// The Prometheus endpoint.
    Prometheus(PrometheusPlan),
    /// An OTLP push (gRPC or HTTP).
    Otlp(OtlpPlan),
    /// Prometheus remote write.
    RemoteWrite(RemoteWritePlan),
}
