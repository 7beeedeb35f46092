//! The cluster view on the Prometheus endpoint's port: `GET /` serves a self-contained
//! page (HTML, inline CSS and JS, compiled into the binary) that redraws every second
//! from `GET /api/cluster`, the JSON of every source's state, time shares, GPU
//! utilisation and staleness (see `cluster_json`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use super::cluster_json::{ClusterHistory, cluster_json};
use crate::aggregate::Aggregator;

/// The page, embedded at build time.
const PAGE: &str = include_str!("../../assets/cluster.html");

/// How often the history of every live source is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// What the cluster handlers share: the aggregator and the per-source history.
struct ClusterView {
    aggregator: Arc<Aggregator>,
    history: Mutex<ClusterHistory>,
}

impl ClusterView {
    /// Reads the store, keeps the reading as a history sample, returns the JSON text.
    fn sample_json(&self) -> String {
        let reading = self.aggregator.cluster_reading();
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.record(&reading);
        cluster_json(&reading, &history).to_string()
    }

    fn sample(&self) {
        let reading = self.aggregator.cluster_reading();
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&reading);
    }
}

async fn page() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        PAGE,
    )
        .into_response()
}

async fn api(State(view): State<Arc<ClusterView>>) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        view.sample_json(),
    )
        .into_response()
}

/// The routes `GET /` and `GET /api/cluster`, for merging into the Prometheus
/// endpoint's router; also starts sampling every live source once a second (so the
/// last minute is known before anyone opens the page) until `cancel`.
pub(crate) fn routes<S>(aggregator: Arc<Aggregator>, cancel: CancellationToken) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let view = Arc::new(ClusterView {
        aggregator,
        history: Mutex::new(ClusterHistory::default()),
    });
    let sampler = view.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => sampler.sample(),
            }
        }
    });
    Router::new()
        .route("/", get(page))
        .route("/api/cluster", get(api))
        .with_state(view)
}
