//! Traces in a build without the `traces` feature: none. Settings refuse
//! `OTEL_TRACES_EXPORTER=otlp` before anything starts, so none of these is ever made;
//! they keep the subscriber's stack the same shape in every build.

use crate::error::Error;
use crate::pipeline::Pipeline;
use crate::settings::TraceSettings;

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
    pub(crate) fn shutdown(self) {
        match self {}
    }
}

impl Pipeline for TracePipeline {
    fn shutdown(self: Box<Self>) {
        match *self {}
    }
}

/// The trace layer's place in the stack, never filled without the feature.
pub(crate) enum NoLayer {}

impl<S: tracing_core::Subscriber> tracing_subscriber::Layer<S> for NoLayer {}
