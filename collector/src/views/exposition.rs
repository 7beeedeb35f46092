//! The Prometheus encoders: a view's rows (read under the aggregator's lock, see
//! `views::rows`) formatted as text exposition 0.0.4 or OpenMetrics 1.0, after the
//! lock is released, in chunks: a scrape of a 60 MB view streams, never builds one
//! string.
//!
//! OpenMetrics differs from the text format in three places: a counter family is named
//! without `_total` (its samples keep it), `target_info` is the `info` family `target`,
//! and `"` is escaped in HELP; the text ends with `# EOF`.

use bytes::Bytes;

use super::format::{escape_help, format_u64, format_value};
use super::rows::{FamilyKind, FamilyRows, Row, RowValue, Rows};

/// Which exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Prometheus text exposition 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

/// The `le` label of each bucket of the last bounds written, with what follows it
/// (`le="0.5"} `): histograms of a metric share their bounds, and float formatting
/// is the slow part of encoding.
#[derive(Default)]
struct LeCache {
    bounds: Vec<f64>,
    les: Vec<String>,
}

const LE_INF: &str = "le=\"+Inf\"} ";

impl LeCache {
    fn les(&mut self, bounds: &[f64]) -> &[String] {
        let same = self.les.len() == bounds.len() + 1
            && self.bounds.len() == bounds.len()
            && self
                .bounds
                .iter()
                .zip(bounds)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            self.bounds = bounds.to_vec();
            self.les = bounds
                .iter()
                .chain(std::iter::once(&f64::INFINITY))
                .map(|b| {
                    let mut s = String::from("le=\"");
                    format_value(*b, &mut s);
                    s.push_str("\"} ");
                    s
                })
                .collect();
        }
        &self.les
    }
}

fn sample(out: &mut String, name: &str, suffix: &str, labels: &str, value: f64) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() {
        out.push('{');
        out.push_str(labels);
        out.push('}');
    }
    out.push(' ');
    format_value(value, out);
    out.push('\n');
}

/// Encodes a view's rows, a chunk at a time.
pub(crate) struct Encoder {
    rows: Rows,
    format: Format,
    family: usize,
    row: usize,
    les: LeCache,
    done: bool,
}

impl Encoder {
    pub(crate) fn new(rows: Rows, format: Format) -> Encoder {
        Encoder {
            rows,
            format,
            family: 0,
            row: 0,
            les: LeCache::default(),
            done: false,
        }
    }

    /// About how long the whole text will be (to size one buffer for it).
    pub(crate) fn estimate(&self) -> usize {
        self.rows.samples() * 64 + 4096
    }

    /// Appends to `out` until it holds at least `limit` bytes or the view is done;
    /// false once everything is written.
    pub(crate) fn fill(&mut self, out: &mut String, limit: usize) -> bool {
        if self.done {
            return false;
        }
        while out.len() < limit {
            let Some(family) = self.rows.families.get(self.family) else {
                if self.format == Format::OpenMetrics {
                    out.push_str("# EOF\n");
                }
                self.done = true;
                return true;
            };
            if self.row == 0 {
                header(out, family, self.format);
            }
            let name = family_sample_name(family, self.format);
            let end = family.rows.len().min(self.row + 512);
            for row in &family.rows[self.row..end] {
                write_row(out, &self.rows, name.as_ref(), row, &mut self.les);
            }
            self.row = end;
            if self.row >= family.rows.len() {
                self.family += 1;
                self.row = 0;
            }
        }
        true
    }

    /// The next chunk of about `size` bytes, or `None` when done.
    pub(crate) fn next_chunk(&mut self, size: usize) -> Option<Bytes> {
        // Below malloc's mmap threshold (128 KiB), so chunk buffers are reused, not
        // mapped and faulted in afresh each time; a row is at most a few KiB.
        let mut out = String::with_capacity(size + 16 * 1024);
        self.fill(&mut out, size);
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// The whole text.
    pub(crate) fn into_string(mut self) -> String {
        let mut out = String::with_capacity(self.estimate());
        self.fill(&mut out, usize::MAX);
        out
    }
}

/// The name a family's samples carry: OpenMetrics counters always end in `_total`.
fn family_sample_name(family: &FamilyRows, format: Format) -> std::borrow::Cow<'_, str> {
    match (format, family.kind) {
        (Format::OpenMetrics, FamilyKind::Counter) if !family.name.ends_with("_total") => {
            std::borrow::Cow::Owned(format!("{}_total", family.name))
        }
        _ => std::borrow::Cow::Borrowed(&family.name),
    }
}

fn header(out: &mut String, family: &FamilyRows, format: Format) {
    let (name, kind) = match (format, family.kind) {
        (Format::Text, FamilyKind::Info) => (&*family.name, "gauge"),
        (Format::OpenMetrics, FamilyKind::Info) => ("target", "info"),
        (Format::OpenMetrics, FamilyKind::Counter) => (
            family.name.strip_suffix("_total").unwrap_or(&family.name),
            "counter",
        ),
        (_, FamilyKind::Counter) => (&*family.name, "counter"),
        (_, FamilyKind::Gauge) => (&*family.name, "gauge"),
        (_, FamilyKind::Histogram) => (&*family.name, "histogram"),
    };
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    match format {
        Format::Text => escape_help(&family.help, out),
        Format::OpenMetrics => {
            let mut escaped = String::with_capacity(family.help.len() + 8);
            escape_help(&family.help, &mut escaped);
            for c in escaped.chars() {
                if c == '"' {
                    out.push('\\');
                }
                out.push(c);
            }
        }
    }
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

fn write_row(out: &mut String, rows: &Rows, name: &str, row: &Row, les: &mut LeCache) {
    match &row.value {
        RowValue::Number(v) => sample(out, name, "", &row.labels, *v),
        RowValue::Hist {
            bounds,
            at,
            count,
            sum,
        } => {
            let les = les.les(bounds);
            let counts = rows.counts(*at, bounds.len() + 1);
            // `name_bucket{labels,` is written once and copied for the other buckets.
            let prefix_start = out.len();
            out.push_str(name);
            out.push_str("_bucket{");
            out.push_str(&row.labels);
            if !row.labels.is_empty() {
                out.push(',');
            }
            let prefix = prefix_start..out.len();
            let mut cumulative = 0u64;
            for (i, c) in counts.iter().enumerate() {
                cumulative = cumulative.saturating_add(*c);
                if i > 0 {
                    out.extend_from_within(prefix.clone());
                }
                out.push_str(les.get(i).map_or(LE_INF, String::as_str));
                format_u64(cumulative, out);
                out.push('\n');
            }
            sample(out, name, "_sum", &row.labels, *sum);
            sample(out, name, "_count", &row.labels, *count as f64);
        }
    }
}

/// Encodes `rows` whole.
pub(crate) fn encode(rows: Rows, format: Format) -> String {
    Encoder::new(rows, format).into_string()
}
