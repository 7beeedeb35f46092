//! One worker's exclusive state timeline and its exact time accounting.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::clock::Clock;
use crate::intern::{self, OpId};
use crate::span;
use crate::state::AppState;

/// A (state, operation) pair: what the timeline is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) state: AppState,
    pub(crate) op: OpId,
}

/// An open state scope, identified by its span.
#[derive(Debug, Clone, Copy)]
struct Frame {
    span: u64,
    key: Key,
}

/// The mutable part of a tracker. Every method is short, allocation-free once the
/// operation table has grown to the worker's set of operations, and cannot panic.
#[derive(Debug)]
struct Timeline {
    /// What `set_state` chose with no scope open.
    base: Key,
    /// Open scopes, oldest first; the last one is current.
    frames: Vec<Frame>,
    /// Clock reading when time was last committed (while stopped: when it stopped).
    since: u64,
    /// Clock reading where counting starts: creation, or [`Tracker::begin`].
    origin: u64,
    /// Untracked nanoseconds since `origin`: the intervals between a
    /// [`finalize`](Tracker::finalize) and the next transition.
    untracked: u64,
    /// Whether [`finalize`](Tracker::finalize) stopped the clock (until the next
    /// transition resumes it).
    stopped: bool,
    /// Committed nanoseconds, indexed by operation id, then by state.
    totals: Vec<[u64; 7]>,
    /// Which states each operation has been in (bit per state), so a series exists
    /// from its first visit even when no clock tick has passed yet.
    seen: Vec<u8>,
}

impl Timeline {
    fn current(&self) -> Key {
        self.frames.last().map_or(self.base, |f| f.key)
    }

    /// Adds the time since the last commit to the current key and marks it seen. After
    /// a [`finalize`](Tracker::finalize) it resumes the clock instead: the time since
    /// the stop is nobody's.
    fn commit(&mut self, now: u64) {
        let key = self.current();
        let mut elapsed = now.saturating_sub(self.since);
        if self.stopped {
            self.stopped = false;
            self.untracked += elapsed;
            elapsed = 0;
        }
        self.since = self.since.max(now);
        let idx = key.op.index();
        if idx >= self.totals.len() {
            self.totals.resize(idx + 1, [0; 7]);
            self.seen.resize(idx + 1, 0);
        }
        self.totals[idx][key.state.index()] += elapsed;
        self.seen[idx] |= 1 << key.state.index();
    }

    fn mark_seen(&mut self, key: Key) {
        let idx = key.op.index();
        if idx >= self.totals.len() {
            self.totals.resize(idx + 1, [0; 7]);
            self.seen.resize(idx + 1, 0);
        }
        self.seen[idx] |= 1 << key.state.index();
    }
}

#[derive(Debug)]
struct Inner {
    id: u64,
    enabled: AtomicBool,
    clock: Clock,
    /// Whether [`Tracker::begin`] has run.
    begun: AtomicBool,
    /// Mirror of the current state's code, for lock-free readers (gauges, samplers).
    current_code: AtomicU8,
    /// Mirror of the number of open scopes, so closing a span skips the lock while
    /// none is open.
    open_frames: AtomicUsize,
    timeline: Mutex<Timeline>,
    /// Warnings raised inside a subscriber callback, where `tracing` drops nested
    /// events; emitted at the next call from user code or an exporter.
    has_warnings: AtomicBool,
    warnings: Mutex<Vec<String>>,
    /// A training job's progress marks ([`crate::job`]), read by their gauges.
    marks: Marks,
}

/// A training job's progress marks (the public face is [`crate::job`]): atomics, so a
/// mark costs one store, no lock and no allocation.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    /// The last training step completed.
    pub(crate) step: Mark,
    /// The step the last checkpoint saved covers.
    pub(crate) checkpoint_step: Mark,
    /// The `gpu` nanoseconds when the last checkpoint was saved.
    pub(crate) checkpoint_gpu_nanos: Mark,
    /// The step of the checkpoint restored.
    pub(crate) restored_step: Mark,
    /// The last [`RECENT_CHECKPOINTS`] checkpoints saved, oldest first: (step, `gpu`
    /// nanoseconds kept). Every export carries them all, so the collector sees each
    /// checkpoint even when several are saved between two of its readings. Behind a lock:
    /// a save is rare.
    pub(crate) recent: Mutex<std::collections::VecDeque<(u64, u64)>>,
}

/// How many of the last checkpoints every export carries.
pub(crate) const RECENT_CHECKPOINTS: usize = 8;

/// One mark: unset (0) until the first [`set`](Mark::set), then the value plus one.
#[derive(Debug, Default)]
pub(crate) struct Mark(AtomicU64);

impl Mark {
    /// Sets the mark (`u64::MAX` is kept as `u64::MAX - 1`).
    #[inline]
    pub(crate) fn set(&self, value: u64) {
        self.0.store(value.min(u64::MAX - 1) + 1, Ordering::Relaxed);
    }

    /// The mark, if it was ever set.
    #[inline]
    pub(crate) fn get(&self) -> Option<u64> {
        self.0.load(Ordering::Relaxed).checked_sub(1)
    }
}

/// One worker's timeline: at every instant in exactly one (state, operation).
///
/// A tracker starts in `startup` with operation `""`. The current (state, operation)
/// is that of the most recently opened state scope still open, or, with none open, the
/// base set by [`set_state`](Tracker::set_state). Time is committed at every transition
/// and read live: a [`snapshot`](Tracker::snapshot) (and so every export) includes the
/// time spent so far in the current state, and the per-(state, operation) totals always
/// sum to the time elapsed since counting started: when the tracker was made, or, for
/// one that `init()` sets up (or [`enable_tracker`] enables), at that moment
/// ([`begin`](Tracker::begin)): as in the seed, nothing before tracking is enabled is
/// counted. [`finalize`](Tracker::finalize) ends the timeline: nothing after it is
/// counted either (until a later transition resumes it).
///
/// Cloning is cheap and clones share the timeline. The process-wide tracker is
/// [`state_tracker()`]; make your own for tests or for several timelines in one process,
/// and account its spans with its own [`ActivityLayer`](crate::ActivityLayer).
#[derive(Debug, Clone)]
pub struct Tracker {
    inner: Arc<Inner>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker::new()
    }
}

impl Tracker {
    /// A new, enabled tracker on the monotonic clock, in `startup`.
    pub fn new() -> Tracker {
        Tracker::with_clock(Clock::monotonic())
    }

    /// A new, enabled tracker reading time from `clock` (e.g. a [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(clock: impl Into<Clock>) -> Tracker {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let clock = clock.into();
        let origin = clock.now_nanos();
        let base = Key {
            state: AppState::Startup,
            op: OpId::NONE,
        };
        let mut timeline = Timeline {
            base,
            frames: Vec::with_capacity(16),
            since: origin,
            origin,
            untracked: 0,
            stopped: false,
            totals: Vec::with_capacity(16),
            seen: Vec::with_capacity(16),
        };
        timeline.mark_seen(base);
        Tracker {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                enabled: AtomicBool::new(true),
                clock,
                begun: AtomicBool::new(false),
                current_code: AtomicU8::new(AppState::Startup.code()),
                open_frames: AtomicUsize::new(0),
                timeline: Mutex::new(timeline),
                has_warnings: AtomicBool::new(false),
                warnings: Mutex::new(Vec::new()),
                marks: Marks::default(),
            }),
        }
    }

    /// Starts counting now, once: the time counted before is dropped (in every state),
    /// the current (state, operation) and any open scopes stay, and from here the
    /// totals sum to the time since this call. The seed's clock origin: `init()` and
    /// the first [`enable_tracker`] on a tracking rank call it, so a worker counts from
    /// the moment tracking is enabled, not from the moment the tracker was first
    /// touched (an import, a library's scope). Later calls do nothing, so a re-enable
    /// never drops time, and a counter already exported never goes down.
    pub fn begin(&self) {
        if self.inner.begun.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut t = self.lock();
        let now = self.inner.clock.now_nanos();
        for row in &mut t.totals {
            *row = [0; 7];
        }
        t.since = now;
        t.origin = now;
        t.untracked = 0;
        t.stopped = false;
    }

    /// This tracker's identity, carried by its state spans so a layer accounts only its own.
    pub(crate) fn id(&self) -> u64 {
        self.inner.id
    }

    /// Whether tracking is on. When off, scopes and `set_state` do nothing and
    /// exporters report no activity series.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.inner.enabled.load(Ordering::Relaxed)
    }

    /// Turns tracking on or off (see [`enable_tracker`] for the seed's rank-0 mode).
    pub fn set_enabled(&self, enabled: bool) {
        self.inner.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Switches the current state: with no scope open, the base state; inside scopes,
    /// the frame of the most recently opened one (restored to what is beneath it when
    /// that scope closes).
    pub fn set_state(&self, state: AppState, operation: &str) {
        if !self.is_enabled() {
            return;
        }
        self.emit_warnings();
        let key = Key {
            state,
            op: intern::intern(operation),
        };
        let mut t = self.lock();
        let now = self.inner.clock.now_nanos();
        t.commit(now);
        match t.frames.last_mut() {
            Some(frame) => frame.key = key,
            None => t.base = key,
        }
        t.mark_seen(key);
        self.publish(&t);
    }

    /// Enters `state` until the returned guard drops, then reverts to whatever is then
    /// current beneath it. The scope is a `tracing` span (target
    /// [`STATE_SPAN_TARGET`](crate::STATE_SPAN_TARGET), fields `state` and `operation`),
    /// accounted by this tracker's [`ActivityLayer`](crate::ActivityLayer).
    ///
    /// While traces are on ([`TelemetryBuilder::with_traces`](crate::TelemetryBuilder)),
    /// the guard also makes its span the current span on this thread, as
    /// `Span::entered` does, so the spans opened inside nest under it. That is why the
    /// guard cannot move to another thread, and why an `async fn` must not hold it
    /// across an `.await`: instrument the future with [`span`](Tracker::span) instead,
    /// `fut.instrument(tracker.span(AppState::Io, "fetch")).await` (what
    /// `#[track_state]` does for an `async fn`).
    ///
    /// ```
    /// # use higgsmeter::{AppState, state_tracker};
    /// # fn run_inference() {}
    /// {
    ///     let _gpu = state_tracker().scope(AppState::Gpu, "inference");
    ///     run_inference();
    /// } // back to the previous state
    /// ```
    #[inline]
    #[must_use = "the scope ends when this guard drops; bind it with `let _scope = ...`"]
    pub fn scope(&self, state: AppState, operation: &str) -> StateScope {
        if !self.is_enabled() {
            return StateScope {
                span: ScopeSpan::Open(tracing::Span::none()),
            };
        }
        self.emit_warnings();
        let span = span::state_span(self.id(), state, operation);
        StateScope {
            span: if TRACE_PIPELINES.load(Ordering::Relaxed) > 0 {
                ScopeSpan::Entered(span.entered())
            } else {
                ScopeSpan::Open(span)
            },
        }
    }

    /// The span of a state scope, to `instrument` a future with or to enter by hand;
    /// disabled (a no-op span) when the tracker is off.
    pub fn span(&self, state: AppState, operation: &str) -> tracing::Span {
        if !self.is_enabled() {
            return tracing::Span::none();
        }
        self.emit_warnings();
        span::state_span(self.id(), state, operation)
    }

    /// Opens a state scope by hand, for bindings whose scopes are two calls rather than
    /// a guard's life (the Python package's `with state_tracker.scope(...)`): the
    /// tracker is in `state` until [`close_scope`](Tracker::close_scope) with the
    /// returned id, and the scope follows the same rules as a span's (the most recently
    /// opened scope still open is current; closing one out of order only forgets it).
    /// No `tracing` span is made, so no subscriber is needed. A disabled tracker returns
    /// an id that closes nothing.
    pub fn open_scope(&self, state: AppState, operation: &str) -> ScopeId {
        if !self.is_enabled() {
            return ScopeId(0);
        }
        self.emit_warnings();
        // Ids of their own, far above any span id a `tracing` registry hands out (slab
        // indices), so a hand-opened scope never closes a span's frame or the reverse.
        static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1 << 63);
        let id = NEXT_SCOPE.fetch_add(1, Ordering::Relaxed);
        let key = Key {
            state,
            op: intern::intern(operation),
        };
        self.open(id, key);
        ScopeId(id)
    }

    /// Closes a scope [`open_scope`](Tracker::open_scope) returned; returns whether it
    /// was open (closing twice, or an id of a disabled tracker, does nothing).
    pub fn close_scope(&self, scope: ScopeId) -> bool {
        scope.0 != 0 && self.close(scope.0)
    }

    /// The current state (lock-free).
    #[inline]
    pub fn current_state(&self) -> AppState {
        AppState::from_code(u64::from(self.inner.current_code.load(Ordering::Relaxed)))
            .unwrap_or(AppState::Startup)
    }

    /// The current (state, operation).
    pub fn current(&self) -> (AppState, Arc<str>) {
        let key = self.lock().current();
        (key.state, intern::name(key.op))
    }

    /// Ends the timeline here: commits the time spent so far and stops the clock. The
    /// Python tracker's `finalize()`: call it once the worker is done (typically after
    /// `set_state(AppState::Shutdown, "")`).
    ///
    /// From then on every snapshot, scrape and export, the last one at exit (the
    /// [`Telemetry`](crate::Telemetry) guard's drop, Python's `atexit`) included, shows
    /// exactly the time from the start of counting to this call, as the seed's counter
    /// did: the time between `finalize` and the process's exit is not claimed. Calling
    /// it again changes nothing. A transition after it (a `set_state`, a scope opening
    /// or closing) resumes the clock from that moment; the interval in between stays
    /// uncounted, and [`Snapshot::elapsed`] leaves it out too.
    pub fn finalize(&self) {
        if !self.is_enabled() {
            return;
        }
        let mut t = self.lock();
        let now = self.inner.clock.now_nanos();
        t.commit(now);
        t.stopped = true;
    }

    /// Every (state, operation) with its time so far, the current state's live part included.
    pub fn snapshot(&self) -> Snapshot {
        self.emit_warnings();
        let t = self.lock();
        let now = self.inner.clock.now_nanos();
        let current = t.current();
        // Stopped: nothing live, and the clock reads as it did at the stop.
        let now = if t.stopped { t.since } else { now };
        let live = now.saturating_sub(t.since);
        let mut entries = Vec::new();
        for (idx, (row, seen)) in t.totals.iter().zip(&t.seen).enumerate() {
            if *seen == 0 {
                continue;
            }
            let op = OpId(u32::try_from(idx).unwrap_or(0));
            let name = intern::name(op);
            for state in AppState::ALL {
                if seen & (1 << state.index()) == 0 {
                    continue;
                }
                let mut nanos = row[state.index()];
                if current.state == state && current.op == op {
                    nanos += live;
                }
                entries.push(SnapshotEntry {
                    state,
                    operation: name.clone(),
                    nanos,
                });
            }
        }
        Snapshot {
            entries,
            current: (current.state, intern::name(current.op)),
            elapsed_nanos: now.saturating_sub(t.origin).saturating_sub(t.untracked),
        }
    }

    /// The `gpu` nanoseconds so far that count as progress (the collector's goodput):
    /// every operation's but custom badput's (`badput.*`) and the checkpoint scopes'.
    pub(crate) fn productive_gpu_nanos(&self) -> u64 {
        let productive = |op: OpId| {
            let name = intern::name(op);
            !name.starts_with(higgsmeter_catalog::CUSTOM_BADPUT_PREFIX)
                && &*name != higgsmeter_catalog::CHECKPOINT_SAVE_OPERATION
                && &*name != higgsmeter_catalog::CHECKPOINT_RESTORE_OPERATION
        };
        let t = self.lock();
        let now = if t.stopped {
            t.since
        } else {
            self.inner.clock.now_nanos()
        };
        let gpu = AppState::Gpu.index();
        let mut sum = 0u64;
        for (idx, row) in t.totals.iter().enumerate() {
            if row[gpu] > 0 && productive(OpId(u32::try_from(idx).unwrap_or(0))) {
                sum = sum.saturating_add(row[gpu]);
            }
        }
        let current = t.current();
        if current.state == AppState::Gpu && productive(current.op) {
            sum = sum.saturating_add(now.saturating_sub(t.since));
        }
        sum
    }

    /// The job's progress marks.
    #[inline]
    pub(crate) fn marks(&self) -> &Marks {
        &self.inner.marks
    }

    // ---- driven by the activity layer ----

    /// The tracker's clock, in nanoseconds.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        self.inner.clock.now_nanos()
    }

    /// Queues a warning to be logged outside the subscriber callback.
    #[cold]
    pub(crate) fn defer_warning(&self, message: String) {
        self.inner
            .warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
        self.inner.has_warnings.store(true, Ordering::Release);
    }

    #[inline]
    fn emit_warnings(&self) {
        if self.inner.has_warnings.load(Ordering::Relaxed) {
            self.emit_warnings_slow();
        }
    }

    #[cold]
    fn emit_warnings_slow(&self) {
        self.inner.has_warnings.store(false, Ordering::Release);
        let queued = std::mem::take(
            &mut *self
                .inner
                .warnings
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for message in queued {
            tracing::warn!(target: "higgsmeter", "{message}");
        }
    }

    /// A state span opened.
    pub(crate) fn open(&self, span: u64, key: Key) {
        let mut t = self.lock();
        let now = self.inner.clock.now_nanos();
        t.commit(now);
        t.frames.push(Frame { span, key });
        t.mark_seen(key);
        self.publish(&t);
    }

    /// An open state span recorded a new state and/or operation. Returns false, and
    /// changes nothing, when `span` is not open in this tracker (e.g. created with
    /// `state = Empty`: the layer then opens it).
    pub(crate) fn update(&self, span: u64, state: Option<AppState>, op: Option<OpId>) -> bool {
        let mut t = self.lock();
        let Some(pos) = t.frames.iter().rposition(|f| f.span == span) else {
            return false;
        };
        if pos + 1 == t.frames.len() {
            let now = self.inner.clock.now_nanos();
            t.commit(now);
        }
        let frame = &mut t.frames[pos];
        let key = Key {
            state: state.unwrap_or(frame.key.state),
            op: op.unwrap_or(frame.key.op),
        };
        frame.key = key;
        t.mark_seen(key);
        self.publish(&t);
        true
    }

    /// A state span closed. Closing a scope that is not the current one (out of order,
    /// from another task) only forgets it: the current state does not change. Returns
    /// whether `span` was open in this timeline.
    pub(crate) fn close(&self, span: u64) -> bool {
        // A span closing on any thread happens after its creation, so an open frame
        // of its is counted here.
        if self.inner.open_frames.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut t = self.lock();
        let Some(pos) = t.frames.iter().rposition(|f| f.span == span) else {
            return false;
        };
        if pos + 1 == t.frames.len() {
            let now = self.inner.clock.now_nanos();
            t.commit(now);
            t.frames.pop(); // what is now current was marked seen when it was set
        } else {
            t.frames.remove(pos);
        }
        self.publish(&t);
        true
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, Timeline> {
        // The timeline stays consistent even if a holder panicked (nothing in it can).
        self.inner
            .timeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn publish(&self, t: &Timeline) {
        self.inner
            .current_code
            .store(t.current().state.code(), Ordering::Relaxed);
        self.inner
            .open_frames
            .store(t.frames.len(), Ordering::Release);
    }
}

/// How many trace pipelines run. State scopes enter their span while one does, so
/// spans opened inside a scope nest under it; without one, entering would cost every
/// scope the registry's enter and exit for nothing.
static TRACE_PIPELINES: AtomicUsize = AtomicUsize::new(0);

/// A trace pipeline started (`true`) or shut down (`false`).
#[cfg_attr(
    not(feature = "traces"),
    allow(dead_code, reason = "only a trace pipeline calls it")
)]
pub(crate) fn set_scopes_enter(started: bool) {
    if started {
        TRACE_PIPELINES.fetch_add(1, Ordering::Relaxed);
    } else {
        let _ = TRACE_PIPELINES
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// A state scope: the tracker is in its state until this guard drops.
///
/// Holds the scope's span; dropping it (also while unwinding from a panic) closes the
/// span and restores whatever is then current beneath it. While traces are on, the
/// span is also the current span of the thread that opened the scope until the guard
/// drops (see [`Tracker::scope`]); the guard is therefore not `Send`.
#[derive(Debug)]
#[must_use = "the scope ends when this guard drops; bind it with `let _scope = ...`"]
pub struct StateScope {
    span: ScopeSpan,
}

#[derive(Debug)]
enum ScopeSpan {
    Open(tracing::Span),
    Entered(tracing::span::EnteredSpan),
}

impl StateScope {
    /// The scope's span (a disabled span when tracking is off).
    pub fn span(&self) -> &tracing::Span {
        match &self.span {
            ScopeSpan::Open(span) => span,
            ScopeSpan::Entered(entered) => entered,
        }
    }
}

/// A scope opened with [`Tracker::open_scope`], to hand back to
/// [`Tracker::close_scope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeId(u64);

/// One (state, operation) of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// The state.
    pub state: AppState,
    /// The operation (`""` for none).
    pub operation: Arc<str>,
    /// Time spent, in nanoseconds.
    pub nanos: u64,
}

impl SnapshotEntry {
    /// Time spent, as a `Duration`.
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.nanos)
    }

    /// Time spent, in seconds: the value `worker_activity_time_seconds_total` exports.
    pub fn seconds(&self) -> f64 {
        self.nanos as f64 / 1e9
    }
}

/// A tracker's totals at one instant, live time included.
#[derive(Debug, Clone)]
pub struct Snapshot {
    entries: Vec<SnapshotEntry>,
    current: (AppState, Arc<str>),
    elapsed_nanos: u64,
}

impl Snapshot {
    /// Every (state, operation) visited, with its time.
    pub fn entries(&self) -> &[SnapshotEntry] {
        &self.entries
    }

    /// Time in one (state, operation), if it was ever visited.
    pub fn get(&self, state: AppState, operation: &str) -> Option<Duration> {
        self.entries
            .iter()
            .find(|e| e.state == state && &*e.operation == operation)
            .map(SnapshotEntry::duration)
    }

    /// Time in `state`, over all operations.
    pub fn total(&self, state: AppState) -> Duration {
        Duration::from_nanos(
            self.entries
                .iter()
                .filter(|e| e.state == state)
                .map(|e| e.nanos)
                .sum(),
        )
    }

    /// Time over every (state, operation); always equals [`elapsed`](Snapshot::elapsed).
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.entries.iter().map(|e| e.nanos).sum())
    }

    /// Wall-clock time since counting started (the tracker was made, or
    /// [`Tracker::begin`]), at the snapshot's instant, less the time the clock stood
    /// still after a [`Tracker::finalize`].
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_nanos)
    }

    /// The (state, operation) current at the snapshot's instant.
    pub fn current(&self) -> (AppState, &str) {
        (self.current.0, &self.current.1)
    }
}

/// The process-wide tracker, used by [`state_tracker()`], `#[track_state]` and `init()`.
pub fn state_tracker() -> &'static Tracker {
    static GLOBAL: OnceLock<Tracker> = OnceLock::new();
    GLOBAL.get_or_init(Tracker::new)
}

/// The seed's rank-0-only mode: tracks on rank 0 and turns the process-wide tracker
/// off on every other rank (their scopes and `set_state` calls become no-ops).
///
/// By default every rank tracks and exports with its rank as a resource attribute, and
/// the collector aggregates; call this only to keep the Python package's behaviour.
pub fn enable_tracker(rank: u32) {
    let tracker = state_tracker();
    tracker.set_enabled(rank == 0);
    if rank == 0 {
        tracker.begin();
    }
}

#[cfg(test)]
mod begin_tests {
    use std::time::Duration;

    use super::*;
    use crate::ManualClock;

    /// Nothing before `begin` is counted, in any state; after it the totals sum to the
    /// time since it; a second `begin` drops nothing.
    #[test]
    fn counting_starts_at_begin_once() {
        let clock = ManualClock::new();
        let t = Tracker::with_clock(clock.clone());
        clock.advance(Duration::from_millis(500));
        t.set_state(AppState::Io, "read");
        clock.advance(Duration::from_millis(200));
        t.begin();
        clock.advance(Duration::from_millis(150));
        let s = t.snapshot();
        assert_eq!(s.sum(), Duration::from_millis(150));
        assert_eq!(s.elapsed(), Duration::from_millis(150));
        assert_eq!(
            s.get(AppState::Io, "read"),
            Some(Duration::from_millis(150))
        );
        assert_eq!(s.total(AppState::Startup), Duration::ZERO);
        t.begin();
        clock.advance(Duration::from_millis(50));
        assert_eq!(t.snapshot().sum(), Duration::from_millis(200));
    }

    /// `finalize` stops the clock: later snapshots show the totals at the stop; a second
    /// call changes nothing; the next transition resumes counting from its own moment.
    #[test]
    fn finalize_stops_the_clock_until_the_next_transition() {
        let clock = ManualClock::new();
        let t = Tracker::with_clock(clock.clone());
        t.begin();
        t.set_state(AppState::Gpu, "step");
        clock.advance(Duration::from_millis(300));
        t.set_state(AppState::Shutdown, "");
        clock.advance(Duration::from_millis(20));
        t.finalize();
        clock.advance(Duration::from_secs(5));
        t.finalize();
        let s = t.snapshot();
        assert_eq!(s.sum(), Duration::from_millis(320));
        assert_eq!(s.elapsed(), Duration::from_millis(320));
        assert_eq!(s.total(AppState::Shutdown), Duration::from_millis(20));
        assert_eq!(s.current(), (AppState::Shutdown, ""));

        // A transition resumes: the 5 s (and the 1 s before it) are nobody's.
        clock.advance(Duration::from_secs(1));
        t.set_state(AppState::Io, "late");
        clock.advance(Duration::from_millis(40));
        let s = t.snapshot();
        assert_eq!(s.sum(), Duration::from_millis(360));
        assert_eq!(s.elapsed(), Duration::from_millis(360));
        assert_eq!(s.total(AppState::Shutdown), Duration::from_millis(20));
        assert_eq!(s.get(AppState::Io, "late"), Some(Duration::from_millis(40)));
    }
}
