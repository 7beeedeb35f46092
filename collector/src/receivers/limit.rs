//! A cap on a receiver's open connections: past `max_connections` a new connection is
//! refused at once (an HTTP client gets a 503 saying which key to raise), logged at
//! most once a minute, and counted in `higgsmeter_collector_connections_refused_total`.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::self_metrics::{SelfMetrics, Transport};

/// A listener that hands out at most `max` connections at once.
pub(crate) struct LimitedListener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    max: usize,
    transport: Transport,
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
            permits: Arc::new(Semaphore::new(max)),
            max,
            transport,
            stats,
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
                    tracing::warn!(error = %e, transport = self.transport.as_str(), "accepting a connection failed");
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
        self.stats.connections_refused[self.transport as usize]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = match self.transport {
            Transport::Grpc => "receivers.otlp.protocols.grpc.max_connections",
            Transport::Http => "receivers.otlp.protocols.http.max_connections",
        };
        {
            let mut last = self.last_log.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    transport = self.transport.as_str(),
                    max = self.max,
                    "refusing connections: {} are open, the limit ({key}); counted in higgsmeter_collector_connections_refused_total",
                    self.max
                );
            }
        }
        if self.transport == Transport::Http {
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

impl tonic::transport::server::Connected for Counted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}
