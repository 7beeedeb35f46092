//! Training progress: an API for the application, and a follower of a training log.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Training progress at one tick; `None` where nothing was reported.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TrainingReading {
    /// Labeled frames (the seed's `max_labeled_frames`).
    pub labeled_frames: Option<i64>,
    /// Epochs completed (the seed's `training_epochs_completed`).
    pub epochs_completed: Option<i64>,
    /// The latest loss (the seed's `training_final_loss`).
    pub loss: Option<f64>,
}

/// Reads training progress once per tick.
pub trait TrainingSampler: Send {
    /// The progress now.
    fn read(&mut self) -> TrainingReading;
}

/// No value recorded (for the two counts).
const UNSET_COUNT: i64 = i64::MIN;
/// No loss recorded: a NaN bit pattern `record_loss` never stores (it drops NaN).
const UNSET_LOSS: u64 = u64::MAX;

#[derive(Debug)]
struct Progress {
    labeled_frames: AtomicI64,
    epochs_completed: AtomicI64,
    loss: AtomicU64,
}

/// The application's side of training progress: call the `record_*` methods from any
/// thread, as often as you like. Each is one atomic operation, never blocks and never
/// allocates; the agent reads the values at its next tick.
///
/// Cloning is cheap; clones share the values. The counts keep their maximum (a lower
/// count recorded later is ignored, as the counters would ignore it); the loss keeps the
/// last finite value.
///
/// ```
/// use higgsmeter_session::{TrainingProgress, TrainingSampler};
///
/// let progress = TrainingProgress::new();
/// progress.record_labeled_frames(120);
/// progress.record_epochs_completed(3);
/// progress.record_loss(0.042);
/// let mut sampler = progress.clone();
/// assert_eq!(sampler.read().epochs_completed, Some(3));
/// ```
#[derive(Debug, Clone)]
pub struct TrainingProgress {
    inner: Arc<Progress>,
}

impl Default for TrainingProgress {
    fn default() -> Self {
        TrainingProgress::new()
    }
}

impl TrainingProgress {
    /// Nothing recorded yet.
    pub fn new() -> Self {
        TrainingProgress {
            inner: Arc::new(Progress {
                labeled_frames: AtomicI64::new(UNSET_COUNT),
                epochs_completed: AtomicI64::new(UNSET_COUNT),
                loss: AtomicU64::new(UNSET_LOSS),
            }),
        }
    }

    /// Frames labeled so far in the session.
    pub fn record_labeled_frames(&self, frames: u64) {
        let frames = i64::try_from(frames).unwrap_or(i64::MAX);
        self.inner
            .labeled_frames
            .fetch_max(frames, Ordering::Relaxed);
    }

    /// Training epochs completed so far.
    pub fn record_epochs_completed(&self, epochs: u64) {
        let epochs = i64::try_from(epochs).unwrap_or(i64::MAX);
        self.inner
            .epochs_completed
            .fetch_max(epochs, Ordering::Relaxed);
    }

    /// The latest training loss; NaN is ignored.
    pub fn record_loss(&self, loss: f64) {
        if !loss.is_nan() {
            self.inner.loss.store(loss.to_bits(), Ordering::Relaxed);
        }
    }

    /// What has been recorded.
    pub fn reading(&self) -> TrainingReading {
        let count = |v: &AtomicI64| Some(v.load(Ordering::Relaxed)).filter(|v| *v != UNSET_COUNT);
        let loss = self.inner.loss.load(Ordering::Relaxed);
        TrainingReading {
            labeled_frames: count(&self.inner.labeled_frames),
            epochs_completed: count(&self.inner.epochs_completed),
            loss: (loss != UNSET_LOSS).then(|| f64::from_bits(loss)),
        }
    }
}

impl TrainingSampler for TrainingProgress {
    fn read(&mut self) -> TrainingReading {
        self.reading()
    }
}

/// The most a follower reads from its file per tick, so a huge file cannot stall the
/// tick; the rest is read at the next ticks.
const MAX_READ_PER_TICK: u64 = 4 * 1024 * 1024;

/// Follows a CSV training log as training appends to it, e.g. SLEAP's
/// `training_log.csv` (Keras' `CSVLogger`).
///
/// # Format
///
/// Comma-separated, first line a header naming the columns, then one row per finished
/// epoch:
///
/// ```text
/// epoch,loss,val_loss,lr
/// 0,0.0123,0.0150,0.0001
/// 1,0.0098,0.0121,0.0001
/// ```
///
/// Two columns are read, found by name in the header: the epoch (default `epoch`) and
/// the loss (default `loss`); others are ignored, and so are surrounding spaces and
/// double quotes. The epoch column is 0-based, as Keras writes it, so a row with
/// `epoch` = e means e + 1 epochs completed (set [`with_epoch_base`](Self::with_epoch_base)
/// to 1 for a log that counts from 1). The loss is the last row's, a `nan` or empty cell
/// ignored.
///
/// The file may not exist yet: it is read once it appears. Only complete lines (ending
/// in a newline) are read. A file that shrinks or is replaced (a new training run) is
/// read again from its header; the maxima already in the counters stay. A row whose
/// cells do not parse is skipped (logged once per file).
#[derive(Debug)]
pub struct TrainingLogFollower {
    path: PathBuf,
    epoch_column: String,
    loss_column: String,
    epoch_base: i64,
    file: Option<FollowedFile>,
    reading: TrainingReading,
    warned_open: bool,
}

#[derive(Debug)]
struct FollowedFile {
    file: File,
    identity: (u64, u64),
    offset: u64,
    /// Bytes of an incomplete last line.
    partial: Vec<u8>,
    /// Positions of the epoch and loss columns, once the header is read.
    columns: Option<(Option<usize>, Option<usize>)>,
    warned_row: bool,
}

impl TrainingLogFollower {
    /// Follows the CSV log at `path`, with the `epoch` and `loss` columns, epochs from 0.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TrainingLogFollower {
            path: path.into(),
            epoch_column: "epoch".to_owned(),
            loss_column: "loss".to_owned(),
            epoch_base: 0,
            file: None,
            reading: TrainingReading::default(),
            warned_open: false,
        }
    }

    /// The column holding the epoch (default `epoch`).
    pub fn with_epoch_column(mut self, name: impl Into<String>) -> Self {
        self.epoch_column = name.into();
        self
    }

    /// The column holding the loss (default `loss`; e.g. `val_loss`).
    pub fn with_loss_column(mut self, name: impl Into<String>) -> Self {
        self.loss_column = name.into();
        self
    }

    /// The epoch number of the first epoch in the log: 0 (Keras, the default) or 1.
    pub fn with_epoch_base(mut self, base: i64) -> Self {
        self.epoch_base = base;
        self
    }

    /// The followed file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open(&mut self) -> Option<FollowedFile> {
        match File::open(&self.path).and_then(|file| {
            let identity = identity(&file.metadata()?);
            Ok(FollowedFile {
                file,
                identity,
                offset: 0,
                partial: Vec::new(),
                columns: None,
                warned_row: false,
            })
        }) {
            Ok(followed) => {
                self.warned_open = false;
                Some(followed)
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound && !self.warned_open {
                    self.warned_open = true;
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot open the training log (logged once)");
                }
                None
            }
        }
    }

    /// Reads what was appended since the last call.
    fn poll(&mut self) {
        // A file replaced (another inode at the path) or truncated starts over.
        let current = std::fs::metadata(&self.path).ok();
        let restart = match (&self.file, &current) {
            (Some(f), Some(meta)) => f.identity != identity(meta) || meta.len() < f.offset,
            (Some(_), None) => false, // removed: keep what was read, wait for a new one
            (None, _) => true,
        };
        if restart && current.is_some() {
            self.file = self.open();
        }
        let Some(mut followed) = self.file.take() else {
            return;
        };
        let mut chunk = Vec::new();
        let read = followed
            .file
            .seek(SeekFrom::Start(followed.offset))
            .and_then(|_| {
                (&mut followed.file)
                    .take(MAX_READ_PER_TICK)
                    .read_to_end(&mut chunk)
            });
        if let Err(e) = read {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot read the training log; reopening it at the next tick");
            return;
        }
        followed.offset += chunk.len() as u64;
        followed.partial.extend_from_slice(&chunk);
        let Some(last_newline) = followed.partial.iter().rposition(|b| *b == b'\n') else {
            self.file = Some(followed);
            return;
        };
        let complete: Vec<u8> = followed.partial.drain(..=last_newline).collect();
        for line in String::from_utf8_lossy(&complete).lines() {
            self.line(&mut followed, line);
        }
        self.file = Some(followed);
    }

    fn line(&mut self, followed: &mut FollowedFile, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let cells: Vec<&str> = line
            .split(',')
            .map(|c| c.trim().trim_matches('"').trim())
            .collect();
        let Some((epoch_at, loss_at)) = followed.columns else {
            let find = |name: &str| cells.iter().position(|c| *c == name);
            let columns = (find(&self.epoch_column), find(&self.loss_column));
            if columns == (None, None) {
                tracing::warn!(
                    path = %self.path.display(),
                    header = line,
                    epoch_column = %self.epoch_column,
                    loss_column = %self.loss_column,
                    "the training log's header names neither column; nothing will be read from it"
                );
            }
            followed.columns = Some(columns);
            return;
        };
        let cell = |at: Option<usize>| at.and_then(|i| cells.get(i)).filter(|c| !c.is_empty());
        let mut bad = false;
        if let Some(text) = cell(epoch_at) {
            // Integers, also when written as floats ("3.0").
            match text.parse::<i64>().ok().or_else(|| {
                text.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && f.fract() == 0.0)
                    .map(|f| f as i64)
            }) {
                Some(epoch) => {
                    let completed = epoch.saturating_sub(self.epoch_base).saturating_add(1);
                    self.reading.epochs_completed = Some(
                        self.reading
                            .epochs_completed
                            .map_or(completed, |e| e.max(completed)),
                    );
                }
                None => bad = true,
            }
        }
        if let Some(text) = cell(loss_at) {
            match text.parse::<f64>() {
                Ok(loss) if loss.is_nan() => {}
                Ok(loss) => self.reading.loss = Some(loss),
                Err(_) => bad = true,
            }
        }
        if bad && !followed.warned_row {
            followed.warned_row = true;
            tracing::warn!(path = %self.path.display(), row = line, "a training log row does not parse; skipping such rows (logged once per file)");
        }
    }
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(_meta: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl TrainingSampler for TrainingLogFollower {
    fn read(&mut self) -> TrainingReading {
        self.poll();
        self.reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_keeps_maxima_and_the_last_finite_loss() {
        let p = TrainingProgress::new();
        assert_eq!(p.reading(), TrainingReading::default());
        p.record_epochs_completed(5);
        p.record_epochs_completed(2);
        p.record_labeled_frames(u64::MAX);
        p.record_loss(0.5);
        p.record_loss(f64::NAN);
        p.record_loss(0.25);
        let r = p.reading();
        assert_eq!(r.epochs_completed, Some(5));
        assert_eq!(r.labeled_frames, Some(i64::MAX));
        assert_eq!(r.loss, Some(0.25));
    }
}
