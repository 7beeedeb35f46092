//! The tracker's time source: the monotonic clock, or a manual one for exact tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where a [`Tracker`](crate::Tracker) reads time, in nanoseconds since it was made.
#[derive(Debug, Clone)]
pub enum Clock {
    /// The monotonic clock (`std::time::Instant`): what every real worker uses.
    Monotonic(Instant),
    /// Time that moves only when told to (see [`ManualClock`]): for exact, sleep-free tests.
    Manual(ManualClock),
}

impl Clock {
    /// The monotonic clock, starting now.
    pub fn monotonic() -> Clock {
        Clock::Monotonic(Instant::now())
    }

    /// Nanoseconds since the clock's origin.
    #[inline]
    pub fn now_nanos(&self) -> u64 {
        match self {
            Clock::Monotonic(origin) => {
                u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }
            Clock::Manual(manual) => manual.now_nanos(),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::monotonic()
    }
}

impl From<ManualClock> for Clock {
    fn from(manual: ManualClock) -> Self {
        Clock::Manual(manual)
    }
}

/// A clock that stands still until [`advance`](ManualClock::advance)d; clones share time.
///
/// ```
/// use higgsmeter::{AppState, ManualClock, Tracker};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let tracker = Tracker::with_clock(clock.clone());
/// clock.advance(Duration::from_millis(1500));
/// let snap = tracker.snapshot();
/// assert_eq!(snap.total(AppState::Startup), Duration::from_millis(1500));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(by, Ordering::SeqCst);
    }

    /// Nanoseconds since zero.
    pub fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}
