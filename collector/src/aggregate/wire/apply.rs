//! The second pass of a request: the visitor that applies a request already validated
//! by [`walk`](super::walk) with [`Count`](super::Count) to the store.

use super::super::store::{Outcome, Store};
use super::super::{MetricKind, RefusalReason};
use super::{DataKind, DecodeError, HistPoint, Kv, MetricRef, NumberPoint, Visitor};

/// Applies a request already validated by [`walk`](super::walk) with
/// [`Count`](super::Count).
pub(crate) fn apply(
    store: &mut Store,
    req: &[u8],
    now: u64,
    out: &mut Outcome,
) -> Result<(), DecodeError> {
    let mut v = Apply {
        store,
        now,
        out,
        resource: Vec::new(),
        source: None,
        current: None,
    };
    super::walk(req, &mut v)
}

/// The second pass: applies a validated request to the store.
struct Apply<'s, 'a> {
    store: &'s mut Store,
    now: u64,
    out: &'s mut Outcome,
    resource: Vec<Kv<'a>>,
    source: Option<u32>,
    /// The current metric: its id, kind and temporality, or `None` when refused.
    current: Option<(u32, MetricKind, bool)>,
}

impl<'a> Visitor<'a> for Apply<'_, 'a> {
    fn resource(&mut self, attrs: &[Kv<'a>]) {
        self.resource.clear();
        self.resource.extend_from_slice(attrs);
        self.source = None;
    }

    fn metric(&mut self, m: &MetricRef<'a>) {
        let n = m.points.len() as u64;
        self.out.received += n;
        self.current = None;
        let (kind, delta) = match m.kind {
            DataKind::None => return,
            DataKind::Gauge => (MetricKind::Gauge, false),
            DataKind::Sum {
                monotonic: true,
                delta,
            } => (MetricKind::Counter, delta),
            DataKind::Sum {
                monotonic: false,
                delta,
            } => (MetricKind::Gauge, delta),
            DataKind::Histogram { delta } => (MetricKind::Histogram, delta),
            DataKind::ExponentialHistogram => {
                self.out.refuse(RefusalReason::UnsupportedType, n, || {
                    format!(
                        "metric `{}`: exponential histograms are not supported; configure an explicit-bucket histogram view",
                        m.name
                    )
                });
                return;
            }
            DataKind::Summary => {
                self.out.refuse(RefusalReason::UnsupportedType, n, || {
                    format!(
                        "metric `{}`: summaries are not supported; send a histogram",
                        m.name
                    )
                });
                return;
            }
        };
        match self.store.metric_id(m, kind) {
            Ok(id) => {
                if self.source.is_none() {
                    self.source = Some(self.store.source_for(&self.resource, self.now));
                }
                self.current = Some((id, kind, delta));
            }
            Err((reason, msg)) => self.out.refuse(reason, n, || msg),
        }
    }

    fn number(&mut self, p: &NumberPoint<'a>) {
        if let (Some((metric, kind, delta)), Some(source)) = (self.current, self.source) {
            self.store
                .number_point(source, metric, kind, delta, p, self.now, self.out);
        }
    }

    fn histogram(&mut self, p: &HistPoint<'a>) {
        if let (Some((metric, _, delta)), Some(source)) = (self.current, self.source) {
            self.store
                .histogram_point(source, metric, delta, p, self.now, self.out);
        }
    }
}
