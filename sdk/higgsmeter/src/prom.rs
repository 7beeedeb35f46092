//! The in-process Prometheus endpoint: `GET /metrics` in text exposition format.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_sdk::metrics::MeterProviderBuilder;
use prometheus::{Encoder, TextEncoder};
use tokio::sync::watch;

use crate::error::Error;
use crate::pipeline::Pipeline;

/// Adds the Prometheus exporter's reader to the meter provider; the endpoint that
/// serves its registry starts once the provider is built ([`Unstarted::serve`]).
pub(crate) fn with_reader(
    builder: MeterProviderBuilder,
    addr: SocketAddr,
) -> Result<(MeterProviderBuilder, Unstarted), Error> {
    let (reader, registry) = reader()?;
    Ok((builder.with_reader(reader), Unstarted { addr, registry }))
}

/// The exporter reader and the registry it fills. Catalog names are exposition names
/// already, so no unit or `_total` suffix is added; scope labels are left out.
fn reader() -> Result<
    (
        opentelemetry_prometheus::PrometheusExporter,
        prometheus::Registry,
    ),
    Error,
> {
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .without_units()
        .without_counter_suffixes()
        .scope_info_enabled(false)
        .build()
        .map_err(|e| Error::Prometheus(e.to_string()))?;
    Ok((exporter, registry))
}

/// The endpoint's address and the registry it will serve.
pub(crate) struct Unstarted {
    addr: SocketAddr,
    registry: prometheus::Registry,
}

/// A running endpoint; its shutdown (or the runtime's) ends it.
#[derive(Debug)]
pub(crate) struct PromServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl PromServer {
    /// The bound address (useful with port 0).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Pipeline for PromServer {
    fn shutdown(self: Box<Self>) {
        let _ = self.stop.send(true);
    }
}

impl Unstarted {
    /// Binds the address now (so a taken port is an error from `init()`), then serves
    /// on `rt`.
    pub(crate) fn serve(self, rt: &tokio::runtime::Runtime) -> Result<PromServer, Error> {
        serve(rt, self.addr, self.registry)
    }
}

fn serve(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    registry: prometheus::Registry,
) -> Result<PromServer, Error> {
    let std_listener = std::net::TcpListener::bind(addr)
        .map_err(|source| Error::PrometheusBind { addr, source })?;
    let local = std_listener
        .local_addr()
        .map_err(|source| Error::PrometheusBind { addr, source })?;
    std_listener
        .set_nonblocking(true)
        .map_err(|source| Error::PrometheusBind { addr, source })?;
    let listener = {
        let _entered = rt.enter();
        tokio::net::TcpListener::from_std(std_listener)
            .map_err(|source| Error::PrometheusBind { addr, source })?
    };
    let (stop, mut stopped) = watch::channel(false);
    rt.spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopped.changed() => break,
            };
            let Ok((stream, _)) = accepted else { continue };
            let registry = registry.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(req, registry.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(PromServer { addr: local, stop })
}

async fn handle(
    req: Request<Incoming>,
    registry: prometheus::Registry,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, content_type: &str, body: Vec<u8>| {
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        Ok(resp)
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            b"only GET /metrics\n".to_vec(),
        );
    }
    if req.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            b"metrics are at /metrics\n".to_vec(),
        );
    }
    // Gathering reads the tracker (a short lock), so it runs off the accept loop.
    let gathered = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(4096);
        TextEncoder::new()
            .encode(&registry.gather(), &mut buf)
            .map(|()| buf)
    })
    .await;
    match gathered {
        Ok(Ok(body)) => reply(StatusCode::OK, prometheus::TEXT_FORMAT, body),
        Ok(Err(e)) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("encoding failed: {e}\n").into_bytes(),
        ),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("gather failed: {e}\n").into_bytes(),
        ),
    }
}
