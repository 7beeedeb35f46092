//! The Prometheus remote write 1.0 messages (`prometheus/prompb/remote.proto` and
//! `types.proto`), the fields this exporter sends, declared with prost's derive (no
//! code generation step). Field numbers and types are the protocol's.

/// `prometheus.WriteRequest`: what one remote write request carries.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteRequest {
    /// The series, each with its samples.
    #[prost(message, repeated, tag = "1")]
    pub(crate) timeseries: Vec<TimeSeries>,
    /// Family metadata (type, help); receivers may ignore it.
    #[prost(message, repeated, tag = "3")]
    pub(crate) metadata: Vec<MetricMetadata>,
}

/// `prometheus.TimeSeries`: labels sorted by name, `__name__` among them.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TimeSeries {
    /// The series' labels.
    #[prost(message, repeated, tag = "1")]
    pub(crate) labels: Vec<Label>,
    /// Its samples, oldest first.
    #[prost(message, repeated, tag = "2")]
    pub(crate) samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    /// The label's name.
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    /// Its value (never empty: an empty value is no label).
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    /// The value.
    #[prost(double, tag = "1")]
    pub(crate) value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub(crate) timestamp: i64,
}

/// `prometheus.MetricMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MetricMetadata {
    /// `MetricType`: see the constants below.
    #[prost(int32, tag = "1")]
    pub(crate) r#type: i32,
    /// The family's name.
    #[prost(string, tag = "2")]
    pub(crate) metric_family_name: String,
    /// Its help text.
    #[prost(string, tag = "4")]
    pub(crate) help: String,
    /// Its unit.
    #[prost(string, tag = "5")]
    pub(crate) unit: String,
}

/// `MetricMetadata.MetricType.COUNTER`.
pub(crate) const TYPE_COUNTER: i32 = 1;
/// `MetricMetadata.MetricType.GAUGE`.
pub(crate) const TYPE_GAUGE: i32 = 2;
/// `MetricMetadata.MetricType.HISTOGRAM`.
pub(crate) const TYPE_HISTOGRAM: i32 = 3;
/// `MetricMetadata.MetricType.INFO`.
pub(crate) const TYPE_INFO: i32 = 6;
