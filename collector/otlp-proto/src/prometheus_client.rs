//! The Prometheus protobuf exposition's messages (`io.prometheus.client`, the
//! `metrics.proto` of prometheus/client_model, Apache-2.0), written by hand with prost's
//! derive: what a scraper asking for `application/vnd.google.protobuf;
//! proto=io.prometheus.client.MetricFamily; encoding=delimited` reads, one
//! length-delimited [`MetricFamily`] after another.
//!
//! The `.proto` is proto2; these fields are declared without presence, so a field at its
//! default is not written. Every reader of that format takes a missing field for its
//! default (a missing `type` is `COUNTER`, a missing `upper_bound` is 0), as Prometheus'
//! own proto3 copy of the file does. The native-histogram fields (schema, spans, deltas)
//! and exemplars are declared so that they decode; the collector writes classic
//! histograms only (buckets), which every Prometheus reads as `_bucket`, `_sum` and
//! `_count` series.

/// A label's name and value (unescaped).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LabelPair {
    /// The label's name.
    #[prost(string, tag = "1")]
    pub name: ::prost::alloc::string::String,
    /// The label's value.
    #[prost(string, tag = "2")]
    pub value: ::prost::alloc::string::String,
}

/// A family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    /// A monotonic counter (`Metric::counter`).
    Counter = 0,
    /// A gauge (`Metric::gauge`).
    Gauge = 1,
    /// A summary (`Metric::summary`).
    Summary = 2,
    /// An untyped value (`Metric::untyped`).
    Untyped = 3,
    /// A histogram (`Metric::histogram`).
    Histogram = 4,
    /// A gauge histogram (`Metric::histogram`).
    GaugeHistogram = 5,
}

/// A gauge's value.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct Gauge {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// A counter's value.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Counter {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// An exemplar.
    #[prost(message, optional, tag = "2")]
    pub exemplar: ::core::option::Option<Exemplar>,
    /// When the counter was created.
    #[prost(message, optional, tag = "3")]
    pub created_timestamp: ::core::option::Option<Timestamp>,
}

/// A summary's quantile.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct Quantile {
    /// The quantile (0 to 1).
    #[prost(double, tag = "1")]
    pub quantile: f64,
    /// Its value.
    #[prost(double, tag = "2")]
    pub value: f64,
}

/// A summary.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Summary {
    /// Observations.
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    /// Their sum.
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    /// The quantiles.
    #[prost(message, repeated, tag = "3")]
    pub quantile: ::prost::alloc::vec::Vec<Quantile>,
    /// When the summary was created.
    #[prost(message, optional, tag = "4")]
    pub created_timestamp: ::core::option::Option<Timestamp>,
}

/// An untyped value.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct Untyped {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// A histogram: classic (`bucket`) and/or native (schema, zero bucket, spans).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Histogram {
    /// Observations.
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    /// Observations, for a float histogram (overrides `sample_count` when set).
    #[prost(double, tag = "4")]
    pub sample_count_float: f64,
    /// Their sum.
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    /// The classic buckets, cumulative, by increasing upper bound (the `+Inf` bucket
    /// may be left out: it is then `sample_count`).
    #[prost(message, repeated, tag = "3")]
    pub bucket: ::prost::alloc::vec::Vec<Bucket>,
    /// When the histogram was created.
    #[prost(message, optional, tag = "15")]
    pub created_timestamp: ::core::option::Option<Timestamp>,
    /// Native histogram: the schema (resolution).
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    /// Native histogram: the zero bucket's width.
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    /// Native histogram: observations in the zero bucket.
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    /// Native histogram: observations in the zero bucket, for a float histogram.
    #[prost(double, tag = "8")]
    pub zero_count_float: f64,
    /// Native histogram: the negative buckets' spans.
    #[prost(message, repeated, tag = "9")]
    pub negative_span: ::prost::alloc::vec::Vec<BucketSpan>,
    /// Native histogram: the negative buckets' counts, delta-encoded.
    #[prost(sint64, repeated, tag = "10")]
    pub negative_delta: ::prost::alloc::vec::Vec<i64>,
    /// Native histogram: the negative buckets' counts, for a float histogram.
    #[prost(double, repeated, tag = "11")]
    pub negative_count: ::prost::alloc::vec::Vec<f64>,
    /// Native histogram: the positive buckets' spans.
    #[prost(message, repeated, tag = "12")]
    pub positive_span: ::prost::alloc::vec::Vec<BucketSpan>,
    /// Native histogram: the positive buckets' counts, delta-encoded.
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: ::prost::alloc::vec::Vec<i64>,
    /// Native histogram: the positive buckets' counts, for a float histogram.
    #[prost(double, repeated, tag = "14")]
    pub positive_count: ::prost::alloc::vec::Vec<f64>,
    /// Native histogram: exemplars.
    #[prost(message, repeated, tag = "16")]
    pub exemplars: ::prost::alloc::vec::Vec<Exemplar>,
}

/// A classic histogram's bucket.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Bucket {
    /// Observations at or below `upper_bound` (cumulative).
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    /// The same, for a float histogram (overrides `cumulative_count` when set).
    #[prost(double, tag = "4")]
    pub cumulative_count_float: f64,
    /// The bucket's upper bound (inclusive).
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
    /// An exemplar.
    #[prost(message, optional, tag = "3")]
    pub exemplar: ::core::option::Option<Exemplar>,
}

/// A run of native-histogram buckets.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct BucketSpan {
    /// Gap to the previous span (or the start index of the first).
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    /// Consecutive buckets.
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// An exemplar.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Exemplar {
    /// Its labels.
    #[prost(message, repeated, tag = "1")]
    pub label: ::prost::alloc::vec::Vec<LabelPair>,
    /// Its value.
    #[prost(double, tag = "2")]
    pub value: f64,
    /// When it was observed.
    #[prost(message, optional, tag = "3")]
    pub timestamp: ::core::option::Option<Timestamp>,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds within the second.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// One series of a family: its labels and the value of the family's type.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Metric {
    /// Its labels (the family's name is not one).
    #[prost(message, repeated, tag = "1")]
    pub label: ::prost::alloc::vec::Vec<LabelPair>,
    /// A gauge's value.
    #[prost(message, optional, tag = "2")]
    pub gauge: ::core::option::Option<Gauge>,
    /// A counter's value.
    #[prost(message, optional, tag = "3")]
    pub counter: ::core::option::Option<Counter>,
    /// A summary.
    #[prost(message, optional, tag = "4")]
    pub summary: ::core::option::Option<Summary>,
    /// An untyped value.
    #[prost(message, optional, tag = "5")]
    pub untyped: ::core::option::Option<Untyped>,
    /// A histogram.
    #[prost(message, optional, tag = "7")]
    pub histogram: ::core::option::Option<Histogram>,
    /// The sample's time (ms since the Unix epoch); 0: the scrape's time.
    #[prost(int64, tag = "6")]
    pub timestamp_ms: i64,
}

/// A family: its name, help, type and series.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct MetricFamily {
    /// The name (a counter's with its `_total`; a histogram's without `_bucket`).
    #[prost(string, tag = "1")]
    pub name: ::prost::alloc::string::String,
    /// The help text (unescaped).
    #[prost(string, tag = "2")]
    pub help: ::prost::alloc::string::String,
    /// The type.
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    /// The series.
    #[prost(message, repeated, tag = "4")]
    pub metric: ::prost::alloc::vec::Vec<Metric>,
    /// The unit.
    #[prost(string, tag = "5")]
    pub unit: ::prost::alloc::string::String,
}
