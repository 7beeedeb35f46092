//! The seven mutually exclusive worker states.

use std::fmt;

use higgsmeter_catalog::{
    STATE_CPU, STATE_GPU, STATE_IDLE, STATE_IO, STATE_SHUTDOWN, STATE_STARTUP, STATE_WARMUP, State,
};

/// What a worker is doing right now; at every instant a worker is in exactly one.
///
/// The names and numeric codes are the Python `higgsmeter` 0.1.1's, taken from the
/// catalog's [`State`] constants ([`higgsmeter_catalog::STATES`]): `as_str()` is the
/// `state` label of `worker_activity_time_seconds_total`, `code()` the value of
/// `worker_current_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AppState {
    /// Waiting for work (code 0).
    Idle = STATE_IDLE.code,
    /// Network or disk I/O (code 1).
    Io = STATE_IO.code,
    /// CPU-bound processing (code 2).
    Cpu = STATE_CPU.code,
    /// GPU computation (code 3).
    Gpu = STATE_GPU.code,
    /// Model warm-up and initialisation (code 4).
    Warmup = STATE_WARMUP.code,
    /// Service start-up; every tracker starts here (code 5).
    Startup = STATE_STARTUP.code,
    /// Graceful shut-down (code 6).
    Shutdown = STATE_SHUTDOWN.code,
}

impl AppState {
    /// Every state, in code order.
    pub const ALL: [AppState; 7] = [
        AppState::Idle,
        AppState::Io,
        AppState::Cpu,
        AppState::Gpu,
        AppState::Warmup,
        AppState::Startup,
        AppState::Shutdown,
    ];

    /// The catalog's description of this state: its label value and code.
    pub const fn as_catalog(self) -> State {
        match self {
            AppState::Idle => STATE_IDLE,
            AppState::Io => STATE_IO,
            AppState::Cpu => STATE_CPU,
            AppState::Gpu => STATE_GPU,
            AppState::Warmup => STATE_WARMUP,
            AppState::Startup => STATE_STARTUP,
            AppState::Shutdown => STATE_SHUTDOWN,
        }
    }

    /// The label value: `idle`, `io`, `cpu`, `gpu`, `warmup`, `startup` or `shutdown`.
    pub const fn as_str(self) -> &'static str {
        self.as_catalog().name
    }

    /// The seed's numeric code: idle 0, io 1, cpu 2, gpu 3, warmup 4, startup 5, shutdown 6.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The state with the given numeric code.
    pub const fn from_code(code: u64) -> Option<AppState> {
        let mut i = 0;
        while i < AppState::ALL.len() {
            if AppState::ALL[i].code() as u64 == code {
                return Some(AppState::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// Parses a state name, ignoring ASCII case (`"gpu"`, `"GPU"` and `"Gpu"` all work,
    /// so a span field recorded with `?AppState::Gpu` parses too).
    #[inline]
    pub fn parse(name: &str) -> Option<AppState> {
        // The lower-case names (what `scope()` and `#[track_state]` write) first: one
        // comparison, on every state span's creation.
        match name {
            "idle" => Some(AppState::Idle),
            "io" => Some(AppState::Io),
            "cpu" => Some(AppState::Cpu),
            "gpu" => Some(AppState::Gpu),
            "warmup" => Some(AppState::Warmup),
            "startup" => Some(AppState::Startup),
            "shutdown" => Some(AppState::Shutdown),
            _ => AppState::parse_any_case(name),
        }
    }

    #[cold]
    fn parse_any_case(name: &str) -> Option<AppState> {
        AppState::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(name))
    }

    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AppState {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AppState::parse(s).ok_or_else(|| crate::Error::UnknownState(s.to_owned()))
    }
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
        for (state, (name, code)) in AppState::ALL.into_iter().zip(expected) {
            assert_eq!(state.as_str(), name);
            assert_eq!(state.code(), code);
            assert_eq!(AppState::from_code(u64::from(code)), Some(state));
            assert_eq!(AppState::parse(&name.to_uppercase()), Some(state));
            assert_eq!(name.parse::<AppState>().ok(), Some(state));
        }
        assert_eq!(
            AppState::ALL.map(AppState::as_catalog),
            higgsmeter_catalog::STATES
        );
        assert_eq!(AppState::from_code(7), None);
        assert!("busy".parse::<AppState>().is_err());
    }
}
