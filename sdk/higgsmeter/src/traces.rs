//! Traces: with `OTEL_TRACES_EXPORTER=otlp` (or
//! [`with_traces(true)`](crate::TelemetryBuilder::with_traces)), `init()` adds
//! tracing-opentelemetry's layer to the subscriber it installs, so state scopes,
//! `#[track_state]` calls, step and transfer spans and the user's own spans become
//! OpenTelemetry spans, exported over OTLP by a bounded batch processor, under the
//! metrics' resource. Without it, nothing of this module runs: no layer, no thread, no
//! cost per span.
//!
//! A sampler that keeps nothing (`always_off`) installs no layer at all: every span
//! would be dropped, so none is built. Spans a sampler drops (a `traceidratio` root
//! left out, …) still cost the layer their bookkeeping.

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context as OtelContext;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span, SpanData,
    SpanExporter, SpanProcessor,
};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Level, LevelFilter, Metadata, Subscriber};
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::error::Error;
use crate::layer::is_activity_callsite;
use crate::otlp::{metadata, no_tls, tls};
use crate::pipeline::{Pipeline, on_own_thread};
use crate::settings::{Protocol, TraceSettings};

/// The targets never traced by default: the exporter's own stack (its spans and
/// events would feed the pipeline that exports them).
const EXPORTER_TARGETS: [&str; 7] = [
    "opentelemetry",
    "tonic",
    "h2",
    "hyper",
    "tower",
    "reqwest",
    "tokio",
];

/// Which callsites the trace layer is shown: activity spans, and what the targets
/// enable.
#[derive(Clone, Debug)]
pub(crate) struct TraceFilter {
    targets: Targets,
    max: LevelFilter,
}

impl TraceFilter {
    fn new(targets: Option<Targets>) -> TraceFilter {
        let targets = targets.unwrap_or_else(|| {
            Targets::new()
                .with_default(Level::INFO)
                .with_targets(EXPORTER_TARGETS.map(|t| (t, LevelFilter::OFF)))
        });
        let max = targets
            .iter()
            .map(|(_, level)| level)
            .chain(targets.default_level())
            .max()
            .unwrap_or(LevelFilter::OFF);
        TraceFilter { targets, max }
    }

    #[inline]
    pub(crate) fn enables(&self, meta: &Metadata<'_>) -> bool {
        is_activity_callsite(meta)
            || (*meta.level() <= self.max && self.targets.would_enable(meta.target(), meta.level()))
    }
}

/// Span counts of a trace pipeline; see [`Telemetry::trace_counts`](crate::Telemetry::trace_counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceCounts {
    /// Sampled spans that ended and were offered to the export queue.
    pub ended: u64,
    /// Spans the exporter delivered.
    pub exported: u64,
    /// Spans in batches the exporter failed to deliver.
    pub failed: u64,
}

impl TraceCounts {
    /// Spans neither delivered nor failed: still queued, or dropped because the
    /// queue was full. Once the [`Telemetry`](crate::Telemetry) guard has shut the pipeline down,
    /// nothing is queued, and this is exactly the number dropped.
    pub fn queued_or_dropped(&self) -> u64 {
        self.ended
            .saturating_sub(self.exported)
            .saturating_sub(self.failed)
    }
}

#[derive(Debug, Default)]
struct Counters {
    ended: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
}

impl Counters {
    fn read(&self) -> TraceCounts {
        // `exported` and `failed` first: a span is counted as ended before it is
        // exported, so the difference never goes below zero mid-flight.
        let exported = self.exported.load(Ordering::Acquire);
        let failed = self.failed.load(Ordering::Acquire);
        TraceCounts {
            ended: self.ended.load(Ordering::Acquire),
            exported,
            failed,
        }
    }
}

/// The SDK's batch processor (bounded queue, export on its own thread), counting
/// the spans offered to it.
#[derive(Debug)]
struct CountingProcessor {
    inner: BatchSpanProcessor,
    counts: Arc<Counters>,
}

impl SpanProcessor for CountingProcessor {
    fn on_start(&self, span: &mut Span, cx: &OtelContext) {
        self.inner.on_start(span, cx);
    }
    fn on_end(&self, span: SpanData) {
        self.counts.ended.fetch_add(1, Ordering::AcqRel);
        self.inner.on_end(span);
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter counting what it delivered and what it failed to.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    counts: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.counts.exported.fetch_add(n, Ordering::AcqRel),
            Err(_) => self.counts.failed.fetch_add(n, Ordering::AcqRel),
        };
        result
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A running trace pipeline: the tracer provider and its counts.
pub(crate) struct TracePipeline {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    counts: Arc<Counters>,
    filter: TraceFilter,
}

impl fmt::Debug for TracePipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TracePipeline")
            .field("counts", &self.counts.read())
            .finish_non_exhaustive()
    }
}

impl TracePipeline {
    /// Builds the OTLP span exporter and the tracer provider. Must run inside the
    /// export runtime's context (tonic connects lazily on it).
    pub(crate) fn start(s: TraceSettings, resource: &Resource) -> Result<TracePipeline, Error> {
        let exporter = otlp_exporter(&s)?;
        TracePipeline::with_exporter(exporter, s, resource)
    }

    fn with_exporter<E: SpanExporter + 'static>(
        exporter: E,
        s: TraceSettings,
        resource: &Resource,
    ) -> Result<TracePipeline, Error> {
        let counts = Arc::new(Counters::default());
        let mut batch = BatchConfigBuilder::default();
        if let Some(n) = s.max_queue_size {
            batch = batch
                .with_max_queue_size(n)
                .with_max_export_batch_size(n.min(512));
        }
        if let Some(d) = s.export_delay {
            batch = batch.with_scheduled_delay(d);
        }
        let processor = BatchSpanProcessor::builder(CountingExporter {
            inner: exporter,
            counts: counts.clone(),
        })
        .with_batch_config(batch.build())
        .build();
        let provider = SdkTracerProvider::builder()
            .with_sampler(s.sampler)
            .with_resource(resource.clone())
            .with_span_processor(CountingProcessor {
                inner: processor,
                counts: counts.clone(),
            })
            .build();
        let tracer = provider.tracer("higgsmeter");
        crate::tracker::set_scopes_enter(true);
        Ok(TracePipeline {
            provider,
            tracer,
            counts,
            filter: TraceFilter::new(s.filter),
        })
    }

    pub(crate) fn filter(&self) -> TraceFilter {
        self.filter.clone()
    }

    pub(crate) fn layer<S>(&self) -> TraceLayer<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        TraceLayer {
            inner: OpenTelemetryLayer::new(self.tracer.clone())
                .with_tracked_inactivity(false)
                .with_threads(false),
            filter: self.filter.clone(),
        }
    }

    pub(crate) fn counts(&self) -> TraceCounts {
        self.counts.read()
    }

    /// Exports what is queued, off the caller's thread. Errors are logged.
    pub(crate) fn force_flush(&self) {
        let provider = self.provider.clone();
        match on_own_thread("higgsmeter-flush", move || provider.force_flush()) {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(target: "higgsmeter", error = %e, "span flush failed")
            }
            None => tracing::warn!(target: "higgsmeter", "span flush thread failed"),
        }
    }

    /// Exports what is queued and stops, off the caller's thread (exporter clients
    /// must not be dropped inside an async runtime); logs what was lost.
    pub(crate) fn shutdown(self) {
        crate::tracker::set_scopes_enter(false);
        let TracePipeline {
            provider, counts, ..
        } = self;
        let shut = on_own_thread("higgsmeter-shutdown", move || {
            let shut = provider.shutdown();
            drop(provider);
            shut
        });
        match shut {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(target: "higgsmeter", error = %e, "final span export failed")
            }
            None => tracing::warn!(target: "higgsmeter", "span shutdown thread failed"),
        }
        let c = counts.read();
        if c.failed > 0 || c.queued_or_dropped() > 0 {
            tracing::warn!(
                target: "higgsmeter",
                ended = c.ended,
                exported = c.exported,
                failed = c.failed,
                dropped = c.queued_or_dropped(),
                "not every span was exported (dropped: the queue was full; raise \
                 OTEL_BSP_MAX_QUEUE_SIZE or with_traces_max_queue_size)"
            );
        }
    }
}

impl Pipeline for TracePipeline {
    fn flush(&self) {
        self.force_flush();
    }

    /// Every span closed by now is exported or counted.
    fn shutdown(self: Box<Self>) {
        TracePipeline::shutdown(*self);
    }
}

fn otlp_exporter(s: &TraceSettings) -> Result<opentelemetry_otlp::SpanExporter, Error> {
    let endpoint_label = s
        .endpoint
        .clone()
        .unwrap_or_else(|| "the OTEL_EXPORTER_OTLP_* endpoint".to_owned());
    let refused = || {
        no_tls(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_CERTIFICATE",
            endpoint_label.clone(),
        )
    };
    match s.protocol {
        Protocol::Grpc => {
            let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                b = b.with_metadata(metadata(&s.headers)?);
            }
            if s.tls_on {
                b = tls::grpc(b, &s.tls, refused)?;
            }
            b.build()
        }
        Protocol::HttpProtobuf => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            if !s.headers.is_empty() {
                b = b.with_headers(s.headers.clone());
            }
            if s.tls_on {
                b = tls::http(b, &s.tls, refused)?;
            }
            b.build()
        }
    }
    .map_err(|source| Error::OtlpTraces {
        endpoint: endpoint_label,
        source,
    })
}

/// tracing-opentelemetry's layer, shown only the spans and events its filter
/// enables (activity spans, and your spans at `INFO` and above by default).
///
/// The subscriber [`init()`](crate::init) installs carries it when traces are on;
/// with [`with_subscriber(false)`](crate::TelemetryBuilder::with_subscriber), add
/// [`Telemetry::trace_layer`](crate::Telemetry::trace_layer) to your own subscriber
/// beside [`Telemetry::activity_layer`](crate::Telemetry::activity_layer).
pub struct TraceLayer<S> {
    inner: OpenTelemetryLayer<S, SdkTracer>,
    filter: TraceFilter,
}

impl<S> fmt::Debug for TraceLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for TraceLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if self.filter.enables(attrs.metadata()) {
            self.inner.on_new_span(attrs, id, ctx);
        }
    }

    // A span it was not shown has no OpenTelemetry data, which the inner layer
    // finds and skips in each of these.
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.inner.on_record(id, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.filter.enables(event.metadata()) {
            self.inner.on_event(event, ctx);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }

    // Passes look-ups through, so `tracing_opentelemetry::OpenTelemetrySpanExt`
    // (a span's `context()`, `set_parent`) finds the inner layer.
    #[allow(
        unsafe_code,
        reason = "Layer::downcast_raw is an unsafe trait method; this only forwards \
                  to the inner layer's, whose pointers stay valid for `&self`"
    )]
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: the inner layer's contract: a pointer to a value of type `id`
        // that lives as long as `&self.inner`, and so as `&self`.
        unsafe { self.inner.downcast_raw(id) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::trace::Sampler;
    use std::collections::HashMap;
    use std::sync::mpsc;

    #[test]
    fn the_default_filter_keeps_the_exporters_own_crates_out() {
        let f = TraceFilter::new(None);
        tracing::subscriber::with_default(tracing_subscriber::registry(), || {
            let enables = |span: tracing::Span| span.metadata().is_some_and(|m| f.enables(m));
            assert!(!enables(tracing::info_span!(target: "h2::proto", "conn")));
            assert!(!enables(
                tracing::info_span!(target: "opentelemetry_sdk", "x")
            ));
            assert!(enables(tracing::info_span!("handle_request")));
            assert!(!enables(tracing::debug_span!("detail")));
            assert!(enables(crate::step_span("decoder", "decode", None)));
        });
    }

    /// An exporter that holds its first batch until told to go on.
    #[derive(Debug)]
    struct Gated {
        go: std::sync::Mutex<Option<mpsc::Receiver<()>>>,
    }

    impl SpanExporter for Gated {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let rx = self.go.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(rx) = rx {
                let _ = rx.recv_timeout(Duration::from_secs(30));
            }
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking_the_caller() {
        let (go, rx) = mpsc::channel();
        let settings = TraceSettings {
            endpoint: None,
            protocol: Protocol::Grpc,
            tls: crate::settings::TlsFiles::default(),
            tls_on: false,
            headers: HashMap::new(),
            sampler: Sampler::AlwaysOn,
            max_queue_size: Some(4),
            export_delay: Some(Duration::from_millis(1)),
            filter: None,
        };
        let pipeline = TracePipeline::with_exporter(
            Gated {
                go: std::sync::Mutex::new(Some(rx)),
            },
            settings,
            &Resource::builder_empty().build(),
        )
        .unwrap();
        use opentelemetry::trace::{Span as _, Tracer as _};
        for _ in 0..100 {
            pipeline.tracer.start("s").end();
        }
        // At most one batch (4) in the exporter's hands and 4 queued: the rest dropped.
        let before = pipeline.counts();
        assert_eq!((before.ended, before.exported), (100, 0), "{before:?}");
        go.send(()).unwrap();
        let counts = pipeline.counts.clone();
        pipeline.shutdown();
        let after = counts.read();
        assert_eq!(after.ended, 100);
        assert_eq!(after.failed, 0);
        assert!(after.exported >= 1 && after.exported <= 8, "{after:?}");
        assert_eq!(after.exported + after.queued_or_dropped(), 100);
    }
}
