//! The one Prometheus text exposition parser (0.0.4, and OpenMetrics' sample lines):
//! [`parse`] gives every sample line as a [`Sample`] (labels unescaped), [`families`]
//! the same samples grouped under their `# TYPE` family with its kind and help.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name (a histogram's `_bucket`, `_sum`, `_count` included).
    pub name: String,
    /// Its labels, unescaped.
    pub labels: BTreeMap<String, String>,
    /// Its value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

impl Sample {
    /// A label's value, if it has the label.
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels.get(k).map(String::as_str)
    }
}

/// Every sample line of `text`; comments and blank lines skipped. Panics on a line
/// that is not a sample.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| parse_line(line).unwrap_or_else(|e| panic!("bad sample line {line:?}: {e}")))
        .collect()
}

/// The sum of the samples named `name` whose labels include every pair of `with`.
pub fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && with.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

/// One family of an exposition: its `# TYPE`, its `# HELP` and its samples.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Family {
    /// The `# TYPE` word (`counter`, `gauge`, ...).
    pub kind: String,
    /// The `# HELP` text.
    pub help: String,
    /// (sample name, sorted labels) → value.
    pub samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

/// The exposition's families keyed by their `# HELP`/`# TYPE` name, each sample under
/// the family declared last before it. Panics on a series that appears twice or a line
/// that is not a sample.
pub fn families(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(name.to_owned()).or_default().help = help.to_owned();
            current = name.to_owned();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("a TYPE line without a type: {line:?}"));
            families.entry(name.to_owned()).or_default().kind = kind.to_owned();
            current = name.to_owned();
        } else if line.starts_with('#') {
            continue;
        } else {
            let sample =
                parse_line(line).unwrap_or_else(|e| panic!("bad sample line {line:?}: {e}"));
            let key = (sample.name, sample.labels.into_iter().collect::<Vec<_>>());
            let family = families.entry(current.clone()).or_default();
            assert!(
                family.samples.insert(key.clone(), sample.value).is_none(),
                "duplicated series {key:?}"
            );
        }
    }
    families
}

/// One sample line: `name{labels} value [timestamp] [# exemplar]`.
fn parse_line(line: &str) -> Result<Sample, String> {
    let line = line.trim();
    let name_end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return Err("no name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| "no value".to_owned())?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|e| format!("value {v:?}: {e}"))?,
    };
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `k="v",...}` into `out`; returns what follows the closing brace.
fn parse_labels<'a>(s: &'a str, out: &mut BTreeMap<String, String>) -> Result<&'a str, String> {
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| format!("a label without `=` in {s:?}"))?;
        let mut chars = after
            .strip_prefix('"')
            .ok_or_else(|| format!("label {key:?}: no opening quote"))?
            .char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("label {key:?}: unterminated escape")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err(format!("label {key:?}: no closing quote")),
            }
        };
        out.insert(key.trim().to_owned(), value);
        // `after` is `"value"...`: skip its opening quote, the value and the closing one.
        rest = &after[1 + end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_with_escaped_labels_special_values_and_timestamps() {
        let text = "# HELP a_total A.\n# TYPE a_total counter\n\
                    a_total{k=\"x \\\"y\\\", z\",n=\"1\\n2\\\\\"} 3.5\n\
                    b 1 1700000000\n\
                    c_bucket{le=\"+Inf\"} +Inf\n\
                    d{} NaN\n";
        let got = parse(text);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].name, "a_total");
        assert_eq!(got[0].label("k"), Some("x \"y\", z"));
        assert_eq!(got[0].label("n"), Some("1\n2\\"));
        assert_eq!(got[0].value, 3.5);
        assert_eq!((got[1].name.as_str(), got[1].value), ("b", 1.0));
        assert_eq!(got[2].label("le"), Some("+Inf"));
        assert_eq!(got[2].value, f64::INFINITY);
        assert!(got[3].value.is_nan() && got[3].labels.is_empty());
        assert_eq!(sum(&got, "a_total", &[("n", "1\n2\\")]), 3.5);
        assert_eq!(sum(&got, "a_total", &[("n", "other")]), 0.0);
    }

    #[test]
    fn families_group_samples_under_their_type() {
        let text = "# HELP h_seconds Time.\n# TYPE h_seconds histogram\n\
                    h_seconds_bucket{le=\"1\"} 2\nh_seconds_count 2\n\
                    # TYPE g gauge\ng{a=\"1\"} 4\n";
        let f = families(text);
        assert_eq!(f["h_seconds"].kind, "histogram");
        assert_eq!(f["h_seconds"].help, "Time.");
        assert_eq!(f["h_seconds"].samples.len(), 2);
        assert_eq!(
            f["g"].samples[&("g".to_owned(), vec![("a".to_owned(), "1".to_owned())])],
            4.0
        );
    }

    #[test]
    #[should_panic(expected = "duplicated series")]
    fn a_repeated_series_is_an_error() {
        families("# TYPE g gauge\ng 1\ng 2\n");
    }
}
