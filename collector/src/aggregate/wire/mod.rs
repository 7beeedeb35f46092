//! A zero-copy reader of OTLP `ExportMetricsServiceRequest` protobuf bytes.
//!
//! Decoding a request with prost allocates every string, attribute and bucket vector
//! of every point, only for the aggregator to look series up and drop it all: that is
//! most of the cost of ingest. This reader walks the encoded bytes instead and hands
//! the aggregator borrowed views ([`Kv`], [`NumberPoint`], [`HistPoint`]). A request is
//! walked twice: once to validate it completely (so a malformed request is refused as a
//! whole, before any point is applied), then to apply it.
//!
//! It follows the protobuf wire format: fields in any order, unknown fields skipped,
//! packed and unpacked repeated scalars, the last value of a oneof wins; strings this
//! reader uses must be UTF-8.

mod apply;

pub(crate) use apply::apply;

use opentelemetry_proto::tonic::common::v1::AnyValue;
use prost::Message as _;

pub use crate::protobuf::DecodeError;
use crate::protobuf::{FIXED64, LEN, Reader, Result, VARINT};

fn expect(wire: u8, want: u8) -> Result<()> {
    if wire == want {
        Ok(())
    } else {
        Err(DecodeError("a field has the wrong wire type"))
    }
}

/// An attribute value, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Val<'a> {
    /// No value.
    Empty,
    /// `string_value`.
    Str(&'a str),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `bytes_value`.
    Bytes(&'a [u8]),
    /// An array or key-value list: the whole encoded `AnyValue`, decoded when needed.
    Complex(&'a [u8]),
}

impl Val<'_> {
    /// The `AnyValue` (for the rare complex values and for stored resources).
    pub(crate) fn to_proto(self) -> AnyValue {
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        let value = match self {
            Val::Empty => None,
            Val::Str(s) => Some(V::StringValue(s.to_owned())),
            Val::Bool(b) => Some(V::BoolValue(b)),
            Val::Int(i) => Some(V::IntValue(i)),
            Val::Double(d) => Some(V::DoubleValue(d)),
            Val::Bytes(b) => Some(V::BytesValue(b.to_vec())),
            Val::Complex(raw) => return AnyValue::decode(raw).unwrap_or_default(),
        };
        AnyValue { value }
    }
}

/// One attribute, borrowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Kv<'a> {
    pub(crate) key: &'a str,
    pub(crate) val: Val<'a>,
}

fn any_value(buf: &[u8]) -> Result<Val<'_>> {
    let mut r = Reader::new(buf);
    let mut val = Val::Empty;
    // Whether an array or key-value list was seen: checked once, after the walk (a
    // check per occurrence reads the whole value each time, quadratic in a value
    // that repeats the field).
    let mut complex = false;
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => {
                expect(wire, LEN)?;
                val = Val::Str(r.str()?);
            }
            2 => {
                expect(wire, VARINT)?;
                val = Val::Bool(r.varint()? != 0);
            }
            3 => {
                expect(wire, VARINT)?;
                val = Val::Int(r.varint()? as i64);
            }
            4 => {
                expect(wire, FIXED64)?;
                val = Val::Double(f64::from_bits(r.fixed64()?));
            }
            5 | 6 => {
                expect(wire, LEN)?;
                r.bytes()?;
                complex = true;
                val = Val::Complex(buf);
            }
            7 => {
                expect(wire, LEN)?;
                val = Val::Bytes(r.bytes()?);
            }
            _ => r.skip(wire)?,
        }
    }
    if complex && AnyValue::decode(buf).is_err() {
        return Err(DecodeError("malformed array or key-value list attribute"));
    }
    Ok(val)
}

pub(crate) fn key_value(buf: &[u8]) -> Result<Kv<'_>> {
    let mut r = Reader::new(buf);
    let mut kv = Kv {
        key: "",
        val: Val::Empty,
    };
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => {
                expect(wire, LEN)?;
                kv.key = r.str()?;
            }
            2 => {
                expect(wire, LEN)?;
                kv.val = any_value(r.bytes()?)?;
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(kv)
}

/// A number data point, borrowed.
#[derive(Debug, Default)]
pub(crate) struct NumberPoint<'a> {
    pub(crate) attrs: Vec<Kv<'a>>,
    pub(crate) start: u64,
    pub(crate) time: u64,
    pub(crate) value: Option<f64>,
    pub(crate) flags: u32,
}

fn number_point<'a>(buf: &'a [u8], p: &mut NumberPoint<'a>) -> Result<()> {
    p.attrs.clear();
    p.start = 0;
    p.time = 0;
    p.value = None;
    p.flags = 0;
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            7 => {
                expect(wire, LEN)?;
                p.attrs.push(key_value(r.bytes()?)?);
            }
            2 => {
                expect(wire, FIXED64)?;
                p.start = r.fixed64()?;
            }
            3 => {
                expect(wire, FIXED64)?;
                p.time = r.fixed64()?;
            }
            4 => {
                expect(wire, FIXED64)?;
                p.value = Some(f64::from_bits(r.fixed64()?));
            }
            6 => {
                expect(wire, FIXED64)?;
                p.value = Some(r.fixed64()? as i64 as f64);
            }
            8 => {
                expect(wire, VARINT)?;
                p.flags = r.varint()? as u32;
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(())
}

/// An explicit-bucket histogram data point, borrowed.
#[derive(Debug, Default)]
pub(crate) struct HistPoint<'a> {
    pub(crate) attrs: Vec<Kv<'a>>,
    pub(crate) start: u64,
    pub(crate) time: u64,
    pub(crate) count: u64,
    pub(crate) sum: Option<f64>,
    pub(crate) counts: Vec<u64>,
    pub(crate) bounds: Vec<f64>,
    pub(crate) flags: u32,
}

fn repeated_fixed64(r: &mut Reader<'_>, wire: u8, out: &mut Vec<u64>) -> Result<()> {
    match wire {
        FIXED64 => out.push(r.fixed64()?),
        LEN => {
            let packed = r.bytes()?;
            if packed.len() % 8 != 0 {
                return Err(DecodeError("packed fixed64 field has a partial element"));
            }
            out.extend(packed.chunks_exact(8).map(|c| {
                let mut arr = [0u8; 8];
                arr.copy_from_slice(c);
                u64::from_le_bytes(arr)
            }));
        }
        _ => {
            return Err(DecodeError(
                "a repeated fixed64 field has the wrong wire type",
            ));
        }
    }
    Ok(())
}

fn repeated_double(r: &mut Reader<'_>, wire: u8, out: &mut Vec<f64>) -> Result<()> {
    match wire {
        FIXED64 => out.push(f64::from_bits(r.fixed64()?)),
        LEN => {
            let packed = r.bytes()?;
            if packed.len() % 8 != 0 {
                return Err(DecodeError("packed double field has a partial element"));
            }
            out.extend(packed.chunks_exact(8).map(|c| {
                let mut arr = [0u8; 8];
                arr.copy_from_slice(c);
                f64::from_bits(u64::from_le_bytes(arr))
            }));
        }
        _ => {
            return Err(DecodeError(
                "a repeated double field has the wrong wire type",
            ));
        }
    }
    Ok(())
}

fn hist_point<'a>(buf: &'a [u8], p: &mut HistPoint<'a>) -> Result<()> {
    p.attrs.clear();
    p.counts.clear();
    p.bounds.clear();
    p.start = 0;
    p.time = 0;
    p.count = 0;
    p.sum = None;
    p.flags = 0;
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            9 => {
                expect(wire, LEN)?;
                p.attrs.push(key_value(r.bytes()?)?);
            }
            2 => {
                expect(wire, FIXED64)?;
                p.start = r.fixed64()?;
            }
            3 => {
                expect(wire, FIXED64)?;
                p.time = r.fixed64()?;
            }
            4 => {
                expect(wire, FIXED64)?;
                p.count = r.fixed64()?;
            }
            5 => {
                expect(wire, FIXED64)?;
                p.sum = Some(f64::from_bits(r.fixed64()?));
            }
            6 => repeated_fixed64(&mut r, wire, &mut p.counts)?,
            7 => repeated_double(&mut r, wire, &mut p.bounds)?,
            10 => {
                expect(wire, VARINT)?;
                p.flags = r.varint()? as u32;
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(())
}

/// What a metric carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataKind {
    /// No data.
    None,
    /// A gauge.
    Gauge,
    /// A sum.
    Sum {
        /// Monotonic.
        monotonic: bool,
        /// Delta temporality.
        delta: bool,
    },
    /// An explicit-bucket histogram.
    Histogram {
        /// Delta temporality.
        delta: bool,
    },
    /// An exponential histogram (refused).
    ExponentialHistogram,
    /// A summary (refused).
    Summary,
}

/// A metric, borrowed: its points are still encoded.
#[derive(Debug)]
pub(crate) struct MetricRef<'a> {
    pub(crate) name: &'a str,
    pub(crate) description: &'a str,
    pub(crate) unit: &'a str,
    pub(crate) kind: DataKind,
    pub(crate) points: Vec<&'a [u8]>,
}

/// OTLP's `AGGREGATION_TEMPORALITY_DELTA`.
const DELTA: u64 = 1;

fn metric<'a>(buf: &'a [u8]) -> Result<MetricRef<'a>> {
    let mut m = MetricRef {
        name: "",
        description: "",
        unit: "",
        kind: DataKind::None,
        points: Vec::new(),
    };
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => {
                expect(wire, LEN)?;
                m.name = r.str()?;
            }
            2 => {
                expect(wire, LEN)?;
                m.description = r.str()?;
            }
            3 => {
                expect(wire, LEN)?;
                m.unit = r.str()?;
            }
            5 | 7 | 9 | 10 | 11 => {
                expect(wire, LEN)?;
                let data = r.bytes()?;
                m.points.clear();
                let mut d = Reader::new(data);
                let (mut temporality, mut monotonic) = (0u64, false);
                while let Some((f, w)) = d.key()? {
                    match (f, field) {
                        (1, _) => {
                            expect(w, LEN)?;
                            m.points.push(d.bytes()?);
                        }
                        (2, 7 | 9 | 10) => {
                            expect(w, VARINT)?;
                            temporality = d.varint()?;
                        }
                        (3, 7) => {
                            expect(w, VARINT)?;
                            monotonic = d.varint()? != 0;
                        }
                        _ => d.skip(w)?,
                    }
                }
                let delta = temporality == DELTA;
                m.kind = match field {
                    5 => DataKind::Gauge,
                    7 => DataKind::Sum { monotonic, delta },
                    9 => DataKind::Histogram { delta },
                    10 => DataKind::ExponentialHistogram,
                    _ => DataKind::Summary,
                };
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(m)
}

/// What the walk reports to.
pub(crate) trait Visitor<'a> {
    /// A `ResourceMetrics` starts, with its resource's attributes.
    fn resource(&mut self, attrs: &[Kv<'a>]);
    /// A metric with at least one point starts.
    fn metric(&mut self, m: &MetricRef<'a>);
    /// A point of a gauge or sum.
    fn number(&mut self, p: &NumberPoint<'a>);
    /// A point of an explicit-bucket histogram.
    fn histogram(&mut self, p: &HistPoint<'a>);
}

/// Walks a request, calling `v` for every resource, metric and point, in order.
pub(crate) fn walk<'a>(req: &'a [u8], v: &mut impl Visitor<'a>) -> Result<()> {
    let mut attrs: Vec<Kv<'a>> = Vec::new();
    let mut scopes: Vec<&'a [u8]> = Vec::new();
    let mut number = NumberPoint::default();
    let mut hist = HistPoint::default();
    let mut r = Reader::new(req);
    while let Some((field, wire)) = r.key()? {
        if field != 1 {
            r.skip(wire)?;
            continue;
        }
        expect(wire, LEN)?;
        let rm = r.bytes()?;
        // ResourceMetrics: resource (1) may come after scope_metrics (2).
        attrs.clear();
        scopes.clear();
        let mut rr = Reader::new(rm);
        while let Some((f, w)) = rr.key()? {
            match f {
                1 => {
                    expect(w, LEN)?;
                    attrs.clear();
                    let mut res = Reader::new(rr.bytes()?);
                    while let Some((rf, rw)) = res.key()? {
                        if rf == 1 {
                            expect(rw, LEN)?;
                            attrs.push(key_value(res.bytes()?)?);
                        } else {
                            res.skip(rw)?;
                        }
                    }
                }
                2 => {
                    expect(w, LEN)?;
                    scopes.push(rr.bytes()?);
                }
                _ => rr.skip(w)?,
            }
        }
        v.resource(&attrs);
        for scope in &scopes {
            let mut sr = Reader::new(scope);
            while let Some((f, w)) = sr.key()? {
                if f != 2 {
                    sr.skip(w)?;
                    continue;
                }
                expect(w, LEN)?;
                let m = metric(sr.bytes()?)?;
                if m.points.is_empty() {
                    continue;
                }
                v.metric(&m);
                match m.kind {
                    DataKind::Gauge | DataKind::Sum { .. } => {
                        for p in &m.points {
                            number_point(p, &mut number)?;
                            v.number(&number);
                        }
                    }
                    DataKind::Histogram { .. } => {
                        for p in &m.points {
                            hist_point(p, &mut hist)?;
                            v.histogram(&hist);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// A visitor that only counts points: the validating first pass.
#[derive(Debug, Default)]
pub(crate) struct Count {
    pub(crate) points: u64,
}

impl<'a> Visitor<'a> for Count {
    fn resource(&mut self, _: &[Kv<'a>]) {}
    fn metric(&mut self, m: &MetricRef<'a>) {
        self.points += m.points.len() as u64;
    }
    fn number(&mut self, _: &NumberPoint<'a>) {}
    fn histogram(&mut self, _: &HistPoint<'a>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics, Sum, metric::Data, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use proptest::prelude::*;

    /// Records what the walk reports, as text.
    #[derive(Default)]
    struct Record(Vec<String>);

    fn kvs(attrs: &[Kv<'_>]) -> String {
        attrs
            .iter()
            .map(|kv| format!("{}={:?}", kv.key, kv.val))
            .collect::<Vec<_>>()
            .join(",")
    }

    impl<'a> Visitor<'a> for Record {
        fn resource(&mut self, attrs: &[Kv<'a>]) {
            self.0.push(format!("R {}", kvs(attrs)));
        }
        fn metric(&mut self, m: &MetricRef<'a>) {
            self.0.push(format!(
                "M {} {} {} {:?} {}",
                m.name,
                m.unit,
                m.description,
                m.kind,
                m.points.len()
            ));
        }
        fn number(&mut self, p: &NumberPoint<'a>) {
            self.0.push(format!(
                "N {} {} {} {:?} {}",
                kvs(&p.attrs),
                p.start,
                p.time,
                p.value.map(f64::to_bits),
                p.flags
            ));
        }
        fn histogram(&mut self, p: &HistPoint<'a>) {
            self.0.push(format!(
                "H {} {} {} {} {:?} {:?} {:?} {}",
                kvs(&p.attrs),
                p.start,
                p.time,
                p.count,
                p.sum.map(f64::to_bits),
                p.counts,
                p.bounds.iter().map(|b| b.to_bits()).collect::<Vec<_>>(),
                p.flags
            ));
        }
    }

    fn proto_val(v: &Option<AnyValue>) -> Val<'_> {
        match v.as_ref().and_then(|v| v.value.as_ref()) {
            None => Val::Empty,
            Some(any_value::Value::StringValue(s)) => Val::Str(s),
            Some(any_value::Value::BoolValue(b)) => Val::Bool(*b),
            Some(any_value::Value::IntValue(i)) => Val::Int(*i),
            Some(any_value::Value::DoubleValue(d)) => Val::Double(*d),
            Some(any_value::Value::BytesValue(b)) => Val::Bytes(b),
            Some(_) => Val::Empty,
        }
    }

    fn proto_kvs(attrs: &[KeyValue]) -> String {
        let kv: Vec<Kv<'_>> = attrs
            .iter()
            .map(|a| Kv {
                key: &a.key,
                val: proto_val(&a.value),
            })
            .collect();
        kvs(&kv)
    }

    /// What the walk must report for `req`, computed from prost's structs.
    fn expected(req: &ExportMetricsServiceRequest) -> Vec<String> {
        let mut out = Vec::new();
        for rm in &req.resource_metrics {
            out.push(format!(
                "R {}",
                proto_kvs(rm.resource.as_ref().map_or(&[], |r| &r.attributes))
            ));
            for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
                let (kind, n) = match &m.data {
                    Some(Data::Gauge(g)) => (DataKind::Gauge, g.data_points.len()),
                    Some(Data::Sum(s)) => (
                        DataKind::Sum {
                            monotonic: s.is_monotonic,
                            delta: s.aggregation_temporality == 1,
                        },
                        s.data_points.len(),
                    ),
                    Some(Data::Histogram(h)) => (
                        DataKind::Histogram {
                            delta: h.aggregation_temporality == 1,
                        },
                        h.data_points.len(),
                    ),
                    _ => (DataKind::None, 0),
                };
                if n == 0 {
                    continue;
                }
                out.push(format!(
                    "M {} {} {} {:?} {}",
                    m.name, m.unit, m.description, kind, n
                ));
                let numbers = match &m.data {
                    Some(Data::Gauge(g)) => &g.data_points[..],
                    Some(Data::Sum(s)) => &s.data_points[..],
                    _ => &[],
                };
                for p in numbers {
                    let v = match p.value {
                        Some(number_data_point::Value::AsDouble(d)) => Some(d),
                        Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
                        None => None,
                    };
                    out.push(format!(
                        "N {} {} {} {:?} {}",
                        proto_kvs(&p.attributes),
                        p.start_time_unix_nano,
                        p.time_unix_nano,
                        v.map(f64::to_bits),
                        p.flags
                    ));
                }
                if let Some(Data::Histogram(h)) = &m.data {
                    for p in &h.data_points {
                        out.push(format!(
                            "H {} {} {} {} {:?} {:?} {:?} {}",
                            proto_kvs(&p.attributes),
                            p.start_time_unix_nano,
                            p.time_unix_nano,
                            p.count,
                            p.sum.map(f64::to_bits),
                            p.bucket_counts,
                            p.explicit_bounds
                                .iter()
                                .map(|b| b.to_bits())
                                .collect::<Vec<_>>(),
                            p.flags
                        ));
                    }
                }
            }
        }
        out
    }

    fn any_value_strategy() -> impl Strategy<Value = Option<AnyValue>> {
        use any_value::Value as V;
        prop_oneof![
            "[a-c\\u{e9}]{0,3}".prop_map(|s| Some(AnyValue {
                value: Some(V::StringValue(s))
            })),
            any::<i64>().prop_map(|i| Some(AnyValue {
                value: Some(V::IntValue(i))
            })),
            any::<bool>().prop_map(|b| Some(AnyValue {
                value: Some(V::BoolValue(b))
            })),
            any::<f64>().prop_map(|d| Some(AnyValue {
                value: Some(V::DoubleValue(d))
            })),
            Just(None),
        ]
    }

    fn attrs() -> impl Strategy<Value = Vec<KeyValue>> {
        prop::collection::vec(
            ("[a-d.]{0,4}", any_value_strategy()).prop_map(|(key, value)| KeyValue {
                key,
                value,
                ..Default::default()
            }),
            0..3,
        )
    }

    fn number() -> impl Strategy<Value = NumberDataPoint> {
        (
            attrs(),
            any::<u64>(),
            any::<u64>(),
            prop::option::of(prop_oneof![
                any::<f64>().prop_map(number_data_point::Value::AsDouble),
                any::<i64>().prop_map(number_data_point::Value::AsInt)
            ]),
            0..3u32,
        )
            .prop_map(|(attributes, start, time, value, flags)| NumberDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: time,
                value,
                flags,
                ..Default::default()
            })
    }

    fn hist() -> impl Strategy<Value = HistogramDataPoint> {
        (
            attrs(),
            any::<u64>(),
            any::<u64>(),
            prop::option::of(any::<f64>()),
            prop::collection::vec(any::<u64>(), 0..4),
            prop::collection::vec(any::<f64>(), 0..4),
        )
            .prop_map(
                |(attributes, start, count, sum, bucket_counts, explicit_bounds)| {
                    HistogramDataPoint {
                        attributes,
                        start_time_unix_nano: start,
                        time_unix_nano: start / 2,
                        count,
                        sum,
                        bucket_counts,
                        explicit_bounds,
                        ..Default::default()
                    }
                },
            )
    }

    fn metric() -> impl Strategy<Value = Metric> {
        let data = prop_oneof![
            prop::collection::vec(number(), 0..3)
                .prop_map(|data_points| Data::Gauge(Gauge { data_points })),
            (
                prop::collection::vec(number(), 0..3),
                0..3i32,
                any::<bool>()
            )
                .prop_map(|(data_points, t, m)| Data::Sum(Sum {
                    data_points,
                    aggregation_temporality: t,
                    is_monotonic: m
                })),
            (prop::collection::vec(hist(), 0..3), 0..3i32).prop_map(|(data_points, t)| {
                Data::Histogram(Histogram {
                    data_points,
                    aggregation_temporality: t,
                })
            }),
        ];
        ("[a-z._]{0,6}", "[a-zA-Z{}/]{0,3}", "[ a-z]{0,5}", data).prop_map(
            |(name, unit, description, data)| Metric {
                name,
                unit,
                description,
                data: Some(data),
                ..Default::default()
            },
        )
    }

    fn request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
        prop::collection::vec(
            (
                attrs(),
                prop::collection::vec(prop::collection::vec(metric(), 0..3), 0..3),
            )
                .prop_map(|(attributes, scopes)| ResourceMetrics {
                    resource: Some(Resource {
                        attributes,
                        ..Default::default()
                    }),
                    scope_metrics: scopes
                        .into_iter()
                        .map(|metrics| ScopeMetrics {
                            metrics,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }),
            0..3,
        )
        .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
    }

    proptest! {
        /// Arbitrary bytes never panic the reader.
        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = walk(&bytes, &mut Count::default());
        }

        /// On anything prost encodes, the reader reports exactly what prost decodes.
        #[test]
        fn agrees_with_prost(req in request()) {
            use prost::Message as _;
            let bytes = req.encode_to_vec();
            let mut got = Record::default();
            walk(&bytes, &mut got).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got.0, expected(&req));
        }

        /// Truncating a valid request anywhere is either refused or still well-formed
        /// (never a panic).
        #[test]
        fn truncation_is_safe(req in request(), cut in any::<prop::sample::Index>()) {
            use prost::Message as _;
            let bytes = req.encode_to_vec();
            let cut = if bytes.is_empty() { 0 } else { cut.index(bytes.len()) };
            let _ = walk(&bytes[..cut], &mut Count::default());
        }
    }

    #[test]
    fn unpacked_repeated_and_reordered_fields() {
        // HistogramDataPoint with count (4) first, bucket_counts (6) unpacked, bounds (7) unpacked.
        let mut p = Vec::new();
        p.extend([0x21]); // field 4, fixed64
        p.extend(3u64.to_le_bytes());
        for c in [1u64, 2] {
            p.push(0x31); // field 6, fixed64 (unpacked)
            p.extend(c.to_le_bytes());
        }
        p.push(0x39); // field 7, fixed64 (unpacked double)
        p.extend(1.5f64.to_bits().to_le_bytes());
        let mut h = HistPoint::default();
        hist_point(&p, &mut h).unwrap();
        assert_eq!(h.count, 3);
        assert_eq!(h.counts, vec![1, 2]);
        assert_eq!(h.bounds, vec![1.5]);
        // A wrong wire type for a known field is an error, not a misread.
        assert!(hist_point(&[0x20, 0x01], &mut h).is_err());
        // Groups are refused.
        assert!(walk(&[0x0b], &mut Count::default()).is_err());
    }
}
