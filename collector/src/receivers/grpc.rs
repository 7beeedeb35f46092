//! OTLP/gRPC receiver (tonic): metrics in, traces and logs refused as unimplemented.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::{SIGNAL_NOT_SUPPORTED, response};
use crate::aggregate::Aggregator;
use crate::self_metrics::{RequestRefusal, SelfMetrics, Transport};

struct Metrics {
    aggregator: Arc<Aggregator>,
}

#[tonic::async_trait]
impl MetricsService for Metrics {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let result = self.aggregator.ingest(request.get_ref(), Transport::Grpc);
        Ok(Response::new(response(&result)))
    }
}

struct Refuse;

#[tonic::async_trait]
impl TraceService for Refuse {
    async fn export(
        &self,
        _: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        Err(Status::unimplemented(SIGNAL_NOT_SUPPORTED))
    }
}

#[tonic::async_trait]
impl LogsService for Refuse {
    async fn export(
        &self,
        _: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        Err(Status::unimplemented(SIGNAL_NOT_SUPPORTED))
    }
}

/// Counts every request, and every request tonic or we refused (a trailers-only
/// response: its `grpc-status` is in the headers). tonic reports undecodable protobuf
/// as INTERNAL; OTLP says INVALID_ARGUMENT, so that is what the sender gets.
fn account(
    stats: &SelfMetrics,
    mut resp: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    stats.request(Transport::Grpc);
    let Some(code) = resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return resp;
    };
    let message = resp
        .headers()
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let reason = match tonic::Code::from(code) {
        tonic::Code::Ok => return resp,
        tonic::Code::Internal if message.contains("decompress") => RequestRefusal::Decompress,
        tonic::Code::Internal | tonic::Code::InvalidArgument | tonic::Code::DataLoss => {
            resp.headers_mut()
                .insert("grpc-status", http::HeaderValue::from_static("3"));
            RequestRefusal::Malformed
        }
        tonic::Code::ResourceExhausted | tonic::Code::OutOfRange => RequestRefusal::TooLarge,
        tonic::Code::Unimplemented if message.contains("metrics only") => {
            RequestRefusal::UnsupportedSignal
        }
        tonic::Code::Unimplemented
            if message.contains("compress") || message.contains("encoding") =>
        {
            RequestRefusal::Decompress
        }
        _ => RequestRefusal::Other,
    };
    stats.refuse_request(Transport::Grpc, reason);
    resp
}

/// `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Serves OTLP/gRPC on `listener` until `cancel`.
pub(crate) async fn serve(
    listener: TcpListener,
    max_message: usize,
    aggregator: Arc<Aggregator>,
    stats: Arc<SelfMetrics>,
    cancel: CancellationToken,
) {
    let metrics = MetricsServiceServer::new(Metrics { aggregator })
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message);
    let traces = TraceServiceServer::new(Refuse).accept_compressed(CompressionEncoding::Gzip);
    let logs = LogsServiceServer::new(Refuse).accept_compressed(CompressionEncoding::Gzip);
    let layer = tower::ServiceBuilder::new().map_response(move |resp| account(&stats, resp));
    // Larger HTTP/2 windows: a 1,000-point request is ~130 KiB, over the 64 KiB default.
    let result = tonic::transport::Server::builder()
        .initial_stream_window_size(Some(2 * 1024 * 1024))
        .initial_connection_window_size(Some(8 * 1024 * 1024))
        .layer(layer)
        .add_service(metrics)
        .add_service(traces)
        .add_service(logs)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            cancel.cancelled(),
        )
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "the OTLP/gRPC receiver stopped");
    }
}
