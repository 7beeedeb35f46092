//! The counters behind one lock, shared between the agent's tick thread, the
//! instruments and the handles: its own module so that the agent (which writes them)
//! and the instruments (which read them) both depend on it, not on each other.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::counters::SessionCounters;

/// The counters, shared between the tick thread, the instruments and the pusher.
#[derive(Debug)]
pub(crate) struct Shared {
    counters: Mutex<SessionCounters>,
}

impl Shared {
    /// Shares `counters`.
    pub(crate) fn new(counters: SessionCounters) -> Self {
        Shared {
            counters: Mutex::new(counters),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, SessionCounters> {
        // A panic while it was held (none is expected: `apply` does not panic) leaves
        // counters consistent field by field.
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
