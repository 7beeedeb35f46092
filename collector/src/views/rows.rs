//! The read model of the Prometheus views: under the aggregator's lock the store
//! produces a view's rows (families in exposition order, each with its samples' labels
//! and values); encoders (`views::exposition`: text 0.0.4 and OpenMetrics 1.0,
//! `views::exposition_proto`: protobuf; remote write's) format them after the lock is
//! released. Every row's label text is copied into one
//! buffer, and histogram counts into another: the encoders then read both in order
//! (the store's label strings, scattered over the heap, were a cache miss per series
//! in the encoder, and their reference counts another two under the lock and after).

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

/// One series: where its rendered labels (`k="v",…`, escaped) are in [`Rows::text`],
/// and its value.
pub(crate) struct Row {
    labels: (usize, usize),
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
    /// Every row's label text, back to back (see [`Rows::labels`]).
    pub(crate) text: String,
    /// The bounds of the last histogram row: a row with equal bounds shares this `Arc`
    /// (the encoders then recognise them by pointer).
    pub(crate) last_bounds: Option<Arc<[f64]>>,
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

    /// A row's rendered labels (`k="v",…`, escaped; empty for none).
    pub(crate) fn labels(&self, row: &Row) -> &str {
        self.text
            .get(row.labels.0..row.labels.1)
            .unwrap_or_default()
    }

    /// Starts a family, with room for `rows` rows.
    pub(crate) fn push_family(&mut self, name: &str, help: &str, kind: FamilyKind, rows: usize) {
        self.families.push(FamilyRows {
            name: name.into(),
            help: help.into(),
            kind,
            rows: Vec::with_capacity(rows),
        });
    }

    /// Adds a row to the last family (started by [`Rows::push_family`]).
    pub(crate) fn push_row(&mut self, labels: &str, value: RowValue) {
        let start = self.text.len();
        self.text.push_str(labels);
        if let Some(family) = self.families.last_mut() {
            family.rows.push(Row {
                labels: (start, self.text.len()),
                value,
            });
        }
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
        let bounds = match &self.last_bounds {
            Some(last) if Arc::ptr_eq(last, bounds) || same_bounds(last, bounds) => last.clone(),
            _ => {
                self.last_bounds = Some(bounds.clone());
                bounds.clone()
            }
        };
        RowValue::Hist {
            bounds,
            at,
            count,
            sum,
        }
    }
}

/// Whether two histograms' bounds are the same bits.
fn same_bounds(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The labels of a rendered label set (`a="x",b="y\"z"`, as `naming::render_labels`
/// writes them), unescaped; `None` if the text is not in that shape.
pub(crate) fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        out.push((name.to_owned(), value));
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return None,
        };
    }
    Some(out)
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
