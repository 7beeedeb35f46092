//! The tracker's time source: the monotonic clock, or a manual one for exact tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where a [`Tracker`](crate::Tracker) reads time, in nanoseconds since it was made.
#[derive(Debug, Clone)]
pub enum Clock {
    /// The monotonic clock ([`MonotonicClock`]): what every real worker uses.
    Monotonic(MonotonicClock),
    /// Time that moves only when told to (see [`ManualClock`]): for exact, sleep-free tests.
    Manual(ManualClock),
}

impl Clock {
    /// The monotonic clock, starting now.
    pub fn monotonic() -> Clock {
        Clock::Monotonic(MonotonicClock::new())
    }

    /// Nanoseconds since the clock's origin.
    #[inline]
    pub fn now_nanos(&self) -> u64 {
        match self {
            Clock::Monotonic(clock) => clock.now_nanos(),
            Clock::Manual(manual) => manual.now_nanos(),
        }
    }
}

/// The monotonic clock, read where it is cheapest: the CPU's time-stamp counter where it
/// is invariant (x86-64's `rdtsc`, aarch64's system counter), scaled to nanoseconds by a
/// calibration against `CLOCK_MONOTONIC` made once per process (under a millisecond
/// usually, 200 ms at most); `CLOCK_MONOTONIC` itself elsewhere (the `quanta` crate
/// decides). A state scope reads it twice, and with `clock_gettime` those reads were
/// most of what separated it from a bare `tracing` span: about 9 ns a read now against
/// 24 ns before on the benchmark machine (`transitions` bench, group `clock`).
///
/// The tracker's sums are exact against this clock whatever it is (every interval is
/// one difference of two of its readings); against the system's clock they agree to
/// the calibration's error, parts per million.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> MonotonicClock {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        MonotonicClock { clock, origin }
    }

    /// Nanoseconds since the origin (never less than zero: a counter read on another
    /// core a few cycles behind the origin counts as the origin).
    #[inline]
    pub fn now_nanos(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
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
