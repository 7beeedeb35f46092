//! The lab agent's aggregator: one [`Sample`] per tick, rolling [`SessionCounters`].
//!
//! A transcription of the seed's `apply_sample`, operation for operation, so the
//! counters are the seed's to the last bit of every float: the same additions in the
//! same order, the same strict comparisons, the same `None` rules. Field names are the
//! seed's; they are also the JSON keys of the allocator push and of `replay`.

use serde::{Deserialize, Serialize};

use crate::iso::{Timestamp, serde_iso, whole_seconds_between};

/// Utilisation, in percent, a sample must exceed (strictly) to count as GPU-active:
/// the seed's `GPU_ACTIVE_UTIL_THRESHOLD`.
pub const GPU_ACTIVE_UTIL_THRESHOLD: f64 = 5.0;

/// The window buckets, the seed's `WINDOW_BUCKETS`; any other bucket counts as `other`.
pub const WINDOW_BUCKETS: [&str; 4] = ["subject", "terminal", "browser", "other"];

/// The counter the `subject` bucket adds to, the seed's `SUBJECT_FIELD`; every other
/// bucket adds to `seconds_in_{bucket}` (see [`SessionCounters::window_field`]).
pub const SUBJECT_FIELD: &str = "seconds_in_subject_software";

/// The process names whose first sighting the counters time (`seconds_to_first_*`).
pub const SLEAP_PROCESSES: [&str; 3] = ["sleap-label", "sleap-train", "sleap-track"];

/// One tick of input from the four samplers, with the seed's field names.
///
/// In JSON (a `replay` line): `ts` in ISO 8601, `null` for `None`; see the crate docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// When the sample was taken.
    #[serde(with = "serde_iso")]
    pub ts: Timestamp,
    /// Seconds this sample stands for (added to its window bucket, and to GPU-active
    /// time when the GPU was active).
    pub sample_interval_seconds: f64,
    /// `subject`, `terminal`, `browser` or `other`; anything else, or `None`, counts as
    /// `other`.
    pub active_window_bucket: Option<String>,
    /// GPU utilisation, percent.
    pub gpu_util_pct: f64,
    /// GPU memory used, MiB.
    pub vram_mb: f64,
    /// Names of the watched processes running at the sample.
    pub processes_seen: Vec<String>,
    /// Labeled frames reported so far, if known.
    pub max_labeled_frames: Option<i64>,
    /// Training epochs completed, if known.
    pub training_epochs_completed: Option<i64>,
    /// The latest training loss, if known.
    pub training_final_loss: Option<f64>,
}

impl Sample {
    /// The bucket this sample's interval counts in: its `active_window_bucket` when that
    /// is one of [`WINDOW_BUCKETS`], else `other` (as the seed's `apply_sample`).
    pub fn window_bucket(&self) -> &'static str {
        self.active_window_bucket
            .as_deref()
            .and_then(|b| WINDOW_BUCKETS.into_iter().find(|known| *known == b))
            .unwrap_or("other")
    }

    /// Whether this sample counts as GPU-active: utilisation strictly above
    /// [`GPU_ACTIVE_UTIL_THRESHOLD`] (`NaN` is not).
    pub fn gpu_active(&self) -> bool {
        self.gpu_util_pct > GPU_ACTIVE_UTIL_THRESHOLD
    }
}

/// The rolling session counters, with the seed's field names, in the seed's order.
///
/// Serialised (the allocator push, `replay`'s output) as one JSON object with these
/// keys, `session_started_at` in ISO 8601 as Python's `isoformat()` writes it, `null`
/// for `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionCounters {
    /// When the session started.
    #[serde(with = "serde_iso")]
    pub session_started_at: Timestamp,
    /// Samples applied.
    pub sample_count: u64,
    /// Seconds with the active window in the `subject` bucket.
    pub seconds_in_subject_software: f64,
    /// Seconds with the active window in the `terminal` bucket.
    pub seconds_in_terminal: f64,
    /// Seconds with the active window in the `browser` bucket.
    pub seconds_in_browser: f64,
    /// Seconds with the active window in no other bucket (or unknown).
    pub seconds_in_other: f64,
    /// Seconds with GPU utilisation above [`GPU_ACTIVE_UTIL_THRESHOLD`].
    pub gpu_active_seconds: f64,
    /// Highest GPU utilisation sampled, percent.
    pub gpu_util_peak: f64,
    /// Highest GPU memory used, MiB.
    pub vram_used_peak_mb: f64,
    /// Whole seconds from the start to the first sample that saw `sleap-label`.
    pub seconds_to_first_sleap_label: Option<i64>,
    /// Whole seconds from the start to the first sample that saw `sleap-train`.
    pub seconds_to_first_sleap_train: Option<i64>,
    /// Whole seconds from the start to the first sample that saw `sleap-track`.
    pub seconds_to_first_sleap_track: Option<i64>,
    /// The most labeled frames reported.
    pub max_labeled_frames: i64,
    /// The most training epochs reported completed.
    pub training_epochs_completed: i64,
    /// The last training loss reported.
    pub training_final_loss: Option<f64>,
}

impl SessionCounters {
    /// Zeroed counters of a session that started at `session_started_at` (the seed's
    /// `new_counters`).
    pub fn new(session_started_at: Timestamp) -> Self {
        SessionCounters {
            session_started_at,
            sample_count: 0,
            seconds_in_subject_software: 0.0,
            seconds_in_terminal: 0.0,
            seconds_in_browser: 0.0,
            seconds_in_other: 0.0,
            gpu_active_seconds: 0.0,
            gpu_util_peak: 0.0,
            vram_used_peak_mb: 0.0,
            seconds_to_first_sleap_label: None,
            seconds_to_first_sleap_train: None,
            seconds_to_first_sleap_track: None,
            max_labeled_frames: 0,
            training_epochs_completed: 0,
            training_final_loss: None,
        }
    }

    /// Applies one sample: the seed's `apply_sample`, line for line.
    pub fn apply(&mut self, s: &Sample) {
        self.sample_count += 1;
        *self.window_seconds_mut(s.window_bucket()) += s.sample_interval_seconds;
        if s.gpu_active() {
            self.gpu_active_seconds += s.sample_interval_seconds;
        }
        if s.gpu_util_pct > self.gpu_util_peak {
            self.gpu_util_peak = s.gpu_util_pct;
        }
        if s.vram_mb > self.vram_used_peak_mb {
            self.vram_used_peak_mb = s.vram_mb;
        }
        let elapsed = whole_seconds_between(&self.session_started_at, &s.ts);
        let seen = |name: &str| s.processes_seen.iter().any(|p| p == name);
        for (name, first) in SLEAP_PROCESSES.into_iter().zip([
            &mut self.seconds_to_first_sleap_label,
            &mut self.seconds_to_first_sleap_train,
            &mut self.seconds_to_first_sleap_track,
        ]) {
            if first.is_none() && seen(name) {
                *first = Some(elapsed);
            }
        }
        if let Some(frames) = s.max_labeled_frames
            && frames > self.max_labeled_frames
        {
            self.max_labeled_frames = frames;
        }
        if let Some(epochs) = s.training_epochs_completed
            && epochs > self.training_epochs_completed
        {
            self.training_epochs_completed = epochs;
        }
        if let Some(loss) = s.training_final_loss {
            self.training_final_loss = Some(loss);
        }
    }

    /// Seconds in each window bucket, in [`WINDOW_BUCKETS`] order.
    pub fn window_seconds(&self) -> [(&'static str, f64); 4] {
        [
            (WINDOW_BUCKETS[0], self.seconds_in_subject_software),
            (WINDOW_BUCKETS[1], self.seconds_in_terminal),
            (WINDOW_BUCKETS[2], self.seconds_in_browser),
            (WINDOW_BUCKETS[3], self.seconds_in_other),
        ]
    }

    /// The time to the first sighting of each of [`SLEAP_PROCESSES`], in that order.
    pub fn first_seen(&self) -> [(&'static str, Option<i64>); 3] {
        [
            (SLEAP_PROCESSES[0], self.seconds_to_first_sleap_label),
            (SLEAP_PROCESSES[1], self.seconds_to_first_sleap_train),
            (SLEAP_PROCESSES[2], self.seconds_to_first_sleap_track),
        ]
    }

    /// The name of the field a window bucket's seconds add to: [`SUBJECT_FIELD`] for
    /// `subject`, `seconds_in_{bucket}` for the others; anything that is not one of
    /// [`WINDOW_BUCKETS`] counts as `other`.
    pub fn window_field(bucket: &str) -> &'static str {
        match bucket {
            "subject" => SUBJECT_FIELD,
            "terminal" => "seconds_in_terminal",
            "browser" => "seconds_in_browser",
            _ => "seconds_in_other",
        }
    }

    /// The counters as the seed's JSON object (one line, no trailing newline).
    pub fn to_json(&self) -> String {
        // Serialising plain fields and finite floats cannot fail; the fallback keeps
        // the signature infallible all the same.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    fn window_seconds_mut(&mut self, bucket: &str) -> &mut f64 {
        match bucket {
            "subject" => &mut self.seconds_in_subject_software,
            "terminal" => &mut self.seconds_in_terminal,
            "browser" => &mut self.seconds_in_browser,
            _ => &mut self.seconds_in_other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iso::parse;

    fn sample(ts: &str, bucket: Option<&str>, util: f64) -> Sample {
        Sample {
            ts: parse(ts).unwrap(),
            sample_interval_seconds: 2.0,
            active_window_bucket: bucket.map(str::to_owned),
            gpu_util_pct: util,
            vram_mb: 0.0,
            processes_seen: Vec::new(),
            max_labeled_frames: None,
            training_epochs_completed: None,
            training_final_loss: None,
        }
    }

    #[test]
    fn the_threshold_is_strict_and_unknown_buckets_count_as_other() {
        let mut c = SessionCounters::new(parse("2025-03-01T09:00:00Z").unwrap());
        c.apply(&sample("2025-03-01T09:00:02Z", Some("subject"), 5.0));
        c.apply(&sample("2025-03-01T09:00:04Z", Some("Subject"), 5.5));
        c.apply(&sample("2025-03-01T09:00:06Z", None, 0.0));
        c.apply(&sample("2025-03-01T09:00:08Z", Some("terminal"), 0.0));
        assert_eq!(c.sample_count, 4);
        assert_eq!(c.seconds_in_subject_software, 2.0);
        assert_eq!(c.seconds_in_other, 4.0);
        assert_eq!(c.seconds_in_terminal, 2.0);
        assert_eq!(c.gpu_active_seconds, 2.0);
        assert_eq!(c.gpu_util_peak, 5.5);
    }

    #[test]
    fn a_sample_names_its_bucket_and_field() {
        let field = |b: Option<&str>| {
            SessionCounters::window_field(sample("2025-03-01T09:00:00Z", b, 0.0).window_bucket())
        };
        assert_eq!(field(Some("subject")), SUBJECT_FIELD);
        assert_eq!(field(Some("browser")), "seconds_in_browser");
        assert_eq!(field(Some("Subject")), "seconds_in_other");
        assert_eq!(field(None), "seconds_in_other");
        assert!(!sample("2025-03-01T09:00:00Z", None, 5.0).gpu_active());
        assert!(!sample("2025-03-01T09:00:00Z", None, f64::NAN).gpu_active());
        assert!(sample("2025-03-01T09:00:00Z", None, 5.000_000_000_000_001).gpu_active());
    }

    #[test]
    fn progress_keeps_maxima_and_the_last_loss_and_ignores_none() {
        let mut c = SessionCounters::new(parse("2025-03-01T09:00:00Z").unwrap());
        let mut s = sample("2025-03-01T09:00:02.9Z", None, 0.0);
        s.processes_seen = vec!["sleap-train".into()];
        s.training_epochs_completed = Some(3);
        s.training_final_loss = Some(0.5);
        c.apply(&s);
        s.ts = parse("2025-03-01T09:00:09Z").unwrap();
        s.processes_seen = vec!["sleap-train".into(), "sleap-track".into()];
        s.training_epochs_completed = Some(2);
        s.training_final_loss = None;
        s.max_labeled_frames = Some(-4);
        c.apply(&s);
        assert_eq!(c.seconds_to_first_sleap_train, Some(2));
        assert_eq!(c.seconds_to_first_sleap_track, Some(9));
        assert_eq!(c.seconds_to_first_sleap_label, None);
        assert_eq!(c.training_epochs_completed, 3);
        assert_eq!(c.training_final_loss, Some(0.5));
        assert_eq!(c.max_labeled_frames, 0);
    }

    #[test]
    fn json_has_the_seed_field_names_in_order() {
        let c = SessionCounters::new(parse("2025-03-01T09:00:00Z").unwrap());
        assert_eq!(
            c.to_json(),
            "{\"session_started_at\":\"2025-03-01T09:00:00+00:00\",\"sample_count\":0,\
             \"seconds_in_subject_software\":0.0,\"seconds_in_terminal\":0.0,\
             \"seconds_in_browser\":0.0,\"seconds_in_other\":0.0,\"gpu_active_seconds\":0.0,\
             \"gpu_util_peak\":0.0,\"vram_used_peak_mb\":0.0,\
             \"seconds_to_first_sleap_label\":null,\"seconds_to_first_sleap_train\":null,\
             \"seconds_to_first_sleap_track\":null,\"max_labeled_frames\":0,\
             \"training_epochs_completed\":0,\"training_final_loss\":null}"
        );
    }
}
