//! The Prometheus encoders: a view's rows (read under the aggregator's lock, see
//! `views::rows`) formatted as text exposition 0.0.4 or OpenMetrics 1.0, after the
//! lock is released, in chunks: a scrape of a 60 MB view streams, never builds one
//! string.
//!
//! OpenMetrics differs from the text format in three places: a counter family is named
//! without `_total` (its samples keep it), `target_info` is the `info` family `target`,
//! and `"` is escaped in HELP; the text ends with `# EOF`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::format::{Text, escape_help, format_u64, format_value};
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
/// (`le="0.5"} `), back to back in one string: histograms of a metric share their
/// bounds (one `Arc`), and float formatting is the slow part of encoding.
#[derive(Default)]
struct LeCache {
    /// The bounds last seen (compared by pointer first, then by value).
    bounds: Option<Arc<[f64]>>,
    text: String,
    /// Where each bucket's `le` ends in `text` (the bounds, then `+Inf`).
    ends: Vec<usize>,
}

const LE_INF: &str = "le=\"+Inf\"} ";

impl LeCache {
    /// Makes the cache hold `bounds`' labels.
    fn set(&mut self, bounds: &Arc<[f64]>) {
        if let Some(last) = &self.bounds
            && (Arc::ptr_eq(last, bounds)
                || (last.len() == bounds.len()
                    && last
                        .iter()
                        .zip(bounds.iter())
                        .all(|(a, b)| a.to_bits() == b.to_bits())))
        {
            return;
        }
        self.bounds = Some(bounds.clone());
        self.text.clear();
        self.ends.clear();
        for b in bounds.iter().chain(std::iter::once(&f64::INFINITY)) {
            self.text.push_str("le=\"");
            format_value(*b, &mut self.text);
            self.text.push_str("\"} ");
            self.ends.push(self.text.len());
        }
    }

    /// Bucket `i`'s label and what follows it (`+Inf` past the bounds).
    fn le(&self, i: usize) -> &str {
        let start = match i.checked_sub(1) {
            Some(j) => self.ends.get(j).copied().unwrap_or(usize::MAX),
            None => 0,
        };
        self.ends
            .get(i)
            .and_then(|&end| self.text.get(start..end))
            .unwrap_or(LE_INF)
    }
}

/// `name suffix{labels} value`, a line.
fn sample(out: &mut impl Text, name: &str, suffix: &str, labels: &str, value: f64) {
    out.put_str(name);
    out.put_str(suffix);
    if !labels.is_empty() {
        out.put_ascii(b'{');
        out.put_str(labels);
        out.put_ascii(b'}');
    }
    out.put_ascii(b' ');
    format_value(value, out);
    out.put_ascii(b'\n');
}

/// Encodes a view's rows, a chunk at a time.
pub(crate) struct Encoder {
    rows: Rows,
    format: Format,
    family: usize,
    row: usize,
    /// The current family's sample name (OpenMetrics counters end in `_total`).
    name: String,
    /// `name_bucket{labels,` of the histogram being written: its labels are written
    /// once per series, the prefix copied for each bucket line.
    prefix: String,
    les: LeCache,
    /// The chunks' buffer: each chunk is split off it, and its memory taken back for
    /// the next one once the connection has sent and dropped it.
    chunk: BytesMut,
    done: bool,
}

impl Encoder {
    pub(crate) fn new(rows: Rows, format: Format) -> Encoder {
        Encoder {
            rows,
            format,
            family: 0,
            row: 0,
            name: String::new(),
            prefix: String::new(),
            les: LeCache::default(),
            chunk: BytesMut::new(),
            done: false,
        }
    }

    /// About how long the whole text will be (to size one buffer for it).
    pub(crate) fn estimate(&self) -> usize {
        self.rows.samples() * 64 + 4096
    }

    /// Appends to `out` until it holds at least `limit` bytes or the view is done;
    /// false once everything is written.
    pub(crate) fn fill(&mut self, out: &mut impl Text, limit: usize) -> bool {
        if self.done {
            return false;
        }
        while out.written() < limit {
            let Some(family) = self.rows.families.get(self.family) else {
                if self.format == Format::OpenMetrics {
                    out.put_str("# EOF\n");
                }
                self.done = true;
                return true;
            };
            if self.row == 0 {
                header(out, family, self.format);
                sample_name(family, self.format, &mut self.name);
            }
            let end = family.rows.len().min(self.row + 512);
            for row in family.rows.get(self.row..end).unwrap_or(&[]) {
                match &row.value {
                    RowValue::Number(v) => {
                        sample(out, &self.name, "", self.rows.labels(row), *v);
                    }
                    RowValue::Hist { .. } => histogram(
                        out,
                        &self.rows,
                        row,
                        &self.name,
                        &mut self.prefix,
                        &mut self.les,
                    ),
                }
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
        // A row is at most a few KiB past `size`. Reserving takes back the memory of
        // the chunks already sent (dropped), so a scrape reuses a buffer or two
        // instead of allocating (and faulting in) one per chunk.
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.reserve(size + 16 * 1024);
        self.fill(&mut chunk, size);
        let out = (!chunk.is_empty()).then(|| chunk.split().freeze());
        self.chunk = chunk;
        out
    }

    /// The whole text.
    pub(crate) fn into_string(mut self) -> String {
        let mut out = String::with_capacity(self.estimate());
        self.fill(&mut out, usize::MAX);
        out
    }
}

/// The name a family's samples carry into `out`: OpenMetrics counters always end in
/// `_total`.
fn sample_name(family: &FamilyRows, format: Format, out: &mut String) {
    out.clear();
    out.push_str(&family.name);
    if format == Format::OpenMetrics
        && family.kind == FamilyKind::Counter
        && !family.name.ends_with("_total")
    {
        out.push_str("_total");
    }
}

fn header(out: &mut impl Text, family: &FamilyRows, format: Format) {
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
    out.put_str("# HELP ");
    out.put_str(name);
    out.put_ascii(b' ');
    match format {
        Format::Text => escape_help(&family.help, out),
        Format::OpenMetrics => {
            let mut escaped = String::with_capacity(family.help.len() + 8);
            escape_help(&family.help, &mut escaped);
            let mut rest = escaped.as_str();
            while let Some(i) = rest.find('"') {
                out.put_str(&rest[..i]);
                out.put_str("\\\"");
                rest = &rest[i + 1..];
            }
            out.put_str(rest);
        }
    }
    out.put_str("\n# TYPE ");
    out.put_str(name);
    out.put_ascii(b' ');
    out.put_str(kind);
    out.put_ascii(b'\n');
}

/// A histogram series' lines: a cumulative count per bucket, the sum, the count.
fn histogram(
    out: &mut impl Text,
    rows: &Rows,
    row: &Row,
    name: &str,
    prefix: &mut String,
    les: &mut LeCache,
) {
    let RowValue::Hist {
        bounds,
        at,
        count,
        sum,
    } = &row.value
    else {
        return;
    };
    les.set(bounds);
    let labels = rows.labels(row);
    prefix.clear();
    prefix.push_str(name);
    prefix.push_str("_bucket{");
    prefix.push_str(labels);
    if !labels.is_empty() {
        prefix.push(',');
    }
    let mut cumulative = 0u64;
    for (i, c) in rows.counts(*at, bounds.len() + 1).iter().enumerate() {
        cumulative = cumulative.saturating_add(*c);
        out.put_str(prefix);
        out.put_str(les.le(i));
        format_u64(cumulative, out);
        out.put_ascii(b'\n');
    }
    sample(out, name, "_sum", labels, *sum);
    sample(out, name, "_count", labels, *count as f64);
}

/// Encodes `rows` whole.
pub(crate) fn encode(rows: Rows, format: Format) -> String {
    Encoder::new(rows, format).into_string()
}
