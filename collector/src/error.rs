//! The collector's errors: configuration, startup and I/O.

use std::net::SocketAddr;

/// Everything that can stop the collector from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    ReadConfig {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not YAML.
    #[error("the config file is not valid YAML: {message}")]
    Yaml {
        /// The parser's message, with the line and column.
        message: String,
    },
    /// A config key is unknown or its value is wrong.
    #[error("config error at `{path}`: {message} (every key and default: otel-config/README.md)")]
    Config {
        /// The key's path, e.g. `receivers.otlp.protocols.grpc.endpoint`.
        path: String,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// A listener could not bind its address.
    #[error(
        "cannot listen on {addr} for the {what}: {source} (another process may use the port: pick another one in the config or on the command line, or use port 0)"
    )]
    Bind {
        /// Which component (its key and role).
        what: String,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another I/O failure while starting or running.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The storage directory cannot hold the aggregation state.
    #[error(
        "cannot keep the aggregation state in {directory}: {message} (set extensions.file_storage.directory to a writable directory, or processors.higgsmeter.storage: none to run without state)"
    )]
    Storage {
        /// The directory.
        directory: String,
        /// What failed.
        message: String,
    },
}
