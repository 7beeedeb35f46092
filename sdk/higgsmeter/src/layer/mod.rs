//! The activity layers: a tracker's timeline from state spans, and the catalog
//! families from step and transfer spans.
//!
//! Two plain layers, one job each: [`StateLayer`] (state spans → the tracker's
//! timeline) and [`CatalogLayer`] (step and transfer spans → catalog histograms and
//! counters), each keeping its per-span data in the registry's span extensions.
//! Neither filters: [`Activity`] puts them side by side, and [`ActivityLayer`], the
//! public layer, puts that behind one per-layer filter, so that it fits any
//! subscriber; the subscriber `init()` installs uses it behind a gate of its own
//! instead (see `subscriber.rs`).

mod catalog;
mod fields;
mod state;

use std::fmt;

use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Dispatch, Event, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::engine::{EngineRecorders, STEP_SPAN_TARGET, TRANSFER_SPAN_TARGET};
use crate::span::STATE_FIELD;
use crate::tracker::Tracker;

use catalog::CatalogLayer;
use state::StateLayer;

/// A `tracing_subscriber::Layer` that accounts state spans into a [`Tracker`] and
/// records step and transfer spans into the catalog families.
///
/// A state span is any span with a `state` field: the ones `scope()` and
/// `#[track_state]` create, and your own, e.g. `#[tracing::instrument(fields(state =
/// "io"))]`. Its time runs from the span's creation to its close (not its enters and
/// exits, so an `.instrument`ed future is in its state while it awaits). Callsites
/// that are neither state spans nor [`step_span`](crate::step_span) /
/// [`transfer_span`](crate::transfer_span)s are filtered out once, at registration:
/// other spans cost this layer nothing. A state value it does not know is ignored with
/// one warning per callsite.
///
/// It composes two layers with one job each, behind one per-layer filter: a state
/// layer (state spans → the tracker's timeline) and a catalog-span layer (step and
/// transfer spans → `mstar_step_seconds`, `mstar_batch_size`, `mstar_transfer_*`).
/// Their per-span data lives in the registry's span extensions, under private types.
///
/// ```
/// use higgsmeter::{ActivityLayer, AppState, Tracker};
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let tracker = Tracker::new();
/// let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone()));
/// tracing::subscriber::with_default(subscriber, || {
///     let _io = tracker.scope(AppState::Io, "fetch");
///     assert_eq!(tracker.current_state(), AppState::Io);
/// });
/// assert_eq!(tracker.current_state(), AppState::Startup);
/// ```
pub struct ActivityLayer<S> {
    tracker: Tracker,
    inner: Filtered<Activity, ActivitySpans, S>,
}

/// The state layer and the catalog-span layer, side by side: each sees every span
/// handed to it and keeps what is its own, except that a span the state layer closed
/// in its timeline (a state span) is not offered to the catalog layer, which would
/// otherwise look it up to find out.
pub(crate) struct Activity {
    state: StateLayer,
    catalog: CatalogLayer,
}

impl Activity {
    pub(crate) fn new(tracker: Tracker, engine: Option<EngineRecorders>) -> Self {
        Activity {
            state: StateLayer::new(tracker.clone()),
            catalog: CatalogLayer::new(tracker, engine),
        }
    }
}

impl<S> Layer<S> for Activity
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.state.on_new_span(attrs, id, ctx.clone());
        self.catalog.on_new_span(attrs, id, ctx);
    }
    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.state.on_record(span, values, ctx.clone());
        self.catalog.on_record(span, values, ctx);
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if !self.state.close(&id) {
            self.catalog.on_close(id, ctx);
        }
    }
}

impl<S> ActivityLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// A layer accounting state spans into `tracker`.
    pub fn new(tracker: Tracker) -> Self {
        ActivityLayer::build(tracker, None)
    }

    /// Records step and transfer spans into instruments of this meter (by default, of
    /// `opentelemetry::global::meter("higgsmeter")`, resolved at the first such span).
    pub fn with_meter(self, meter: &opentelemetry::metrics::Meter) -> Self {
        ActivityLayer::build(self.tracker, Some(EngineRecorders::new(meter)))
    }

    fn build(tracker: Tracker, engine: Option<EngineRecorders>) -> Self {
        ActivityLayer {
            inner: Activity::new(tracker.clone(), engine).with_filter(ActivitySpans),
            tracker,
        }
    }
}

impl<S> fmt::Debug for ActivityLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActivityLayer").finish_non_exhaustive()
    }
}

// Every method but `on_record` and `on_close` forwards to the filtered layer, so
// per-layer filtering works as it would for the `Filtered` itself (`on_layer`
// registers the filter, `on_new_span` keeps the thread's filter state, `downcast_raw`
// answers the registry's per-layer-filter queries); those two go straight to the
// inner layers, which skip what is not theirs without the filter's look-up.
impl<S> Layer<S> for ActivityLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.inner.on_register_dispatch(subscriber)
    }
    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber)
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_new_span(attrs, id, ctx)
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }
    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        // Past the filter (see `on_close`): the two layers look the span up themselves.
        self.inner.inner().on_record(span, values, ctx)
    }
    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx)
    }
    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        self.inner.on_event(event, ctx)
    }
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx)
    }
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx)
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        // Past the filter: `Filtered` would look the span up in the registry only to
        // ask whether the filter enabled it, and the filter's answer is a function of
        // the callsite, which both layers check themselves (the state layer finds the
        // span in its timeline or not, without a look-up; the catalog layer checks
        // the metadata of the span it looks up anyway). One registry look-up fewer
        // per span.
        self.inner.inner().on_close(id, ctx)
    }
    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx)
    }
    #[doc(hidden)]
    #[allow(
        unsafe_code,
        reason = "the trait's method is unsafe; this only forwards it"
    )]
    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        // SAFETY: forwarding to the wrapped layer's own `downcast_raw`, whose pointer
        // is valid for as long as `self.inner`, which lives as long as `self`.
        unsafe { self.inner.downcast_raw(id) }
    }
}

/// Lets through span callsites that declare a `state` field, and step and transfer
/// spans; decided once per callsite.
struct ActivitySpans;

/// Whether a callsite is a state span's: a span declaring a `state` field.
#[inline]
pub(crate) fn is_state_callsite(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.fields().field(STATE_FIELD).is_some()
}

/// Which catalog span a callsite is, if it is one.
#[inline]
fn catalog_kind(meta: &Metadata<'_>) -> Option<CatalogKind> {
    if !meta.is_span() {
        return None;
    }
    match meta.target() {
        STEP_SPAN_TARGET => Some(CatalogKind::Step),
        TRANSFER_SPAN_TARGET => Some(CatalogKind::Transfer),
        _ => None,
    }
}

/// Whether a callsite is one the activity layers account: a state, step or transfer
/// span.
pub(crate) fn is_activity_callsite(meta: &Metadata<'_>) -> bool {
    is_state_callsite(meta) || catalog_kind(meta).is_some()
}

impl<S> Filter<S> for ActivitySpans {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        is_activity_callsite(meta)
    }
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_activity_callsite(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        None
    }
}

/// The two kinds of catalog span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatalogKind {
    Step,
    Transfer,
}
