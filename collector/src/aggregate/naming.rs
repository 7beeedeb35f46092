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
    fn catalog_families_keep_their_name() {
        let fam = higgsmeter_catalog::WORKER_ACTIVITY_TIME;
        assert_eq!(
            prometheus_name(fam.name, "s", MetricKind::Counter, Some(&fam)),
            fam.name
        );
    }

    proptest! {
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
