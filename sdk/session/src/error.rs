//! The crate's errors.

/// What can go wrong starting the agent or the pusher, or replaying samples.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range.
    #[error("invalid {name}: {reason}")]
    InvalidSetting {
        /// The setting.
        name: &'static str,
        /// What is wrong, and what is accepted.
        reason: &'static str,
    },
    /// A thread could not be started (the process is out of threads or memory).
    #[error("cannot start a thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The allocator URL does not parse.
    #[error(
        "invalid allocator URL `{url}`: {reason}; give an absolute http:// URL, e.g. http://allocator.lab:8000/api/sessions"
    )]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// A line of a replay file is not a sample.
    #[error("line {line}: {message}")]
    BadSample {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The replay file could not be read.
    #[error("cannot read the samples: {0}")]
    Read(#[source] std::io::Error),
}
