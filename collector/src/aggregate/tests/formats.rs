//! The negotiated answers of a scrape against the text exposition: the protobuf
//! exposition decodes (prost) to the families and samples the text says, and a gzip
//! body inflates to the bytes of the uncompressed one, for every format and both views.

use std::io::Read as _;

use opentelemetry_proto::prometheus_client::{MetricFamily, MetricType};
use prost::Message as _;

use super::*;
use crate::views::negotiate::{Coding, Exposition};
use crate::views::rows::{Rows, parse_labels};
use crate::views::scrape::Scrape;

fn rows(s: &Store, view: View) -> Rows {
    super::super::store::rows(s, view, SEC, &crate::self_metrics::SelfMetrics::default())
}

/// One sample: its name, labels (in order, `le` last) and value.
type Sample = (String, Vec<(String, String)>, f64);

/// A family as the text says it: name, type, help (unescaped), samples.
#[derive(Debug)]
struct TextFamily {
    name: String,
    kind: String,
    help: String,
    samples: Vec<Sample>,
}

fn unescape_help(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

fn parse_value(text: &str) -> f64 {
    match text {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("bad value {v:?}")),
    }
}

/// Parses text exposition 0.0.4 (as the collector writes it) into families.
fn parse_text(text: &str) -> Vec<TextFamily> {
    let mut out: Vec<TextFamily> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(TextFamily {
                name: name.to_owned(),
                kind: String::new(),
                help: unescape_help(help),
                samples: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (_, kind) = rest.split_once(' ').expect("a type");
            out.last_mut().expect("HELP before TYPE").kind = kind.to_owned();
        } else {
            let (series, value) = line.rsplit_once(' ').expect("a sample");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (
                    name,
                    parse_labels(labels.strip_suffix('}').expect("}")).expect("labels"),
                ),
                None => (series, Vec::new()),
            };
            out.last_mut().expect("a family").samples.push((
                name.to_owned(),
                labels,
                parse_value(value),
            ));
        }
    }
    out
}

/// The samples a Prometheus reads from a protobuf family (a classic histogram's
/// buckets with `le` as the text formats it, the implied `+Inf` bucket, sum, count).
fn proto_samples(family: &MetricFamily) -> Vec<Sample> {
    let le = |bound: f64| {
        let mut s = String::new();
        crate::views::format::format_value(bound, &mut s);
        ("le".to_owned(), s)
    };
    let mut out = Vec::new();
    for m in &family.metric {
        let labels: Vec<(String, String)> = m
            .label
            .iter()
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect();
        match family.r#type() {
            MetricType::Counter => {
                let value = m.counter.as_ref().expect("a counter's value").value;
                out.push((family.name.clone(), labels, value));
            }
            MetricType::Gauge => {
                let value = m.gauge.as_ref().expect("a gauge's value").value;
                out.push((family.name.clone(), labels, value));
            }
            MetricType::Histogram => {
                let h = m.histogram.as_ref().expect("a histogram");
                assert_eq!(h.schema, 0, "a classic histogram only");
                assert!(h.positive_span.is_empty() && h.zero_threshold == 0.0);
                let bucket = format!("{}_bucket", family.name);
                for b in &h.bucket {
                    let mut l = labels.clone();
                    l.push(le(b.upper_bound));
                    out.push((bucket.clone(), l, b.cumulative_count as f64));
                }
                if h.bucket
                    .last()
                    .is_none_or(|b| b.upper_bound != f64::INFINITY)
                {
                    let mut l = labels.clone();
                    l.push(le(f64::INFINITY));
                    out.push((bucket.clone(), l, h.sample_count as f64));
                }
                out.push((format!("{}_sum", family.name), labels.clone(), h.sample_sum));
                out.push((
                    format!("{}_count", family.name),
                    labels,
                    h.sample_count as f64,
                ));
            }
            other => panic!("the collector writes no {other:?}"),
        }
    }
    out
}

fn decode_delimited(mut bytes: &[u8]) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut bytes).expect("a MetricFamily"));
    }
    out
}

fn same_value(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

#[test]
fn protobuf_decodes_to_the_families_and_samples_of_the_text() {
    let s = golden_store();
    for view in [View::Fleet, View::Sources] {
        let text = parse_text(&render(&s, view, SEC));
        let proto = decode_delimited(&crate::views::exposition_proto::encode(rows(&s, view)));
        let names = |f: &[TextFamily]| f.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(
            proto.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
            names(&text),
            "{view:?}"
        );
        let mut histograms = 0;
        for (p, t) in proto.iter().zip(&text) {
            let kind = match p.r#type() {
                MetricType::Counter => "counter",
                MetricType::Gauge => "gauge",
                MetricType::Histogram => "histogram",
                other => panic!("{other:?}"),
            };
            assert_eq!(kind, t.kind, "{}", t.name);
            assert_eq!(p.help, t.help, "{}", t.name);
            assert!(p.unit.is_empty());
            histograms += usize::from(kind == "histogram");
            let samples = proto_samples(p);
            assert_eq!(samples.len(), t.samples.len(), "{}", t.name);
            for (a, b) in samples.iter().zip(&t.samples) {
                assert_eq!((&a.0, &a.1), (&b.0, &b.1), "{}", t.name);
                assert!(same_value(a.2, b.2), "{a:?} != {b:?}");
            }
        }
        assert!(histograms >= 3, "{view:?}: the golden store's histograms");
        // Unescaped label values, as the text escapes them.
        assert!(proto.iter().flat_map(|f| &f.metric).any(|m| {
            m.label
                .iter()
                .any(|l| l.name == "path" && l.value == "a\"b\\c\nd é")
        }));
    }
}

/// A histogram whose count differs from its buckets' total (never from ingest, which
/// refuses such points; a checkpoint is not checked for it): the text writes both, and
/// protobuf keeps both with an explicit `+Inf` bucket.
#[test]
fn protobuf_keeps_a_count_that_differs_from_the_buckets() {
    let rows = || {
        let mut rows = Rows::default();
        rows.push_family(
            "lat",
            "Latency",
            crate::views::rows::FamilyKind::Histogram,
            2,
        );
        for (labels, count) in [("op=\"a\"", 9), ("op=\"b\"", 6)] {
            let value = rows.hist(&std::sync::Arc::from([1.0, 5.0]), &[1, 2, 3], count, 20.0);
            rows.push_row(labels, value);
        }
        rows
    };
    let text = crate::views::exposition::encode(rows(), Format::Text);
    let proto = decode_delimited(&crate::views::exposition_proto::encode(rows()));
    let buckets = |m: &opentelemetry_proto::prometheus_client::Metric| {
        let h = m.histogram.as_ref().expect("a histogram");
        (
            h.sample_count,
            h.bucket
                .iter()
                .map(|b| (b.upper_bound, b.cumulative_count))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        buckets(&proto[0].metric[0]),
        (9, vec![(1.0, 1), (5.0, 3), (f64::INFINITY, 6)])
    );
    // Equal: the `+Inf` bucket is implied, as client_golang writes it.
    assert_eq!(buckets(&proto[0].metric[1]), (6, vec![(1.0, 1), (5.0, 3)]));
    let text = parse_text(&text);
    assert_eq!(proto_samples(&proto[0]).len(), text[0].samples.len());
    for (a, b) in proto_samples(&proto[0]).iter().zip(&text[0].samples) {
        assert_eq!(a, b);
    }
}

/// Every chunk of a scrape's body, concatenated.
fn body(mut scrape: Scrape) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = scrape.next_chunk().expect("a chunk") {
        assert!(!chunk.is_empty());
        out.extend_from_slice(&chunk);
    }
    assert!(scrape.next_chunk().expect("done").is_none());
    out
}

#[test]
fn gzip_bodies_inflate_to_the_plain_ones() {
    let s = golden_store();
    for view in [View::Fleet, View::Sources] {
        for format in [
            Exposition::Text(Format::Text),
            Exposition::Text(Format::OpenMetrics),
            Exposition::Protobuf,
        ] {
            let plain = body(Scrape::new(rows(&s, view), format, Coding::Identity));
            let want = match format {
                Exposition::Text(f) => render_as(&s, view, SEC, f).into_bytes(),
                Exposition::Protobuf => crate::views::exposition_proto::encode(rows(&s, view)),
            };
            assert!(plain == want, "{view:?} {format:?}: the plain body");
            let gz = body(Scrape::new(rows(&s, view), format, Coding::Gzip));
            assert_eq!(&gz[..2], [0x1f, 0x8b], "a gzip member");
            let mut inflated = Vec::new();
            flate2::read::GzDecoder::new(gz.as_slice())
                .read_to_end(&mut inflated)
                .expect("valid gzip");
            assert!(inflated == want, "{view:?} {format:?}: gzip round trip");
            assert!(gz.len() < want.len() / 4, "{view:?} {format:?}: compressed");
        }
    }
}

/// A body larger than one chunk streams in several, each inflating in order.
#[test]
fn a_large_gzip_body_streams_in_chunks() {
    let mut s = Store::new(config());
    let metrics = (0..5)
        .map(|m| {
            let points = (0..4_000)
                .map(|i| point(vec![kv("op", &format!("op{i}"))], 1, 2, f64::from(i) * 0.37))
                .collect();
            counter(&format!("work{m}"), false, points)
        })
        .collect();
    ingest(&mut s, &request(worker(0), metrics), SEC);
    let want = render(&s, View::Fleet, SEC).into_bytes();
    assert!(want.len() > 4 * 64 * 1024);
    let mut scrape = Scrape::new(
        rows(&s, View::Fleet),
        Exposition::Text(Format::Text),
        Coding::Gzip,
    );
    let mut chunks = Vec::new();
    while let Some(chunk) = scrape.next_chunk().expect("a chunk") {
        chunks.push(chunk);
    }
    assert!(chunks.len() > 1, "streamed, not one buffer");
    let gz: Vec<u8> = chunks.concat();
    let mut inflated = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut inflated)
        .expect("valid gzip");
    assert!(inflated == want);
}
