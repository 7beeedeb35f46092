//! The remote write encoder: a view's rows (the same rows the Prometheus endpoint
//! formats, read under the aggregator's lock) as remote write 1.0 `WriteRequest`s,
//! each at most `max_batch_size_bytes` before compression, snappy block-compressed.
//!
//! A series is named and labelled as the text exposition writes it: the family's
//! sample name, the row's labels, histograms as `_bucket` (cumulative, with `le`
//! formatted as in the text), `_sum` and `_count`; then the view label and the
//! external labels the series does not carry already, sorted by name.

use bytes::Bytes;
use prost::Message as _;

use super::prompb::{self, Label, MetricMetadata, Sample, TimeSeries, WriteRequest};
use crate::views::format::format_value;
pub(crate) use crate::views::rows::parse_labels;
use crate::views::rows::{FamilyKind, RowValue, Rows};

/// One compressed request, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    /// The snappy-compressed `WriteRequest`.
    pub(crate) body: Bytes,
    /// Samples it carries (what is counted when it is dropped).
    pub(crate) samples: u64,
}

/// What every series of a send gets besides its own labels.
pub(crate) struct Extra<'a> {
    /// External labels, added where the series has no label of that name.
    pub(crate) external: &'a [(String, String)],
    /// Largest uncompressed request, bytes.
    pub(crate) max_batch: usize,
    /// The samples' time, ms since the Unix epoch.
    pub(crate) timestamp_ms: i64,
}

/// Builds the batches of one send.
pub(crate) struct BatchBuilder<'a> {
    extra: Extra<'a>,
    request: WriteRequest,
    size: usize,
    samples: u64,
    batches: Vec<Batch>,
    /// Samples lost: rows whose labels could not be read back, or a request that could not be compressed (never expected; counted as dropped).
    pub(crate) lost: u64,
    encoder: snap::raw::Encoder,
}

impl<'a> BatchBuilder<'a> {
    pub(crate) fn new(extra: Extra<'a>) -> BatchBuilder<'a> {
        BatchBuilder {
            extra,
            request: WriteRequest::default(),
            size: 0,
            samples: 0,
            batches: Vec::new(),
            lost: 0,
            encoder: snap::raw::Encoder::new(),
        }
    }

    /// Adds every row of `rows`; `view_label`: a label every series of it gets.
    pub(crate) fn add_view(&mut self, rows: &Rows, view_label: Option<(&str, &str)>) {
        let mut les: Vec<String> = Vec::new();
        let mut les_of: Vec<f64> = Vec::new();
        for family in &rows.families {
            let (kind, name) = match family.kind {
                FamilyKind::Counter => (prompb::TYPE_COUNTER, &*family.name),
                FamilyKind::Gauge => (prompb::TYPE_GAUGE, &*family.name),
                FamilyKind::Histogram => (prompb::TYPE_HISTOGRAM, &*family.name),
                FamilyKind::Info => (prompb::TYPE_INFO, &*family.name),
            };
            let mut described = false;
            for row in &family.rows {
                let Some(mut base) = parse_labels(rows.labels(row)) else {
                    self.lost += 1;
                    continue;
                };
                if let Some((k, v)) = view_label {
                    base.push((k.to_owned(), v.to_owned()));
                }
                // An empty value is no label (Prometheus' rule; `series` drops it), so
                // the external label is added over it, as Prometheus does.
                for (k, v) in self.extra.external {
                    if !base.iter().any(|(name, v)| name == k && !v.is_empty()) {
                        base.push((k.clone(), v.clone()));
                    }
                }
                if !described {
                    described = true;
                    let meta = MetricMetadata {
                        r#type: kind,
                        metric_family_name: name.to_owned(),
                        help: family.help.to_string(),
                        unit: String::new(),
                    };
                    self.size += meta.encoded_len() + 4;
                    self.request.metadata.push(meta);
                }
                match &row.value {
                    RowValue::Number(v) => self.series(name, "", &base, None, *v),
                    RowValue::Hist {
                        bounds,
                        at,
                        count,
                        sum,
                    } => {
                        let same = les_of.len() == bounds.len()
                            && les_of
                                .iter()
                                .zip(bounds.iter())
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                        if !same {
                            les_of = bounds.to_vec();
                            les = bounds
                                .iter()
                                .map(|b| {
                                    let mut s = String::new();
                                    format_value(*b, &mut s);
                                    s
                                })
                                .chain(std::iter::once("+Inf".to_owned()))
                                .collect();
                        }
                        let counts = rows.counts(*at, bounds.len() + 1);
                        let mut cumulative = 0u64;
                        for (i, c) in counts.iter().enumerate() {
                            cumulative = cumulative.saturating_add(*c);
                            let le = les.get(i).map_or("+Inf", String::as_str);
                            self.series(name, "_bucket", &base, Some(le), cumulative as f64);
                        }
                        self.series(name, "_sum", &base, None, *sum);
                        self.series(name, "_count", &base, None, *count as f64);
                    }
                }
            }
        }
    }

    fn series(
        &mut self,
        name: &str,
        suffix: &str,
        base: &[(String, String)],
        le: Option<&str>,
        value: f64,
    ) {
        let mut labels: Vec<Label> = Vec::with_capacity(base.len() + 2);
        labels.push(Label {
            name: "__name__".to_owned(),
            value: format!("{name}{suffix}"),
        });
        labels.extend(
            base.iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| Label {
                    name: k.clone(),
                    value: v.clone(),
                }),
        );
        if let Some(le) = le {
            labels.push(Label {
                name: "le".to_owned(),
                value: le.to_owned(),
            });
        }
        labels.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let series = TimeSeries {
            labels,
            samples: vec![Sample {
                value,
                timestamp: self.extra.timestamp_ms,
            }],
        };
        let len = series.encoded_len() + 6;
        if self.size + len > self.extra.max_batch && !self.request.timeseries.is_empty() {
            self.flush();
        }
        self.size += len;
        self.samples += 1;
        self.request.timeseries.push(series);
    }

    /// Compresses the request being built into a batch.
    fn flush(&mut self) {
        let request = std::mem::take(&mut self.request);
        let samples = std::mem::take(&mut self.samples);
        self.size = 0;
        if request.timeseries.is_empty() {
            return;
        }
        let raw = request.encode_to_vec();
        match self.encoder.compress_vec(&raw) {
            Ok(body) => self.batches.push(Batch {
                body: Bytes::from(body),
                samples,
            }),
            // Only an input over snappy's ~4 GiB limit fails; max_batch_size_bytes
            // keeps requests far below it.
            Err(e) => {
                tracing::error!(error = %e, samples, "cannot compress a remote write request; its samples are dropped");
                self.lost += samples;
            }
        }
    }

    /// The batches, the last one flushed.
    pub(crate) fn finish(mut self) -> (Vec<Batch>, u64) {
        self.flush();
        (self.batches, self.lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::naming::render_labels;

    #[test]
    fn labels_read_back_what_render_wrote() {
        let labels = vec![
            ("a".to_owned(), "x".to_owned()),
            ("host_name".to_owned(), "node \"0\"\\x\ny".to_owned()),
            ("path".to_owned(), "a\"b\\c\nd é,=\"".to_owned()),
            ("z".to_owned(), String::new()),
        ];
        let text = render_labels(&labels);
        assert_eq!(parse_labels(&text).unwrap(), labels);
        assert_eq!(parse_labels("").unwrap(), Vec::new());
        assert!(parse_labels("a=\"x").is_none());
        assert!(parse_labels("a=\"x\"b=\"y\"").is_none());
    }
}
