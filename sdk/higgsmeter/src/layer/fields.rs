//! Reading span fields without allocating: the visitors of the state and catalog layers.

use std::fmt::{self, Write as _};

use tracing_core::field::{Field, Visit};

use crate::intern::{self, OpId};
use crate::span::{OPERATION_FIELD, STATE_FIELD, TRACKER_FIELD};
use crate::state::AppState;

use super::CatalogKind;

/// What a span's `state` field said.
#[derive(Default)]
pub(super) enum Parsed {
    /// No `state` value (absent from these values, or `Empty`).
    #[default]
    Missing,
    /// A worker state.
    State(AppState),
    /// A value that names no worker state, as text for the warning (the buffer is
    /// written only on this path, not for every span).
    Unknown(SmallText),
}

/// Reads `state`, `operation` and the tracker id from span fields without allocating.
#[derive(Default)]
pub(super) struct StateFields {
    pub(super) state: Parsed,
    pub(super) operation: Option<OpId>,
    pub(super) tracker: Option<u64>,
}

impl StateFields {
    fn set_state_text(&mut self, text: &str) {
        self.state = match AppState::parse(text) {
            Some(state) => Parsed::State(state),
            None => match text.parse::<u64>().ok().and_then(AppState::from_code) {
                Some(state) => Parsed::State(state),
                None => {
                    let mut raw = SmallText::default();
                    let _ = raw.write_str(text);
                    Parsed::Unknown(raw)
                }
            },
        };
    }

    fn set_state_code(&mut self, code: Option<u64>, shown: &dyn fmt::Display) {
        self.state = match code.and_then(AppState::from_code) {
            Some(state) => Parsed::State(state),
            None => {
                let mut raw = SmallText::default();
                let _ = write!(raw, "{shown}");
                Parsed::Unknown(raw)
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

/// Reads the fields of step and transfer spans without allocating.
#[derive(Default)]
pub(super) struct CatalogFields {
    component: OpId,
    graph_walk: OpId,
    src: OpId,
    dst: OpId,
    transport: OpId,
    pub(super) amount: Option<u64>,
}

impl CatalogFields {
    /// The interned label values of a span of `kind`, in its family's order
    /// (`OpId::NONE` where a value was not given).
    pub(super) fn labels(&self, kind: CatalogKind) -> [OpId; 3] {
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

/// A fixed 64-byte text buffer: formats short values without touching the heap.
pub(super) struct SmallText {
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
    pub(super) fn as_str(&self) -> &str {
        match std::str::from_utf8(&self.buf[..self.len]) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&self.buf[..e.valid_up_to()]).unwrap_or(""),
        }
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
