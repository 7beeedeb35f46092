//! The views: what the store's read models become for their readers. The Prometheus
//! exposition (text 0.0.4 and OpenMetrics 1.0, and the protobuf exposition; which one a
//! scrape gets, and whether gzip-compressed, is `negotiate`'s, and `scrape` streams it),
//! the OTLP push's request, and the cluster page's JSON and timeline.
//!
//! A view never sees the store. Under the aggregator's lock the store copies what a
//! view reads into a read model ([`rows::Rows`], [`rows::OtlpRows`],
//! [`cluster::ClusterReading`]: labels shared by `Arc`, numbers copied); the lock is
//! released and the view encodes the model. That copy is the whole API between the
//! store and the views (`Aggregator::rows`, `otlp_rows`, `cluster_reading`), so this
//! module depends on the leaf modules only, and the aggregator's methods that render a
//! view (`render`, `export_request`, ...) are in `aggregate` with the others.

pub(crate) mod cluster;
pub(crate) mod cluster_json;
pub(crate) mod cluster_timeline;
pub(crate) mod exposition;
pub(crate) mod exposition_proto;
pub(crate) mod format;
pub(crate) mod jobs;
pub(crate) mod negotiate;
pub(crate) mod otlp;
pub(crate) mod rows;
pub(crate) mod scrape;

/// Which Prometheus view to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `/metrics`: counters, histograms and summable gauges aggregated over the
    /// source identity; per-source gauges with identity labels; derived and
    /// self metrics.
    Fleet,
    /// `/metrics/sources`: every family per live source, identity labels kept.
    Sources,
}
