//! The state layer: drives a tracker's timeline from state spans opening and closing.

use std::collections::HashSet;
use std::sync::Mutex;

use tracing_core::callsite::Identifier;
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::intern::{self, OpId};
use crate::tracker::{Key, Tracker};

use super::fields::{Parsed, StateFields};
use super::is_state_callsite;

/// Accounts state spans (spans with a `state` field) into a tracker's timeline.
///
/// A plain layer: it ignores other spans itself (one check of the callsite's metadata
/// at creation, a look-up-free close), so it relies on whatever filter it sits behind
/// to keep their callsites off: [`ActivityLayer`](super::ActivityLayer)'s per-layer
/// filter, or the gate of the subscriber `init()` installs.
///
/// The open scopes themselves are the tracker's timeline (its frame stack, in opening
/// order, which decides the current state); the only per-span data of this layer, the
/// operation of a span created with `state = Empty`, lives in the span's extensions.
pub(crate) struct StateLayer {
    tracker: Tracker,
    /// Callsites already warned about (an unknown state value): one warning each.
    warned: Mutex<HashSet<Identifier>>,
}

/// The operation given to a span created with `state = Empty`, kept in the span's
/// extensions until the span records a state (and opens) or closes.
struct PendingOperation(OpId);

impl StateLayer {
    pub(crate) fn new(tracker: Tracker) -> Self {
        StateLayer {
            tracker,
            warned: Mutex::new(HashSet::new()),
        }
    }

    fn warn_once(&self, meta: &'static Metadata<'static>, value: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.insert(meta.callsite()) {
            drop(warned);
            // `tracing` drops events raised inside a subscriber callback: the tracker
            // logs this at its next call from user code or from an exporter.
            self.tracker.defer_warning(format!(
                "span {:?} (target {}, {}:{}) has state = {value:?}, which is not a worker \
                 state (idle, io, cpu, gpu, warmup, startup, shutdown or their codes 0-6): \
                 its time is not counted",
                meta.name(),
                meta.target(),
                meta.file().unwrap_or("?"),
                meta.line().unwrap_or(0),
            ));
        }
    }

    /// Closes `id` in the timeline; returns whether it was open there (a state span of
    /// this tracker), so that a layer composed with this one can skip it.
    pub(crate) fn close(&self, id: &Id) -> bool {
        // No look-up: a span that is not open in the timeline is not found there.
        self.tracker.close(id.into_u64())
    }

    /// Whether a span's `higgsmeter.tracker` field (if any) names another tracker.
    fn foreign(&self, fields: &StateFields) -> bool {
        fields.tracker.is_some_and(|t| t != self.tracker.id())
    }
}

impl<S> Layer<S> for StateLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if !is_state_callsite(meta) || !self.tracker.is_enabled() {
            return;
        }
        let mut fields = StateFields::default();
        attrs.record(&mut fields);
        if self.foreign(&fields) {
            return;
        }
        match fields.state {
            Parsed::State(state) => {
                let op = fields
                    .operation
                    .unwrap_or_else(|| intern::intern(meta.name()));
                self.tracker.open(id.into_u64(), Key { state, op });
            }
            Parsed::Unknown(raw) => self.warn_once(meta, raw.as_str()),
            // `state = Empty`: opens when a state is recorded.
            Parsed::Missing => {
                if let (Some(op), Some(span)) = (fields.operation, ctx.span(id)) {
                    // `replace`, not `insert`: a second tracker's layer may get here too.
                    span.extensions_mut().replace(PendingOperation(op));
                }
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if !self.tracker.is_enabled() {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        let meta = span.metadata();
        if !is_state_callsite(meta) {
            return;
        }
        let mut fields = StateFields::default();
        values.record(&mut fields);
        let state = match fields.state {
            Parsed::State(state) => Some(state),
            Parsed::Unknown(raw) => {
                self.warn_once(meta, raw.as_str());
                None
            }
            Parsed::Missing => None,
        };
        if state.is_none() && fields.operation.is_none() {
            return;
        }
        if self.tracker.update(id.into_u64(), state, fields.operation) {
            return;
        }
        // Not open in this tracker: a span created with `state = Empty`.
        match state {
            Some(state) => {
                let op = fields
                    .operation
                    .or_else(|| span.extensions().get::<PendingOperation>().map(|p| p.0))
                    .unwrap_or_else(|| intern::intern(meta.name()));
                self.tracker.open(id.into_u64(), Key { state, op });
            }
            None => {
                if let Some(op) = fields.operation {
                    span.extensions_mut().replace(PendingOperation(op));
                }
            }
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        self.close(&id);
    }
}
