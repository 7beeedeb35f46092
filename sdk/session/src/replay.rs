//! Offline recomputation: apply a file of samples, in order, to fresh counters.

use std::io::BufRead;

use crate::counters::{Sample, SessionCounters};
use crate::error::Error;
use crate::iso::Timestamp;

/// Applies every sample in `samples` (JSON Lines: one [`Sample`] per line, blank lines
/// skipped) to the counters of a session that started at `session_started_at`, and
/// returns them.
///
/// # Errors
///
/// [`Error::BadSample`] with the 1-based line number of the first line that is not a
/// sample (invalid JSON, a missing or misspelled field, a wrong type, a timestamp that is
/// not ISO 8601); [`Error::Read`] when reading fails. Nothing is returned then: a replay
/// is all or nothing.
pub fn replay(
    session_started_at: Timestamp,
    samples: impl BufRead,
) -> Result<SessionCounters, Error> {
    let mut counters = SessionCounters::new(session_started_at);
    for (index, line) in samples.lines().enumerate() {
        let line = line.map_err(Error::Read)?;
        if line.trim().is_empty() {
            continue;
        }
        let sample: Sample = serde_json::from_str(&line).map_err(|e| Error::BadSample {
            line: index + 1,
            message: e.to_string(),
        })?;
        counters.apply(&sample);
    }
    Ok(counters)
}

/// Parses an ISO 8601 timestamp as `replay` and the JSON fields take it (an offset or
/// `Z`; none means UTC; fractions finer than a microsecond are truncated).
pub fn parse_timestamp(text: &str) -> Option<Timestamp> {
    crate::iso::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_names_its_number() {
        let start = parse_timestamp("2025-03-01T09:00:00Z").unwrap();
        let good = r#"{"ts":"2025-03-01T09:00:02Z","sample_interval_seconds":2,"active_window_bucket":null,"gpu_util_pct":0,"vram_mb":0,"processes_seen":[],"max_labeled_frames":null,"training_epochs_completed":null,"training_final_loss":null}"#;
        let text = format!("{good}\n\n{good}\n{{\"ts\": 3}}\n");
        match replay(start, text.as_bytes()) {
            Err(Error::BadSample { line, .. }) => assert_eq!(line, 4),
            other => panic!("{other:?}"),
        }
        let counters = replay(start, format!("{good}\n{good}").as_bytes()).unwrap();
        assert_eq!(counters.sample_count, 2);
        assert_eq!(counters.seconds_in_other, 4.0);
    }
}
