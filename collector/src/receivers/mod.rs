//! OTLP receivers: gRPC (tonic) and HTTP (axum), both feeding the [`Aggregator`](crate::Aggregator).
//!
//! Responses follow OTLP: success; partial success with `rejected_data_points` and a
//! message when some points are refused; a gRPC status / HTTP code with a message when
//! the request itself is unusable. Traces and logs are refused as not supported.
//!
//! Each receiver type owns its settings and their checks: `otlp` (and `otlp/NAME`)
//! here, with its two protocols' listeners in `grpc.rs` and `http.rs`.
//! [`ReceiverConfig`] is the registry of types: a new one is its module plus its line
//! there (ADR 0016).

pub(crate) mod grpc;
pub(crate) mod http;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use serde::Deserialize;
use serde::de::MapAccess;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::net::TcpListener;

use crate::aggregate::{Aggregator, IngestResult};
use crate::auth::{AuthSettings, BearerAuth, BearerTokenAuthConfig};
use crate::component::{ComponentId, Context, PlanEnv, ReadSettings, Started, defaults_if_null};
use crate::duration::{show, show_bytes};
use crate::error::Error;
use crate::forward::TraceForwarder;
use crate::net::ConnLimits;
use crate::self_metrics::{Listener, SelfMetrics, Transport};
use crate::tls::{TlsListener, TlsServerSettings};
pub use grpc::GrpcReceiver;
pub use http::HttpReceiver;

/// The default `max_connections_per_peer` of both receivers (or their
/// `max_connections` when that is lower): an eighth of the default `max_connections`,
/// room for a node's ranks and exporters many times over.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 128;

crate::component::registry! {
    /// One configured receiver's settings, by type.
    pub enum ReceiverConfig: "receiver", dyn ReceiverSettings {
        /// `otlp`: OTLP over gRPC and/or HTTP.
        "otlp" => Otlp(OtlpReceiver),
    }
}

/// What a receiver type's settings do once read: their checks, into one plan per
/// listener.
pub(crate) trait ReceiverSettings {
    /// Checks the settings of receiver `id`.
    fn plan(&self, id: &ComponentId, env: PlanEnv<'_>) -> Result<Vec<ReceiverPlan>, Error>;
}

impl ReadSettings for OtlpReceiver {
    /// A bare `otlp:` is both protocols on their default endpoints.
    fn read<'de, A: MapAccess<'de>>(_id: &ComponentId, map: &mut A) -> Result<Self, A::Error> {
        defaults_if_null(map)
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

impl ReceiverSettings for OtlpReceiver {
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
            plans.push(g.plan(id, env)?);
        }
        if let Some(h) = &p.http {
            plans.push(h.plan(id, env)?);
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

/// A checked listener of a receiver: OTLP/gRPC or OTLP/HTTP.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverPlan {
    pub(crate) id: ComponentId,
    pub(crate) transport: Transport,
    pub(crate) addr: SocketAddr,
    /// The largest message (gRPC) or body (HTTP), bytes.
    pub(crate) max_size: usize,
    pub(crate) limits: ConnLimits,
    pub(crate) read_timeout: Duration,
    pub(crate) tls: Option<TlsServerSettings>,
    pub(crate) auth: Option<BearerTokenAuthConfig>,
}

/// A listener bound, with everything it serves with.
pub(crate) struct Bound {
    /// Its key (`receivers.otlp.protocols.grpc`), for the logs.
    pub(crate) key: String,
    pub(crate) listener: TcpListener,
    pub(crate) max_size: usize,
    pub(crate) limits: ConnLimits,
    pub(crate) read_timeout: Duration,
    pub(crate) tls: Option<Arc<TlsListener>>,
    pub(crate) auth: Option<Arc<BearerAuth>>,
    pub(crate) traces: Option<Arc<TraceForwarder>>,
    pub(crate) aggregator: Arc<Aggregator>,
    pub(crate) stats: Arc<SelfMetrics>,
}

impl ReceiverPlan {
    /// Its transport.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Where it listens (as configured: port 0 picks one at start).
    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    /// The largest message (gRPC) or body (HTTP) it takes, bytes.
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    fn key(&self) -> String {
        format!(
            "receivers.{}.protocols.{}",
            self.id,
            self.transport.as_str()
        )
    }

    fn listener(&self) -> Listener {
        match self.transport {
            Transport::Grpc => Listener::Grpc,
            Transport::Http => Listener::Http,
        }
    }

    /// The listener in a pipeline line (`otlp grpc 127.0.0.1:4317`).
    pub(crate) fn describe(&self) -> String {
        format!("{} {} {}", self.id, self.transport.as_str(), self.addr)
    }

    /// Its line under `receivers:` in `--check-config`.
    pub(crate) fn summary(&self) -> String {
        let (id, addr, max) = (&self.id, self.addr, self.limits.max);
        let size = show_bytes(self.max_size);
        match self.transport {
            Transport::Grpc => format!(
                "  {id} grpc on {addr}: messages up to {size}, at most {max} connections, a request times out after {}",
                show(self.read_timeout)
            ),
            Transport::Http => format!(
                "  {id} http on {addr}: bodies up to {size}, at most {max} connections, headers within {}, a body within {}",
                show(self.limits.opening),
                show(self.read_timeout)
            ),
        }
    }

    /// How it is secured, for `--check-config`.
    pub(crate) fn security(&self) -> String {
        format!(
            "{} {}: {}{}",
            self.listener().role(),
            self.id,
            crate::tls::describe(&self.tls),
            if self.auth.is_some() {
                ", bearer token required"
            } else {
                ""
            }
        )
    }

    /// Reads its TLS files and token, takes its port, and readies it to serve.
    pub(crate) async fn start(self, ctx: &Context) -> Result<Started, Error> {
        let key = self.key();
        let (listener, addr, tls) =
            crate::component::listen(ctx, self.listener(), &key, self.addr, &self.tls).await?;
        let auth = self
            .auth
            .as_ref()
            .map(|a| BearerAuth::start(a, ctx.stopped.clone()))
            .transpose()?;
        let bound = Bound {
            key,
            listener,
            max_size: self.max_size,
            limits: self.limits,
            read_timeout: self.read_timeout,
            tls,
            auth,
            traces: ctx.traces.clone(),
            aggregator: ctx.aggregator.clone(),
            stats: ctx.stats.clone(),
        };
        let stop = ctx.stop.clone();
        Ok(Started {
            address: Some((self.listener(), addr)),
            run: match self.transport {
                Transport::Grpc => grpc::serve(bound, stop).boxed(),
                Transport::Http => http::serve(bound, stop).boxed(),
            },
        })
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
