//! The activity layer: drives a tracker's timeline from state spans opening and closing.

use std::collections::HashSet;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;

use tracing_core::callsite::Identifier;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Dispatch, Event, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::engine::{
    EngineRecorders, STEP_SPAN_TARGET, StepRecorder, TRANSFER_SPAN_TARGET, TransferRecorder,
};
use crate::intern::{self, OpId};
use crate::span::{OPERATION_FIELD, STATE_FIELD, TRACKER_FIELD};
use crate::state::AppState;
use crate::tracker::{Key, Tracker};

/// A `tracing_subscriber::Layer` that accounts state spans into a [`Tracker`].
///
/// A state span is any span with a `state` field: the ones `scope()` and
/// `#[track_state]` create, and your own, e.g. `#[tracing::instrument(fields(state =
/// "io"))]`. Its time runs from the span's creation to its close (not its enters and
/// exits, so an `.instrument`ed future is in its state while it awaits). Callsites
/// without a `state` field are filtered out once, at registration: other spans cost
/// this layer nothing. A state value it does not know is ignored with one warning per
/// callsite.
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
    inner: Filtered<Accountant, StateSpans, S>,
}

impl<S> ActivityLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// A layer accounting state spans into `tracker`.
    pub fn new(tracker: Tracker) -> Self {
        ActivityLayer {
            inner: Accountant::new(tracker).with_filter(StateSpans),
        }
    }
    /// Records step and transfer spans into instruments of this meter (by default, of
    /// `opentelemetry::global::meter("higgsmeter")`, resolved at the first such span).
    pub fn with_meter(mut self, meter: &opentelemetry::metrics::Meter) -> Self {
        let _ = self
            .inner
            .inner_mut()
            .engine
            .set(EngineRecorders::new(meter));
        self
    }
}

impl<S> fmt::Debug for ActivityLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActivityLayer").finish_non_exhaustive()
    }
}

// Every method forwards to the filtered layer, so per-layer filtering works as it
// would for the `Filtered` itself (`on_layer` registers the filter, `downcast_raw`
// answers the registry's per-layer-filter queries).
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
        self.inner.on_record(span, values, ctx)
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
        self.inner.on_close(id, ctx)
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
struct StateSpans;

fn is_state_callsite(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.fields().field(STATE_FIELD).is_some()
}

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

fn is_ours(meta: &Metadata<'_>) -> bool {
    is_state_callsite(meta) || catalog_kind(meta).is_some()
}

impl<S> Filter<S> for StateSpans {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        is_ours(meta)
    }
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if is_ours(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        None
    }
}

/// The inner layer: turns span lifecycles into timeline transitions.
struct Accountant {
    tracker: Tracker,
    warned: Mutex<HashSet<Identifier>>,
    /// The engine instruments step and transfer spans record into.
    engine: OnceLock<EngineRecorders>,
    /// Open step and transfer spans (few at a time: scanned, never allocated per span
    /// once the vector has grown).
    open: Mutex<Vec<CatalogSpan>>,
    /// How many are open, so closing a state span skips the catalog look-up.
    open_count: AtomicUsize,
    /// Recorders by interned label values, made at a combination's first close.
    steps: RwLock<Vec<([OpId; 2], StepRecorder)>>,
    transfers: RwLock<Vec<([OpId; 3], TransferRecorder)>>,
}

impl Accountant {
    fn new(tracker: Tracker) -> Self {
        Accountant {
            tracker,
            warned: Mutex::new(HashSet::new()),
            engine: OnceLock::new(),
            open: Mutex::new(Vec::with_capacity(16)),
            open_count: AtomicUsize::new(0),
            steps: RwLock::new(Vec::new()),
            transfers: RwLock::new(Vec::new()),
        }
    }

    fn engine(&self) -> &EngineRecorders {
        self.engine
            .get_or_init(|| EngineRecorders::new(&opentelemetry::global::meter("higgsmeter")))
    }

    fn open_catalog(&self, kind: CatalogKind, attrs: &Attributes<'_>, id: &Id) {
        let mut fields = CatalogFields::default();
        attrs.record(&mut fields);
        let span = CatalogSpan {
            span: id.into_u64(),
            kind,
            labels: fields.labels(kind),
            amount: fields.amount,
            start: self.tracker.now_nanos(),
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.push(span);
        self.open_count.fetch_add(1, Ordering::Release);
    }

    fn record_catalog(&self, id: &Id, values: &Record<'_>) {
        let mut fields = CatalogFields::default();
        values.record(&mut fields);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(span) = open.iter_mut().rev().find(|s| s.span == id.into_u64()) {
            if fields.amount.is_some() {
                span.amount = fields.amount;
            }
            let labels = fields.labels(span.kind);
            for (slot, new) in span.labels.iter_mut().zip(labels) {
                if new != OpId::NONE {
                    *slot = new;
                }
            }
        }
    }

    /// If `id` is an open step or transfer span, records its duration and amount and
    /// returns true.
    fn close_catalog(&self, id: &Id) -> bool {
        if self.open_count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let span = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let Some(pos) = open.iter().rposition(|s| s.span == id.into_u64()) else {
                return false;
            };
            self.open_count.fetch_sub(1, Ordering::Release);
            open.swap_remove(pos)
        };
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
        true
    }

    #[cold]
    fn catalog_error(&self, e: crate::Error) {
        self.tracker
            .defer_warning(format!("a step or transfer span was not recorded: {e}"));
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

    /// Whether a span's `higgsmeter.tracker` field (if any) names another tracker.
    fn foreign(&self, fields: &StateFields) -> bool {
        fields.tracker.is_some_and(|t| t != self.tracker.id())
    }
}

impl<S> Layer<S> for Accountant
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        if let Some(kind) = catalog_kind(attrs.metadata()) {
            return self.open_catalog(kind, attrs, id);
        }
        if !self.tracker.is_enabled() {
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
                    .unwrap_or_else(|| intern::intern(attrs.metadata().name()));
                self.tracker.open(id.into_u64(), Key { state, op });
            }
            Parsed::Unknown => self.warn_once(attrs.metadata(), fields.raw.as_str()),
            // `state = Empty`: opens when a state is recorded.
            Parsed::Missing => {
                if let Some(op) = fields.operation {
                    self.tracker.pend_operation(id.into_u64(), op);
                }
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if ctx.metadata(id).and_then(catalog_kind).is_some() {
            return self.record_catalog(id, values);
        }
        if !self.tracker.is_enabled() {
            return;
        }
        let mut fields = StateFields::default();
        values.record(&mut fields);
        let state = match fields.state {
            Parsed::State(state) => Some(state),
            Parsed::Unknown => {
                if let Some(span) = ctx.span(id) {
                    self.warn_once(span.metadata(), fields.raw.as_str());
                }
                None
            }
            Parsed::Missing => None,
        };
        if state.is_none() && fields.operation.is_none() {
            return;
        }
        let name = ctx.span(id).map(|s| s.metadata().name());
        self.tracker
            .record(id.into_u64(), state, fields.operation, || {
                name.map_or(OpId::NONE, intern::intern)
            });
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        if !self.close_catalog(&id) {
            self.tracker.close(id.into_u64());
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatalogKind {
    Step,
    Transfer,
}

/// An open step or transfer span.
struct CatalogSpan {
    span: u64,
    kind: CatalogKind,
    /// (component, graph_walk, -) or (src, dst, transport), interned.
    labels: [OpId; 3],
    /// Batch size or bytes.
    amount: Option<u64>,
    start: u64,
}

/// Reads the fields of step and transfer spans without allocating.
#[derive(Default)]
struct CatalogFields {
    component: OpId,
    graph_walk: OpId,
    src: OpId,
    dst: OpId,
    transport: OpId,
    amount: Option<u64>,
}

impl CatalogFields {
    fn labels(&self, kind: CatalogKind) -> [OpId; 3] {
        match kind {
            CatalogKind::Step => [self.component, self.graph_walk, OpId::NONE],
            CatalogKind::Transfer => [self.src, self.dst, self.transport],
        }
    }
}

impl Visit for CatalogFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            "component" => &mut self.component,
            "graph_walk" => &mut self.graph_walk,
            "src" => &mut self.src,
            "dst" => &mut self.dst,
            "transport" => &mut self.transport,
            _ => return,
        };
        *slot = intern::intern(value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        if matches!(field.name(), "batch_size" | "bytes") {
            self.amount = Some(value);
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if matches!(field.name(), "batch_size" | "bytes") {
            self.amount = u64::try_from(value).ok();
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = SmallText::default();
        let _ = write!(text, "{value:?}");
        self.record_str(field, text.as_str().trim_matches('"'));
    }
}

#[derive(Default)]
enum Parsed {
    #[default]
    Missing,
    State(AppState),
    Unknown,
}

/// Reads `state`, `operation` and the tracker id from span fields without allocating.
#[derive(Default)]
struct StateFields {
    state: Parsed,
    operation: Option<OpId>,
    tracker: Option<u64>,
    raw: SmallText,
}

impl StateFields {
    fn set_state_text(&mut self, text: &str) {
        self.state = match AppState::parse(text) {
            Some(state) => Parsed::State(state),
            None => match text.parse::<u64>().ok().and_then(AppState::from_code) {
                Some(state) => Parsed::State(state),
                None => {
                    self.raw.set(text);
                    Parsed::Unknown
                }
            },
        };
    }

    fn set_state_code(&mut self, code: Option<u64>, shown: &dyn fmt::Display) {
        self.state = match code.and_then(AppState::from_code) {
            Some(state) => Parsed::State(state),
            None => {
                self.raw.clear();
                let _ = write!(self.raw, "{shown}");
                Parsed::Unknown
            }
        };
    }
}

impl Visit for StateFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            STATE_FIELD => self.set_state_text(value),
            OPERATION_FIELD => self.operation = Some(intern::intern(value)),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            STATE_FIELD => self.set_state_code(Some(value), &value),
            TRACKER_FIELD => self.tracker = Some(value),
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            STATE_FIELD => self.set_state_code(u64::try_from(value).ok(), &value),
            TRACKER_FIELD => self.tracker = u64::try_from(value).ok(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            STATE_FIELD => {
                let mut text = SmallText::default();
                let _ = write!(text, "{value:?}");
                self.set_state_text(text.as_str().trim_matches('"'));
            }
            OPERATION_FIELD => {
                let mut text = SmallText::default();
                let _ = write!(text, "{value:?}");
                if text.truncated {
                    // Too long for the stack buffer: allocate on this (rare) path.
                    self.operation = Some(intern::intern(&format!("{value:?}")));
                } else {
                    self.operation = Some(intern::intern(text.as_str().trim_matches('"')));
                }
            }
            _ => {}
        }
    }
}

/// A fixed 64-byte text buffer: formats short values without touching the heap.
struct SmallText {
    buf: [u8; 64],
    len: usize,
    truncated: bool,
}

impl Default for SmallText {
    fn default() -> Self {
        SmallText {
            buf: [0; 64],
            len: 0,
            truncated: false,
        }
    }
}

impl SmallText {
    fn as_str(&self) -> &str {
        match std::str::from_utf8(&self.buf[..self.len]) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&self.buf[..e.valid_up_to()]).unwrap_or(""),
        }
    }
    fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }
    fn set(&mut self, text: &str) {
        self.clear();
        let _ = self.write_str(text);
    }
}

impl fmt::Write for SmallText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            self.truncated = true;
        }
        Ok(())
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
