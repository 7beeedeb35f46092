//! The span conventions: what makes a span a state span.

use crate::state::AppState;

/// The target of every state span higgsmeter creates (`scope()`, `#[track_state]`).
///
/// If you put a global level or target filter in front of the
/// [`ActivityLayer`](crate::ActivityLayer), let `higgsmeter::state=info` through, or
/// state time goes uncounted.
pub const STATE_SPAN_TARGET: &str = "higgsmeter::state";

/// The field whose value names the state (`"gpu"`, `"io"`, …, any ASCII case, or the
/// numeric code). Any span with this field is a state span.
pub const STATE_FIELD: &str = "state";

/// The field whose value names the operation; without it, the span's name is the
/// operation (as the seed's decorator uses the function's name).
pub const OPERATION_FIELD: &str = "operation";

/// The field naming the tracker a span belongs to; spans without it belong to whichever
/// tracker the layer accounts for.
pub const TRACKER_FIELD: &str = "higgsmeter.tracker";

/// Creates a state span for a tracker (an idle, disabled span when no subscriber wants
/// it), named after its state (`gpu`, `io`, …), so that a trace shows what each span is.
#[inline]
pub(crate) fn state_span(tracker: u64, state: AppState, operation: &str) -> tracing::Span {
    macro_rules! state_span {
        ($name:literal) => {
            tracing::span!(
                target: "higgsmeter::state",
                tracing::Level::INFO,
                $name,
                state = state.as_str(),
                operation = operation,
                higgsmeter.tracker = tracker,
            )
        };
    }
    match state {
        AppState::Idle => state_span!("idle"),
        AppState::Io => state_span!("io"),
        AppState::Cpu => state_span!("cpu"),
        AppState::Gpu => state_span!("gpu"),
        AppState::Warmup => state_span!("warmup"),
        AppState::Startup => state_span!("startup"),
        AppState::Shutdown => state_span!("shutdown"),
    }
}
