//! The seven mutually exclusive worker states of the Python `higgsmeter` 0.1.1: their
//! `state` label values and their `worker_current_state` codes.

/// One worker state: the `state` label value and the `worker_current_state` code.
///
/// The SDK's `AppState` enum is built from these constants, and the collector reads
/// codes and names through them, so the two cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct State {
    /// The `state` label value of [`WORKER_ACTIVITY_TIME`](crate::WORKER_ACTIVITY_TIME),
    /// e.g. `gpu`.
    pub name: &'static str,
    /// The value of [`WORKER_CURRENT_STATE`](crate::WORKER_CURRENT_STATE) while a
    /// worker is in this state.
    pub code: u8,
}

/// `idle` (code 0): waiting for work.
pub const STATE_IDLE: State = State {
    name: "idle",
    code: 0,
};

/// `io` (code 1): network or disk I/O.
pub const STATE_IO: State = State {
    name: "io",
    code: 1,
};

/// `cpu` (code 2): CPU-bound processing.
pub const STATE_CPU: State = State {
    name: "cpu",
    code: 2,
};

/// `gpu` (code 3): GPU computation.
pub const STATE_GPU: State = State {
    name: "gpu",
    code: 3,
};

/// `warmup` (code 4): model warm-up and initialisation.
pub const STATE_WARMUP: State = State {
    name: "warmup",
    code: 4,
};

/// `startup` (code 5): service start-up; every worker starts here.
pub const STATE_STARTUP: State = State {
    name: "startup",
    code: 5,
};

/// `shutdown` (code 6): graceful shut-down.
pub const STATE_SHUTDOWN: State = State {
    name: "shutdown",
    code: 6,
};

/// Every state in code order: `STATES[i].code == i`.
pub const STATES: [State; 7] = [
    STATE_IDLE,
    STATE_IO,
    STATE_CPU,
    STATE_GPU,
    STATE_WARMUP,
    STATE_STARTUP,
    STATE_SHUTDOWN,
];

/// The state whose `worker_current_state` code is `code`.
///
/// ```
/// use higgsmeter_catalog::{STATE_GPU, state_by_code};
///
/// assert_eq!(state_by_code(3), Some(STATE_GPU));
/// assert_eq!(state_by_code(7), None);
/// ```
pub const fn state_by_code(code: u64) -> Option<State> {
    let mut i = 0;
    while i < STATES.len() {
        if STATES[i].code as u64 == code {
            return Some(STATES[i]);
        }
        i += 1;
    }
    None
}

/// The state whose `state` label value is `name`, ignoring ASCII case.
///
/// ```
/// use higgsmeter_catalog::{STATE_IO, state_by_name};
///
/// assert_eq!(state_by_name("io"), Some(STATE_IO));
/// assert_eq!(state_by_name("IO"), Some(STATE_IO));
/// assert_eq!(state_by_name("busy"), None);
/// ```
pub fn state_by_name(name: &str) -> Option<State> {
    STATES
        .into_iter()
        .find(|s| s.name.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_the_seeds() {
        let expected = [
            ("idle", 0),
            ("io", 1),
            ("cpu", 2),
            ("gpu", 3),
            ("warmup", 4),
            ("startup", 5),
            ("shutdown", 6),
        ];
        for (i, (state, (name, code))) in STATES.into_iter().zip(expected).enumerate() {
            assert_eq!((state.name, state.code), (name, code));
            assert_eq!(usize::from(state.code), i, "STATES is in code order");
            assert_eq!(state_by_code(u64::from(code)), Some(state));
            assert_eq!(state_by_name(name), Some(state));
        }
    }
}
