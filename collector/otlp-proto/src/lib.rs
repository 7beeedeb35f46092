//! The OTLP protobuf messages (prost, with serde for OTLP/JSON) and gRPC stubs (tonic)
//! that `higgsmeter-collector` uses: common, resource, metrics, trace and logs types and
//! the metrics, trace and logs services.
//!
//! The files under `src/proto/tonic/` are copied unchanged from `opentelemetry-proto`
//! 0.33.1 (Apache-2.0), and `src/proto.rs` holds its serde helpers; the module paths
//! (`tonic::collector::metrics::v1`, …) are the same, so the collector names this crate
//! `opentelemetry_proto` in its manifest. Vendored because `opentelemetry-proto`
//! depends on `opentelemetry_sdk` unconditionally (for conversions the collector does
//! not use), and the collector's normal dependencies must not hold the SDK
//! (ADR 6, `docs/adr/0006-vendored-otlp-types.md`).
//!
//! `prometheus_client` (`src/prometheus_client.rs`) is not vendored: the Prometheus
//! protobuf exposition's messages (`io.prometheus.client.MetricFamily` and what it holds),
//! written by hand with prost's derive, for the collector's `/metrics` when a scraper asks
//! for protobuf.
//!
//! Not a stable API: it follows whatever `opentelemetry-proto` version the workspace
//! pins; `README.md` here says how to update it.

// Generated code, as upstream keeps it: not formatted, not linted.
#[rustfmt::skip]
#[allow(warnings, clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
#[doc(hidden)]
mod proto;

pub use proto::tonic;

pub mod prometheus_client;
