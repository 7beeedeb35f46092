//! The Prometheus endpoint of a build without the `prometheus` feature: none. Settings
//! refuse an address before anything starts; this refuses it again, should one get
//! here.

use std::net::SocketAddr;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use crate::error::Error;
use crate::pipeline::Pipeline;

/// Never made without the `prometheus` feature.
pub(crate) enum Unstarted {}

/// Never made without the `prometheus` feature.
pub(crate) enum PromServer {}

/// Refuses: this build has no Prometheus endpoint.
pub(crate) fn with_reader(
    _builder: MeterProviderBuilder,
    addr: SocketAddr,
) -> Result<(MeterProviderBuilder, Unstarted), Error> {
    Err(Error::InvalidSetting {
        name: "HIGGSMETER_PROMETHEUS_ADDR",
        value: format!("{:?}", Some(addr)),
        reason: "this build has no Prometheus endpoint: enable higgsmeter's `prometheus` feature",
    })
}

impl Unstarted {
    pub(crate) fn serve(self, _rt: &tokio::runtime::Runtime) -> Result<PromServer, Error> {
        match self {}
    }
}

impl PromServer {
    pub(crate) fn local_addr(&self) -> SocketAddr {
        match *self {}
    }
}

impl Pipeline for PromServer {
    fn shutdown(self: Box<Self>) {
        match *self {}
    }
}
