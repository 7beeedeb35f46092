//! The seven mutually exclusive worker states.

use std::fmt;

/// What a worker is doing right now; at every instant a worker is in exactly one.
///
/// The names and numeric codes are the Python `higgsmeter` 0.1.1's: `as_str()` is the
/// `state` label of `worker_activity_time_seconds_total`, `code()` the value of
/// `worker_current_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AppState {
    /// Waiting for work (code 0).
    Idle = 0,
    /// Network or disk I/O (code 1).
    Io = 1,
    /// CPU-bound processing (code 2).
    Cpu = 2,
    /// GPU computation (code 3).
    Gpu = 3,
    /// Model warm-up and initialisation (code 4).
    Warmup = 4,
    /// Service start-up; every tracker starts here (code 5).
    Startup = 5,
    /// Graceful shut-down (code 6).
    Shutdown = 6,
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

    /// The label value: `idle`, `io`, `cpu`, `gpu`, `warmup`, `startup` or `shutdown`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AppState::Idle => "idle",
            AppState::Io => "io",
            AppState::Cpu => "cpu",
            AppState::Gpu => "gpu",
            AppState::Warmup => "warmup",
            AppState::Startup => "startup",
            AppState::Shutdown => "shutdown",
        }
    }

    /// The seed's numeric code: idle 0, io 1, cpu 2, gpu 3, warmup 4, startup 5, shutdown 6.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The state with the given numeric code.
    pub const fn from_code(code: u64) -> Option<AppState> {
        match code {
            0 => Some(AppState::Idle),
            1 => Some(AppState::Io),
            2 => Some(AppState::Cpu),
            3 => Some(AppState::Gpu),
            4 => Some(AppState::Warmup),
            5 => Some(AppState::Startup),
            6 => Some(AppState::Shutdown),
            _ => None,
        }
    }

    /// Parses a state name, ignoring ASCII case (`"gpu"`, `"GPU"` and `"Gpu"` all work,
    /// so a span field recorded with `?AppState::Gpu` parses too).
    pub fn parse(name: &str) -> Option<AppState> {
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
        assert_eq!(AppState::from_code(7), None);
        assert!("busy".parse::<AppState>().is_err());
    }
}
