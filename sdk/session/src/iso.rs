//! ISO 8601 timestamps as the lab agent's Python writes and reads them.
//!
//! Python's `datetime` has microsecond resolution; so does every timestamp here: a
//! finer fraction is truncated when parsed, so time differences are the seed's.

use chrono::{DateTime, FixedOffset, NaiveDateTime, Timelike, Utc};

/// A timestamp: a date, a time of day to the microsecond and an offset from UTC.
pub type Timestamp = DateTime<FixedOffset>;

/// The current time, in UTC, to the microsecond.
pub(crate) fn now() -> Timestamp {
    truncate(DateTime::<Utc>::from(std::time::SystemTime::now()).fixed_offset())
}

/// Parses RFC 3339 / ISO 8601 (`2025-03-01T09:30:00+00:00`, `...Z`, `...T09:30:00.25+01:00`);
/// a time without an offset is taken as UTC. `None` when `text` is none of these.
pub(crate) fn parse(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    let parsed = DateTime::parse_from_rfc3339(text).ok().or_else(|| {
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
            .map(|naive| naive.and_utc().fixed_offset())
    })?;
    Some(truncate(parsed))
}

/// Python's `datetime.isoformat()`: `2025-03-01T09:30:00+00:00`, with `.ffffff` only when
/// the microseconds are not 0.
pub(crate) fn format(ts: &Timestamp) -> String {
    let micros = ts.nanosecond() / 1_000;
    if micros == 0 {
        ts.format("%Y-%m-%dT%H:%M:%S%:z").to_string()
    } else {
        format!(
            "{}.{micros:06}{}",
            ts.format("%Y-%m-%dT%H:%M:%S"),
            ts.format("%:z")
        )
    }
}

/// Whole seconds from `start` to `ts`, as the seed computes them:
/// `int((ts - start).total_seconds())`, truncated toward zero.
pub(crate) fn whole_seconds_between(start: &Timestamp, ts: &Timestamp) -> i64 {
    let micros = (*ts - *start).num_microseconds().unwrap_or(i64::MAX);
    micros / 1_000_000
}

fn truncate(ts: Timestamp) -> Timestamp {
    let nanos = ts.nanosecond();
    // Leap-second nanoseconds (>= 1e9) keep their second; the rest drop below 1 µs.
    ts.with_nanosecond(nanos - nanos % 1_000).unwrap_or(ts)
}

/// Serde adapter for [`Timestamp`] fields in the seed's JSON (ISO 8601 strings).
pub(crate) mod serde_iso {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use super::Timestamp;

    pub(crate) fn serialize<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(ts))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).ok_or_else(|| {
            D::Error::custom(format!(
                "`{text}` is not an ISO 8601 timestamp (e.g. 2025-03-01T09:30:00+00:00)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_python_isoformat() {
        let ts = parse("2025-03-01T09:30:00Z").unwrap();
        assert_eq!(format(&ts), "2025-03-01T09:30:00+00:00");
        let ts = parse("2025-03-01T09:30:00.250+02:00").unwrap();
        assert_eq!(format(&ts), "2025-03-01T09:30:00.250000+02:00");
        // Nanoseconds are truncated to Python's microseconds.
        let ts = parse("2025-03-01T09:30:00.000001999Z").unwrap();
        assert_eq!(format(&ts), "2025-03-01T09:30:00.000001+00:00");
        // No offset: UTC.
        let ts = parse("2025-03-01 09:30:00").unwrap();
        assert_eq!(format(&ts), "2025-03-01T09:30:00+00:00");
        assert_eq!(parse("yesterday"), None);
    }

    #[test]
    fn whole_seconds_truncate_toward_zero_like_python_int() {
        let start = parse("2025-03-01T09:30:00Z").unwrap();
        let at = |s: &str| parse(s).unwrap();
        assert_eq!(
            whole_seconds_between(&start, &at("2025-03-01T09:30:01.999999Z")),
            1
        );
        assert_eq!(
            whole_seconds_between(&start, &at("2025-03-01T10:30:00+01:00")),
            0
        );
        assert_eq!(
            whole_seconds_between(&start, &at("2025-03-01T09:29:58.5Z")),
            -1
        );
        assert_eq!(
            whole_seconds_between(&start, &at("2025-03-01T09:29:59.5Z")),
            0
        );
    }
}
