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

#[cfg(feature = "traces")]
pub use imp::{TraceCounts, TraceLayer};
pub(crate) use imp::{TraceFilter, TracePipeline, TraceSettings, TracesConfig, resolve};

/// Reads `OTEL_TRACES_EXPORTER`: `Some(true)` for `otlp`, `Some(false)` for `none`.
fn exporter_from_env(read: bool) -> Result<Option<bool>, crate::Error> {
    match crate::telemetry::env(read, "OTEL_TRACES_EXPORTER") {
        None => Ok(None),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "otlp" => Ok(Some(true)),
            "none" => Ok(Some(false)),
            _ => Err(crate::Error::InvalidSetting {
                name: "OTEL_TRACES_EXPORTER",
                value: v,
                reason: "expected `otlp` (export spans over OTLP) or `none`",
            }),
        },
    }
}

#[cfg(not(feature = "traces"))]
mod imp {
    use crate::error::Error;
    use crate::telemetry::TelemetryBuilder;

    /// Trace settings of a builder: none without the `traces` feature.
    #[derive(Debug, Default)]
    pub(crate) struct TracesConfig;

    /// Never made without the `traces` feature.
    #[derive(Debug, Clone)]
    pub(crate) enum TraceSettings {}

    /// Never made without the `traces` feature.
    #[derive(Debug)]
    pub(crate) enum TracePipeline {}

    /// Never made without the `traces` feature.
    #[derive(Clone)]
    pub(crate) enum TraceFilter {}

    impl TraceFilter {
        pub(crate) fn enables(&self, _meta: &tracing_core::Metadata<'_>) -> bool {
            match *self {}
        }
    }

    impl TracePipeline {
        pub(crate) fn start(
            settings: TraceSettings,
            _resource: &opentelemetry_sdk::Resource,
        ) -> Result<TracePipeline, Error> {
            match settings {}
        }
        pub(crate) fn filter(&self) -> TraceFilter {
            match *self {}
        }
        pub(crate) fn layer(&self) -> NoLayer {
            match *self {}
        }
        pub(crate) fn force_flush(&self) {
            match *self {}
        }
        pub(crate) fn shutdown(self) {
            match self {}
        }
    }

    /// The trace layer's place in the stack, never filled without the feature.
    pub(crate) enum NoLayer {}

    impl<S: tracing_core::Subscriber> tracing_subscriber::Layer<S> for NoLayer {}

    /// `OTEL_TRACES_EXPORTER=otlp` in a build without the `traces` feature is an error.
    pub(crate) fn resolve(
        _b: &TelemetryBuilder,
        read: bool,
    ) -> Result<Option<TraceSettings>, Error> {
        if super::exporter_from_env(read)? == Some(true) {
            return Err(Error::InvalidSetting {
                name: "OTEL_TRACES_EXPORTER",
                value: "otlp".to_owned(),
                reason: "this build exports no traces: enable higgsmeter's `traces` feature",
            });
        }
        Ok(None)
    }
}

#[cfg(feature = "traces")]
mod imp {
    use std::any::TypeId;
    use std::collections::HashMap;
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
        BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, Span,
        SpanData, SpanExporter, SpanProcessor,
    };
    use tracing_core::span::{Attributes, Id, Record};
    use tracing_core::{Event, Level, LevelFilter, Metadata, Subscriber};
    use tracing_opentelemetry::OpenTelemetryLayer;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::{Context, Layer};
    use tracing_subscriber::registry::LookupSpan;

    use crate::error::Error;
    use crate::layer::is_activity_callsite;
    use crate::telemetry::{Protocol, Telemetry, TelemetryBuilder, env};

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

    /// Trace settings of a builder (the `with_traces*` setters).
    #[derive(Default)]
    pub(crate) struct TracesConfig {
        enabled: Option<bool>,
        endpoint: Option<String>,
        sampler: Option<Sampler>,
        max_queue_size: Option<usize>,
        export_delay: Option<Duration>,
        filter: Option<Targets>,
    }

    impl fmt::Debug for TracesConfig {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("TracesConfig")
                .field("enabled", &self.enabled)
                .field("endpoint", &self.endpoint)
                .field("sampler", &self.sampler)
                .finish_non_exhaustive()
        }
    }

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
            self.traces.enabled = Some(on);
            self
        }

        /// Where to push spans: the full URL, used as given (else
        /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; else the base endpoint of
        /// [`with_otlp_endpoint`](Self::with_otlp_endpoint) or
        /// `OTEL_EXPORTER_OTLP_ENDPOINT`, with `/v1/traces` appended for HTTP).
        pub fn with_otlp_traces_endpoint(mut self, endpoint: impl Into<String>) -> Self {
            self.traces.endpoint = Some(endpoint.into());
            self
        }

        /// Which traces to keep (else `OTEL_TRACES_SAMPLER` and
        /// `OTEL_TRACES_SAMPLER_ARG`, else `parentbased_always_on`). With
        /// `Sampler::AlwaysOff` no trace layer is installed at all.
        pub fn with_traces_sampler(mut self, sampler: Sampler) -> Self {
            self.traces.sampler = Some(sampler);
            self
        }

        /// The most ended spans held for export (else `OTEL_BSP_MAX_QUEUE_SIZE`, else
        /// 2048). Spans ending while it is full are dropped and counted
        /// ([`Telemetry::trace_counts`]); the worker never waits for the exporter.
        pub fn with_traces_max_queue_size(mut self, spans: usize) -> Self {
            self.traces.max_queue_size = Some(spans.max(1));
            self
        }

        /// How long ended spans wait before they are pushed, at most (else
        /// `OTEL_BSP_SCHEDULE_DELAY`, else 5 s); a full batch (512 spans) goes at once.
        pub fn with_traces_export_delay(mut self, delay: Duration) -> Self {
            self.traces.export_delay = Some(delay);
            self
        }

        /// Which spans and events of yours become part of traces (default: `INFO` and
        /// above, except the exporter's own crates: `opentelemetry*`, `tonic`, `h2`,
        /// `hyper*`, `tower*`, `reqwest`, `tokio`). State, step and transfer spans are
        /// always traced.
        pub fn with_traces_filter(mut self, filter: Targets) -> Self {
            self.traces.filter = Some(filter);
            self
        }
    }

    /// The resolved trace settings: present only when traces are on.
    #[derive(Debug, Clone)]
    pub(crate) struct TraceSettings {
        endpoint: Option<String>,
        protocol: Protocol,
        /// The endpoint in effect is `https://`.
        https: bool,
        /// CA and client certificate files (the metrics' builder settings, then the
        /// `_TRACES_` variables, then the shared ones).
        tls: crate::telemetry::TlsFiles,
        headers: HashMap<String, String>,
        sampler: Sampler,
        max_queue_size: Option<usize>,
        export_delay: Option<Duration>,
        filter: TraceFilter,
    }

    /// Traces on or off, and their settings; `None` when off (or when the sampler keeps
    /// nothing).
    pub(crate) fn resolve(
        b: &TelemetryBuilder,
        read: bool,
    ) -> Result<Option<TraceSettings>, Error> {
        let t = &b.traces;
        let enabled = match t.enabled {
            Some(on) => on,
            None => super::exporter_from_env(read)?.unwrap_or(false),
        };
        if !enabled {
            return Ok(None);
        }
        let protocol =
            Protocol::resolve(b.otlp_protocol, read, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?;
        let endpoint = t
            .endpoint
            .clone()
            .or_else(|| b.otlp_endpoint.as_deref().map(|e| signal_url(e, protocol)))
            .or_else(|| env(read, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .or_else(|| env(read, "OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| signal_url(&e, protocol)));
        let https = endpoint
            .as_deref()
            .is_some_and(|e| e.trim().to_ascii_lowercase().starts_with("https://"));
        let file = |set: &Option<std::path::PathBuf>, var: &str| {
            set.clone().or_else(|| {
                env(read, &format!("OTEL_EXPORTER_OTLP_TRACES_{var}"))
                    .or_else(|| env(read, &format!("OTEL_EXPORTER_OTLP_{var}")))
                    .map(std::path::PathBuf::from)
            })
        };
        let files = b.otlp_tls_files();
        let tls = crate::telemetry::TlsFiles {
            certificate: file(&files.certificate, "CERTIFICATE"),
            client_certificate: file(&files.client_certificate, "CLIENT_CERTIFICATE"),
            client_key: file(&files.client_key, "CLIENT_KEY"),
        };
        let sampler = match &t.sampler {
            Some(s) => s.clone(),
            None => sampler_from_env(
                env(read, "OTEL_TRACES_SAMPLER").as_deref(),
                env(read, "OTEL_TRACES_SAMPLER_ARG").as_deref(),
            )?,
        };
        if matches!(sampler, Sampler::AlwaysOff) {
            return Ok(None);
        }
        Ok(Some(TraceSettings {
            endpoint,
            protocol,
            https,
            tls,
            headers: b.otlp_headers.clone(),
            sampler,
            max_queue_size: t.max_queue_size,
            export_delay: t.export_delay,
            filter: TraceFilter::new(t.filter.clone()),
        }))
    }

    /// `http://host:4318` → `http://host:4318/v1/traces` for HTTP; gRPC takes the base.
    fn signal_url(base: &str, protocol: Protocol) -> String {
        match protocol {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
        }
    }

    /// The sampler of `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, as the
    /// OpenTelemetry specification names them.
    pub(super) fn sampler_from_env(
        name: Option<&str>,
        arg: Option<&str>,
    ) -> Result<Sampler, Error> {
        let ratio = || -> Result<f64, Error> {
            match arg {
                None => Ok(1.0),
                Some(a) => match a.trim().parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                    _ => Err(Error::InvalidSetting {
                        name: "OTEL_TRACES_SAMPLER_ARG",
                        value: a.to_owned(),
                        reason: "expected a ratio from 0 to 1, e.g. 0.25",
                    }),
                },
            }
        };
        let Some(name) = name else {
            return Ok(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));
        };
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatioBased(ratio()?),
            "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            "parentbased_traceidratio" => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio()?)))
            }
            _ => {
                return Err(Error::InvalidSetting {
                    name: "OTEL_TRACES_SAMPLER",
                    value: name.to_owned(),
                    reason: "expected always_on, always_off, traceidratio, \
                             parentbased_always_on, parentbased_always_off or \
                             parentbased_traceidratio",
                });
            }
        })
    }

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
                || (*meta.level() <= self.max
                    && self.targets.would_enable(meta.target(), meta.level()))
        }
    }

    /// Span counts of a trace pipeline; see [`Telemetry::trace_counts`].
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
        /// queue was full. Once the [`Telemetry`] guard has shut the pipeline down,
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
                filter: s.filter,
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
            let done = std::thread::Builder::new()
                .name("higgsmeter-flush".into())
                .spawn(move || provider.force_flush());
            match done.map(|h| h.join()) {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(target: "higgsmeter", error = %e, "span flush failed")
                }
                _ => tracing::warn!(target: "higgsmeter", "span flush thread failed"),
            }
        }

        /// Exports what is queued and stops, off the caller's thread (exporter clients
        /// must not be dropped inside an async runtime); logs what was lost.
        pub(crate) fn shutdown(self) {
            crate::tracker::set_scopes_enter(false);
            let TracePipeline {
                provider, counts, ..
            } = self;
            let shut = std::thread::Builder::new()
                .name("higgsmeter-shutdown".into())
                .spawn(move || {
                    let shut = provider.shutdown();
                    drop(provider);
                    shut
                });
            match shut.map(|h| h.join()) {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(target: "higgsmeter", error = %e, "final span export failed")
                }
                _ => tracing::warn!(target: "higgsmeter", "span shutdown thread failed"),
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

    #[cfg(not(feature = "tls"))]
    fn no_tls(endpoint: &str) -> Error {
        Error::InvalidSetting {
            name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_CERTIFICATE",
            value: endpoint.to_owned(),
            reason: "this build has no TLS: enable higgsmeter's `tls` feature",
        }
    }

    fn otlp_exporter(s: &TraceSettings) -> Result<opentelemetry_otlp::SpanExporter, Error> {
        let endpoint_label = s
            .endpoint
            .clone()
            .unwrap_or_else(|| "the OTEL_EXPORTER_OTLP_* endpoint".to_owned());
        match s.protocol {
            Protocol::Grpc => {
                let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                if let Some(e) = &s.endpoint {
                    b = b.with_endpoint(e.clone());
                }
                if !s.headers.is_empty() {
                    b = b.with_metadata(crate::otlp::metadata(&s.headers)?);
                }
                if s.https || s.tls.any() {
                    #[cfg(feature = "tls")]
                    {
                        b = b.with_tls_config(crate::otlp::tonic_tls(&s.tls)?);
                    }
                    #[cfg(not(feature = "tls"))]
                    return Err(no_tls(&endpoint_label));
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
                if s.https || s.tls.any() {
                    #[cfg(feature = "tls")]
                    {
                        b = b.with_http_client(crate::otlp::http_client(&s.tls)?);
                    }
                    #[cfg(not(feature = "tls"))]
                    return Err(no_tls(&endpoint_label));
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
    /// with [`with_subscriber(false)`](TelemetryBuilder::with_subscriber), add
    /// [`Telemetry::trace_layer`] to your own subscriber beside
    /// [`Telemetry::activity_layer`].
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

    impl Telemetry {
        /// tracing-opentelemetry's layer for this pipeline's spans, to add to a
        /// subscriber of your own (with
        /// [`with_subscriber(false)`](TelemetryBuilder::with_subscriber)); `None` when
        /// traces are off.
        pub fn trace_layer<S>(&self) -> Option<TraceLayer<S>>
        where
            S: Subscriber + for<'a> LookupSpan<'a>,
        {
            self.traces.as_ref().map(TracePipeline::layer)
        }

        /// How many spans ended, were exported, failed or were dropped so far; `None`
        /// when traces are off.
        pub fn trace_counts(&self) -> Option<TraceCounts> {
            self.traces.as_ref().map(TracePipeline::counts)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::mpsc;

        #[test]
        fn samplers_follow_the_specification_names() {
            let s = |n: Option<&str>, a: Option<&str>| format!("{:?}", sampler_from_env(n, a));
            assert_eq!(s(None, None), s(Some("parentbased_always_on"), None));
            assert!(s(Some("always_off"), None).contains("AlwaysOff"));
            assert!(s(Some("traceidratio"), Some("0.25")).contains("0.25"));
            assert!(s(Some("parentbased_traceidratio"), None).contains("ParentBased"));
            let err = sampler_from_env(Some("traceidratio"), Some("2"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("OTEL_TRACES_SAMPLER_ARG"), "{err}");
            let err = sampler_from_env(Some("jaeger_remote"), None)
                .unwrap_err()
                .to_string();
            assert!(err.contains("always_on"), "{err}");
        }

        #[test]
        fn settings_come_from_the_builder_and_default_to_off() {
            let b = || Telemetry::builder().with_env(false);
            assert!(
                resolve(&b(), false).unwrap().is_none(),
                "off unless asked for"
            );
            let on = b().with_traces(true).with_otlp_endpoint("http://h:4318");
            let s = resolve(&on, false).unwrap().unwrap();
            assert_eq!(s.endpoint.as_deref(), Some("http://h:4318/v1/traces"));
            assert_eq!(s.protocol, Protocol::HttpProtobuf);
            assert!(
                matches!(s.sampler, Sampler::ParentBased(_)),
                "{:?}",
                s.sampler
            );
            let own = b()
                .with_traces(true)
                .with_otlp_protocol(Protocol::Grpc)
                .with_otlp_endpoint("http://metrics:4317")
                .with_otlp_traces_endpoint("http://traces:4317");
            let s = resolve(&own, false).unwrap().unwrap();
            assert_eq!(s.endpoint.as_deref(), Some("http://traces:4317"));
            let off = b()
                .with_traces(true)
                .with_traces_sampler(Sampler::AlwaysOff);
            assert!(
                resolve(&off, false).unwrap().is_none(),
                "always_off builds nothing"
            );
        }

        #[test]
        fn http_endpoints_get_the_traces_path() {
            assert_eq!(
                signal_url("http://127.0.0.1:4318/", Protocol::HttpProtobuf),
                "http://127.0.0.1:4318/v1/traces"
            );
            assert_eq!(
                signal_url("http://127.0.0.1:4317", Protocol::Grpc),
                "http://127.0.0.1:4317"
            );
        }

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
                https: false,
                tls: crate::telemetry::TlsFiles::default(),
                headers: HashMap::new(),
                sampler: Sampler::AlwaysOn,
                max_queue_size: Some(4),
                export_delay: Some(Duration::from_millis(1)),
                filter: TraceFilter::new(None),
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
}
