//! Errors of the higgsmeter crate.

/// What can go wrong setting higgsmeter up. Tracking itself never fails: the hot path
/// drops and counts instead of returning errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A state name that is not one of the seven.
    #[error("unknown worker state {0:?}: expected idle, io, cpu, gpu, warmup, startup or shutdown")]
    UnknownState(String),

    /// A recorder was asked for a family that is not one of the engine catalog's.
    #[error(
        "{0} is not a serving-engine family of the catalog (see higgsmeter::catalog::STATUS_FAMILIES)"
    )]
    NotAnEngineFamily(&'static str),

    /// A recorder of one kind was asked for a family of another.
    #[error("{family} is a {kind} in the catalog, not a {asked}: use the {kind} recorder")]
    WrongKind {
        /// The family.
        family: &'static str,
        /// Its kind in the catalog.
        kind: &'static str,
        /// The kind asked for.
        asked: &'static str,
    },

    /// A recorder's labels do not match its family's.
    #[error("{family} takes exactly the labels [{expected}]: {problem}")]
    Labels {
        /// The family.
        family: &'static str,
        /// Its labels, comma-separated.
        expected: String,
        /// What is wrong.
        problem: String,
    },

    /// An environment variable or builder setting has a value higgsmeter cannot use.
    #[error("invalid {name}={value:?}: {reason}")]
    InvalidSetting {
        /// The variable or setting.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is expected instead.
        reason: &'static str,
    },

    /// A global `tracing` subscriber was already installed. `init` checks this before
    /// it builds anything: nothing was started.
    #[error(
        "a global tracing subscriber is already installed: build with \
         `Telemetry::builder().with_subscriber(false)` and add `telemetry.activity_layer()` \
         to your own subscriber"
    )]
    SubscriberAlreadySet,

    /// The background runtime for exporters could not start.
    #[error("could not start higgsmeter's exporter thread: {0}")]
    Runtime(#[source] std::io::Error),

    /// The OTLP exporter could not be built.
    #[cfg(feature = "otlp")]
    #[error("could not build the OTLP metric exporter for {endpoint}: {source}")]
    Otlp {
        /// The endpoint it was built for.
        endpoint: String,
        /// The exporter's error.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },

    /// A TLS file named by a variable or builder setting cannot be used.
    #[cfg(feature = "otlp")]
    #[error("cannot use {name}={path}: {reason}")]
    TlsFile {
        /// The variable (or its builder setting).
        name: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },

    /// The OTLP span exporter could not be built.
    #[cfg(feature = "traces")]
    #[error("could not build the OTLP span exporter for {endpoint}: {source}")]
    OtlpTraces {
        /// The endpoint it was built for.
        endpoint: String,
        /// The exporter's error.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },

    /// The Prometheus endpoint could not bind its address.
    #[cfg(feature = "prometheus")]
    #[error(
        "could not listen for Prometheus scrapes on {addr}: {source} (is another process \
         using the port? set HIGGSMETER_PROMETHEUS_ADDR or with_prometheus_addr to another)"
    )]
    PrometheusBind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The bind error.
        #[source]
        source: std::io::Error,
    },

    /// The Prometheus exporter could not be built.
    #[cfg(feature = "prometheus")]
    #[error("could not build the Prometheus exporter: {0}")]
    Prometheus(String),
}
