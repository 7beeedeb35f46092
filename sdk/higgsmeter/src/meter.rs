//! The meter provider: one provider whose readers are yours
//! ([`with_periodic_exporter`](crate::TelemetryBuilder::with_periodic_exporter)), the
//! OTLP push and the Prometheus endpoint's registry, so every instrument is registered
//! once and reaches each of them.

use std::net::SocketAddr;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};

use crate::error::Error;
use crate::metrics::ActivityInstruments;
use crate::pipeline::{Pipeline, on_own_thread};
use crate::settings::OtlpSettings;

/// A reader of yours, added to the provider's builder.
pub(crate) type AddReader = Box<dyn FnOnce(MeterProviderBuilder) -> MeterProviderBuilder + Send>;

/// The running meter provider, and the activity instruments whose callbacks stay
/// registered until its final export.
pub(crate) struct MeterPipeline {
    provider: SdkMeterProvider,
    instruments: Option<ActivityInstruments>,
    /// Where the OTLP push goes, for messages (`None`: no OTLP push).
    otlp_endpoint: Option<String>,
}

/// Builds the provider with its readers. Must run inside the export runtime's context
/// (tonic connects lazily on it). The Prometheus endpoint, if asked for, is returned
/// to be served once the provider is built.
pub(crate) fn start(
    resource: Resource,
    otlp: Option<&OtlpSettings>,
    prometheus_addr: Option<SocketAddr>,
    extra_readers: Vec<AddReader>,
) -> Result<(MeterPipeline, Option<crate::prom::Unstarted>), Error> {
    let mut builder = SdkMeterProvider::builder().with_resource(resource);
    for add in extra_readers {
        builder = add(builder);
    }
    if let Some(otlp) = otlp {
        builder = crate::otlp::with_reader(builder, otlp)?;
    }
    let prometheus = match prometheus_addr {
        Some(addr) => {
            let (b, endpoint) = crate::prom::with_reader(builder, addr)?;
            builder = b;
            Some(endpoint)
        }
        None => None,
    };
    let pipeline = MeterPipeline {
        provider: builder.build(),
        instruments: None,
        otlp_endpoint: otlp.map(crate::otlp::endpoint_label),
    };
    Ok((pipeline, prometheus))
}

impl MeterPipeline {
    /// The provider.
    pub(crate) fn provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    /// higgsmeter's meter.
    pub(crate) fn meter(&self) -> Meter {
        self.provider.meter("higgsmeter")
    }

    /// Keeps the activity instruments until the final export.
    pub(crate) fn keep(&mut self, instruments: ActivityInstruments) {
        self.instruments = Some(instruments);
    }
}

impl Pipeline for MeterPipeline {
    /// Exports now, to every push exporter, off the caller's thread.
    fn flush(&self) {
        let provider = self.provider.clone();
        match on_own_thread("higgsmeter-flush", move || provider.force_flush()) {
            Some(Ok(())) => {}
            Some(Err(e)) => tracing::warn!(
                target: "higgsmeter",
                error = %e,
                "metric flush to {} failed (the first failed export said why)",
                self.otlp_endpoint.as_deref().unwrap_or("an exporter")
            ),
            None => tracing::warn!(target: "higgsmeter", "metric flush thread failed"),
        }
    }

    /// The final export and shutdown, off the caller's thread: exporter clients must
    /// not be dropped inside an async runtime, and the final export needs the export
    /// runtime running.
    fn shutdown(self: Box<Self>) {
        let MeterPipeline {
            provider,
            instruments,
            otlp_endpoint,
        } = *self;
        let shut = on_own_thread("higgsmeter-shutdown", move || {
            let _instruments = instruments; // callbacks stay registered until the end
            let flushed = provider.force_flush();
            let shut = provider.shutdown();
            drop(provider);
            (flushed, shut)
        });
        match shut {
            Some((Ok(()), Ok(()))) => {}
            Some((flushed, shut)) => tracing::warn!(
                target: "higgsmeter",
                ?flushed,
                ?shut,
                "final metric export to {} failed: what was counted since its last successful \
                 export did not reach it (the first failed export said why)",
                otlp_endpoint.as_deref().unwrap_or("an exporter")
            ),
            None => tracing::warn!(target: "higgsmeter", "metric shutdown thread failed"),
        }
    }
}
