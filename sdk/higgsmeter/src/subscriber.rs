//! The global subscriber `init()` installs: the registry, the stderr log, and the state
//! and catalog layers, with one gate in front instead of per-layer filters.
//!
//! Per-layer filters cost every span a few thread-local updates and, at each close, one
//! registry look-up per filtered layer; and when two of them disagree about a callsite
//! (the log's `warn` filter says no to an `info` state span, the activity filter yes),
//! its interest becomes "sometimes" and every span of it runs both filters again. This
//! stack has none: the [`Gate`] decides once per callsite whether any layer wants it
//! (an activity span, or what `RUST_LOG` lets through), and each layer skips what is
//! not its own with a check of the metadata it is handed.

use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Event, Level, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

use crate::engine::EngineRecorders;
use crate::layer::{Activity, is_activity_callsite};
use crate::traces::{TraceFilter, TracePipeline};
use crate::tracker::Tracker;

/// The subscriber `init()` installs as the global default: state spans into
/// `tracker`, step and transfer spans into `meter`'s instruments (the global meter's
/// when `None`), with a filter (`init()` reads it from `RUST_LOG`), the log events it
/// enables to stderr, and with a trace pipeline, the spans its filter enables to it.
pub(crate) fn subscriber(
    tracker: &Tracker,
    log: Option<LogFilter>,
    meter: Option<&opentelemetry::metrics::Meter>,
    traces: Option<&TracePipeline>,
) -> impl Subscriber + Send + Sync + 'static {
    let filter = log;
    let log = filter.clone().map(|filter| LogLayer {
        inner: tracing_subscriber::fmt::layer().with_writer(std::io::stderr),
        filter,
    });
    // One stack of layers, added to the registry at once: every layer added with
    // `.with()` costs each close a registry close guard of its own.
    let layers = Layer::<Registry>::and_then(
        log,
        Activity::new(tracker.clone(), meter.map(EngineRecorders::new)),
    )
    .and_then(traces.map(|t| t.layer()))
    .and_then(Gate {
        log: filter,
        traces: traces.map(TracePipeline::filter),
    });
    tracing_subscriber::registry().with(layers)
}

/// What the stderr log shows: a list of targets and levels, as `RUST_LOG` gives it.
#[derive(Clone)]
pub(crate) struct LogFilter {
    targets: Targets,
    /// The most verbose level any directive enables, checked first.
    max: LevelFilter,
}

impl LogFilter {
    /// `RUST_LOG`, or `warn` when it is unset or not a list of targets and levels.
    pub(crate) fn from_env() -> LogFilter {
        let targets = std::env::var("RUST_LOG")
            .ok()
            .and_then(|v| v.parse::<Targets>().ok())
            .unwrap_or_else(|| Targets::new().with_default(Level::WARN));
        LogFilter::new(targets)
    }

    fn new(targets: Targets) -> LogFilter {
        let max = targets
            .iter()
            .map(|(_, level)| level)
            .chain(targets.default_level())
            .max()
            .unwrap_or(LevelFilter::OFF);
        LogFilter { targets, max }
    }

    #[inline]
    fn enables(&self, meta: &Metadata<'_>) -> bool {
        *meta.level() <= self.max && self.targets.would_enable(meta.target(), meta.level())
    }
}

/// Keeps off every callsite no layer of the stack wants: the only filter of the stack.
///
/// A plain layer's `never` disables a callsite for the whole subscriber, so this
/// decides for all of them: activity spans, and what the log filter enables.
struct Gate {
    log: Option<LogFilter>,
    traces: Option<TraceFilter>,
}

impl Gate {
    #[inline]
    fn wants(&self, meta: &Metadata<'_>) -> bool {
        is_activity_callsite(meta)
            || self.log.as_ref().is_some_and(|log| log.enables(meta))
            || self.traces.as_ref().is_some_and(|t| t.enables(meta))
    }
}

impl<S: Subscriber> Layer<S> for Gate {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.wants(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    // Asked only when another dispatcher made a callsite's interest "sometimes".
    fn enabled(&self, meta: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        self.wants(meta)
    }
}

/// The stderr log: `tracing-subscriber`'s fmt layer, shown only the events and spans
/// its filter enables. It is built without span events, so span enters, exits and
/// closes do nothing in it and are not passed on. An event inside a state span the
/// filter does not enable shows that span's name, without its fields, in its context.
struct LogLayer<L> {
    inner: L,
    filter: LogFilter,
}

impl<S, L> Layer<S> for LogLayer<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if self.filter.enables(attrs.metadata()) {
            self.inner.on_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if ctx
            .metadata(id)
            .is_some_and(|meta| self.filter.enables(meta))
        {
            self.inner.on_record(id, values, ctx);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.filter.enables(event.metadata()) {
            self.inner.on_event(event, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AppState;

    fn warn_only() -> Option<LogFilter> {
        Some(LogFilter::new(Targets::new().with_default(Level::WARN)))
    }

    #[test]
    fn state_spans_pass_the_gate_and_move_the_timeline() {
        let tracker = Tracker::new();
        let subscriber = subscriber(&tracker, warn_only(), None, None);
        tracing::subscriber::with_default(subscriber, || {
            let scope = tracker.scope(AppState::Gpu, "inference");
            assert!(!scope.span().is_disabled());
            assert_eq!(tracker.current_state(), AppState::Gpu);
            let _own = tracing::info_span!("mine", state = "io").entered();
            assert_eq!(tracker.current_state(), AppState::Io);
        });
        assert_eq!(tracker.current_state(), AppState::Startup);
        assert!(tracker.snapshot().get(AppState::Io, "mine").is_some());
    }

    #[test]
    fn the_gate_keeps_off_what_no_layer_wants() {
        let tracker = Tracker::new();
        tracing::subscriber::with_default(subscriber(&tracker, warn_only(), None, None), || {
            assert!(tracing::info_span!("other", request = 7u64).is_disabled());
            assert!(!tracing::warn_span!("logged").is_disabled());
            assert!(!crate::step_span("decoder", "decode", None).is_disabled());
        });
        // Without the log, only activity spans pass.
        tracing::subscriber::with_default(subscriber(&tracker, None, None, None), || {
            assert!(tracing::error_span!("other").is_disabled());
            assert!(!crate::transfer_span("a", "b", "shm", None).is_disabled());
        });
    }

    #[test]
    fn the_log_filter_reads_levels_and_targets() {
        let filter = LogFilter::new("warn,higgsmeter=info".parse().unwrap());
        assert_eq!(filter.max, LevelFilter::INFO);
        let off = LogFilter::new(Targets::new());
        assert_eq!(off.max, LevelFilter::OFF);
    }
}
