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
    steps: Recorders<[OpId; 2], StepRecorder>,
    transfers: Recorders<[OpId; 3], TransferRecorder>,
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
            steps: Recorders::new(),
            transfers: Recorders::new(),
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
            CatalogKind::Step => self.steps.with(
                [a, b],
                || self.engine().step(&intern::name(a), &intern::name(b)),
                |r| r.record(elapsed, span.amount),
            ),
            CatalogKind::Transfer => self.transfers.with(
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

/// How many label combinations a [`Recorders`] cache holds without a lock.
const LOCK_FREE_RECORDERS: usize = 32;

/// Recorders by label combination, made on first use: a fixed table of cells read
/// without a lock (a hit is one scan of the cells set so far; an engine has a handful of
/// combinations), then a locked list for combinations past the table's size.
struct Recorders<K, R> {
    /// Filled in order, each cell once: the first empty cell ends a search.
    cells: [OnceLock<(K, R)>; LOCK_FREE_RECORDERS],
    overflow: RwLock<Vec<(K, R)>>,
}

impl<K: PartialEq + Copy, R> Recorders<K, R> {
    fn new() -> Self {
        Recorders {
            cells: std::array::from_fn(|_| OnceLock::new()),
            overflow: RwLock::new(Vec::new()),
        }
    }

    /// Runs `use_it` on the recorder for `key`, making (and caching) it on first use.
    fn with(
        &self,
        key: K,
        make: impl FnOnce() -> Result<R, crate::Error>,
        use_it: impl FnOnce(&R),
    ) -> Result<(), crate::Error> {
        let mut first_free = None;
        for (i, cell) in self.cells.iter().enumerate() {
            match cell.get() {
                Some((k, r)) if *k == key => {
                    use_it(r);
                    return Ok(());
                }
                Some(_) => {}
                None => {
                    first_free = Some(i);
                    break;
                }
            }
        }
        let Some(first_free) = first_free else {
            return self.with_overflow(key, make, use_it);
        };
        let mut entry = (key, make()?);
        for cell in &self.cells[first_free..] {
            match cell.set(entry) {
                Ok(()) => {
                    if let Some((_, r)) = cell.get() {
                        use_it(r);
                    }
                    return Ok(());
                }
                // Taken meanwhile, perhaps by another thread with this very key.
                Err(back) => {
                    if let Some((k, r)) = cell.get()
                        && *k == key
                    {
                        use_it(r);
                        return Ok(());
                    }
                    entry = back;
                }
            }
        }
        let mut overflow = self.overflow.write().unwrap_or_else(|e| e.into_inner());
        match overflow.iter().find(|(k, _)| *k == key) {
            Some((_, r)) => use_it(r),
            None => {
                use_it(&entry.1);
                overflow.push(entry);
            }
        }
        Ok(())
    }

    /// The table is full: the locked list. The hit path holds a read lock.
    #[cold]
    fn with_overflow(
        &self,
        key: K,
        make: impl FnOnce() -> Result<R, crate::Error>,
        use_it: impl FnOnce(&R),
    ) -> Result<(), crate::Error> {
        {
            let hit = self.overflow.read().unwrap_or_else(|e| e.into_inner());
            if let Some((_, r)) = hit.iter().find(|(k, _)| *k == key) {
                use_it(r);
                return Ok(());
            }
        }
        let r = make()?;
        let mut overflow = self.overflow.write().unwrap_or_else(|e| e.into_inner());
        match overflow.iter().find(|(k, _)| *k == key) {
            Some((_, cached)) => use_it(cached),
            None => {
                use_it(&r);
                overflow.push((key, r));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(n: u32) -> impl FnOnce() -> Result<u32, crate::Error> {
        move || Ok(n)
    }

    #[test]
    fn recorders_are_made_once_per_key_past_the_table_too() {
        let cache: Recorders<u32, u32> = Recorders::new();
        let made = std::cell::Cell::new(0);
        for round in 0..3 {
            for key in 0..(LOCK_FREE_RECORDERS as u32 + 8) {
                let mut seen = None;
                cache
                    .with(
                        key,
                        || {
                            made.set(made.get() + 1);
                            ok(key * 10)()
                        },
                        |r| seen = Some(*r),
                    )
                    .unwrap();
                assert_eq!(seen, Some(key * 10), "round {round}, key {key}");
            }
        }
        assert_eq!(made.get(), LOCK_FREE_RECORDERS + 8);
    }

    #[test]
    fn a_failed_make_caches_nothing() {
        let cache: Recorders<u32, u32> = Recorders::new();
        let err = cache.with(1, || Err(crate::Error::NotAnEngineFamily("x")), |_| {});
        assert!(err.is_err());
        let mut seen = None;
        cache.with(1, ok(7), |r| seen = Some(*r)).unwrap();
        assert_eq!(seen, Some(7));
    }
}
