//! The counters against the seed's own arithmetic: a Python transcription of
//! `apply_sample` (tests/fixtures/aggregator.py) run on the same sample streams,
//! compared value for value.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::Write;
use std::process::Command;

use crate::support::{assert_same_counters, fixture, python_counters};
use chrono::{DateTime, Duration as ChronoDuration, FixedOffset};
use serde_json::{Value, json};

/// xorshift64*: a deterministic stream, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const OFFSETS: [i32; 4] = [0, 2 * 3600, -5 * 3600, 5 * 3600 + 1800];

fn iso(ts: DateTime<FixedOffset>, rng: &mut Rng) -> String {
    let offset = FixedOffset::east_opt(*rng.pick(&OFFSETS)).unwrap();
    let ts = ts.with_timezone(&offset);
    if offset.local_minus_utc() == 0 && rng.chance(50) {
        ts.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string()
    } else {
        ts.format("%Y-%m-%dT%H:%M:%S%.f%:z").to_string()
    }
}

/// A number as either a JSON integer or a float, as the seed's producers may send.
fn number(rng: &mut Rng, max: u64) -> Value {
    if rng.chance(50) {
        json!(rng.below(max + 1))
    } else {
        json!(rng.unit() * max as f64)
    }
}

/// One random stream with every edge: unknown and `None` buckets, utilisation exactly
/// 5 (int and float) and just around it, decreasing epochs and frames, `None`
/// progress, processes appearing late, irregular timestamps (late, early, before the
/// start, sub-second, in other offsets).
fn stream(rng: &mut Rng, started: DateTime<FixedOffset>) -> Vec<Value> {
    let n = rng.below(80) as usize;
    let mut ts = started;
    let mut epochs: i64 = 0;
    let mut frames: i64 = 0;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let step_us = match rng.below(6) {
            0 => 2_000_000,
            1 => rng.below(10_000_000) as i64,
            2 => -(rng.below(3_000_000) as i64), // the clock went back
            3 => 1_999_999,
            4 => rng.below(1_000_000) as i64,
            _ => 2_000_001,
        };
        ts += ChronoDuration::microseconds(step_us);
        if i == 0 && rng.chance(20) {
            ts = started - ChronoDuration::microseconds(rng.below(5_000_000) as i64);
        }
        let interval = match rng.below(5) {
            0 => json!(2),
            1 => json!(2.0),
            2 => json!(rng.unit() * 4.0),
            3 => json!(0.1),
            _ => json!(1.9999999),
        };
        let bucket = match rng.below(9) {
            0 => Value::Null,
            1 => json!("Subject"),
            2 => json!("unknown"),
            3 => json!(""),
            4 => json!("other"),
            5 | 6 => json!("subject"),
            7 => json!("terminal"),
            _ => json!("browser"),
        };
        let util = match rng.below(7) {
            0 => json!(5),
            1 => json!(5.0),
            2 => json!(5.000001),
            3 => json!(4.999999),
            4 => json!(0),
            5 => number(rng, 100),
            _ => json!(100),
        };
        let vram = number(rng, 81_920);
        // Late: the processes start appearing after the first third of the stream.
        let mut processes: Vec<&str> = Vec::new();
        if i > n / 3 {
            for name in [
                "sleap-label",
                "sleap-train",
                "sleap-track",
                "sleap",
                "python3",
            ] {
                if rng.chance(25) {
                    processes.push(name);
                }
            }
        }
        let frames_v = if rng.chance(40) {
            Value::Null
        } else {
            frames += rng.below(40) as i64 - 12; // sometimes decreasing, even negative
            json!(frames)
        };
        let epochs_v = if rng.chance(40) {
            Value::Null
        } else {
            epochs += rng.below(4) as i64 - 1; // sometimes decreasing
            json!(epochs)
        };
        let loss = match rng.below(4) {
            0 | 1 => Value::Null,
            2 => json!(rng.unit()),
            _ => json!(0.0),
        };
        out.push(json!({
            "ts": iso(ts, rng),
            "sample_interval_seconds": interval,
            "active_window_bucket": bucket,
            "gpu_util_pct": util,
            "vram_mb": vram,
            "processes_seen": processes,
            "max_labeled_frames": frames_v,
            "training_epochs_completed": epochs_v,
            "training_final_loss": loss,
        }));
    }
    out
}

fn write_jsonl(path: &std::path::Path, samples: &[Value]) {
    let mut f = std::fs::File::create(path).unwrap();
    for s in samples {
        writeln!(f, "{s}").unwrap();
    }
}

#[test]
fn random_streams_match_the_seeds_python_value_for_value() {
    let dir = std::env::temp_dir().join(format!("hm-session-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0x5EED_0004_C052_F311);
    let mut compared_fields_with_values = 0;
    for case in 0..60 {
        let started = DateTime::parse_from_rfc3339("2025-03-01T09:00:00.250000+00:00").unwrap()
            + ChronoDuration::seconds(rng.below(86_400) as i64);
        let started_text = iso(started, &mut rng);
        let samples = stream(&mut rng, started);
        let path = dir.join(format!("case-{case}.jsonl"));
        write_jsonl(&path, &samples);

        let python = python_counters(&started_text, &path);
        let rust = higgsmeter_session::replay(
            higgsmeter_session::parse_timestamp(&started_text).unwrap(),
            std::io::BufReader::new(std::fs::File::open(&path).unwrap()),
        )
        .unwrap();
        let rust: Value = serde_json::from_str(&rust.to_json()).unwrap();
        assert_same_counters(&rust, &python, &format!("case {case} ({})", path.display()));
        compared_fields_with_values += python
            .as_object()
            .unwrap()
            .values()
            .filter(|v| !v.is_null() && v.as_f64() != Some(0.0))
            .count();
    }
    // The streams exercise the counters (not 60 empty sessions).
    assert!(
        compared_fields_with_values > 400,
        "{compared_fields_with_values}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The checked-in fixture, whose expected counters were computed by running the
/// Python transcription (`python3 tests/fixtures/aggregator.py
/// 2025-03-01T09:00:00+00:00 tests/fixtures/samples.jsonl > tests/fixtures/expected.json`),
/// through the binary's `replay`; and the Python run again, in case either changed.
#[test]
fn replay_prints_the_fixtures_expected_counters() {
    let started = "2025-03-01T09:00:00+00:00";
    let output = Command::new(env!("CARGO_BIN_EXE_higgsmeter-session"))
        .args(["replay", "--session-started-at", started, "--samples"])
        .arg(fixture("samples.jsonl"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "one JSON object on one line: {stdout}"
    );
    let rust: Value = serde_json::from_str(&stdout).unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    assert_same_counters(&rust, &expected, "fixture vs expected.json");
    assert_same_counters(
        &rust,
        &python_counters(started, &fixture("samples.jsonl")),
        "fixture vs python",
    );
}

#[test]
fn a_malformed_line_fails_with_its_number_and_prints_nothing() {
    let dir = std::env::temp_dir().join(format!("hm-session-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read_to_string(fixture("samples.jsonl")).unwrap();
    let mut lines: Vec<&str> = good.lines().take(3).collect();
    lines.push(r#"{"ts": "2025-03-01T09:00:08+00:00", "sample_interval_seconds": "two"}"#);
    lines.extend(good.lines().skip(3));
    let path = dir.join("bad.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_higgsmeter-session"))
        .args([
            "replay",
            "--session-started-at",
            "2025-03-01T09:00:00Z",
            "--samples",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "{:?}", output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 4"), "{stderr}");

    // A start that is not a timestamp is refused too.
    let output = Command::new(env!("CARGO_BIN_EXE_higgsmeter-session"))
        .args(["replay", "--session-started-at", "Monday", "--samples"])
        .arg(fixture("samples.jsonl"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
