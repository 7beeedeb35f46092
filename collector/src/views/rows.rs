//! The read model of the Prometheus views: under the aggregator's lock the store
//! produces a view's rows (families in exposition order, each with its samples' labels
//! and values); encoders (`views::exposition`: text 0.0.4 and OpenMetrics 1.0)
//! format them after the lock is released. Labels are shared with the store (`Arc`),
//! histogram counts copied into one buffer, so taking the rows is a copy of numbers.

use std::sync::Arc;

use higgsmeter_catalog::Kind;

use crate::labels::MetricKind;

/// A family's type, as the encoders write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FamilyKind {
    Counter,
    Gauge,
    Histogram,
    /// `target_info`: a gauge in text 0.0.4, the `info` family `target` in OpenMetrics.
    Info,
}

impl From<MetricKind> for FamilyKind {
    fn from(kind: MetricKind) -> Self {
        match kind {
            MetricKind::Counter => FamilyKind::Counter,
            MetricKind::Gauge => FamilyKind::Gauge,
            MetricKind::Histogram => FamilyKind::Histogram,
        }
    }
}

impl From<Kind> for FamilyKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Counter => FamilyKind::Counter,
            Kind::Histogram => FamilyKind::Histogram,
            _ => FamilyKind::Gauge,
        }
    }
}

/// One family of a view: its header and its samples, in order.
pub(crate) struct FamilyRows {
    pub(crate) name: Arc<str>,
    pub(crate) help: Arc<str>,
    pub(crate) kind: FamilyKind,
    pub(crate) rows: Vec<Row>,
}

/// One series: its rendered labels (`k="v",…`, escaped) and its value.
pub(crate) struct Row {
    pub(crate) labels: Arc<str>,
    pub(crate) value: RowValue,
}

/// A series' value.
pub(crate) enum RowValue {
    Number(f64),
    /// A histogram: its bounds, and where its bucket counts (bounds + 1, not
    /// cumulative) start in [`Rows::counts`].
    Hist {
        bounds: Arc<[f64]>,
        at: usize,
        count: u64,
        sum: f64,
    },
}

/// A view, read: what the encoders format.
#[derive(Default)]
pub(crate) struct Rows {
    pub(crate) families: Vec<FamilyRows>,
    /// Every histogram's bucket counts, back to back.
    pub(crate) counts: Vec<u64>,
}

impl Rows {
    /// A histogram's bucket counts.
    pub(crate) fn counts(&self, at: usize, n: usize) -> &[u64] {
        self.counts.get(at..at + n).unwrap_or(&[])
    }

    /// Samples in all (histograms: buckets, sum and count each), to size buffers.
    pub(crate) fn samples(&self) -> usize {
        self.families
            .iter()
            .flat_map(|f| &f.rows)
            .map(|r| match &r.value {
                RowValue::Number(_) => 1,
                RowValue::Hist { bounds, .. } => bounds.len() + 3,
            })
            .sum()
    }

    pub(crate) fn push_family(
        &mut self,
        name: &str,
        help: &str,
        kind: FamilyKind,
    ) -> &mut Vec<Row> {
        self.families.push(FamilyRows {
            name: name.into(),
            help: help.into(),
            kind,
            rows: Vec::new(),
        });
        let last = self.families.len() - 1;
        &mut self.families[last].rows
    }

    /// A histogram's row: its bucket counts appended to the shared buffer (its count
    /// alone when it has no buckets).
    pub(crate) fn hist(
        &mut self,
        bounds: &Arc<[f64]>,
        counts: &[u64],
        count: u64,
        sum: f64,
    ) -> RowValue {
        let at = self.counts.len();
        if counts.is_empty() {
            self.counts.push(count);
        } else {
            self.counts.extend_from_slice(counts);
        }
        RowValue::Hist {
            bounds: bounds.clone(),
            at,
            count,
            sum,
        }
    }
}

/// A metric's OTLP identity.
pub(crate) struct MetricHead {
    pub(crate) name: String,
    pub(crate) help: String,
    pub(crate) unit: String,
    pub(crate) kind: MetricKind,
}

/// A point's attributes.
pub(crate) enum Attrs {
    /// A fleet entry's labels, or a per-source series' point attributes.
    Shared(Arc<[(String, String)]>),
    /// A per-source gauge in the fleet view: the source's identity labels, the point's
    /// attributes, then the static labels.
    SourceGauge {
        source: Vec<(String, String)>,
        point: Arc<[(String, String)]>,
    },
}

/// One OTLP data point, read.
pub(crate) struct OtlpPoint {
    pub(crate) metric: u32,
    pub(crate) attrs: Attrs,
    pub(crate) value: RowValue,
}

/// What the OTLP push reads under the lock: the fleet view's points (per-source
/// gauges first, then fleet entries), and with `include_sources` every live source's
/// resource and series.
pub(crate) struct OtlpRows {
    pub(crate) metrics: Vec<MetricHead>,
    pub(crate) fleet: Vec<OtlpPoint>,
    pub(crate) sources: Vec<(
        Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
        Vec<OtlpPoint>,
    )>,
    /// Histogram bucket counts, back to back (see [`RowValue::Hist`]).
    pub(crate) counts: Vec<u64>,
    pub(crate) static_labels: Vec<(String, String)>,
}

impl OtlpRows {
    /// A histogram's bucket counts.
    pub(crate) fn counts(&self, at: usize, n: usize) -> &[u64] {
        self.counts.get(at..at + n).unwrap_or(&[])
    }
}
