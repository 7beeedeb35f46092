//! The Prometheus protobuf exposition: a view's rows (the same rows the text encoders
//! format, `views::rows`) as length-delimited `io.prometheus.client.MetricFamily`
//! messages, one per family, in chunks after the aggregator's lock is released; what
//! client_golang serves for `application/vnd.google.protobuf;
//! proto=io.prometheus.client.MetricFamily; encoding=delimited`.
//!
//! The families, names and values are the text format's: a counter family keeps its
//! `_total`, `target_info` is a gauge, a histogram is classic (cumulative buckets by
//! upper bound, the sum, the count; no native-histogram fields, so every Prometheus
//! reads it as `_bucket`, `_sum` and `_count` series). The `+Inf` bucket is left out
//! when it equals the count, as client_golang leaves it out; written when it does not,
//! so that a scrape stores what the text format says. Labels are unescaped; HELP is the
//! raw text. Families without series are not written.
//!
//! The messages are written field by field (prost's wire primitives) from the rows,
//! without building prost structs (at 100 k series the structs and their strings took
//! most of a scrape's time); `opentelemetry_proto::prometheus_client` holds the same
//! messages as prost types, which the tests decode these bytes with.

use bytes::{BufMut as _, Bytes, BytesMut};
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

use super::rows::{FamilyKind, FamilyRows, Row, RowValue, Rows};

/// `io.prometheus.client.MetricType`'s values the collector writes.
const COUNTER: u64 = 0;
const GAUGE: u64 = 1;
const HISTOGRAM: u64 = 4;

/// Encodes a view's rows as delimited `MetricFamily` messages, a chunk at a time.
pub(crate) struct ProtoEncoder {
    rows: Rows,
    family: usize,
    /// The chunks' buffer (see `views::exposition::Encoder`).
    chunk: BytesMut,
    /// The family being written (its length precedes it).
    body: Vec<u8>,
    /// The series being written (its length precedes it).
    metric: Vec<u8>,
    /// A label value, unescaped.
    value: String,
}

impl ProtoEncoder {
    pub(crate) fn new(rows: Rows) -> ProtoEncoder {
        ProtoEncoder {
            rows,
            family: 0,
            chunk: BytesMut::new(),
            body: Vec::new(),
            metric: Vec::new(),
            value: String::new(),
        }
    }

    /// The next chunk: whole messages, at least `size` bytes unless it is the last one
    /// (one family larger than `size` is one chunk); `None` when done.
    pub(crate) fn next_chunk(&mut self, size: usize) -> Option<Bytes> {
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.reserve(size + 16 * 1024);
        self.fill(&mut chunk, size);
        let out = (!chunk.is_empty()).then(|| chunk.split().freeze());
        self.chunk = chunk;
        out
    }

    /// Appends messages to `out` until it holds at least `limit` bytes or every family is
    /// written.
    fn fill(&mut self, out: &mut BytesMut, limit: usize) {
        while out.len() < limit {
            let Some(family) = self.rows.families.get(self.family) else {
                return;
            };
            self.family += 1;
            if family_body(
                &self.rows,
                family,
                &mut self.body,
                &mut self.metric,
                &mut self.value,
            ) {
                out.reserve(self.body.len() + 10);
                encode_varint(self.body.len() as u64, out);
                out.put_slice(&self.body);
            }
        }
    }

    /// Everything, in one buffer.
    pub(crate) fn into_bytes(mut self) -> Vec<u8> {
        let mut out = BytesMut::new();
        self.fill(&mut out, usize::MAX);
        out.to_vec()
    }
}

/// A string field.
fn put_str(tag: u32, s: &str, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

/// A double field.
fn put_f64(tag: u32, v: f64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::SixtyFourBit, out);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A varint field.
fn put_u64(tag: u32, v: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(v, out);
}

/// A string field's length (its key, length and bytes), for a tag below 16.
fn str_len(s: &str) -> usize {
    1 + encoded_len_varint(s.len() as u64) + s.len()
}

/// The `MetricFamily` of `family` into `body` (without its length); false when it has
/// no series to write.
fn family_body(
    rows: &Rows,
    family: &FamilyRows,
    body: &mut Vec<u8>,
    metric: &mut Vec<u8>,
    value: &mut String,
) -> bool {
    let kind = match family.kind {
        FamilyKind::Counter => COUNTER,
        FamilyKind::Gauge | FamilyKind::Info => GAUGE,
        FamilyKind::Histogram => HISTOGRAM,
    };
    body.clear();
    put_str(1, &family.name, body);
    put_str(2, &family.help, body);
    put_u64(3, kind, body);
    let mut any = false;
    for row in &family.rows {
        metric.clear();
        if !write_metric(rows, row, kind, metric, value) {
            tracing::debug!(family = %family.name, "labels not readable; series left out of the protobuf scrape");
            continue;
        }
        encode_key(4, WireType::LengthDelimited, body);
        encode_varint(metric.len() as u64, body);
        body.extend_from_slice(metric);
        any = true;
    }
    any
}

/// One `Metric` into `out`; false when its labels cannot be read back (never expected:
/// the store renders them).
fn write_metric(rows: &Rows, row: &Row, kind: u64, out: &mut Vec<u8>, value: &mut String) -> bool {
    let mut rest = rows.labels(row);
    while !rest.is_empty() {
        let Some((name, after)) = rest.split_once("=\"") else {
            return false;
        };
        // The value up to its closing quote, unescaped (`naming::escape_label_value`).
        value.clear();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return false,
                },
                Some((_, c)) => value.push(c),
                None => return false,
            }
        };
        encode_key(1, WireType::LengthDelimited, out);
        encode_varint((str_len(name) + str_len(value)) as u64, out);
        put_str(1, name, out);
        put_str(2, value, out);
        rest = after.get(end + 1..).unwrap_or_default();
        rest = match rest.strip_prefix(',') {
            Some(r) => r,
            None if rest.is_empty() => rest,
            None => return false,
        };
    }
    match &row.value {
        // Counter (3) or gauge (2): a message holding the double (field 1).
        RowValue::Number(v) => {
            encode_key(
                if kind == COUNTER { 3 } else { 2 },
                WireType::LengthDelimited,
                out,
            );
            encode_varint(9, out);
            put_f64(1, *v, out);
        }
        RowValue::Hist {
            bounds,
            at,
            count,
            sum,
        } => {
            let counts = rows.counts(*at, bounds.len() + 1);
            // The buckets, cumulative; the +Inf one only when it differs from the count
            // (client_golang leaves it out: a reader takes the count for it).
            let buckets = || {
                let mut cumulative = 0u64;
                bounds
                    .iter()
                    .chain(std::iter::once(&f64::INFINITY))
                    .zip(counts)
                    .map(move |(&bound, c)| {
                        cumulative = cumulative.saturating_add(*c);
                        (bound, cumulative)
                    })
                    .filter(|&(bound, cumulative)| bound != f64::INFINITY || cumulative != *count)
            };
            let bucket_len = |cumulative: u64| 1 + encoded_len_varint(cumulative) + 9;
            let len = 1
                + encoded_len_varint(*count)
                + 9
                + buckets()
                    .map(|(_, c)| 1 + encoded_len_varint(bucket_len(c) as u64) + bucket_len(c))
                    .sum::<usize>();
            // Histogram (7): sample_count (1), sample_sum (2), bucket (3) each with
            // cumulative_count (1) and upper_bound (2).
            encode_key(7, WireType::LengthDelimited, out);
            encode_varint(len as u64, out);
            put_u64(1, *count, out);
            put_f64(2, *sum, out);
            for (bound, cumulative) in buckets() {
                encode_key(3, WireType::LengthDelimited, out);
                encode_varint(bucket_len(cumulative) as u64, out);
                put_u64(1, cumulative, out);
                put_f64(2, bound, out);
            }
        }
    }
    true
}

/// Encodes `rows` whole.
pub(crate) fn encode(rows: Rows) -> Vec<u8> {
    ProtoEncoder::new(rows).into_bytes()
}
