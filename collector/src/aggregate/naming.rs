//! OpenTelemetry → Prometheus names, following the OTel–Prometheus compatibility spec.

use higgsmeter_catalog::Family;

use super::MetricKind;

/// The Prometheus name of an OTLP metric: a catalog family keeps its catalog name;
/// anything else is sanitised and gets its unit suffix and, for counters, `_total`.
pub(crate) fn prometheus_name(
    name: &str,
    unit: &str,
    kind: MetricKind,
    family: Option<&Family>,
) -> String {
    if let Some(family) = family {
        return family.name.to_owned();
    }
    let mut base = sanitize_metric_name(name);
    let had_total = base.ends_with("_total") && kind == MetricKind::Counter;
    if had_total {
        base.truncate(base.len() - "_total".len());
    }
    let suffix = unit_suffix(unit, kind);
    if !suffix.is_empty() && !base.ends_with(&format!("_{suffix}")) && base != suffix {
        base.push('_');
        base.push_str(&suffix);
    }
    if kind == MetricKind::Counter {
        base.push_str("_total");
    }
    base
}

/// Replaces every character outside `[a-zA-Z0-9_:]` with `_`, collapses runs of `_`,
/// and prefixes a leading digit with `_`.
pub(crate) fn sanitize_metric_name(name: &str) -> String {
    sanitize(name, true)
}

/// Like [`sanitize_metric_name`], for label names (no `:` allowed).
pub(crate) fn sanitize_label_name(name: &str) -> String {
    sanitize(name, false)
}

fn sanitize(name: &str, allow_colon: bool) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for (i, c) in name.chars().enumerate() {
        let ok = c.is_ascii_alphanumeric() || c == '_' || (allow_colon && c == ':');
        let c = if ok { c } else { '_' };
        if i == 0 && c.is_ascii_digit() {
            out.push('_');
        }
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// The unit suffix of the spec's table (`s` → `seconds`, `By` → `bytes`, `1` →
/// `ratio` for gauges, `a/b` → `a_per_b`); `{annotations}` are dropped.
pub(crate) fn unit_suffix(unit: &str, kind: MetricKind) -> String {
    let unit = strip_annotations(unit);
    if unit.is_empty() {
        return String::new();
    }
    if unit == "1" {
        return if kind == MetricKind::Gauge {
            "ratio".to_owned()
        } else {
            String::new()
        };
    }
    if let Some((num, den)) = unit.split_once('/') {
        let num = main_unit(num);
        let den = per_unit(den);
        return match (num.is_empty(), den.is_empty()) {
            (false, false) => format!("{num}_per_{den}"),
            (false, true) => num,
            (true, false) => format!("per_{den}"),
            (true, true) => String::new(),
        };
    }
    main_unit(&unit)
}

fn strip_annotations(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut depth = 0usize;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.trim().to_owned()
}

fn main_unit(unit: &str) -> String {
    let known = match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        "1" => "",
        other => return sanitize_unit(other),
    };
    known.to_owned()
}

fn per_unit(unit: &str) -> String {
    let known = match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => return main_unit(other),
    };
    known.to_owned()
}

fn sanitize_unit(unit: &str) -> String {
    let s = sanitize(unit, false);
    s.trim_matches('_').to_owned()
}

/// Escapes a label value for the text exposition (`\`, `"`, newline).
pub(crate) fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Escapes a `# HELP` text (`\`, newline).
pub(crate) fn escape_help(help: &str, out: &mut String) {
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Renders sorted `(name, value)` pairs as `a="x",b="y"` (no braces).
pub(crate) fn render_labels(labels: &[(String, String)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_label_value(v, &mut out);
        out.push('"');
    }
    out
}

/// Sorts labels by name and merges names that collide after sanitising, joining their
/// values with `;` as the spec says.
pub(crate) fn normalize_labels(mut labels: Vec<(String, String)>) -> Vec<(String, String)> {
    labels.sort();
    let mut out: Vec<(String, String)> = Vec::with_capacity(labels.len());
    for (k, v) in labels {
        match out.last_mut() {
            Some((lk, lv)) if *lk == k => {
                lv.push(';');
                lv.push_str(&v);
            }
            _ => out.push((k, v)),
        }
    }
    out
}

/// Formats a sample value the way Prometheus parses it: integers without a fraction,
/// other values as Rust's `{}` prints them (the shortest digits that round-trip, in
/// positional notation, never an exponent), without going through `core::fmt`.
pub(crate) fn format_value(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        if v < 0.0 {
            out.push('-');
        }
        format_u64(v.abs() as u64, out);
    } else {
        format_shortest(v, out);
    }
}

/// A finite `v` as `format!("{v}")` writes it. zmij finds the same shortest
/// round-trip digits as `core::fmt` but may write them with an exponent (`1e-7`,
/// `1.5e+21`); the digits are re-placed positionally here.
fn format_shortest(v: f64, out: &mut String) {
    let mut buf = zmij::Buffer::new();
    let text = buf.format_finite(v);
    let s = text.as_bytes();
    // Most values: `12.34`, `0.001234` (no exponent, a fraction without trailing
    // zeros) are already written as `core::fmt` writes them.
    if let Some(dot) = s.iter().position(|&b| b == b'.') {
        let frac = &s[dot + 1..];
        if frac.last().is_some_and(|&b| b != b'0')
            && frac.iter().all(u8::is_ascii_digit)
            && !is_tie(v, -(frac.len() as i64))
        {
            out.push_str(text);
            return;
        }
    }
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let (mantissa, exp) = match s.iter().position(|&b| b == b'e' || b == b'E') {
        Some(i) => (&s[..i], parse_exp(&s[i + 1..])),
        None => (s, 0),
    };
    // The mantissa's digits without the point, and how many of them precede it.
    let mut digits = [0u8; 32];
    let mut n = 0usize;
    let mut int_len: Option<usize> = None;
    for &b in mantissa {
        if b == b'.' {
            int_len = Some(n);
        } else if n < digits.len() {
            digits[n] = b;
            n += 1;
        }
    }
    let mut point = int_len.unwrap_or(n) as i64 + exp;
    // Drop leading zeros (moving the point) and trailing zeros.
    let mut start = 0;
    while start < n && digits[start] == b'0' {
        start += 1;
        point -= 1;
    }
    while n > start && digits[n - 1] == b'0' {
        n -= 1;
    }
    let digits = &digits[start..n];
    let len = digits.len() as i64;
    if is_tie(v, point - len) {
        // `v` lies exactly halfway between two shortest candidates: zmij rounds the
        // last digit to even, `core::fmt` up. Rare (values like 2^50 + 0.25).
        use std::fmt::Write as _;
        let _ = write!(out, "{v}");
        return;
    }
    if negative {
        out.push('-');
    }
    if digits.is_empty() {
        out.push('0');
        return;
    }
    let push = |out: &mut String, d: &[u8]| {
        for &b in d {
            out.push(char::from(b));
        }
    };
    let zeros = |out: &mut String, k: i64| {
        for _ in 0..k {
            out.push('0');
        }
    };
    if point <= 0 {
        out.push_str("0.");
        zeros(out, -point);
        push(out, digits);
    } else if point >= len {
        push(out, digits);
        zeros(out, point - len);
    } else {
        let (int, frac) = digits.split_at(point as usize);
        push(out, int);
        out.push('.');
        push(out, frac);
    }
}

/// Whether finite `v` is exactly halfway between two multiples of `10^k`, that is
/// whether `2v / 10^k` is an odd integer. With `v = m·2^e`, `m` odd, that holds iff
/// `e + 1 == k` and, for `k ≥ 0`, `5^k` divides `m`.
fn is_tie(v: f64, k: i64) -> bool {
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let fraction = bits & ((1u64 << 52) - 1);
    let (m, e) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), biased - 1075)
    };
    if m == 0 {
        return false;
    }
    let zeros = m.trailing_zeros();
    let (m, e) = (m >> zeros, e + i64::from(zeros));
    if e + 1 != k {
        return false;
    }
    // 5^23 exceeds any 53-bit mantissa.
    k < 0 || (k <= 22 && m % 5u64.pow(k as u32) == 0)
}

fn parse_exp(s: &[u8]) -> i64 {
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let e = s
        .iter()
        .fold(0i64, |e, &b| e * 10 + i64::from(b.wrapping_sub(b'0')));
    if negative { -e } else { e }
}

/// Appends the decimal digits of `n`.
pub(crate) fn format_u64(n: u64, out: &mut String) {
    out.push_str(itoa::Buffer::new().format(n));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spec_examples() {
        assert_eq!(
            prometheus_name("http.server.duration", "s", MetricKind::Histogram, None),
            "http_server_duration_seconds"
        );
        assert_eq!(
            prometheus_name("requests", "{request}", MetricKind::Counter, None),
            "requests_total"
        );
        assert_eq!(
            prometheus_name("requests_total", "", MetricKind::Counter, None),
            "requests_total"
        );
        assert_eq!(
            prometheus_name("busy", "s", MetricKind::Counter, None),
            "busy_seconds_total"
        );
        assert_eq!(
            prometheus_name("busy_seconds_total", "s", MetricKind::Counter, None),
            "busy_seconds_total"
        );
        assert_eq!(
            prometheus_name("cpu.utilization", "1", MetricKind::Gauge, None),
            "cpu_utilization_ratio"
        );
        assert_eq!(
            prometheus_name("net.io", "By/s", MetricKind::Gauge, None),
            "net_io_bytes_per_second"
        );
        assert_eq!(prometheus_name("2xx", "", MetricKind::Gauge, None), "_2xx");
        assert_eq!(prometheus_name("a..b", "", MetricKind::Gauge, None), "a_b");
    }

    #[test]
    fn values_format_as_prometheus_parses_them() {
        for (v, want) in [
            (0.0, "0"),
            (-0.0, "0"),
            (3.0, "3"),
            (-12.0, "-12"),
            (0.25, "0.25"),
            (1e20, "100000000000000000000"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
        ] {
            let mut s = String::new();
            format_value(v, &mut s);
            assert_eq!(s, want);
        }
        let mut s = String::new();
        format_u64(u64::MAX, &mut s);
        assert_eq!(s, u64::MAX.to_string());
    }

    fn assert_formats_as_display(v: f64) {
        let mut s = String::new();
        format_value(v, &mut s);
        // The integer fast path writes `-0` as `0`.
        let want = if v == 0.0 {
            "0".to_owned()
        } else {
            format!("{v}")
        };
        assert_eq!(s, want, "bits {:#x}", v.to_bits());
    }

    #[test]
    fn values_format_as_display_does() {
        let specials = [
            0.1,
            0.2,
            0.3,
            0.1 + 0.2,
            1e-7,
            1e-5,
            1e-4,
            1e21,
            1e22,
            1.5e300,
            1e15,
            1e16,
            1e15 + 0.5,
            123_456_789_012_345_680.0,
            4_503_599_627_370_497.0,
            9_007_199_254_740_993.0,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            5e-324,
            -5e-324,
            2.5e-300,
            1.0 / 3.0,
            -2.0 / 3.0,
            123.456,
            -0.0,
            0.0,
            -1e-7,
            0.000_123,
            1234.5,
            f64::from_bits(0x44b5_2d02_c7e1_4af6), // nearest 1e23, below it
        ];
        for v in specials {
            assert_formats_as_display(v);
        }
        // Powers of ten and their neighbours, over the whole range.
        for e in -324..=308 {
            let p = format!("1e{e}").parse::<f64>().unwrap_or(0.0);
            for v in [
                p,
                f64::from_bits(p.to_bits() + 1),
                f64::from_bits(p.to_bits().saturating_sub(1)),
            ] {
                assert_formats_as_display(v);
                assert_formats_as_display(-v);
            }
        }
        // Short decimals at every scale, and their neighbours (where a candidate may
        // sit on a rounding boundary, like 1e23).
        for e in -30..=300 {
            for d in (1..1000).step_by(7) {
                let p = format!("{d}e{e}").parse::<f64>().unwrap_or(0.0);
                for v in [
                    p,
                    f64::from_bits(p.to_bits() + 1),
                    f64::from_bits(p.to_bits() - 1),
                ] {
                    assert_formats_as_display(v);
                }
            }
        }
        // Exact halves and quarters above 2^50, where two shortest candidates tie.
        for i in 0..10_000u64 {
            let base = (1u64 << 50) + i * 7_919;
            for frac in [0.25, 0.5, 0.75] {
                assert_formats_as_display(base as f64 + frac);
                assert_formats_as_display((base << 2) as f64 + frac * 4.0);
            }
        }
        // A deterministic spread of bit patterns (xorshift).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if v.is_finite() {
                assert_formats_as_display(v);
            }
            // Short decimals, as counters and sums of timings are.
            assert_formats_as_display((x % 1_000_000) as f64 / 1000.0);
            assert_formats_as_display((x % 100_000) as f64 * 0.37);
        }
    }

    #[test]
    fn catalog_families_keep_their_name() {
        let fam = higgsmeter_catalog::WORKER_ACTIVITY_TIME;
        assert_eq!(
            prometheus_name(fam.name, "s", MetricKind::Counter, Some(&fam)),
            fam.name
        );
    }

    proptest! {
        #[test]
        fn any_float_formats_as_display_does(bits in any::<u64>(), small in -1e6f64..1e6) {
            for v in [f64::from_bits(bits), small] {
                if v.is_finite() {
                    assert_formats_as_display(v);
                }
            }
        }

        #[test]
        fn sanitized_names_are_valid(name in "\\PC{0,40}", unit in "\\PC{0,8}") {
            for kind in [MetricKind::Counter, MetricKind::Gauge, MetricKind::Histogram] {
                let n = prometheus_name(&name, &unit, kind, None);
                prop_assert!(!n.is_empty());
                let first = n.chars().next().unwrap_or('_');
                prop_assert!(first.is_ascii_alphabetic() || first == '_' || first == ':', "{n}");
                prop_assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "{n}");
                if kind == MetricKind::Counter { prop_assert!(n.ends_with("_total")); }
            }
            let l = sanitize_label_name(&name);
            prop_assert!(l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            prop_assert!(!l.chars().next().unwrap_or('0').is_ascii_digit());
        }
    }
}
