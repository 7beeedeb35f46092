//! The collector's own counters and gauges (names in
//! `higgsmeter_catalog::COLLECTOR_FAMILIES`): lock-free counters that the receivers,
//! the aggregator and the exporters bump, each table sized and indexed by its label
//! (`labels.rs`), one [`ExporterStats`] per configured exporter instance, and
//! [`SelfMetrics::read`], which lists their samples family by family for the views.
//!
//! The store renders these next to the fleet's families but knows nothing of what
//! they count: it gets label values and numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use higgsmeter_catalog::{
    COLLECTOR_CHECKPOINTS, COLLECTOR_CONNECTIONS_CLOSED, COLLECTOR_CONNECTIONS_REFUSED,
    COLLECTOR_EXPORT_DROPPED, COLLECTOR_EXPORT_QUEUE_DEPTH, COLLECTOR_EXPORTS,
    COLLECTOR_POINTS_RECEIVED, COLLECTOR_POINTS_REFUSED, COLLECTOR_REQUESTS,
    COLLECTOR_REQUESTS_REFUSED, COLLECTOR_SPANS_EXPORTED, COLLECTOR_SPANS_RECEIVED,
    COLLECTOR_TLS_HANDSHAKES_FAILED, Family,
};

pub use crate::labels::Transport;
pub(crate) use crate::labels::{
    By, CloseReason, DropReason, Listener, RefusalReason, RequestRefusal, SpanOutcome,
};

/// A counter per member of label `E`.
pub(crate) type Counts<E, const N: usize> = By<E, AtomicU64, N>;

crate::labels::label! {
    /// How a checkpoint write ended.
    pub(crate) enum CheckpointOutcome {
        /// Written and renamed into place.
        Ok = "ok",
        /// Not written; the previous checkpoint stays.
        Failed = "failed",
    }
}

/// What an exporter sends, for its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Metric points: requests in `higgsmeter_collector_exports_total`, drops in
    /// `higgsmeter_collector_export_dropped_points_total{reason}`.
    Metrics,
    /// Spans: in `higgsmeter_collector_spans_exported_total{outcome}` (`rejected`,
    /// `dropped`).
    Traces,
}

/// One exporter instance's counters (`exporter` label: its key under `exporters`,
/// `type[/name]`), shared by its metrics and traces pushes.
#[derive(Debug, Default)]
pub(crate) struct ExporterStats {
    /// The `exporter` label value.
    pub(crate) name: String,
    /// Whether it pushes metrics (its `exports_total`, queue depth and drops are shown).
    pub(crate) metrics: std::sync::atomic::AtomicBool,
    /// Whether it forwards spans (its `spans_exported_total` is shown).
    pub(crate) traces: std::sync::atomic::AtomicBool,
    /// Requests the upstream took.
    pub(crate) exports_ok: AtomicU64,
    /// Requests that failed (retried or refused).
    pub(crate) exports_failed: AtomicU64,
    /// Readings waiting in the queue.
    pub(crate) queue_depth: AtomicU64,
    /// Points dropped, by reason.
    pub(crate) dropped: Counts<DropReason, { DropReason::COUNT }>,
    /// Spans forwarded, by outcome.
    pub(crate) spans: Counts<SpanOutcome, { SpanOutcome::COUNT }>,
    /// Spans taken but not yet sent (counted as dropped if shutdown ends first).
    pub(crate) spans_queued: AtomicU64,
}

/// Lock-free counters the receivers, the aggregator and the exporters bump.
#[derive(Debug, Default)]
pub(crate) struct SelfMetrics {
    pub(crate) requests: Counts<Transport, { Transport::COUNT }>,
    pub(crate) requests_refused:
        By<Transport, Counts<RequestRefusal, { RequestRefusal::COUNT }>, { Transport::COUNT }>,
    pub(crate) points_received: Counts<Transport, { Transport::COUNT }>,
    pub(crate) points_refused: Counts<RefusalReason, { RefusalReason::COUNT }>,
    pub(crate) checkpoints: Counts<CheckpointOutcome, { CheckpointOutcome::COUNT }>,
    /// Connections refused at a receiver's `max_connections` (or the peer's
    /// `max_connections_per_peer`), every one busy, per transport.
    pub(crate) connections_refused: Counts<Transport, { Transport::COUNT }>,
    /// Connections a receiver closed, per transport and [`CloseReason`].
    pub(crate) connections_closed:
        By<Transport, Counts<CloseReason, { CloseReason::COUNT }>, { Transport::COUNT }>,
    /// Failed TLS handshakes, per [`Listener`].
    pub(crate) tls_handshakes_failed: Counts<Listener, { Listener::COUNT }>,
    /// Spans received by the traces pipeline, per transport.
    pub(crate) spans_received: Counts<Transport, { Transport::COUNT }>,
    /// The exporter instances, in the order they were registered.
    exporters: Mutex<Vec<Arc<ExporterStats>>>,
}

/// Adds `n` to a counter.
pub(crate) fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// A counter's value.
pub(crate) fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl SelfMetrics {
    /// Counts a request on `t`.
    pub(crate) fn request(&self, t: Transport) {
        add(&self.requests[t], 1);
    }

    /// Counts a request on `t` refused whole for `reason`.
    pub(crate) fn refuse_request(&self, t: Transport, reason: RequestRefusal) {
        add(&self.requests_refused[t][reason], 1);
    }

    /// Counts a connection on `t` that the receiver closed for `reason`.
    pub(crate) fn close_connection(&self, t: Transport, reason: CloseReason) {
        add(&self.connections_closed[t][reason], 1);
    }

    /// The counters of exporter `name` (`type[/name]`), which pushes `signal`: made
    /// on first use, then shared (an exporter in both pipelines has one set).
    pub(crate) fn exporter(&self, name: &str, signal: Signal) -> Arc<ExporterStats> {
        let mut list = self
            .exporters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let stats = match list.iter().find(|e| e.name == name) {
            Some(e) => e.clone(),
            None => {
                let e = Arc::new(ExporterStats {
                    name: name.to_owned(),
                    ..ExporterStats::default()
                });
                list.push(e.clone());
                e
            }
        };
        let flag = match signal {
            Signal::Metrics => &stats.metrics,
            Signal::Traces => &stats.traces,
        };
        flag.store(true, Ordering::Relaxed);
        stats
    }

    /// Every exporter instance's counters, by name.
    pub(crate) fn exporters(&self) -> Vec<Arc<ExporterStats>> {
        let mut list = self
            .exporters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// Every sample of the collector's own families, family by family in name order
    /// (the store adds the two it derives itself, series and sources): `emit` gets
    /// the family, the label values in the family's label order, and the value.
    pub(crate) fn read(&self, emit: &mut dyn FnMut(&'static Family, &[&str], f64)) {
        let exporters = self.exporters();
        let pushing = || {
            exporters
                .iter()
                .filter(|e| e.metrics.load(Ordering::Relaxed))
        };
        let n = |a: &AtomicU64| get(a) as f64;
        for (o, c) in self.checkpoints.iter() {
            emit(&COLLECTOR_CHECKPOINTS, &[o.as_str()], n(c));
        }
        for (t, by) in self.connections_closed.iter() {
            for (r, c) in by.iter() {
                emit(
                    &COLLECTOR_CONNECTIONS_CLOSED,
                    &[t.as_str(), r.as_str()],
                    n(c),
                );
            }
        }
        for (t, c) in self.connections_refused.iter() {
            emit(&COLLECTOR_CONNECTIONS_REFUSED, &[t.as_str()], n(c));
        }
        for e in pushing() {
            for (r, c) in e.dropped.iter() {
                emit(&COLLECTOR_EXPORT_DROPPED, &[&e.name, r.as_str()], n(c));
            }
        }
        for e in pushing() {
            emit(&COLLECTOR_EXPORT_QUEUE_DEPTH, &[&e.name], n(&e.queue_depth));
        }
        for e in pushing() {
            emit(
                &COLLECTOR_EXPORTS,
                &[&e.name, "failed"],
                n(&e.exports_failed),
            );
            emit(&COLLECTOR_EXPORTS, &[&e.name, "ok"], n(&e.exports_ok));
        }
        for (t, c) in self.points_received.iter() {
            emit(&COLLECTOR_POINTS_RECEIVED, &[t.as_str()], n(c));
        }
        for (r, c) in self.points_refused.iter() {
            emit(&COLLECTOR_POINTS_REFUSED, &[r.as_str()], n(c));
        }
        for (t, by) in self.requests_refused.iter() {
            for (r, c) in by.iter() {
                emit(&COLLECTOR_REQUESTS_REFUSED, &[t.as_str(), r.as_str()], n(c));
            }
        }
        for (t, c) in self.requests.iter() {
            emit(&COLLECTOR_REQUESTS, &[t.as_str()], n(c));
        }
        for e in exporters
            .iter()
            .filter(|e| e.traces.load(Ordering::Relaxed))
        {
            for (o, c) in e.spans.iter() {
                emit(&COLLECTOR_SPANS_EXPORTED, &[&e.name, o.as_str()], n(c));
            }
        }
        for (t, c) in self.spans_received.iter() {
            emit(&COLLECTOR_SPANS_RECEIVED, &[t.as_str()], n(c));
        }
        for (l, c) in self.tls_handshakes_failed.iter() {
            emit(&COLLECTOR_TLS_HANDSHAKES_FAILED, &[l.as_str()], n(c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_read_in_name_order_with_its_labels() {
        let stats = SelfMetrics::default();
        let primary = stats.exporter("otlp/primary", Signal::Metrics);
        add(&primary.dropped[DropReason::Refused], 3);
        stats.exporter("otlphttp", Signal::Traces);
        let mut families: Vec<&'static str> = Vec::new();
        let mut refused = None;
        stats.read(&mut |family, labels, value| {
            assert_eq!(family.labels.len(), labels.len(), "{}", family.name);
            if families.last() != Some(&family.name) {
                families.push(family.name);
            }
            if family.name == COLLECTOR_EXPORT_DROPPED.name && labels[1] == "refused" {
                refused = Some((labels[0].to_owned(), value));
            }
        });
        let mut sorted = families.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(families, sorted, "families repeat or are out of order");
        assert_eq!(refused, Some(("otlp/primary".to_owned(), 3.0)));
    }

    #[test]
    fn an_exporter_in_both_pipelines_has_one_set_of_counters() {
        let stats = SelfMetrics::default();
        let a = stats.exporter("otlp", Signal::Metrics);
        let b = stats.exporter("otlp", Signal::Traces);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.metrics.load(Ordering::Relaxed) && a.traces.load(Ordering::Relaxed));
        assert_eq!(stats.exporters().len(), 1);
    }
}
