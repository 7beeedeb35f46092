//! Durations written as `200ms`, `5s`, `2m`, `1h` (also `us`, `ns`), as the
//! OpenTelemetry Collector's config writes them: the serde helpers every component's
//! settings use.

use std::time::Duration;

use serde::{Deserialize, Deserializer, de::Error as _};

pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; write e.g. 500ms, 5s, 1m or 1h"))?;
    let secs = match unit.trim() {
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "`{text}` has no known unit; write e.g. 500ms, 5s, 1m or 1h"
            ));
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{text}` is out of range"))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse(&s).map_err(D::Error::custom)
}

pub(crate) mod option {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) => super::parse(&s).map(Some).map_err(D::Error::custom),
        }
    }
}

/// `1s`, `100ms`, `1h`: a duration as the config writes it.
pub(crate) fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        format!("{d:?}")
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `16 MiB`, `512 KiB`, `100 B`.
pub(crate) fn show_bytes(n: usize) -> String {
    const MIB: usize = 1 << 20;
    const KIB: usize = 1 << 10;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} B")
    }
}
