//! OTLP receivers: gRPC (tonic) and HTTP (axum), both feeding the [`Aggregator`](crate::Aggregator).
//!
//! Responses follow OTLP: success; partial success with `rejected_data_points` and a
//! message when some points are refused; a gRPC status / HTTP code with a message when
//! the request itself is unusable. Traces and logs are refused as not supported.
//!
//! Each receiver type owns its settings and their checks: `otlp` (and `otlp/NAME`)
//! here, with its two protocols' listeners in `grpc.rs` and `http.rs`.
//! [`ReceiverConfig`] is the registry of types (ADR 0016).

pub(crate) mod grpc;
pub(crate) mod http;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use serde::Deserialize;
use serde::de::MapAccess;

use crate::aggregate::IngestResult;
use crate::auth::{AuthSettings, BearerTokenAuthConfig};
use crate::component::{ComponentId, Context, PlanEnv, Registry, Started, defaults_if_null};
use crate::error::Error;
pub use grpc::{GrpcPlan, GrpcReceiver};
pub use http::{HttpPlan, HttpReceiver};

/// The default `max_connections_per_peer` of both receivers (or their
/// `max_connections` when that is lower): an eighth of the default `max_connections`,
/// room for a node's ranks and exporters many times over.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 128;

/// One configured receiver's settings, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum ReceiverConfig {
    /// `otlp`: OTLP over gRPC and/or HTTP.
    Otlp(OtlpReceiver),
}

impl Registry for ReceiverConfig {
    const WHAT: &'static str = "receiver";
    const TYPES: &'static [&'static str] = &["otlp"];

    fn read<'de, A: MapAccess<'de>>(_id: &ComponentId, map: &mut A) -> Result<Self, A::Error> {
        Ok(ReceiverConfig::Otlp(defaults_if_null(map)?))
    }
}

impl ReceiverConfig {
    /// Checks the settings of receiver `id`: one plan per listener.
    pub(crate) fn plan(
        &self,
        id: &ComponentId,
        env: PlanEnv<'_>,
    ) -> Result<Vec<ReceiverPlan>, Error> {
        match self {
            ReceiverConfig::Otlp(r) => r.plan(id, env),
        }
    }
}

/// `receivers.otlp` (and `otlp/NAME`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpReceiver {
    /// `receivers.otlp.protocols`: each protocol present is on.
    pub protocols: Protocols,
}

impl Default for OtlpReceiver {
    /// Both protocols on their default endpoints.
    fn default() -> Self {
        OtlpReceiver {
            protocols: Protocols {
                grpc: Some(GrpcReceiver::default()),
                http: Some(HttpReceiver::default()),
            },
        }
    }
}

/// `receivers.otlp.protocols`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    /// OTLP/gRPC.
    #[serde(default, deserialize_with = "crate::component::null_is_default")]
    pub grpc: Option<GrpcReceiver>,
    /// OTLP/HTTP.
    #[serde(default, deserialize_with = "crate::component::null_is_default")]
    pub http: Option<HttpReceiver>,
}

impl OtlpReceiver {
    fn plan(&self, id: &ComponentId, env: PlanEnv<'_>) -> Result<Vec<ReceiverPlan>, Error> {
        let p = &self.protocols;
        if p.grpc.is_none() && p.http.is_none() {
            return Err(Error::Config {
                path: format!("receivers.{id}.protocols"),
                message: "turn on `grpc`, `http` or both".into(),
            });
        }
        let mut plans = Vec::new();
        if let Some(g) = &p.grpc {
            plans.push(ReceiverPlan::Grpc(g.plan(id, env)?));
        }
        if let Some(h) = &p.http {
            plans.push(ReceiverPlan::Http(h.plan(id, env)?));
        }
        Ok(plans)
    }
}

/// A per-peer cap: 1 to the receiver's `max_connections`; missing, the default (or
/// `max_connections` when that is lower).
fn check_per_peer(path: &str, per_peer: Option<usize>, max: usize) -> Result<usize, Error> {
    let Some(per_peer) = per_peer else {
        return Ok(DEFAULT_MAX_CONNECTIONS_PER_PEER.min(max));
    };
    if per_peer == 0 || per_peer > max {
        return Err(Error::Config {
            path: path.to_owned(),
            message: format!(
                "must be 1 to the receiver's max_connections ({max}); it is {per_peer} (default {DEFAULT_MAX_CONNECTIONS_PER_PEER})"
            ),
        });
    }
    Ok(per_peer)
}

/// Resolves a listener's `auth.authenticator` (at `path`) to its configured extension
/// and reads its token.
fn authenticator(
    path: &str,
    auth: &Option<AuthSettings>,
    env: PlanEnv<'_>,
) -> Result<Option<BearerTokenAuthConfig>, Error> {
    let Some(auth) = auth else { return Ok(None) };
    let path = format!("{path}.authenticator");
    let error = |message: String| Error::Config {
        path: path.clone(),
        message,
    };
    if auth.authenticator != "bearertokenauth" {
        return Err(error(format!(
            "authenticator `{}` is not defined: this collector has `bearertokenauth` (configure it under extensions)",
            auth.authenticator
        )));
    }
    let Some(cfg) = env.bearertokenauth else {
        return Err(error(
            "authenticator `bearertokenauth` is not defined: configure extensions.bearertokenauth (token or filename)".into(),
        ));
    };
    if let Some(list) = env.extensions
        && !list.iter().any(|e| e == "bearertokenauth")
    {
        return Err(error(
            "`bearertokenauth` is not listed in service.extensions: list it there".into(),
        ));
    }
    cfg.token()?;
    Ok(Some(cfg.clone()))
}

/// How a listener is secured, for `--check-config`.
fn security(
    what: &str,
    id: &ComponentId,
    tls: &Option<crate::tls::TlsServerSettings>,
    auth: bool,
) -> String {
    format!(
        "{what} {id}: {}{}",
        crate::tls::describe(tls),
        if auth { ", bearer token required" } else { "" }
    )
}

/// A checked listener of a receiver.
#[derive(Debug, Clone, PartialEq)]
pub enum ReceiverPlan {
    /// OTLP/gRPC.
    Grpc(GrpcPlan),
    /// OTLP/HTTP.
    Http(HttpPlan),
}

impl ReceiverPlan {
    /// The listener in a pipeline line (`otlp grpc 127.0.0.1:4317`).
    pub(crate) fn describe(&self) -> String {
        match self {
            ReceiverPlan::Grpc(p) => format!("{} grpc {}", p.id, p.addr),
            ReceiverPlan::Http(p) => format!("{} http {}", p.id, p.addr),
        }
    }

    /// Its line under `receivers:` in `--check-config`.
    pub(crate) fn summary(&self) -> String {
        match self {
            ReceiverPlan::Grpc(p) => p.summary(),
            ReceiverPlan::Http(p) => p.summary(),
        }
    }

    /// How it is secured, for `--check-config`.
    pub(crate) fn security(&self) -> String {
        match self {
            ReceiverPlan::Grpc(p) => {
                security("OTLP/gRPC receiver", &p.id, &p.tls, p.auth.is_some())
            }
            ReceiverPlan::Http(p) => {
                security("OTLP/HTTP receiver", &p.id, &p.tls, p.auth.is_some())
            }
        }
    }

    /// Binds it and readies it to run.
    pub(crate) async fn start(self, ctx: &Context) -> Result<Started, Error> {
        match self {
            ReceiverPlan::Grpc(p) => p.start(ctx).await,
            ReceiverPlan::Http(p) => p.start(ctx).await,
        }
    }
}

/// The OTLP response for an ingest result.
pub(crate) fn response(result: &IngestResult) -> ExportMetricsServiceResponse {
    let partial_success = (result.rejected > 0).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: i64::try_from(result.rejected).unwrap_or(i64::MAX),
        error_message: result.message.clone(),
    });
    ExportMetricsServiceResponse { partial_success }
}

/// What a traces or logs request is told.
pub(crate) const SIGNAL_NOT_SUPPORTED: &str = "higgsmeter-collector receives metrics only (and traces where service.pipelines.traces is configured); send logs, and traces without that pipeline, to another OpenTelemetry collector";

/// What a trace request is told when an exporter's queue has no room for it.
pub(crate) fn queue_full(exporter: &str) -> String {
    format!(
        "the traces queue of exporter `{exporter}` is full (exporters.{exporter}.sending_queue.traces_queue_mib; its upstream is down or slow); retry later (nothing of this request was taken)"
    )
}

/// What a request without the bearer token is told (never what it sent).
pub(crate) const UNAUTHENTICATED: &str = "missing or wrong bearer token: this receiver requires `authorization: Bearer <token>` (its auth.authenticator); nothing of this request was counted";

/// What a request that arrives while the collector shuts down is told (it is not
/// counted: the sender retries against the next process).
pub(crate) const SHUTTING_DOWN: &str =
    "higgsmeter-collector is shutting down; retry shortly (nothing of this request was counted)";
