//! The trace settings of the builder and the trace accessors of the guard (`traces`
//! feature).

use std::time::Duration;

use opentelemetry_sdk::trace::Sampler;
use tracing_core::Subscriber;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use super::{Telemetry, TelemetryBuilder};
use crate::traces::{TraceCounts, TraceLayer, TracePipeline};

impl TelemetryBuilder {
    /// Exports spans over OTLP (else `OTEL_TRACES_EXPORTER`: `otlp` on, `none` or
    /// unset off).
    ///
    /// With traces on, the subscriber `init()` installs also hands every state
    /// scope, `#[track_state]` call, [`step_span`](crate::step_span),
    /// [`transfer_span`](crate::transfer_span) and span of yours at `INFO` or above
    /// (see [`with_traces_filter`](Self::with_traces_filter)) to
    /// `tracing-opentelemetry`, which makes each an OpenTelemetry span, nested as
    /// in the code, under the metrics' resource. The metrics do not change.
    pub fn with_traces(mut self, on: bool) -> Self {
        self.requests.traces.enabled = Some(on);
        self
    }

    /// Where to push spans: the full URL, used as given (else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; else the base endpoint of
    /// [`with_otlp_endpoint`](Self::with_otlp_endpoint) or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, with `/v1/traces` appended for HTTP).
    pub fn with_otlp_traces_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.requests.traces.endpoint = Some(endpoint.into());
        self
    }

    /// Which traces to keep (else `OTEL_TRACES_SAMPLER` and
    /// `OTEL_TRACES_SAMPLER_ARG`, else `parentbased_always_on`). With
    /// `Sampler::AlwaysOff` no trace layer is installed at all.
    pub fn with_traces_sampler(mut self, sampler: Sampler) -> Self {
        self.requests.traces.sampler = Some(sampler);
        self
    }

    /// The most ended spans held for export (else `OTEL_BSP_MAX_QUEUE_SIZE`, else
    /// 2048). Spans ending while it is full are dropped and counted
    /// ([`Telemetry::trace_counts`]); the worker never waits for the exporter.
    pub fn with_traces_max_queue_size(mut self, spans: usize) -> Self {
        self.requests.traces.max_queue_size = Some(spans.max(1));
        self
    }

    /// How long ended spans wait before they are pushed, at most (else
    /// `OTEL_BSP_SCHEDULE_DELAY`, else 5 s); a full batch (512 spans) goes at once.
    pub fn with_traces_export_delay(mut self, delay: Duration) -> Self {
        self.requests.traces.export_delay = Some(delay);
        self
    }

    /// Which spans and events of yours become part of traces (default: `INFO` and
    /// above, except the exporter's own crates: `opentelemetry*`, `tonic`, `h2`,
    /// `hyper*`, `tower*`, `reqwest`, `tokio`). State, step and transfer spans are
    /// always traced.
    pub fn with_traces_filter(mut self, filter: Targets) -> Self {
        self.requests.traces.filter = Some(filter);
        self
    }
}

impl Telemetry {
    /// tracing-opentelemetry's layer for this pipeline's spans, to add to a
    /// subscriber of your own (with
    /// [`with_subscriber(false)`](TelemetryBuilder::with_subscriber)); `None` when
    /// traces are off.
    pub fn trace_layer<S>(&self) -> Option<TraceLayer<S>>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        self.pipeline::<TracePipeline>().map(TracePipeline::layer)
    }

    /// How many spans ended, were exported, failed or were dropped so far; `None`
    /// when traces are off.
    pub fn trace_counts(&self) -> Option<TraceCounts> {
        self.pipeline::<TracePipeline>().map(TracePipeline::counts)
    }
}
