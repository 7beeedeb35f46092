//! The catalog-span layer: records step and transfer spans into the engine's catalog
//! histograms and counters when they close.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use tracing_core::Subscriber;
use tracing_core::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::engine::{EngineRecorders, StepRecorder, TransferRecorder};
use crate::intern::{self, OpId};
use crate::tracker::Tracker;

use super::fields::CatalogFields;
use super::{CatalogKind, catalog_kind};

/// Records [`step_span`](crate::step_span)s and [`transfer_span`](crate::transfer_span)s:
/// their wall duration (on the tracker's clock) and amount go to the catalog families
/// when they close.
///
/// A plain layer, like [`StateLayer`](super::state::StateLayer): other spans cost it a
/// metadata check at creation and, once this layer has seen a catalog span, one span
/// look-up at close ([`Activity`](super::Activity) spares it the state spans). An
/// open span's labels, amount and start live in its extensions.
pub(crate) struct CatalogLayer {
    /// The clock, and where warnings raised in a callback wait to be logged.
    tracker: Tracker,
    /// The engine instruments step and transfer spans record into.
    engine: OnceLock<EngineRecorders>,
    /// Whether this layer has ever opened a catalog span: until then, closing a span
    /// skips the look-up. (A flag, not a count of open spans: a count costs every
    /// catalog span two atomic read-modify-writes, and in an engine some step is open
    /// nearly all the time anyway.)
    seen: AtomicBool,
    /// Recorders by interned label values, made at a combination's first close.
    steps: RwLock<Vec<([OpId; 2], StepRecorder)>>,
    transfers: RwLock<Vec<([OpId; 3], TransferRecorder)>>,
}

/// An open step or transfer span: its extension.
#[derive(Clone, Copy)]
struct OpenCatalogSpan {
    kind: CatalogKind,
    /// (component, graph_walk, -) or (src, dst, transport), interned.
    labels: [OpId; 3],
    /// Batch size or bytes.
    amount: Option<u64>,
    /// The tracker's clock at creation.
    start: u64,
}

impl CatalogLayer {
    /// A layer recording into `engine`'s instruments; without one, into
    /// `opentelemetry::global::meter("higgsmeter")`'s, resolved at the first close.
    pub(crate) fn new(tracker: Tracker, engine: Option<EngineRecorders>) -> Self {
        let cell = OnceLock::new();
        if let Some(engine) = engine {
            let _ = cell.set(engine);
        }
        CatalogLayer {
            tracker,
            engine: cell,
            seen: AtomicBool::new(false),
            steps: RwLock::new(Vec::new()),
            transfers: RwLock::new(Vec::new()),
        }
    }

    fn engine(&self) -> &EngineRecorders {
        self.engine
            .get_or_init(|| EngineRecorders::new(&opentelemetry::global::meter("higgsmeter")))
    }

    fn record(&self, span: OpenCatalogSpan) {
        let elapsed = Duration::from_nanos(self.tracker.now_nanos().saturating_sub(span.start));
        let [a, b, c] = span.labels;
        let recorded = match span.kind {
            CatalogKind::Step => with_cached(
                &self.steps,
                [a, b],
                || self.engine().step(&intern::name(a), &intern::name(b)),
                |r| r.record(elapsed, span.amount),
            ),
            CatalogKind::Transfer => with_cached(
                &self.transfers,
                [a, b, c],
                || {
                    self.engine()
                        .transfer(&intern::name(a), &intern::name(b), &intern::name(c))
                },
                |r| r.record(elapsed, span.amount.unwrap_or(0)),
            ),
        };
        if let Err(e) = recorded {
            self.catalog_error(e);
        }
    }

    #[cold]
    fn catalog_error(&self, e: crate::Error) {
        self.tracker
            .defer_warning(format!("a step or transfer span was not recorded: {e}"));
    }
}

impl<S> Layer<S> for CatalogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(kind) = catalog_kind(attrs.metadata()) else {
            return;
        };
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut fields = CatalogFields::default();
        attrs.record(&mut fields);
        let open = OpenCatalogSpan {
            kind,
            labels: fields.labels(kind),
            amount: fields.amount,
            start: self.tracker.now_nanos(),
        };
        // `replace`, not `insert`: another activity layer on the same subscriber (for
        // another tracker) records the same span into its own meter.
        span.extensions_mut().replace(open);
        if !self.seen.load(Ordering::Relaxed) {
            self.seen.store(true, Ordering::Release);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let Some(kind) = catalog_kind(span.metadata()) else {
            return;
        };
        let mut fields = CatalogFields::default();
        values.record(&mut fields);
        let mut extensions = span.extensions_mut();
        if let Some(open) = extensions.get_mut::<OpenCatalogSpan>() {
            if fields.amount.is_some() {
                open.amount = fields.amount;
            }
            for (slot, new) in open.labels.iter_mut().zip(fields.labels(kind)) {
                if new != OpId::NONE {
                    *slot = new;
                }
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        // A catalog span closing on any thread happens after its creation, and so
        // after the flag was set.
        if !self.seen.load(Ordering::Acquire) {
            return;
        }
        let Some(span) = ctx.span(&id) else {
            return;
        };
        if catalog_kind(span.metadata()).is_none() {
            return;
        }
        // Copied out (not removed): every activity layer on the subscriber reads it;
        // the registry drops it with the span.
        let Some(open) = span.extensions().get::<OpenCatalogSpan>().copied() else {
            return;
        };
        self.record(open);
    }
}

/// Runs `use_it` on the recorder cached for a label combination, making (and caching)
/// it on first use. The hit path holds a read lock and clones nothing.
fn with_cached<K: PartialEq + Copy, R>(
    cache: &RwLock<Vec<(K, R)>>,
    key: K,
    make: impl FnOnce() -> Result<R, crate::Error>,
    use_it: impl FnOnce(&R),
) -> Result<(), crate::Error> {
    {
        let hit = cache.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, r)) = hit.iter().find(|(k, _)| *k == key) {
            use_it(r);
            return Ok(());
        }
    }
    let r = make()?;
    use_it(&r);
    cache
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, r));
    Ok(())
}
