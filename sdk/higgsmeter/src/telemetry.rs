//! `init()`: the OpenTelemetry wiring of a worker, behind one guard.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{
    MeterProviderBuilder, PeriodicReader, SdkMeterProvider, Temporality,
};
use opentelemetry_sdk::resource::EnvResourceDetector;
use tracing_subscriber::registry::LookupSpan;

use higgsmeter_catalog::STATUS_INTERVAL_S;

use crate::error::Error;
use crate::layer::ActivityLayer;
use crate::metrics::{ActivityInstruments, register_activity_instruments};
use crate::tracker::{Tracker, state_tracker};

mod settings;
use settings::Settings;
pub(crate) use settings::{OtlpSettings, TlsFiles, env};

/// The environment variable naming the in-process Prometheus endpoint's address.
pub(crate) const PROMETHEUS_ADDR_ENV: &str = "HIGGSMETER_PROMETHEUS_ADDR";

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP/gRPC (tonic), usually port 4317.
    Grpc,
    /// OTLP/HTTP with binary protobuf bodies, usually port 4318 (`/v1/metrics`).
    HttpProtobuf,
}

impl Protocol {
    pub(crate) fn parse(value: &str) -> Result<Protocol, Error> {
        match value.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            other => Err(Error::InvalidSetting {
                name: "OTEL_EXPORTER_OTLP_PROTOCOL",
                value: other.to_owned(),
                reason: "expected `grpc` or `http/protobuf`",
            }),
        }
    }

    /// The protocol of one signal's exporter: the builder's `chosen`, else the signal's
    /// variable (`OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`, `…_TRACES_PROTOCOL`), else
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
    pub(crate) fn resolve(
        chosen: Option<Protocol>,
        read: bool,
        signal_var: &str,
    ) -> Result<Protocol, Error> {
        if let Some(p) = chosen {
            return Ok(p);
        }
        match env(read, signal_var).or_else(|| env(read, "OTEL_EXPORTER_OTLP_PROTOCOL")) {
            Some(v) => Protocol::parse(&v),
            None => Ok(Protocol::HttpProtobuf),
        }
    }
}

type AddReader = Box<dyn FnOnce(MeterProviderBuilder) -> MeterProviderBuilder + Send>;

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
    service_name: Option<String>,
    attributes: Vec<KeyValue>,
    pub(crate) otlp_endpoint: Option<String>,
    pub(crate) otlp_protocol: Option<Protocol>,
    pub(crate) otlp_headers: HashMap<String, String>,
    otlp_tls: TlsFiles,
    pub(crate) traces: crate::traces::TracesConfig,
    export_interval: Option<Duration>,
    temporality: Option<Temporality>,
    prometheus_addr: Option<SocketAddr>,
    read_env: bool,
    install_subscriber: bool,
    log_to_stderr: bool,
    set_global_meter_provider: bool,
    gpu_meter: bool,
    extra_readers: Vec<AddReader>,
}

impl fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("service_name", &self.service_name)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .field("otlp_protocol", &self.otlp_protocol)
            .field("export_interval", &self.export_interval)
            .field("prometheus_addr", &self.prometheus_addr)
            .field("traces", &self.traces)
            .field("install_subscriber", &self.install_subscriber)
            .finish_non_exhaustive()
    }
}

impl Default for TelemetryBuilder {
    fn default() -> Self {
        TelemetryBuilder {
            tracker: state_tracker().clone(),
            service_name: None,
            attributes: Vec::new(),
            otlp_endpoint: None,
            otlp_protocol: None,
            otlp_headers: HashMap::new(),
            otlp_tls: TlsFiles::default(),
            traces: Default::default(),
            export_interval: None,
            temporality: None,
            prometheus_addr: None,
            read_env: true,
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
        self.service_name = Some(name.into());
        self
    }

    /// Adds a resource attribute (wins over `OTEL_RESOURCE_ATTRIBUTES` and the defaults).
    pub fn with_resource_attribute(
        mut self,
        key: &'static str,
        value: impl Into<opentelemetry::Value>,
    ) -> Self {
        self.attributes.push(KeyValue::new(key, value));
        self
    }

    /// Pushes OTLP to this endpoint: the base URL (`http://host:4317` for gRPC,
    /// `http://host:4318` for HTTP, where `/v1/metrics` is appended).
    pub fn with_otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.otlp_endpoint = Some(endpoint.into());
        self
    }

    /// The OTLP transport (else `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP/protobuf).
    pub fn with_otlp_protocol(mut self, protocol: Protocol) -> Self {
        self.otlp_protocol = Some(protocol);
        self
    }

    /// Adds a header (gRPC metadata) to every OTLP export.
    pub fn with_otlp_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.otlp_headers.insert(key.into(), value.into());
        self
    }

    /// The TLS files set on the builder (traces read them too).
    #[cfg(feature = "traces")]
    pub(crate) fn otlp_tls_files(&self) -> &TlsFiles {
        &self.otlp_tls
    }

    /// The CA certificate (PEM file) that verifies the OTLP endpoint's certificate
    /// (over `OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE`;
    /// default: the system's roots). Needs the `tls` feature.
    pub fn with_otlp_certificate(mut self, ca_pem_file: impl Into<PathBuf>) -> Self {
        self.otlp_tls.certificate = Some(ca_pem_file.into());
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
        self.otlp_tls.client_certificate = Some(cert_pem_file.into());
        self.otlp_tls.client_key = Some(key_pem_file.into());
        self
    }

    /// How often to push (else `OTEL_METRIC_EXPORT_INTERVAL`, else 1 s).
    pub fn with_export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = Some(interval);
        self
    }

    /// OTLP temporality (else `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, else cumulative).
    pub fn with_temporality(mut self, temporality: Temporality) -> Self {
        self.temporality = Some(temporality);
        self
    }

    /// Serves Prometheus text exposition on `http://ADDR/metrics` (else
    /// `HIGGSMETER_PROMETHEUS_ADDR`; off when neither is set).
    pub fn with_prometheus_addr(mut self, addr: SocketAddr) -> Self {
        self.prometheus_addr = Some(addr);
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
        self.read_env = read_env;
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
        let settings = Settings::resolve(&self)?;
        let tracker = self.tracker.clone();

        if settings.disabled {
            let subscriber_installed = self.install_subscriber
                && install_subscriber(&tracker, self.log_to_stderr, None, None)?;
            return Ok(Telemetry {
                tracker,
                provider: None,
                instruments: None,
                runtime: None,
                prometheus: None,
                gpu: None,
                traces: None,
                subscriber_installed,
            });
        }

        let needs_runtime = settings.otlp.is_some()
            || settings.prometheus_addr.is_some()
            || settings.traces.is_some();
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
        let resource = settings.resource.clone();
        let otlp = settings.otlp.clone();
        let extra_readers = self.extra_readers;
        let prometheus_addr = settings.prometheus_addr;
        let traces = settings.traces.clone();
        let built = std::thread::Builder::new()
            .name("higgsmeter-init".into())
            .spawn(move || {
                let _entered = handle.as_ref().map(|h| h.enter());
                let traces = traces
                    .map(|t| crate::traces::TracePipeline::start(t, &resource))
                    .transpose()?;
                match build_provider(
                    resource,
                    otlp,
                    extra_readers,
                    prometheus_addr,
                    handle.clone(),
                ) {
                    Ok(built) => Ok((built, traces)),
                    Err(e) => {
                        // Shut down off this thread, outside the runtime's context.
                        if let Some(traces) = traces {
                            traces.shutdown();
                        }
                        Err(e)
                    }
                }
            })
            .map_err(Error::Runtime)?
            .join()
            .unwrap_or_else(|_| {
                Err(Error::Runtime(std::io::Error::other(
                    "provider build panicked",
                )))
            })?;
        let ((provider, prometheus_registry), traces) = built;
        let meter = provider.meter("higgsmeter");
        // From here on, a failure drops this guard, which shuts the exporters and the
        // runtime down off the caller's thread, as on a normal exit.
        let mut telemetry = Telemetry {
            tracker,
            provider: Some(provider),
            instruments: None,
            runtime,
            prometheus: None,
            gpu: None,
            traces,
            subscriber_installed: false,
        };

        #[cfg(feature = "prometheus")]
        if let (Some(addr), Some(registry), Some(rt)) = (
            prometheus_addr,
            prometheus_registry,
            telemetry.runtime.as_ref(),
        ) {
            telemetry.prometheus = Some(crate::prom::serve(rt, addr, registry)?);
        }
        #[cfg(not(feature = "prometheus"))]
        let _ = prometheus_registry;

        telemetry.subscriber_installed = self.install_subscriber
            && install_subscriber(
                &telemetry.tracker,
                self.log_to_stderr,
                Some(&meter),
                telemetry.traces.as_ref(),
            )?;
        telemetry.instruments = Some(register_activity_instruments(
            &meter,
            telemetry.tracker.clone(),
        ));
        if self.set_global_meter_provider
            && let Some(provider) = &telemetry.provider
        {
            opentelemetry::global::set_meter_provider(provider.clone());
        }
        // After the subscriber, so its one log line on a host without GPUs is seen.
        if self.gpu_meter {
            telemetry.gpu = start_gpu_meter(&meter, &telemetry.tracker);
        }
        Ok(telemetry)
    }
}

#[cfg(feature = "prometheus")]
type PromHandle = crate::prom::PromServer;
#[cfg(not(feature = "prometheus"))]
type PromHandle = ();
#[cfg(feature = "prometheus")]
type PromRegistry = prometheus::Registry;
#[cfg(not(feature = "prometheus"))]
type PromRegistry = ();

fn install_subscriber(
    tracker: &Tracker,
    log_to_stderr: bool,
    meter: Option<&opentelemetry::metrics::Meter>,
    traces: Option<&crate::traces::TracePipeline>,
) -> Result<bool, Error> {
    let log = log_to_stderr.then(crate::subscriber::LogFilter::from_env);
    let subscriber = crate::subscriber::subscriber(tracker, log, meter, traces);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| Error::SubscriberAlreadySet)?;
    Ok(true)
}

fn build_provider(
    resource: Resource,
    otlp: Option<OtlpSettings>,
    extra_readers: Vec<AddReader>,
    prometheus_addr: Option<SocketAddr>,
    handle: Option<tokio::runtime::Handle>,
) -> Result<(SdkMeterProvider, Option<PromRegistry>), Error> {
    let _entered = handle.as_ref().map(|h| h.enter());
    let mut builder = SdkMeterProvider::builder().with_resource(resource);
    for add in extra_readers {
        builder = add(builder);
    }
    #[cfg(feature = "otlp")]
    if let Some(otlp) = otlp {
        builder = builder.with_reader(crate::otlp::reader(&otlp)?);
    }
    #[cfg(not(feature = "otlp"))]
    let _ = otlp;
    #[cfg(feature = "prometheus")]
    let registry = match prometheus_addr {
        Some(_) => {
            let (reader, registry) = crate::prom::reader()?;
            builder = builder.with_reader(reader);
            Some(registry)
        }
        None => None,
    };
    #[cfg(not(feature = "prometheus"))]
    let registry = {
        let _ = prometheus_addr;
        None
    };
    Ok((builder.build(), registry))
}

/// The running pipeline: flushes (the current state's time included) and shuts every
/// exporter down when dropped.
///
/// Returned by [`init()`] and [`TelemetryBuilder::init`]. Keep it alive for the life of
/// the worker, e.g. `let _telemetry = higgsmeter::init()?;` at the top of `main`.
#[must_use = "exporting stops when the Telemetry guard drops; bind it with `let _telemetry = ...`"]
pub struct Telemetry {
    tracker: Tracker,
    provider: Option<SdkMeterProvider>,
    instruments: Option<ActivityInstruments>,
    runtime: Option<tokio::runtime::Runtime>,
    prometheus: Option<PromHandle>,
    gpu: Option<GpuMeter>,
    pub(crate) traces: Option<crate::traces::TracePipeline>,
    subscriber_installed: bool,
}

#[cfg(feature = "nvml")]
type GpuMeter = higgsmeter_nvml::NvmlMeter;
#[cfg(not(feature = "nvml"))]
type GpuMeter = ();

/// Starts the NVML meter, its state source wired to the tracker. Failing (no driver,
/// no GPU) is one log line, never an error: the worker runs on without GPU metrics.
#[cfg(feature = "nvml")]
fn start_gpu_meter(meter: &opentelemetry::metrics::Meter, tracker: &Tracker) -> Option<GpuMeter> {
    let tracker = tracker.clone();
    match higgsmeter_nvml::NvmlMeter::builder()
        .with_state_source(move || tracker.current_state().as_str())
        .start(meter)
    {
        Ok(gpus) => {
            tracing::info!(target: "higgsmeter", gpus = gpus.devices().len(), "NVML GPU meter started");
            Some(gpus)
        }
        Err(e @ higgsmeter_nvml::NvmlError::LibraryNotLoaded { .. }) => {
            tracing::info!(target: "higgsmeter", "GPU metrics off: {e}");
            None
        }
        Err(e) => {
            tracing::warn!(target: "higgsmeter", "GPU metrics off: {e}");
            None
        }
    }
}

#[cfg(not(feature = "nvml"))]
fn start_gpu_meter(_meter: &opentelemetry::metrics::Meter, _tracker: &Tracker) -> Option<GpuMeter> {
    None
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("exporting", &self.provider.is_some())
            .field("prometheus_addr", &self.prometheus_addr())
            .field("prometheus_endpoint", &self.prometheus.is_some())
            .field("gpu_meter", &self.gpu.is_some())
            .field("traces", &self.traces.is_some())
            .field("subscriber_installed", &self.subscriber_installed)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// A builder, for settings beyond the environment's.
    pub fn builder() -> TelemetryBuilder {
        TelemetryBuilder::default()
    }

    /// The tracker this pipeline exports.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// The meter provider, to create your own instruments (`None` when
    /// `OTEL_SDK_DISABLED=true`).
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.provider.as_ref()
    }

    /// The activity layer for this pipeline's tracker, to add to a subscriber of your
    /// own (with `with_subscriber(false)`).
    pub fn activity_layer<S>(&self) -> ActivityLayer<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let layer = ActivityLayer::new(self.tracker.clone());
        match &self.provider {
            Some(provider) => layer.with_meter(&provider.meter("higgsmeter")),
            None => layer,
        }
    }

    /// The NVML GPU meter `init()` started, if it did: its
    /// [`readings`](higgsmeter_nvml::NvmlMeter::readings) feed other in-process consumers
    /// (the lab session agent) without opening NVML a second time.
    #[cfg(feature = "nvml")]
    pub fn gpu_meter(&self) -> Option<&higgsmeter_nvml::NvmlMeter> {
        self.gpu.as_ref()
    }

    /// Where the Prometheus endpoint listens, if it is on (the bound address: useful
    /// with port 0).
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "prometheus")]
        {
            self.prometheus.as_ref().map(|p| p.local_addr())
        }
        #[cfg(not(feature = "prometheus"))]
        {
            None
        }
    }

    /// Exports now, to every push exporter, blocking until done (at most the exporters'
    /// timeouts). Errors are logged, never returned: tracking never fails.
    pub fn force_flush(&self) {
        if let Some(traces) = &self.traces {
            traces.force_flush();
        }
        if let Some(provider) = &self.provider {
            let provider = provider.clone();
            let done = std::thread::Builder::new()
                .name("higgsmeter-flush".into())
                .spawn(move || provider.force_flush());
            match done.map(|h| h.join()) {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(target: "higgsmeter", error = %e, "metric flush failed")
                }
                _ => tracing::warn!(target: "higgsmeter", "metric flush thread failed"),
            }
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.tracker.finalize();
        #[cfg(feature = "nvml")]
        if let Some(gpu) = self.gpu.take() {
            gpu.sample_now(); // the final export carries a last GPU sample
            drop(gpu);
        }
        #[cfg(feature = "prometheus")]
        if let Some(prom) = self.prometheus.take() {
            prom.stop();
        }
        if let Some(traces) = self.traces.take() {
            traces.shutdown(); // every span closed by now is exported or counted
        }
        let instruments = self.instruments.take();
        if let Some(provider) = self.provider.take() {
            // Shut down off the caller's thread: exporter clients must not be dropped
            // inside an async runtime, and the final export needs our runtime running.
            let shutdown = std::thread::Builder::new()
                .name("higgsmeter-shutdown".into())
                .spawn(move || {
                    let _instruments = instruments; // callbacks stay registered until the end
                    let flushed = provider.force_flush();
                    let shut = provider.shutdown();
                    drop(provider);
                    (flushed, shut)
                });
            match shutdown.map(|h| h.join()) {
                Ok(Ok((Ok(()), Ok(())))) => {}
                Ok(Ok((flushed, shut))) => {
                    tracing::warn!(target: "higgsmeter", ?flushed, ?shut, "final metric export failed")
                }
                _ => tracing::warn!(target: "higgsmeter", "metric shutdown thread failed"),
            }
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
    use super::settings::{http_metrics_url, instance_id};
    use super::*;

    #[test]
    fn http_endpoints_get_the_metrics_path_once() {
        assert_eq!(
            http_metrics_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            http_metrics_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            http_metrics_url("http://h:4318/custom/path"),
            "http://h:4318/custom/path"
        );
    }

    #[test]
    fn instance_ids_are_uuid_v4_and_differ() {
        let a = instance_id();
        let b = instance_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn bad_protocol_is_a_clear_error() {
        let err = Protocol::parse("http/json").unwrap_err().to_string();
        assert!(
            err.contains("grpc") && err.contains("http/protobuf"),
            "{err}"
        );
    }
}
