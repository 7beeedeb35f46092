//! OTLP receivers: gRPC (tonic) and HTTP (axum), both feeding the [`Aggregator`](crate::Aggregator).
//!
//! Responses follow OTLP: success; partial success with `rejected_data_points` and a
//! message when some points are refused; a gRPC status / HTTP code with a message when
//! the request itself is unusable. Traces and logs are refused as not supported.

pub(crate) mod grpc;
pub(crate) mod http;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};

use crate::aggregate::IngestResult;

/// The OTLP response for an ingest result.
pub(crate) fn response(result: &IngestResult) -> ExportMetricsServiceResponse {
    let partial_success = (result.rejected > 0).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: i64::try_from(result.rejected).unwrap_or(i64::MAX),
        error_message: result.message.clone(),
    });
    ExportMetricsServiceResponse { partial_success }
}

/// What a traces or logs request is told.
pub(crate) const SIGNAL_NOT_SUPPORTED: &str = "higgsmeter-collector receives metrics only; send traces and logs to another OpenTelemetry collector";

/// What a request without the bearer token is told (never what it sent).
pub(crate) const UNAUTHENTICATED: &str = "missing or wrong bearer token: this receiver requires `authorization: Bearer <token>` (its auth.authenticator); nothing of this request was counted";

/// What a request that arrives while the collector shuts down is told (it is not
/// counted: the sender retries against the next process).
pub(crate) const SHUTTING_DOWN: &str =
    "higgsmeter-collector is shutting down; retry shortly (nothing of this request was counted)";
