//! The agent: a tick thread that reads the samplers, applies the sample to the
//! counters and publishes them to the instruments and the pusher.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;

use crate::counters::{Sample, SessionCounters};
use crate::error::Error;
use crate::instruments::{self, SessionInstruments};
use crate::iso::{self, Timestamp};
use crate::samplers::{
    GpuSampler, NoGpu, ProcScanner, ProcessSampler, TrainingReading, TrainingSampler,
    WindowSampler, X11Window,
};
use crate::shared::Shared;

/// The tick interval unless set: 2 s, the lab agent's.
pub const DEFAULT_TICK_INTERVAL: Duration = Duration::from_secs(2);

/// The shortest tick interval accepted.
pub const MIN_TICK_INTERVAL: Duration = Duration::from_millis(10);

/// How long stopping waits for a tick in progress before leaving the thread behind.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A cloneable read handle on a running agent's counters (for a [`Pusher`](crate::Pusher)
/// or your own reporting).
#[derive(Debug, Clone)]
pub struct CountersHandle {
    shared: Arc<Shared>,
}

impl CountersHandle {
    /// A copy of the counters now.
    pub fn counters(&self) -> SessionCounters {
        self.shared.lock().clone()
    }
}

/// The samplers a tick reads, and how their readings become a [`Sample`].
pub(crate) struct Samplers {
    pub(crate) window: Box<dyn WindowSampler>,
    pub(crate) processes: Box<dyn ProcessSampler>,
    pub(crate) gpu: Box<dyn GpuSampler>,
    pub(crate) training: Vec<Box<dyn TrainingSampler>>,
}

impl Samplers {
    /// Reads every sampler once: the sample taken at `ts`, standing for `interval`.
    pub(crate) fn sample(&mut self, ts: Timestamp, interval: Duration) -> Sample {
        let bucket = self.window.bucket();
        let gpu = self.gpu.read();
        let mut processes_seen = Vec::new();
        self.processes.processes_seen(&mut processes_seen);
        let training = self
            .training
            .iter_mut()
            .map(|t| t.read())
            .fold(TrainingReading::default(), merge);
        Sample {
            ts,
            sample_interval_seconds: interval.as_secs_f64(),
            active_window_bucket: Some(bucket.as_str().to_owned()),
            gpu_util_pct: gpu.util_pct,
            vram_mb: gpu.vram_mb,
            processes_seen,
            max_labeled_frames: training.labeled_frames,
            training_epochs_completed: training.epochs_completed,
            training_final_loss: training.loss,
        }
    }
}

/// Several training sources in one reading: the highest counts, and the loss of the
/// last source (in the order added) that has one.
fn merge(acc: TrainingReading, next: TrainingReading) -> TrainingReading {
    let max = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    TrainingReading {
        labeled_frames: max(acc.labeled_frames, next.labeled_frames),
        epochs_completed: max(acc.epochs_completed, next.epochs_completed),
        loss: next.loss.or(acc.loss),
    }
}

/// Configures and starts a [`SessionAgent`]; from [`SessionAgent::builder`].
#[must_use = "call start() to start the agent"]
pub struct SessionAgentBuilder {
    interval: Duration,
    started_at: Option<Timestamp>,
    window: Option<Box<dyn WindowSampler>>,
    processes: Option<Box<dyn ProcessSampler>>,
    gpu: Option<Box<dyn GpuSampler>>,
    training: Vec<Box<dyn TrainingSampler>>,
}

impl std::fmt::Debug for SessionAgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionAgentBuilder")
            .field("interval", &self.interval)
            .field("started_at", &self.started_at)
            .field("training", &self.training.len())
            .finish_non_exhaustive()
    }
}

impl SessionAgentBuilder {
    /// How often to sample (default 2 s, at least [`MIN_TICK_INTERVAL`]). Each sample
    /// stands for the time measured since the previous one (the first: since the
    /// start), so a late tick loses nothing.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// When the session started (default: when [`start`](Self::start) is called).
    pub fn with_session_started_at(mut self, started_at: Timestamp) -> Self {
        self.started_at = Some(started_at);
        self
    }

    /// The active-window sampler (default [`X11Window::default`]).
    pub fn with_window_sampler(mut self, sampler: impl WindowSampler + 'static) -> Self {
        self.window = Some(Box::new(sampler));
        self
    }

    /// The process sampler (default [`ProcScanner::default`]: SLEAP's three).
    pub fn with_process_sampler(mut self, sampler: impl ProcessSampler + 'static) -> Self {
        self.processes = Some(Box::new(sampler));
        self
    }

    /// The GPU sampler (default [`NoGpu`]; [`NvmlGpu`](crate::NvmlGpu) reads a running
    /// NVML meter).
    pub fn with_gpu_sampler(mut self, sampler: impl GpuSampler + 'static) -> Self {
        self.gpu = Some(Box::new(sampler));
        self
    }

    /// Adds a training-progress source ([`TrainingProgress`](crate::TrainingProgress),
    /// [`TrainingLogFollower`](crate::TrainingLogFollower)). With several, a sample has
    /// the highest counts and the loss of the last source added that has one.
    pub fn with_training_sampler(mut self, sampler: impl TrainingSampler + 'static) -> Self {
        self.training.push(Box::new(sampler));
        self
    }

    /// Registers the session instruments on `meter` and starts the tick thread. The
    /// first sample is taken one interval after the start.
    ///
    /// # Errors
    ///
    /// When the interval is shorter than [`MIN_TICK_INTERVAL`] or the thread cannot
    /// start; nothing is left running then.
    pub fn start(self, meter: &Meter) -> Result<SessionAgent, Error> {
        if self.interval < MIN_TICK_INTERVAL {
            return Err(Error::InvalidSetting {
                name: "interval",
                reason: "the tick interval must be at least 10 ms",
            });
        }
        let started_at = self.started_at.unwrap_or_else(iso::now);
        let shared = Arc::new(Shared::new(SessionCounters::new(started_at)));
        let samplers = Samplers {
            window: self
                .window
                .unwrap_or_else(|| Box::new(X11Window::default())),
            processes: self
                .processes
                .unwrap_or_else(|| Box::new(ProcScanner::default())),
            gpu: self.gpu.unwrap_or_else(|| Box::new(NoGpu)),
            training: self.training,
        };
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread_shared = Arc::clone(&shared);
        let interval = self.interval;
        let thread = std::thread::Builder::new()
            .name("higgsmeter-session".into())
            .spawn(move || run(samplers, &thread_shared, interval, &stop_rx))
            .map_err(Error::Spawn)?;
        let instruments = instruments::register(meter, &shared);
        tracing::info!(
            session_started_at = %iso::format(&started_at),
            interval_ms = interval.as_millis() as u64,
            "session agent started"
        );
        Ok(SessionAgent {
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
            _instruments: instruments,
        })
    }
}

/// The tick thread: a sample every `interval`, on a fixed schedule, until stopped.
fn run(mut samplers: Samplers, shared: &Shared, interval: Duration, stop: &mpsc::Receiver<()>) {
    let mut last = Instant::now();
    let mut next = last + interval;
    let mut panicked = false;
    loop {
        match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        let measured = now.saturating_duration_since(last);
        last = now;
        let ticked = catch_unwind(AssertUnwindSafe(|| {
            let sample = samplers.sample(iso::now(), measured);
            let mut counters = shared.lock();
            counters.apply(&sample);
            tracing::debug!(
                sample_count = counters.sample_count,
                bucket = sample.active_window_bucket.as_deref().unwrap_or("other"),
                gpu_util_pct = sample.gpu_util_pct,
                processes = ?sample.processes_seen,
                "session tick"
            );
        }));
        if ticked.is_err() && !panicked {
            panicked = true;
            tracing::error!("a session sampler panicked; that tick is skipped (logged once)");
        }
        next += interval;
        if next <= now {
            // Fell behind (a slow sampler, a suspended process): skip, don't burst.
            next = now + interval;
        }
    }
}

/// A running session agent. Dropping it (or [`stop`](SessionAgent::stop)) stops the tick
/// thread; the counters keep their last values for the instruments and handles.
#[must_use = "the agent stops when this handle is dropped"]
pub struct SessionAgent {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _instruments: SessionInstruments,
}

impl std::fmt::Debug for SessionAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionAgent").finish_non_exhaustive()
    }
}

impl SessionAgent {
    /// A builder with the defaults: 2 s ticks, the X11 window sampler, the `/proc`
    /// scanner for SLEAP's processes, no GPU, no training source.
    pub fn builder() -> SessionAgentBuilder {
        SessionAgentBuilder {
            interval: DEFAULT_TICK_INTERVAL,
            started_at: None,
            window: None,
            processes: None,
            gpu: None,
            training: Vec::new(),
        }
    }

    /// A copy of the counters now.
    pub fn counters(&self) -> SessionCounters {
        self.shared.lock().clone()
    }

    /// A cloneable handle that reads the counters (also after the agent stopped).
    pub fn handle(&self) -> CountersHandle {
        CountersHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Stops the tick thread (the same as dropping the handle).
    pub fn stop(self) {}
}

impl Drop for SessionAgent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                tracing::warn!(
                    "the session tick thread did not stop within 5 s (a sampler is hanging); leaving it behind"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samplers::{GpuSample, TrainingProgress, WindowBucket};

    struct Fixed(WindowBucket);
    impl WindowSampler for Fixed {
        fn bucket(&mut self) -> WindowBucket {
            self.0
        }
    }
    struct Procs(Vec<&'static str>);
    impl ProcessSampler for Procs {
        fn processes_seen(&mut self, out: &mut Vec<String>) {
            out.extend(self.0.iter().map(|s| s.to_string()));
        }
    }
    struct Gpu(f64, f64);
    impl GpuSampler for Gpu {
        fn read(&mut self) -> GpuSample {
            GpuSample {
                util_pct: self.0,
                vram_mb: self.1,
            }
        }
    }
    struct Reading(TrainingReading);
    impl TrainingSampler for Reading {
        fn read(&mut self) -> TrainingReading {
            self.0
        }
    }

    #[test]
    fn a_sample_carries_every_samplers_reading() {
        let progress = TrainingProgress::new();
        progress.record_epochs_completed(4);
        progress.record_loss(0.5);
        let mut samplers = Samplers {
            window: Box::new(Fixed(WindowBucket::Terminal)),
            processes: Box::new(Procs(vec!["sleap-train"])),
            gpu: Box::new(Gpu(37.0, 2048.0)),
            training: vec![
                Box::new(progress),
                Box::new(Reading(TrainingReading {
                    labeled_frames: Some(10),
                    epochs_completed: Some(2),
                    loss: Some(0.25),
                })),
            ],
        };
        let ts = iso::parse("2025-03-01T09:00:02Z").unwrap();
        let s = samplers.sample(ts, Duration::from_millis(2500));
        assert_eq!(s.ts, ts);
        assert_eq!(s.sample_interval_seconds, 2.5);
        assert_eq!(s.active_window_bucket.as_deref(), Some("terminal"));
        assert_eq!((s.gpu_util_pct, s.vram_mb), (37.0, 2048.0));
        assert_eq!(s.processes_seen, vec!["sleap-train".to_owned()]);
        assert_eq!(s.max_labeled_frames, Some(10));
        assert_eq!(s.training_epochs_completed, Some(4));
        assert_eq!(s.training_final_loss, Some(0.25));
    }
}
