//! The OTLP metric push of a build without the `otlp` feature: none. Settings refuse
//! an endpoint before anything starts; this refuses it again, should one get here.

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use crate::error::Error;
use crate::settings::OtlpSettings;

/// Refuses: this build has no OTLP exporter.
pub(crate) fn with_reader(
    _builder: MeterProviderBuilder,
    _s: &OtlpSettings,
) -> Result<MeterProviderBuilder, Error> {
    Err(Error::InvalidSetting {
        name: "OTEL_EXPORTER_OTLP_ENDPOINT",
        value: String::new(),
        reason: "this build has no OTLP exporter: enable higgsmeter's `otlp` feature",
    })
}

/// Where the OTLP metric push would go, for messages (this build has none).
pub(crate) fn endpoint_label(s: &OtlpSettings) -> String {
    s.endpoint.clone().unwrap_or_default()
}
