//! The cluster view on the Prometheus endpoint's port: `GET /` serves a self-contained
//! page (HTML, inline CSS and JS, compiled into the binary) that redraws every second
//! from `GET /api/cluster`, the JSON of every source's state, time shares, GPU
//! utilisation and staleness (see `cluster_json`), `GET /api/cluster/timeline`,
//! every source's states over the last `window` seconds (see `cluster_timeline`), and
//! `GET /api/jobs`, every training job's goodput and badput (see `views::jobs`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::aggregate::Aggregator;
use crate::views::cluster_json::{ClusterHistory, cluster_json};
use crate::views::cluster_timeline::{Timeline, timeline_json, window_from_query};
use crate::views::jobs::jobs_json;

/// The page, embedded at build time.
const PAGE: &str = include_str!("../../assets/cluster.html");

/// How often the history of every live source is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// What the cluster handlers share: the aggregator, the per-source history of the
/// last minute's shares, and the per-source state timeline.
struct ClusterView {
    aggregator: Arc<Aggregator>,
    history: Mutex<ClusterHistory>,
    timeline: Mutex<Timeline>,
}

impl ClusterView {
    /// Reads the store, keeps the reading as a history sample, returns the JSON text.
    fn sample_json(&self) -> String {
        let reading = self.aggregator.cluster_reading();
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.record(&reading);
        cluster_json(&reading, &history).to_string()
    }

    /// The once-a-second sample: the last minute's history and the timeline.
    fn sample(&self) {
        let reading = self.aggregator.cluster_reading();
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&reading);
        self.timeline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&reading);
    }

    /// The timeline over the last `window_s` seconds, as JSON text.
    fn timeline_json(&self, window_s: u64) -> String {
        let reading = self.aggregator.cluster_reading();
        let now_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let doc = {
            let mut timeline = self.timeline.lock().unwrap_or_else(PoisonError::into_inner);
            // This reading too, not only the last second's sample: the lanes end in the
            // state the table (read just now as well) shows.
            timeline.record(&reading);
            timeline_json(&reading, &timeline, window_s, now_unix_s)
        };
        doc.to_string()
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

/// `GET /api/jobs`: every job's goodput, badput by cause, ranks and incarnations
/// (`views::jobs`).
async fn jobs(State(view): State<Arc<ClusterView>>) -> Response {
    let doc = jobs_json(&view.aggregator.job_view());
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        doc.to_string(),
    )
        .into_response()
}

async fn timeline(State(view): State<Arc<ClusterView>>, uri: Uri) -> Response {
    let window_s = window_from_query(uri.query());
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        view.timeline_json(window_s),
    )
        .into_response()
}

/// The routes `GET /`, `GET /api/cluster`, `GET /api/cluster/timeline` and `GET /api/jobs`, for merging into the Prometheus
/// endpoint's router; also starts sampling every live source once a second (so the
/// last minute is known before anyone opens the page) until `cancel`.
pub(crate) fn routes<S>(aggregator: Arc<Aggregator>, cancel: CancellationToken) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let view = Arc::new(ClusterView {
        aggregator,
        history: Mutex::new(ClusterHistory::default()),
        timeline: Mutex::new(Timeline::default()),
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
        .route("/api/cluster/timeline", get(timeline))
        .route("/api/jobs", get(jobs))
        .with_state(view)
}
