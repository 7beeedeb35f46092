//! Listening: a cap on a receiver's open connections (past `max_connections` a new
//! connection is refused at once, an HTTP client getting a 503 that names the key to
//! raise, logged at most once a minute, counted in
//! `higgsmeter_collector_connections_refused_total`), and the HTTP/1 server loop of the
//! OTLP/HTTP receiver and the Prometheus endpoint: a header-read (and keep-alive idle)
//! timeout per connection, and a graceful stop that lets requests in flight finish.
//! On a TLS-only listener each accepted connection's handshake runs in its own task
//! (bounded by the same timeout), so a slow or plaintext client holds up no other.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::self_metrics::{SelfMetrics, Transport};
use crate::tls::TlsListener;

/// A listener that hands out at most `max` connections at once.
pub(crate) struct LimitedListener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    max: usize,
    /// Whose connections these are (`None`: the Prometheus endpoint, never capped).
    transport: Option<Transport>,
    stats: Arc<SelfMetrics>,
    last_log: Mutex<Option<Instant>>,
}

impl LimitedListener {
    pub(crate) fn new(
        listener: TcpListener,
        max: usize,
        transport: Transport,
        stats: Arc<SelfMetrics>,
    ) -> LimitedListener {
        LimitedListener {
            listener,
            permits: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
            transport: Some(transport),
            stats,
            last_log: Mutex::new(None),
        }
    }

    /// A listener whose connections are not capped (the Prometheus endpoint).
    pub(crate) fn unlimited(listener: TcpListener) -> LimitedListener {
        LimitedListener {
            listener,
            permits: Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
            max: Semaphore::MAX_PERMITS,
            transport: None,
            stats: Arc::new(SelfMetrics::default()),
            last_log: Mutex::new(None),
        }
    }

    /// The next connection within the limit (refusing those over it on the way).
    pub(crate) async fn accept(&self) -> Counted {
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off, never spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    return Counted {
                        stream,
                        _permit: permit,
                    };
                }
                Err(_) => self.refuse(stream),
            }
        }
    }

    fn refuse(&self, mut stream: TcpStream) {
        let Some(transport) = self.transport else {
            return;
        };
        self.stats.connections_refused[transport as usize]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = match transport {
            Transport::Grpc => "receivers.otlp.protocols.grpc.max_connections",
            Transport::Http => "receivers.otlp.protocols.http.max_connections",
        };
        {
            let mut last = self.last_log.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    transport = transport.as_str(),
                    max = self.max,
                    "refusing connections: {} are open, the limit ({key}); counted in higgsmeter_collector_connections_refused_total",
                    self.max
                );
            }
        }
        if transport == Transport::Http {
            let body = format!(
                "too many connections: the collector has {} open, the limit ({key}); retry later\n",
                self.max
            );
            let response = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            tokio::spawn(async move {
                let write = async {
                    stream.write_all(response.as_bytes()).await?;
                    stream.shutdown().await
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
            });
        }
    }
}

/// A connection holding one of its listener's places until dropped.
pub(crate) struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// `AsyncRead` and `AsyncWrite` for an enum of two stream variants: each call goes to
/// the variant's stream (a plain connection or its TLS session).
macro_rules! two_stream_io {
    ($ty:ident, $a:ident, $b:ident) => {
        impl tokio::io::AsyncRead for $ty {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $ty::$a(s) => std::pin::Pin::new(s).poll_read(cx, buf),
                    $ty::$b(s) => std::pin::Pin::new(s).poll_read(cx, buf),
                }
            }
        }

        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $ty::$a(s) => std::pin::Pin::new(s).poll_write(cx, buf),
                    $ty::$b(s) => std::pin::Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $ty::$a(s) => std::pin::Pin::new(s).poll_flush(cx),
                    $ty::$b(s) => std::pin::Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $ty::$a(s) => std::pin::Pin::new(s).poll_shutdown(cx),
                    $ty::$b(s) => std::pin::Pin::new(s).poll_shutdown(cx),
                }
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $ty::$a(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
                    $ty::$b(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $ty::$a(s) => s.is_write_vectored(),
                    $ty::$b(s) => s.is_write_vectored(),
                }
            }
        }
    };
}
pub(crate) use two_stream_io;

/// An accepted connection: plaintext, or TLS after a completed handshake.
pub(crate) enum Conn {
    Plain(Counted),
    Tls(Box<tokio_rustls::server::TlsStream<Counted>>),
}

two_stream_io!(Conn, Plain, Tls);

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        let counted = match self {
            Conn::Plain(c) => c,
            Conn::Tls(c) => c.get_ref().0,
        };
        counted.stream.connect_info()
    }
}

/// `listener`'s connections as a stream (tonic's incoming), each TLS handshake done in
/// its own task when `tls` is set (bounded by `handshake_timeout`), until `cancel` or
/// until the stream is dropped.
pub(crate) fn incoming(
    listener: LimitedListener,
    tls: Option<Arc<TlsListener>>,
    handshake_timeout: Duration,
    cancel: tokio_util::sync::CancellationToken,
) -> impl futures_util::Stream<Item = io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Conn>(64);
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                conn = listener.accept() => conn,
            };
            match &tls {
                None => {
                    if tx.send(Conn::Plain(conn)).await.is_err() {
                        return;
                    }
                }
                Some(tls) => {
                    let (tls, tx) = (tls.clone(), tx.clone());
                    tokio::spawn(async move {
                        if let Some(stream) = tls.handshake(conn, handshake_timeout).await {
                            let _ = tx.send(Conn::Tls(Box::new(stream))).await;
                        }
                    });
                }
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move {
        let conn = rx.recv().await?;
        Some((Ok(conn), rx))
    })
}

/// Serves `app` over HTTP/1 on `listener` until `cancel`: a connection whose next
/// request's headers take longer than `header_timeout` (half-sent, or idle keep-alive)
/// is closed. On `cancel` it stops accepting, lets requests in flight finish and
/// closes idle connections; the caller bounds that wait (`service.shutdown_timeout`),
/// and dropping this future drops every connection. With `tls`, each connection's
/// handshake comes first, bounded by `header_timeout` too.
pub(crate) async fn serve_http1(
    listener: LimitedListener,
    app: axum::Router,
    header_timeout: Duration,
    tls: Option<Arc<TlsListener>>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let conn = tokio::select! {
            _ = cancel.cancelled() => break,
            conn = listener.accept() => conn,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let cancel = cancel.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let conn = match tls {
                None => Conn::Plain(conn),
                Some(tls) => match tls.handshake(conn, header_timeout).await {
                    Some(stream) => Conn::Tls(Box::new(stream)),
                    None => return,
                },
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(conn), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    while connections.join_next().await.is_some() {}
}
