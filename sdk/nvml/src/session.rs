//! Session counters of one device, after the lab agent's aggregator (`apply_sample`).
//!
//! In-memory running totals, updated once per sample, with no per-sample storage.
//! Unlike the seed, which adds the *nominal* tick to its counters, every interval here
//! is *measured*: the time from the previous sample to this one, so a late or skipped
//! tick does not drift the totals.
//!
//! # Sampling error
//!
//! A sample sees one utilisation reading (NVML's average over the driver's last sample
//! period, 1/6 s to 1 s) and one worker state, both taken at the sample's end; the whole
//! interval since the previous sample is attributed to them. Attribution granularity is
//! therefore one interval (default 1 s): a kernel burst shorter than the driver's period
//! is diluted into its utilisation, and a state change inside an interval puts that
//! interval's GPU-active time entirely under the state at its end. Over a long run the
//! errors at the two edges of each state's stretch average out; for short stretches,
//! shorten the interval.

use std::time::Instant;

/// At most this many distinct `state` labels are kept per device; later ones are counted
/// under [`OVERFLOW_STATE`]. The worker states are seven.
pub(crate) const MAX_STATES: usize = 16;

/// The `state` label of GPU-active time whose state did not fit in [`MAX_STATES`].
pub(crate) const OVERFLOW_STATE: &str = "other";

/// One device's running totals since the meter started.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionCounters {
    started: Instant,
    /// End of the previous sample: where the next interval starts.
    last_sample: Instant,
    /// Samples with a utilisation reading.
    pub(crate) samples: u64,
    /// Seconds with utilisation above the threshold, by worker state at sampling time.
    pub(crate) active_seconds: Vec<(&'static str, f64)>,
    /// Highest utilisation sampled (ratio 0..1).
    pub(crate) utilization_peak: Option<f64>,
    /// Highest memory used, in bytes.
    pub(crate) memory_peak: Option<u64>,
    /// Seconds from the start to the first sample with the GPU active.
    pub(crate) time_to_first_active: Option<f64>,
}

impl SessionCounters {
    /// Empty counters of a session that started at `started`.
    pub(crate) fn new(started: Instant) -> Self {
        SessionCounters {
            started,
            last_sample: started,
            samples: 0,
            active_seconds: Vec::new(),
            utilization_peak: None,
            memory_peak: None,
            time_to_first_active: None,
        }
    }

    /// Applies the sample taken at `now`: `utilization` (ratio, `None` when it could not
    /// be read), `memory_used` (bytes, `None` likewise), the worker `state` at `now`, and
    /// the activity `threshold` (ratio; active means strictly above it, as in the seed).
    ///
    /// The interval since the previous sample ends here whether or not it had a reading:
    /// an interval without a utilisation reading is neither active nor idle, and is not
    /// carried into the next one.
    pub(crate) fn apply(
        &mut self,
        now: Instant,
        utilization: Option<f64>,
        memory_used: Option<u64>,
        state: &'static str,
        threshold: f64,
    ) {
        let interval = now
            .saturating_duration_since(self.last_sample)
            .as_secs_f64();
        self.last_sample = self.last_sample.max(now);
        if let Some(used) = memory_used {
            self.memory_peak = Some(self.memory_peak.map_or(used, |peak| peak.max(used)));
        }
        let Some(util) = utilization else { return };
        self.samples += 1;
        self.utilization_peak = Some(self.utilization_peak.map_or(util, |peak| peak.max(util)));
        if util > threshold {
            *self.active_slot(state) += interval;
            if self.time_to_first_active.is_none() {
                self.time_to_first_active =
                    Some(now.saturating_duration_since(self.started).as_secs_f64());
            }
        }
    }

    /// GPU-active seconds summed over every state.
    #[cfg(test)]
    pub(crate) fn active_total(&self) -> f64 {
        self.active_seconds.iter().map(|(_, s)| s).sum()
    }

    fn active_slot(&mut self, state: &'static str) -> &mut f64 {
        let state = if self.active_seconds.iter().any(|(s, _)| *s == state)
            || self.active_seconds.len() < MAX_STATES - 1
        {
            state
        } else {
            OVERFLOW_STATE
        };
        let at = match self.active_seconds.iter().position(|(s, _)| *s == state) {
            Some(at) => at,
            None => {
                self.active_seconds.push((state, 0.0));
                self.active_seconds.len() - 1
            }
        };
        &mut self.active_seconds[at].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const T: f64 = 0.05;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn active_time_is_the_measured_interval_not_the_nominal_tick() {
        let t0 = Instant::now();
        let mut c = SessionCounters::new(t0);
        c.apply(at(t0, 0), Some(0.5), Some(10), "gpu", T);
        // A late tick: 2.5 s instead of the nominal 1 s.
        c.apply(at(t0, 2500), Some(0.5), Some(10), "gpu", T);
        c.apply(at(t0, 3500), Some(0.9), Some(30), "gpu", T);
        assert_eq!(c.samples, 3);
        assert_eq!(c.active_seconds, vec![("gpu", 3.5)]);
        assert_eq!(c.utilization_peak, Some(0.9));
        assert_eq!(c.memory_peak, Some(30));
        assert_eq!(c.time_to_first_active, Some(0.0));
    }

    #[test]
    fn the_threshold_is_strict_and_idle_time_is_not_active() {
        let t0 = Instant::now();
        let mut c = SessionCounters::new(t0);
        c.apply(at(t0, 1000), Some(0.05), None, "io", T);
        c.apply(at(t0, 2000), Some(0.0), None, "io", T);
        assert_eq!(c.samples, 2);
        assert_eq!(c.active_total(), 0.0);
        assert_eq!(c.time_to_first_active, None);
        c.apply(at(t0, 3250), Some(0.06), None, "io", T);
        assert_eq!(c.active_seconds, vec![("io", 1.25)]);
        assert_eq!(c.time_to_first_active, Some(3.25));
        // The first-active time is kept, not moved by later active samples.
        c.apply(at(t0, 4000), Some(0.5), None, "gpu", T);
        assert_eq!(c.time_to_first_active, Some(3.25));
    }

    #[test]
    fn active_time_is_split_by_the_state_at_sampling_time() {
        let t0 = Instant::now();
        let mut c = SessionCounters::new(t0);
        for (ms, state) in [
            (1000, "gpu"),
            (2000, "gpu"),
            (3000, "io"),
            (3500, "gpu"),
            (4000, "cpu"),
        ] {
            c.apply(at(t0, ms), Some(0.8), None, state, T);
        }
        assert_eq!(
            c.active_seconds,
            vec![("gpu", 2.5), ("io", 1.0), ("cpu", 0.5)]
        );
        assert_eq!(c.active_total(), 4.0);
    }

    #[test]
    fn an_interval_without_a_reading_is_dropped_not_carried() {
        let t0 = Instant::now();
        let mut c = SessionCounters::new(t0);
        c.apply(at(t0, 1000), Some(0.8), Some(5), "gpu", T);
        c.apply(at(t0, 2000), None, Some(7), "gpu", T);
        c.apply(at(t0, 3000), Some(0.8), None, "gpu", T);
        assert_eq!(c.samples, 2);
        assert_eq!(c.active_seconds, vec![("gpu", 2.0)]);
        assert_eq!(c.memory_peak, Some(7));
    }

    #[test]
    fn a_clock_that_goes_back_adds_nothing() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut c = SessionCounters::new(t0);
        c.apply(at(t0, 1000), Some(0.8), None, "gpu", T);
        c.apply(t0 - Duration::from_secs(1), Some(0.8), None, "gpu", T);
        c.apply(at(t0, 1500), Some(0.8), None, "gpu", T);
        assert_eq!(c.active_seconds, vec![("gpu", 1.5)]);
    }

    #[test]
    fn state_labels_are_bounded() {
        const NAMES: [&str; 20] = [
            "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13",
            "s14", "s15", "s16", "s17", "s18", "s19",
        ];
        let t0 = Instant::now();
        let mut c = SessionCounters::new(t0);
        for (i, name) in NAMES.iter().enumerate() {
            c.apply(at(t0, 1000 * (i as u64 + 1)), Some(0.8), None, name, T);
        }
        assert_eq!(c.active_seconds.len(), MAX_STATES);
        assert_eq!(c.active_seconds.last(), Some(&(OVERFLOW_STATE, 5.0)));
        assert_eq!(c.active_total(), 20.0);
        // A state already counted keeps its own label.
        c.apply(at(t0, 21_000), Some(0.8), None, "s0", T);
        assert_eq!(c.active_seconds[0], ("s0", 2.0));
    }
}
