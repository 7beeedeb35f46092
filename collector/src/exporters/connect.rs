//! The upstream exporters' connector: TCP, then TLS (rustls) when the exporter's
//! endpoint is `https://`, for both the gRPC channel and the HTTP client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TCP, then TLS to `server_name` (or the URI's host) when `tls` is set.
#[derive(Clone)]
pub(crate) struct Connector {
    http: HttpConnector,
    tls: Option<(tokio_rustls::TlsConnector, Option<ServerName<'static>>)>,
}

impl Connector {
    /// A connector; `tls` with the name the upstream's certificate must carry (`None`:
    /// the endpoint's host).
    pub(crate) fn new(
        connect_timeout: std::time::Duration,
        tls: Option<(Arc<rustls::ClientConfig>, Option<ServerName<'static>>)>,
    ) -> Connector {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        // The scheme says nothing here: TLS is decided by the exporter's config.
        http.enforce_http(false);
        Connector {
            http,
            tls: tls.map(|(config, name)| (tokio_rustls::TlsConnector::from(config), name)),
        }
    }
}

impl tower::Service<http::Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<http::Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = self.tls.clone();
        // The TCP connection goes to the URI's host and port whatever its scheme.
        let plain = match plain_uri(&uri) {
            Ok(u) => u,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let connecting = tower::Service::call(&mut self.http, plain);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let Some((connector, name)) = tls else {
                return Ok(TokioIo::new(Stream::Plain(tcp)));
            };
            let name = match name {
                Some(n) => n,
                None => {
                    let host = uri.host().unwrap_or_default();
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    ServerName::try_from(host.to_owned())
                        .map_err(|e| format!("`{host}` is not a TLS server name: {e}"))?
                }
            };
            let stream = connector.connect(name, tcp).await?;
            Ok(TokioIo::new(Stream::Tls(Box::new(stream))))
        })
    }
}

/// `uri` as `http://host:port` (the port from the scheme when it has none).
fn plain_uri(uri: &http::Uri) -> Result<http::Uri, BoxError> {
    let host = uri.host().ok_or("the endpoint has no host")?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    Ok(format!("http://{host}:{port}").parse::<http::Uri>()?)
}

/// A connection to the upstream, plain or TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(s) => s.connected(),
            Stream::Tls(s) => {
                let (tcp, session) = s.get_ref();
                let connected = tcp.connected();
                if session.alpn_protocol() == Some(crate::tls::ALPN_H2) {
                    connected.negotiated_h2()
                } else {
                    connected
                }
            }
        }
    }
}

crate::net::two_stream_io!(Stream, Plain, Tls);
