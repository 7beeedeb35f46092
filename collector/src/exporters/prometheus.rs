//! The Prometheus endpoint: `/metrics` (fleet view), `/metrics/sources` (per-source
//! view), `/healthz` and `/readyz`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::aggregate::{Aggregator, View};

/// The text exposition format's content type.
pub(crate) const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

fn exposition(text: String) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT))],
        text,
    )
        .into_response()
}

async fn fleet(State(aggregator): State<Arc<Aggregator>>) -> Response {
    exposition(aggregator.render(View::Fleet))
}

async fn sources(State(aggregator): State<Arc<Aggregator>>) -> Response {
    exposition(aggregator.render(View::Sources))
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Serves the endpoint on `listener` until `cancel`.
pub(crate) async fn serve(
    listener: TcpListener,
    sources_view: bool,
    aggregator: Arc<Aggregator>,
    cancel: CancellationToken,
) {
    let mut app = Router::new()
        .route("/metrics", get(fleet))
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz));
    if sources_view {
        app = app.route("/metrics/sources", get(sources));
    }
    let app = app.with_state(aggregator);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "the Prometheus endpoint stopped");
    }
}
