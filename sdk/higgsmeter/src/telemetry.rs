//! `init()`: the OpenTelemetry wiring of a worker, behind one guard. The builder holds
//! the requests ([`Requests`]), resolved once into each pipeline's settings; the guard
//! holds the running pipelines as a list, flushed and shut down in order.

use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{
    MeterProviderBuilder, PeriodicReader, SdkMeterProvider, Temporality,
};
use tracing_subscriber::registry::LookupSpan;

use crate::error::Error;
use crate::gpu::GpuMeter;
use crate::layer::ActivityLayer;
use crate::meter::{AddReader, MeterPipeline};
use crate::metrics::register_activity_instruments;
use crate::pipeline::{Pipeline, on_own_thread};
use crate::prom::PromServer;
use crate::settings::{Protocol, Requests, Resolved};
use crate::traces::TracePipeline;
use crate::tracker::{Tracker, state_tracker};

#[cfg(feature = "nvml")]
mod nvml;
#[cfg(feature = "traces")]
mod traces;

/// What a [`TelemetryBuilder`] would export ([`TelemetryBuilder::exports`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exports {
    /// The OTLP metric push (an endpoint is set).
    pub otlp: bool,
    /// The in-process Prometheus endpoint (`HIGGSMETER_PROMETHEUS_ADDR` or the setter).
    pub prometheus: bool,
    /// The trace pipeline (`OTEL_TRACES_EXPORTER=otlp` or the setter).
    pub traces: bool,
}

/// Configures and starts higgsmeter's OpenTelemetry pipeline; see [`init()`].
///
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> Result<(), higgsmeter::Error> {
/// let _telemetry = higgsmeter::Telemetry::builder()
///     .with_service_name("embedder")
///     .with_otlp_endpoint("http://127.0.0.1:4317")
///     .with_otlp_protocol(higgsmeter::Protocol::Grpc)
///     .with_export_interval(Duration::from_secs(1))
///     .with_prometheus_addr("127.0.0.1:9464".parse().unwrap())
///     .init()?;
/// # Ok(()) }
/// ```
#[must_use = "call .init() to start exporting"]
pub struct TelemetryBuilder {
    tracker: Tracker,
    /// What the `with_*` settings ask for, resolved against the environment by `init()`.
    requests: Requests,
    install_subscriber: bool,
    log_to_stderr: bool,
    set_global_meter_provider: bool,
    gpu_meter: bool,
    extra_readers: Vec<AddReader>,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.requests;
        f.debug_struct("TelemetryBuilder")
            .field("service_name", &r.service_name)
            .field("otlp_endpoint", &r.otlp_endpoint)
            .field("otlp_protocol", &r.otlp_protocol)
            .field("export_interval", &r.export_interval)
            .field("prometheus_addr", &r.prometheus_addr)
            .field("traces", &r.traces)
            .field("install_subscriber", &self.install_subscriber)
            .finish_non_exhaustive()
    }
}

impl Default for TelemetryBuilder {
    fn default() -> Self {
        TelemetryBuilder {
            tracker: state_tracker().clone(),
            requests: Requests::default(),
            install_subscriber: true,
            log_to_stderr: true,
            set_global_meter_provider: true,
            gpu_meter: true,
            extra_readers: Vec::new(),
        }
    }
}

impl TelemetryBuilder {
    /// Accounts this tracker instead of the process-wide [`state_tracker()`].
    pub fn with_tracker(mut self, tracker: Tracker) -> Self {
        self.tracker = tracker;
        self
    }

    /// `service.name` (else `OTEL_SERVICE_NAME`, else the executable's name).
    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.requests.service_name = Some(name.into());
        self
    }

    /// `service.name` when neither [`with_service_name`](Self::with_service_name) nor
    /// the environment (`OTEL_SERVICE_NAME`, `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`) names the service, instead of the executable's name
    /// (the Python package passes the script's name: every Python worker's executable
    /// is `python`).
    pub fn with_default_service_name(mut self, name: impl Into<String>) -> Self {
        self.requests.default_service_name = Some(name.into());
        self
    }

    /// What [`init`](Self::init) would export, from these settings and the environment,
    /// without starting anything: the caller decides from it whether to start at all
    /// (the Python package tracks every rank when there is somewhere to aggregate).
    /// `OTEL_SDK_DISABLED=true` is nothing exported.
    ///
    /// # Errors
    ///
    /// A setting `init()` would refuse, with the same error.
    pub fn exports(&self) -> Result<Exports, Error> {
        let resolved = self.requests.resolve()?;
        let on = !resolved.disabled;
        Ok(Exports {
            otlp: on && resolved.otlp.is_some(),
            prometheus: on && resolved.prometheus_addr.is_some(),
            traces: on && resolved.traces.is_some(),
        })
    }

    /// Adds a resource attribute (wins over `OTEL_RESOURCE_ATTRIBUTES` and the defaults).
    pub fn with_resource_attribute(
        mut self,
        key: &'static str,
        value: impl Into<opentelemetry::Value>,
    ) -> Self {
        self.requests.attributes.push(KeyValue::new(key, value));
        self
    }

    /// Pushes OTLP to this endpoint: the base URL (`http://host:4317` for gRPC,
    /// `http://host:4318` for HTTP, where `/v1/metrics` is appended).
    pub fn with_otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.requests.otlp_endpoint = Some(endpoint.into());
        self
    }

    /// The OTLP transport (else `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP/protobuf).
    pub fn with_otlp_protocol(mut self, protocol: Protocol) -> Self {
        self.requests.otlp_protocol = Some(protocol);
        self
    }

    /// Adds a header (gRPC metadata) to every OTLP export.
    pub fn with_otlp_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.requests.otlp_headers.insert(key.into(), value.into());
        self
    }

    /// The CA certificate (PEM file) that verifies the OTLP endpoint's certificate
    /// (over `OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE`;
    /// default: the system's roots). Needs the `tls` feature.
    pub fn with_otlp_certificate(mut self, ca_pem_file: impl Into<PathBuf>) -> Self {
        self.requests.otlp_tls.certificate = Some(ca_pem_file.into());
        self
    }

    /// A client certificate and its key (PEM files) for an endpoint that asks for one,
    /// mutual TLS (over `OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_CERTIFICATE` and
    /// `_CLIENT_KEY`). Needs the `tls` feature.
    pub fn with_otlp_client_certificate(
        mut self,
        cert_pem_file: impl Into<PathBuf>,
        key_pem_file: impl Into<PathBuf>,
    ) -> Self {
        self.requests.otlp_tls.client_certificate = Some(cert_pem_file.into());
        self.requests.otlp_tls.client_key = Some(key_pem_file.into());
        self
    }

    /// How often to push (else `OTEL_METRIC_EXPORT_INTERVAL`, else 1 s).
    pub fn with_export_interval(mut self, interval: Duration) -> Self {
        self.requests.export_interval = Some(interval);
        self
    }

    /// OTLP temporality (else `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, else cumulative).
    pub fn with_temporality(mut self, temporality: Temporality) -> Self {
        self.requests.temporality = Some(temporality);
        self
    }

    /// Serves Prometheus text exposition on `http://ADDR/metrics` (else
    /// `HIGGSMETER_PROMETHEUS_ADDR`; off when neither is set).
    pub fn with_prometheus_addr(mut self, addr: SocketAddr) -> Self {
        self.requests.prometheus_addr = Some(addr);
        self
    }

    /// Whether this builder reads its variables from the environment (default true).
    ///
    /// With `false` it reads none of the variables in the crate docs' table
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_HEADERS`,
    /// `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`,
    /// `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SDK_DISABLED`,
    /// `HIGGSMETER_PROMETHEUS_ADDR`, and for traces `OTEL_TRACES_EXPORTER`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`,
    /// `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`) nor `RANK`, `WORLD_SIZE` and `LOCAL_RANK`: only the
    /// `with_*` settings count. It does not shut the process off from its environment;
    /// others still read:
    ///
    /// - the OpenTelemetry OTLP exporter, for what the builder does not set:
    ///   `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_METRICS_HEADERS` (added to
    ///   the builder's headers), `OTEL_EXPORTER_OTLP_TIMEOUT`,
    ///   `OTEL_EXPORTER_OTLP_COMPRESSION` (and their `_METRICS_` forms), and
    ///   `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` unless
    ///   [`with_temporality`](Self::with_temporality) is called;
    /// - with traces on, the OTLP span exporter (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`,
    ///   `_TRACES_TIMEOUT`, `_TRACES_COMPRESSION` and the shared forms) and the
    ///   OpenTelemetry SDK's batch span processor (`OTEL_BSP_*`);
    /// - the NVML meter (`nvml` feature): `HIGGSMETER_NVML_LIBRARY` and
    ///   `CUDA_VISIBLE_DEVICES` (turn the meter off with
    ///   [`with_gpu_meter(false)`](Self::with_gpu_meter));
    /// - the stderr log layer `init()` installs: `RUST_LOG`
    ///   ([`with_log_to_stderr(false)`](Self::with_log_to_stderr) drops it);
    /// - `host.name`: `HOSTNAME`, when `/proc/sys/kernel/hostname` cannot be read.
    pub fn with_env(mut self, read_env: bool) -> Self {
        self.requests.read_env = read_env;
        self
    }

    /// Whether `init()` installs a global `tracing` subscriber with the activity layer
    /// (default true). With `false`, add [`Telemetry::activity_layer`] to your own.
    pub fn with_subscriber(mut self, install: bool) -> Self {
        self.install_subscriber = install;
        self
    }

    /// Whether the installed subscriber also prints log events to stderr, filtered by
    /// `RUST_LOG` (default `warn`). Default true. An event inside a state span that
    /// `RUST_LOG` does not enable shows the span's name, without its fields, in its
    /// context.
    pub fn with_log_to_stderr(mut self, log: bool) -> Self {
        self.log_to_stderr = log;
        self
    }

    /// Whether to make the meter provider `opentelemetry::global`'s (default true), so
    /// recorders and your own instruments export through the same pipeline.
    pub fn with_global_meter_provider(mut self, set: bool) -> Self {
        self.set_global_meter_provider = set;
        self
    }

    /// Whether `init()` starts the NVML GPU meter (default true; needs the `nvml`
    /// feature). Without a driver or GPU it logs one line and the worker runs on.
    pub fn with_gpu_meter(mut self, on: bool) -> Self {
        self.gpu_meter = on;
        self
    }

    /// Adds an exporter of your own, pushed every `interval` (e.g. an in-memory
    /// exporter in tests).
    pub fn with_periodic_exporter<E: PushMetricExporter>(
        mut self,
        exporter: E,
        interval: Duration,
    ) -> Self {
        self.extra_readers
            .push(Box::new(move |builder: MeterProviderBuilder| {
                builder.with_reader(
                    PeriodicReader::builder(exporter)
                        .with_interval(interval)
                        .build(),
                )
            }));
        self
    }

    /// Builds the pipeline and starts exporting; see [`init()`].
    pub fn init(self) -> Result<Telemetry, Error> {
        let resolved = self.requests.resolve()?;
        // Before anything is built: where another subscriber is installed (another
        // library's, or, in a forked child, the parent's), nothing is started and
        // stopped again, and no second `tracing` dispatcher is made (that takes a
        // process-wide lock of `tracing`'s).
        if self.install_subscriber && tracing::dispatcher::has_been_set() {
            return Err(Error::SubscriberAlreadySet);
        }
        let tracker = self.tracker.clone();
        // The seed's clock origin: counting starts when tracking is set up.
        tracker.begin();

        if resolved.disabled {
            let subscriber_installed = self.install_subscriber
                && install_subscriber(&tracker, self.log_to_stderr, None, None)?;
            return Ok(Telemetry {
                tracker,
                pipelines: Vec::new(),
                runtime: None,
                subscriber_installed,
            });
        }

        let needs_runtime = resolved.otlp.is_some()
            || resolved.prometheus_addr.is_some()
            || resolved.traces.is_some();
        let runtime = if needs_runtime {
            Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("higgsmeter-export")
                    .enable_all()
                    .build()
                    .map_err(Error::Runtime)?,
            )
        } else {
            None
        };

        // Built on a thread of its own: exporter clients must not be created (or
        // dropped) inside the caller's async runtime, if it has one.
        let handle = runtime.as_ref().map(|rt| rt.handle().clone());
        let extra_readers = self.extra_readers;
        let Resolved {
            resource,
            otlp,
            prometheus_addr,
            traces,
            ..
        } = resolved;
        let built = on_own_thread("higgsmeter-init", move || {
            let _entered = handle.as_ref().map(|h| h.enter());
            let traces = traces
                .map(|t| TracePipeline::start(t, &resource))
                .transpose()?;
            match crate::meter::start(resource, otlp.as_ref(), prometheus_addr, extra_readers) {
                Ok((meter, prometheus)) => Ok((meter, prometheus, traces)),
                Err(e) => {
                    // Shut down off this thread, outside the runtime's context.
                    if let Some(traces) = traces {
                        traces.shutdown();
                    }
                    Err(e)
                }
            }
        })
        .unwrap_or_else(|| {
            Err(Error::Runtime(std::io::Error::other(
                "provider build panicked",
            )))
        })?;
        let (meter_pipeline, prometheus, traces) = built;
        let meter = meter_pipeline.meter();
        // From here on, a failure drops this guard, which shuts the exporters and the
        // runtime down off the caller's thread, as on a normal exit. The pipelines are
        // listed in the order they flush and shut down: the GPU meter (a last sample
        // for the final export), the Prometheus endpoint, traces (every span closed
        // by then exported or counted), the meter provider (the final export).
        let mut telemetry = Telemetry {
            tracker,
            pipelines: Vec::new(),
            runtime,
            subscriber_installed: false,
        };
        if let Some(traces) = traces {
            telemetry.pipelines.push(Box::new(traces));
        }
        telemetry.pipelines.push(Box::new(meter_pipeline));
        if let (Some(endpoint), Some(rt)) = (prometheus, telemetry.runtime.as_ref()) {
            let server = endpoint.serve(rt)?;
            telemetry.pipelines.insert(0, Box::new(server));
        }

        telemetry.subscriber_installed = self.install_subscriber
            && install_subscriber(
                &telemetry.tracker,
                self.log_to_stderr,
                Some(&meter),
                telemetry.pipeline::<TracePipeline>(),
            )?;
        let instruments = register_activity_instruments(&meter, telemetry.tracker.clone());
        if let Some(m) = telemetry.pipeline_mut::<MeterPipeline>() {
            m.keep(instruments);
            if self.set_global_meter_provider {
                opentelemetry::global::set_meter_provider(m.provider().clone());
            }
        }
        // After the subscriber, so its one log line on a host without GPUs is seen.
        if self.gpu_meter
            && let Some(gpu) = crate::gpu::start(&meter, &telemetry.tracker)
        {
            telemetry.pipelines.insert(0, Box::new(gpu));
        }
        Ok(telemetry)
    }
}

fn install_subscriber(
    tracker: &Tracker,
    log_to_stderr: bool,
    meter: Option<&opentelemetry::metrics::Meter>,
    traces: Option<&TracePipeline>,
) -> Result<bool, Error> {
    let log = log_to_stderr.then(crate::subscriber::LogFilter::from_env);
    let subscriber = crate::subscriber::subscriber(tracker, log, meter, traces);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| Error::SubscriberAlreadySet)?;
    Ok(true)
}

/// The running pipeline: flushes (the current state's time included) and shuts every
/// exporter down when dropped.
///
/// Returned by [`init()`] and [`TelemetryBuilder::init`]. Keep it alive for the life of
/// the worker, e.g. `let _telemetry = higgsmeter::init()?;` at the top of `main`.
#[must_use = "exporting stops when the Telemetry guard drops; bind it with `let _telemetry = ...`"]
pub struct Telemetry {
    tracker: Tracker,
    /// The running pipelines, in the order they flush and shut down.
    pipelines: Vec<Box<dyn Pipeline>>,
    /// The exporters' runtime, stopped after every pipeline.
    runtime: Option<tokio::runtime::Runtime>,
    subscriber_installed: bool,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("exporting", &self.pipeline::<MeterPipeline>().is_some())
            .field("prometheus_addr", &self.prometheus_addr())
            .field(
                "prometheus_endpoint",
                &self.pipeline::<PromServer>().is_some(),
            )
            .field("gpu_meter", &self.pipeline::<GpuMeter>().is_some())
            .field("traces", &self.pipeline::<TracePipeline>().is_some())
            .field("subscriber_installed", &self.subscriber_installed)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// A builder, for settings beyond the environment's.
    pub fn builder() -> TelemetryBuilder {
        TelemetryBuilder::default()
    }

    /// The running pipeline of type `P`, if there is one.
    fn pipeline<P: Pipeline>(&self) -> Option<&P> {
        self.pipelines.iter().find_map(|p| {
            let p: &dyn Any = p.as_ref();
            p.downcast_ref::<P>()
        })
    }

    /// The running pipeline of type `P`, if there is one, to change.
    fn pipeline_mut<P: Pipeline>(&mut self) -> Option<&mut P> {
        self.pipelines.iter_mut().find_map(|p| {
            let p: &mut dyn Any = p.as_mut();
            p.downcast_mut::<P>()
        })
    }

    /// The tracker this pipeline exports.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// The meter provider, to create your own instruments (`None` when
    /// `OTEL_SDK_DISABLED=true`).
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.pipeline::<MeterPipeline>()
            .map(MeterPipeline::provider)
    }

    /// The activity layer for this pipeline's tracker, to add to a subscriber of your
    /// own (with `with_subscriber(false)`).
    pub fn activity_layer<S>(&self) -> ActivityLayer<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let layer = ActivityLayer::new(self.tracker.clone());
        match self.pipeline::<MeterPipeline>() {
            Some(metrics) => layer.with_meter(&metrics.meter()),
            None => layer,
        }
    }

    /// Where the Prometheus endpoint listens, if it is on (the bound address: useful
    /// with port 0).
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.pipeline::<PromServer>().map(PromServer::local_addr)
    }

    /// Exports now, to every push exporter, blocking until done (at most the exporters'
    /// timeouts). Errors are logged, never returned: tracking never fails.
    pub fn force_flush(&self) {
        for pipeline in &self.pipelines {
            pipeline.flush();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.tracker.finalize();
        for pipeline in self.pipelines.drain(..) {
            pipeline.shutdown();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Starts higgsmeter with settings from the environment: the resource (service name,
/// instance id, host, rank), a meter provider exporting the activity families through
/// OTLP (when `OTEL_EXPORTER_OTLP_ENDPOINT` is set) and a Prometheus endpoint (when
/// `HIGGSMETER_PROMETHEUS_ADDR` is set), and a global `tracing` subscriber that
/// accounts the process-wide tracker's state spans and records step and transfer spans
/// (the two layers [`ActivityLayer`] composes, behind one filter of the whole stack
/// rather than per-layer filters, which cost every span more).
///
/// Works from a plain `fn main` and inside a tokio runtime: exporters run on a
/// background thread of their own, never on the caller's. Keep the returned guard
/// alive; dropping it flushes and shuts down. `Telemetry::builder()` takes settings
/// beyond the environment's.
pub fn init() -> Result<Telemetry, Error> {
    Telemetry::builder().init()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_is_send_and_sync_and_the_builder_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Telemetry>();
        send::<TelemetryBuilder>();
    }

    fn quiet() -> TelemetryBuilder {
        Telemetry::builder()
            .with_tracker(Tracker::new())
            .with_env(false)
            .with_subscriber(false)
            .with_global_meter_provider(false)
            .with_gpu_meter(false)
    }

    #[test]
    fn exports_says_what_init_would_start_without_starting_it() {
        assert_eq!(quiet().exports().unwrap(), Exports::default());
        let both = quiet()
            .with_otlp_endpoint("http://127.0.0.1:9")
            .with_prometheus_addr("127.0.0.1:0".parse().unwrap());
        let exports = both.exports().unwrap();
        assert!(
            exports.otlp && exports.prometheus && !exports.traces,
            "{exports:?}"
        );
        // Nothing started: the same builder still starts (its port 0 not yet taken).
        let telemetry = both.init().unwrap();
        assert!(telemetry.prometheus_addr().is_some());
    }

    #[test]
    fn with_no_exporter_asked_for_only_the_meter_provider_runs() {
        let telemetry = quiet().init().unwrap();
        assert!(telemetry.meter_provider().is_some());
        assert_eq!(telemetry.prometheus_addr(), None);
        assert_eq!(telemetry.pipelines.len(), 1, "{telemetry:?}");
        telemetry.force_flush();
    }

    #[test]
    fn a_pipeline_this_build_lacks_is_a_clear_error() {
        let addr = "127.0.0.1:0".parse().unwrap();
        let prometheus = quiet().with_prometheus_addr(addr).init();
        assert_eq!(prometheus.is_ok(), cfg!(feature = "prometheus"));
        match prometheus {
            Ok(telemetry) => {
                assert!(telemetry.prometheus_addr().is_some());
                assert_eq!(telemetry.pipelines.len(), 2, "{telemetry:?}");
            }
            Err(e) => assert!(e.to_string().contains("`prometheus` feature"), "{e}"),
        }
        let otlp = quiet().with_otlp_endpoint("http://127.0.0.1:9").init();
        assert_eq!(otlp.is_ok(), cfg!(feature = "otlp"));
        if let Err(e) = otlp {
            assert!(e.to_string().contains("`otlp` feature"), "{e}");
        }
    }
}
