//! Goodput marks: what a training worker tells the collector about its progress, so
//! that the collector can split a job's time into goodput (productive `gpu` step time)
//! and badput by cause, per job and across restarts.
//!
//! A worker marks four things, each exported as a gauge of the catalog's
//! [`JOB_FAMILIES`](higgsmeter_catalog::JOB_FAMILIES), per process, from the moment it
//! is first set (a mark never set is not exported):
//!
//! | call | gauge | when |
//! |---|---|---|
//! | [`record_step`] | `higgsmeter_job_step` | after each training step |
//! | [`checkpoint_save`] | `higgsmeter_job_checkpoint_step`, `higgsmeter_job_checkpoint_productive_seconds` | when the save's guard drops |
//! | [`checkpoint_restore`] | `higgsmeter_job_restored_step` | when the restore's guard drops |
//!
//! and the time of a checkpoint's save or restore is a state scope of its own (`io`,
//! operation [`CHECKPOINT_SAVE_OPERATION`] or [`CHECKPOINT_RESTORE_OPERATION`]), as is
//! custom badput ([`badput`], [`badput_in`]: operation `badput.<cause>`, see
//! [`badput_operation`]). Everything
//! else the collector needs is already there: the activity seconds by state, and the
//! job's identity in the resource (`job.id` and `job.incarnation`, which
//! [`init()`](crate::init) reads from the environment; see the crate docs).
//!
//! The functions here work on the process-wide tracker ([`state_tracker()`]); the
//! [`Tracker`] methods of the same names work on any tracker.
//!
//! ```
//! use higgsmeter::{AppState, job, state_tracker};
//! # fn load(_: u64) {}
//! # fn train_step() {}
//! # fn save(_: u64) {}
//! # fn evaluate() {}
//!
//! // In `main`, after `let _telemetry = higgsmeter::init()?;`:
//! let start = 1200; // the checkpoint found on disk, if any
//! {
//!     let _restore = job::checkpoint_restore(start);
//!     load(start);
//! } // higgsmeter_job_restored_step = 1200
//! for step in start + 1..=start + 300 {
//!     {
//!         let _gpu = state_tracker().scope(AppState::Gpu, "train_step");
//!         train_step();
//!     }
//!     job::record_step(step); // higgsmeter_job_step = step
//!     if step % 100 == 0 {
//!         let _save = job::checkpoint_save(step);
//!         save(step);
//!     } // higgsmeter_job_checkpoint_step = step, and the gpu seconds so far
//!     if step % 250 == 0 {
//!         let _eval = job::badput_in(AppState::Gpu, "evaluation");
//!         evaluate();
//!     }
//! }
//! assert_eq!(job::marks().step, Some(1500));
//! assert_eq!(job::marks().checkpoint_step, Some(1500));
//! ```
//!
//! In `async` code, where a guard cannot be held across an `.await`, instrument the
//! future with the scope's span and mark when it is done:
//!
//! ```no_run
//! use higgsmeter::{AppState, job::CHECKPOINT_SAVE_OPERATION, state_tracker};
//! use tracing::Instrument;
//! # async fn save(_: u64) {}
//! # async fn run(step: u64) {
//! let tracker = state_tracker();
//! save(step)
//!     .instrument(tracker.span(AppState::Io, CHECKPOINT_SAVE_OPERATION))
//!     .await;
//! tracker.checkpoint_saved(step);
//! # }
//! ```

use std::time::Duration;

pub use higgsmeter_catalog::{
    BADPUT_CAUSES, CHECKPOINT_RESTORE_OPERATION, CHECKPOINT_SAVE_OPERATION, CUSTOM_BADPUT_PREFIX,
    JOB_ID_ATTRIBUTE, JOB_INCARNATION_ATTRIBUTE,
};

use crate::state::AppState;
use crate::tracker::{StateScope, Tracker, state_tracker};

/// The largest step a mark exports: OTLP's integer points are signed, so a larger
/// step is exported as this.
pub const MAX_STEP: u64 = i64::MAX as u64;

/// Records `step` as the last training step completed, on the process-wide tracker
/// (see [`Tracker::record_step`]).
#[inline]
pub fn record_step(step: u64) {
    state_tracker().record_step(step);
}

/// A checkpoint save of `step`, on the process-wide tracker (see
/// [`Tracker::checkpoint_save`]).
#[inline]
pub fn checkpoint_save(step: u64) -> CheckpointScope {
    state_tracker().checkpoint_save(step)
}

/// A checkpoint restore of `step`, on the process-wide tracker (see
/// [`Tracker::checkpoint_restore`]).
#[inline]
pub fn checkpoint_restore(step: u64) -> CheckpointScope {
    state_tracker().checkpoint_restore(step)
}

/// Custom badput in the `cpu` state, on the process-wide tracker (see
/// [`Tracker::badput`]).
#[inline]
pub fn badput(cause: &str) -> StateScope {
    state_tracker().badput(cause)
}

/// Custom badput in `state`, on the process-wide tracker (see [`Tracker::badput_in`]).
#[inline]
pub fn badput_in(state: AppState, cause: &str) -> StateScope {
    state_tracker().badput_in(state, cause)
}

/// The process-wide tracker's marks (see [`Tracker::job_marks`]).
pub fn marks() -> Marks {
    state_tracker().job_marks()
}

/// The progress marks of a tracker at one instant: `None` for a mark never set (its
/// gauge is not exported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Marks {
    /// The last training step completed (`higgsmeter_job_step`).
    pub step: Option<u64>,
    /// The step the last checkpoint saved covers (`higgsmeter_job_checkpoint_step`).
    pub checkpoint_step: Option<u64>,
    /// The tracker's `gpu` time (but custom badput's, `badput.*`) when that checkpoint
    /// was saved: the progress it keeps
    /// (`higgsmeter_job_checkpoint_productive_seconds`).
    pub checkpoint_productive: Option<Duration>,
    /// The step of the checkpoint restored (`higgsmeter_job_restored_step`).
    pub restored_step: Option<u64>,
}

/// What a [`CheckpointScope`] marks when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checkpoint {
    Save,
    Restore,
}

/// A checkpoint's save or restore: the tracker is in `io` with operation
/// [`CHECKPOINT_SAVE_OPERATION`] or [`CHECKPOINT_RESTORE_OPERATION`] until this guard
/// drops; then the checkpoint's marks are recorded.
///
/// Made by [`Tracker::checkpoint_save`] and [`Tracker::checkpoint_restore`] (or the
/// [`checkpoint_save`] and [`checkpoint_restore`] functions). Dropping it means the
/// operation finished; a drop while unwinding from a panic records no mark (the scope
/// still ends), and [`discard`](CheckpointScope::discard) ends the scope without one
/// when the operation failed with an error. Like a [`StateScope`], the guard stays on
/// the thread that made it.
#[derive(Debug)]
#[must_use = "the checkpoint's scope ends, and its mark is recorded, when this guard drops; bind it with `let _save = ...`"]
pub struct CheckpointScope {
    scope: Option<StateScope>,
    tracker: Tracker,
    kind: Checkpoint,
    step: u64,
}

impl CheckpointScope {
    /// The step this save or restore is of.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Ends the scope without recording the mark: the save or restore failed. Its time
    /// stays counted under its operation.
    pub fn discard(mut self) {
        // `Drop` then finds no scope and records nothing.
        drop(self.scope.take());
    }
}

impl Drop for CheckpointScope {
    fn drop(&mut self) {
        let Some(scope) = self.scope.take() else {
            return; // discarded
        };
        // The scope ends first: the gpu time read for a save is the time at its end.
        drop(scope);
        if std::thread::panicking() {
            return;
        }
        match self.kind {
            Checkpoint::Save => self.tracker.checkpoint_saved(self.step),
            Checkpoint::Restore => self.tracker.checkpoint_restored(self.step),
        }
    }
}

impl Tracker {
    /// Records `step` as the last training step this process completed: the gauge
    /// `higgsmeter_job_step`. One atomic store: no lock, no allocation; call it after
    /// every step. Steps above [`MAX_STEP`] are exported as `MAX_STEP`.
    #[inline]
    pub fn record_step(&self, step: u64) {
        self.marks().step.set(step.min(MAX_STEP));
    }

    /// A checkpoint save of `step`: `io` with operation [`CHECKPOINT_SAVE_OPERATION`]
    /// (the `checkpoint_save` badput) until the guard drops. When it drops (the save
    /// finished), [`checkpoint_saved`](Tracker::checkpoint_saved) records
    /// `higgsmeter_job_checkpoint_step = step` and
    /// `higgsmeter_job_checkpoint_productive_seconds` = this tracker's productive `gpu`
    /// seconds at that moment (all of its `gpu` time but custom badput's, `badput.*`). A failed save records nothing: a panic inside it, or
    /// [`CheckpointScope::discard`].
    ///
    /// ```
    /// use higgsmeter::{ActivityLayer, AppState, ManualClock, Tracker};
    /// use std::time::Duration;
    /// use tracing_subscriber::layer::SubscriberExt;
    ///
    /// let clock = ManualClock::new();
    /// let tracker = Tracker::with_clock(clock.clone());
    /// // Scopes are spans: `init()` installs the layer that accounts them.
    /// let layer = ActivityLayer::new(tracker.clone());
    /// let _subscriber =
    ///     tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    /// tracker.set_state(AppState::Gpu, "train_step");
    /// clock.advance(Duration::from_secs(30));
    /// {
    ///     let _save = tracker.checkpoint_save(100);
    ///     clock.advance(Duration::from_secs(4)); // writing the checkpoint: io
    /// }
    /// let marks = tracker.job_marks();
    /// assert_eq!(marks.checkpoint_step, Some(100));
    /// assert_eq!(marks.checkpoint_productive, Some(Duration::from_secs(30)));
    /// ```
    pub fn checkpoint_save(&self, step: u64) -> CheckpointScope {
        self.checkpoint_scope(Checkpoint::Save, step)
    }

    /// A checkpoint restore of `step`: `io` with operation
    /// [`CHECKPOINT_RESTORE_OPERATION`] (the `checkpoint_restore` badput) until the
    /// guard drops. The mark `higgsmeter_job_restored_step = step` is recorded when it
    /// drops, once the restore finished ([`checkpoint_restored`](Tracker::checkpoint_restored)),
    /// not when it opens: a restore that fails (a panic, or
    /// [`CheckpointScope::discard`]) leaves the mark as it was.
    pub fn checkpoint_restore(&self, step: u64) -> CheckpointScope {
        self.checkpoint_scope(Checkpoint::Restore, step)
    }

    fn checkpoint_scope(&self, kind: Checkpoint, step: u64) -> CheckpointScope {
        let operation = match kind {
            Checkpoint::Save => CHECKPOINT_SAVE_OPERATION,
            Checkpoint::Restore => CHECKPOINT_RESTORE_OPERATION,
        };
        CheckpointScope {
            scope: Some(self.scope(AppState::Io, operation)),
            tracker: self.clone(),
            kind,
            step,
        }
    }

    /// Records a checkpoint saved now, without a scope (the save's time is yours to
    /// account, e.g. an `async` save instrumented with
    /// `tracker.span(AppState::Io, CHECKPOINT_SAVE_OPERATION)`): the step it covers
    /// and this tracker's productive `gpu` time so far (but custom badput's). Takes the tracker's lock briefly; never
    /// blocks on I/O.
    pub fn checkpoint_saved(&self, step: u64) {
        let gpu = self.productive_gpu_nanos();
        let marks = self.marks();
        let step = step.min(MAX_STEP);
        marks.checkpoint_gpu_nanos.set(gpu);
        marks.checkpoint_step.set(step);
        let mut recent = marks.recent.lock().unwrap_or_else(|e| e.into_inner());
        // Room for all of them at the first save: later saves never allocate.
        let room = crate::tracker::RECENT_CHECKPOINTS;
        if recent.capacity() < room {
            let held = recent.len();
            recent.reserve_exact(room - held);
        }
        recent.retain(|(s, _)| *s != step);
        if recent.len() >= crate::tracker::RECENT_CHECKPOINTS {
            recent.pop_front();
        }
        recent.push_back((step, gpu));
    }

    /// Records a checkpoint of `step` restored, without a scope (see
    /// [`checkpoint_saved`](Tracker::checkpoint_saved)).
    #[inline]
    pub fn checkpoint_restored(&self, step: u64) {
        self.marks().restored_step.set(step.min(MAX_STEP));
    }

    /// Custom badput in the `cpu` state: a scope whose operation is `badput.<cause>`
    /// (e.g. `badput.evaluation`), which the collector counts as the `custom` badput
    /// cause, until the guard drops. A `cause` that already starts with
    /// [`CUSTOM_BADPUT_PREFIX`] is taken as the whole operation. Use
    /// [`badput_in`](Tracker::badput_in) for another state (an evaluation on the GPU is
    /// `badput_in(AppState::Gpu, "evaluation")`: badput, not goodput).
    pub fn badput(&self, cause: &str) -> StateScope {
        self.badput_in(AppState::Cpu, cause)
    }

    /// Custom badput in `state`: see [`badput`](Tracker::badput).
    pub fn badput_in(&self, state: AppState, cause: &str) -> StateScope {
        if !self.is_enabled() {
            return self.scope(state, "");
        }
        self.scope(state, &badput_operation(cause))
    }

    /// This tracker's progress marks now.
    pub fn job_marks(&self) -> Marks {
        let marks = self.marks();
        Marks {
            step: marks.step.get(),
            checkpoint_step: marks.checkpoint_step.get(),
            checkpoint_productive: marks.checkpoint_gpu_nanos.get().map(Duration::from_nanos),
            restored_step: marks.restored_step.get(),
        }
    }
}

/// The operation of custom badput for `cause`: `badput.<cause>`, unless `cause` starts
/// with the prefix already.
pub fn badput_operation(cause: &str) -> String {
    if cause.starts_with(CUSTOM_BADPUT_PREFIX) {
        cause.to_owned()
    } else {
        let mut operation = String::with_capacity(CUSTOM_BADPUT_PREFIX.len() + cause.len());
        operation.push_str(CUSTOM_BADPUT_PREFIX);
        operation.push_str(cause);
        operation
    }
}
