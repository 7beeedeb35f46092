//! The Prometheus endpoint (`exporters.prometheus`): its settings, and what it serves:
//! `/metrics` (fleet view), `/metrics/sources` (per-source view), the cluster page,
//! `/healthz` and `/readyz`.
//!
//! Both views are negotiated as client_golang's `promhttp` does (`views::negotiate`):
//! text 0.0.4, OpenMetrics 1.0 or the protobuf exposition by `Accept`, gzip by
//! `Accept-Encoding` (`views::scrape`: one stream over the body, compressed as the
//! chunks are encoded); `Vary: Accept, Accept-Encoding`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::FutureExt as _;
use serde::Deserialize;
use serde::de::MapAccess;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{Exporter, ExporterPlan, ExporterSettings};
use crate::aggregate::{Aggregator, View};
use crate::component::{ComponentId, Context, ReadSettings, Started, defaults_if_null};
use crate::error::Error;
use crate::net::LimitedListener;
use crate::self_metrics::Listener;
use crate::tls::TlsServerSettings;
use crate::views::negotiate::{self, Coding};
use crate::views::scrape::Scrape;

/// `exporters.prometheus` (and `prometheus/NAME`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrometheusExporter {
    /// `host:port` serving `/metrics` (default `127.0.0.1:9464`).
    pub endpoint: String,
    /// Whether `/metrics/sources` (the per-source view) is served (default true).
    pub sources_view: bool,
    /// TLS: `/metrics` over https only.
    pub tls: Option<TlsServerSettings>,
}

impl Default for PrometheusExporter {
    fn default() -> Self {
        PrometheusExporter {
            endpoint: "127.0.0.1:9464".into(),
            sources_view: true,
            tls: None,
        }
    }
}

impl ReadSettings for PrometheusExporter {
    /// A bare `prometheus:` is the endpoint on its defaults.
    fn read<'de, A: MapAccess<'de>>(_id: &ComponentId, map: &mut A) -> Result<Self, A::Error> {
        defaults_if_null(map)
    }
}

impl ExporterSettings for PrometheusExporter {
    fn metrics_plan(&self, id: &ComponentId) -> Result<ExporterPlan, Error> {
        Ok(ExporterPlan::Prometheus(self.plan(id)?))
    }
}

impl Exporter for PrometheusPlan {
    /// `prometheus 127.0.0.1:9464`: the exporter in a pipeline line.
    fn describe(&self) -> String {
        format!("{} {}", self.id, self.addr)
    }

    /// Its line under `exporters:` in `--check-config`.
    fn summary(&self) -> String {
        format!(
            "  {} on {}: /metrics (fleet){}, /, /api/cluster and /api/cluster/timeline (cluster page)",
            self.id,
            self.addr,
            if self.sources_view {
                ", /metrics/sources (per source)"
            } else {
                ""
            }
        )
    }

    /// How it is secured, for `--check-config`.
    fn security(&self) -> Option<String> {
        Some(format!(
            "{} {}: {}",
            Listener::Prometheus.role(),
            self.id,
            crate::tls::describe(&self.tls)
        ))
    }

    /// Takes its port and reads its TLS files.
    async fn start(self, ctx: &Context) -> Result<Started, Error> {
        let key = format!("exporters.{}", self.id);
        let (listener, addr, tls) =
            crate::component::listen(ctx, Listener::Prometheus, &key, self.addr, &self.tls).await?;
        Ok(Started {
            address: Some((Listener::Prometheus, addr)),
            run: serve(
                listener,
                self.sources_view,
                tls,
                ctx.aggregator.clone(),
                ctx.stop.clone(),
            )
            .boxed(),
        })
    }
}

impl PrometheusExporter {
    /// Checks the settings of exporter `id`: the address, and the TLS files.
    pub(crate) fn plan(&self, id: &ComponentId) -> Result<PrometheusPlan, Error> {
        let key = format!("exporters.{id}");
        crate::tls::check_server(&format!("{key}.tls"), &self.tls)?;
        Ok(PrometheusPlan {
            id: id.clone(),
            addr: crate::net::resolve(&format!("{key}.endpoint"), &self.endpoint)?,
            sources_view: self.sources_view,
            tls: self.tls.clone(),
        })
    }
}

/// A checked Prometheus endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusPlan {
    pub(crate) id: ComponentId,
    pub(crate) addr: SocketAddr,
    pub(crate) sources_view: bool,
    pub(crate) tls: Option<TlsServerSettings>,
}

impl PrometheusPlan {
    /// Where it listens (as configured: port 0 picks one at start).
    pub fn address(&self) -> SocketAddr {
        self.addr
    }
}

/// The scrape's answer: `view` in the format and content coding the request's `Accept`
/// and `Accept-Encoding` negotiate (`views::negotiate`), streamed.
fn exposition(aggregator: &Aggregator, view: View, headers: &HeaderMap) -> Response {
    if !aggregator.ready() {
        // Right after a restore, until each source that was live has pushed again (at
        // most stale_after): a restored value may be below what a scraper last read,
        // which it would take for a counter reset. A failed scrape shows it nothing.
        let text = format!(
            "restoring the aggregation state: waiting for {} source(s) to report again (at most processors.higgsmeter.stale_after)\n",
            aggregator.awaiting()
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
            text,
        )
            .into_response();
    }
    let header_str = |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",")
    };
    let format = negotiate::format(&header_str(header::ACCEPT));
    let coding = negotiate::coding(&header_str(header::ACCEPT_ENCODING));
    tracing::debug!(
        view = ?view,
        format = format.name(),
        gzip = coding == Coding::Gzip,
        "scrape"
    );
    // The rows are read under the lock; they are encoded (and compressed) as the body
    // is sent, in chunks, after the lock is released.
    let scrape = Scrape::new(aggregator.rows(view), format, coding);
    let chunks = futures_util::stream::unfold(scrape, |mut scrape| async move {
        let chunk = scrape.next_chunk().transpose()?;
        Some((chunk, scrape))
    });
    let mut response = Body::from_stream(chunks).into_response();
    let out = response.headers_mut();
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    out.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    );
    if coding == Coding::Gzip {
        out.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

async fn fleet(State(aggregator): State<Arc<Aggregator>>, headers: HeaderMap) -> Response {
    exposition(&aggregator, View::Fleet, &headers)
}

async fn sources(State(aggregator): State<Arc<Aggregator>>, headers: HeaderMap) -> Response {
    exposition(&aggregator, View::Sources, &headers)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Serves the endpoint on `listener` until `cancel` (https only with `tls`).
async fn serve(
    listener: TcpListener,
    sources_view: bool,
    tls: Option<Arc<crate::tls::TlsListener>>,
    aggregator: Arc<Aggregator>,
    cancel: CancellationToken,
) {
    let mut app = Router::new()
        .route("/metrics", get(fleet))
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz))
        .merge(super::cluster::routes(aggregator.clone(), cancel.clone()));
    if sources_view {
        app = app.route("/metrics/sources", get(sources));
    }
    let app = app.with_state(aggregator);
    // Scrapers get the receivers' header-read (and keep-alive idle) timeout; no cap.
    let header_timeout = crate::receivers::http::HttpReceiver::default().read_header_timeout;
    crate::net::serve_http1(
        LimitedListener::unlimited(listener, header_timeout, cancel.clone()),
        app,
        tls,
        cancel,
    )
    .await;
}
