//! Listening, where every connection earns its slot (`docs/state-contract.md`,
//! *Connections and limits*; ADR 0015).
//!
//! - A receiver holds at most `max_connections` connections, and at most
//!   `max_connections_per_peer` from one peer address. A new connection past either
//!   cap takes the place of the newest connection (of that peer, for its cap) that has
//!   not finished its opening, or else of the newest idle one (`shed`); only when every
//!   one is busy is it refused at once (an HTTP client getting a 503 that names the key
//!   to raise), logged at most once a minute and counted in
//!   `higgsmeter_collector_connections_refused_total`.
//! - A connection that has not finished its opening (TLS handshake; HTTP/2 preface and
//!   SETTINGS, or the first request's headers) within the receiver's limit is closed,
//!   and so is one idle (no request in flight) past its limit; both counted in
//!   `higgsmeter_collector_connections_closed_total{reason}`.
//! - On shutdown every unfinished or idle connection is closed at once; busy ones
//!   finish their requests first.
//!
//! The limits are enforced by [`Counted`], the TCP stream under TLS and HTTP: when a
//! connection is past its limit its next read fails, so the TLS handshake or the HTTP
//! connection in hyper ends, and the slot is freed when the stream is dropped. The HTTP
//! layers say when a request starts and ends ([`Busy`]); [`H2Opening`] watches the
//! plaintext for the HTTP/2 preface and SETTINGS frame.
//!
//! Also here: the HTTP/1 server loop of the OTLP/HTTP receiver and the Prometheus
//! endpoint, with a graceful stop that lets requests in flight finish. On a TLS-only
//! listener each accepted connection's handshake runs in its own task, so a slow or
//! plaintext client holds up no other.

use std::collections::{BTreeMap, HashMap};
use std::future::Future as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::self_metrics::{CloseReason, SelfMetrics, Transport};
use crate::tls::TlsListener;

/// How long after its last request a connection counts as settled: its response is
/// written, so closing it loses nothing. Until then it is neither shed nor closed at
/// shutdown.
const SETTLE: Duration = Duration::from_millis(500);

/// The connection limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnLimits {
    /// Most connections at once.
    pub(crate) max: usize,
    /// Most connections at once from one peer address.
    pub(crate) per_peer: usize,
    /// Longest from accept to a finished opening.
    pub(crate) opening: Duration,
    /// Longest with no request in flight.
    pub(crate) idle: Duration,
}

/// What one connection's protocol layers report, and what the listener reads when it
/// looks for a connection to shed.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// The protocol's opening is done (HTTP/2 SETTINGS, or a first request).
    opened: AtomicBool,
    /// Requests in flight.
    in_flight: AtomicUsize,
    /// Milliseconds from `accepted` to the last request's start or end.
    last_active_ms: AtomicU64,
    /// Set when the listener shed this connection (it is counted then).
    shed: AtomicBool,
    accepted: Instant,
    /// Cancelled when the connection is shed or the receiver stops.
    kill: CancellationToken,
}

impl ConnState {
    fn new(kill: CancellationToken) -> ConnState {
        ConnState {
            opened: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(0),
            shed: AtomicBool::new(false),
            accepted: Instant::now(),
            kill,
        }
    }

    /// The protocol's opening is done.
    pub(crate) fn open(&self) {
        self.opened.store(true, Ordering::SeqCst);
    }

    fn is_open(&self) -> bool {
        self.opened.load(Ordering::SeqCst)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active_ms.store(ms, Ordering::SeqCst);
    }

    /// When the connection became idle; `None` while a request is in flight.
    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(self.accepted + Duration::from_millis(self.last_active_ms.load(Ordering::SeqCst)))
    }

    /// Idle long enough that its last response is out.
    fn settled(&self, now: Instant) -> bool {
        self.idle_since().is_some_and(|t| now >= t + SETTLE)
    }
}

/// One request in flight on a connection, from its headers to its response; the first
/// one also finishes the connection's opening.
pub(crate) struct Busy(Arc<ConnState>);

impl Busy {
    pub(crate) fn new(state: Arc<ConnState>) -> Busy {
        state.open();
        state.touch();
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(state)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// All `max_connections` busy.
    Full,
    /// All of the peer's `max_connections_per_peer` busy.
    PerPeer,
}

/// The open connections of one listener.
#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    /// By id, in accept order (the newest last).
    open: BTreeMap<u64, (IpAddr, Arc<ConnState>)>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Table {
    /// The connection to shed for a newcomer (of `peer` only, when given): the newest
    /// unfinished one, else the newest settled idle one.
    fn victim(&self, peer: Option<IpAddr>, now: Instant) -> Option<u64> {
        let mut idle = None;
        for (id, (p, state)) in self.open.iter().rev() {
            if peer.is_some_and(|peer| peer != *p) {
                continue;
            }
            if !state.is_open() {
                return Some(*id);
            }
            if idle.is_none() && state.settled(now) {
                idle = Some(*id);
            }
        }
        idle
    }

    /// Forgets connection `id`; its state, when it was still here.
    fn remove(&mut self, id: u64) -> Option<Arc<ConnState>> {
        let (peer, state) = self.open.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
        Some(state)
    }
}

/// A listener's connection slots: who holds them, and the caps.
struct Slots {
    table: Mutex<Table>,
    limits: ConnLimits,
    /// Whose connections these are (`None`: the Prometheus endpoint, not counted).
    transport: Option<Transport>,
    /// The receiver's key (`receivers.otlp.protocols.grpc`), for the logs.
    key: String,
    stats: Arc<SelfMetrics>,
    /// The receiver's stop.
    stop: CancellationToken,
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection from `peer`, shedding another if that makes room.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refusal> {
        let now = Instant::now();
        let mut table = self.lock();
        if table.per_peer.get(&peer).copied().unwrap_or(0) >= self.limits.per_peer {
            let victim = table.victim(Some(peer), now).ok_or(Refusal::PerPeer)?;
            self.shed(&mut table, victim);
        }
        if table.open.len() >= self.limits.max {
            let victim = table.victim(None, now).ok_or(Refusal::Full)?;
            self.shed(&mut table, victim);
        }
        let id = table.next_id;
        table.next_id += 1;
        let state = Arc::new(ConnState::new(self.stop.child_token()));
        table.open.insert(id, (peer, state.clone()));
        *table.per_peer.entry(peer).or_insert(0) += 1;
        Ok(Slot {
            slots: self.clone(),
            id,
            state,
        })
    }

    fn shed(&self, table: &mut Table, id: u64) {
        if let Some(state) = table.remove(id) {
            state.shed.store(true, Ordering::SeqCst);
            state.kill.cancel();
            if let Some(t) = self.transport {
                self.stats.close_connection(t, CloseReason::Shed);
            }
        }
    }
}

/// A connection's place in its listener's table, given back on drop.
struct Slot {
    slots: Arc<Slots>,
    id: u64,
    state: Arc<ConnState>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().remove(self.id);
    }
}

/// A listener that hands out connections within its [`ConnLimits`].
pub(crate) struct LimitedListener {
    listener: TcpListener,
    slots: Arc<Slots>,
    last_log: Mutex<Option<std::time::Instant>>,
}

impl LimitedListener {
    /// A receiver's listener: its connections capped, timed and counted under
    /// `transport`, and closed when unfinished or idle once `stop` is cancelled
    /// (`owner`: the transport and the receiver's key, for the logs).
    pub(crate) fn new(
        listener: TcpListener,
        limits: ConnLimits,
        owner: (Transport, String),
        stats: Arc<SelfMetrics>,
        stop: CancellationToken,
    ) -> LimitedListener {
        let (transport, key) = owner;
        LimitedListener::with(listener, limits, Some((transport, key)), stats, stop)
    }

    /// A listener whose connections are not capped (the Prometheus endpoint), but
    /// timed: `timeout` to the first request's headers and between requests.
    pub(crate) fn unlimited(
        listener: TcpListener,
        timeout: Duration,
        stop: CancellationToken,
    ) -> LimitedListener {
        let limits = ConnLimits {
            max: usize::MAX,
            per_peer: usize::MAX,
            opening: timeout,
            idle: timeout,
        };
        LimitedListener::with(listener, limits, None, Arc::default(), stop)
    }

    fn with(
        listener: TcpListener,
        limits: ConnLimits,
        owner: Option<(Transport, String)>,
        stats: Arc<SelfMetrics>,
        stop: CancellationToken,
    ) -> LimitedListener {
        let (transport, key) = match owner {
            Some((t, k)) => (Some(t), k),
            None => (None, String::new()),
        };
        LimitedListener {
            listener,
            slots: Arc::new(Slots {
                table: Mutex::new(Table::default()),
                limits,
                transport,
                key,
                stats,
                stop,
            }),
            last_log: Mutex::new(None),
        }
    }

    /// The listener's limits.
    pub(crate) fn limits(&self) -> ConnLimits {
        self.slots.limits
    }

    /// The next connection within the limits (refusing those over them on the way).
    pub(crate) async fn accept(&self) -> Counted {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off, never spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            match self.slots.admit(peer.ip()) {
                Ok(slot) => return Counted::new(stream, slot),
                Err(why) => self.refuse(stream, why),
            }
        }
    }

    fn refuse(&self, mut stream: TcpStream, why: Refusal) {
        let Some(transport) = self.slots.transport else {
            return;
        };
        crate::self_metrics::add(&self.slots.stats.connections_refused[transport], 1);
        let limits = self.slots.limits;
        let (setting, max) = match why {
            Refusal::Full => ("max_connections", limits.max),
            Refusal::PerPeer => ("max_connections_per_peer", limits.per_peer),
        };
        let key = format!("{}.{setting}", self.slots.key);
        let whose = match why {
            Refusal::Full => "the collector has",
            Refusal::PerPeer => "this peer address has",
        };
        {
            let mut last = self.last_log.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                *last = Some(std::time::Instant::now());
                tracing::warn!(
                    transport = transport.as_str(),
                    max,
                    "refusing connections: {whose} {max} open and busy, the limit ({key}); counted in higgsmeter_collector_connections_refused_total"
                );
            }
        }
        if transport == Transport::Http {
            let body = format!(
                "too many connections: {whose} {max} open and busy, the limit ({key}); retry later\n"
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

/// A connection holding one of its listener's slots until dropped. Its reads fail once
/// it is past its limits (see the module docs), which ends whatever reads it.
pub(crate) struct Counted {
    stream: TcpStream,
    slot: Slot,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
    timer: Pin<Box<Sleep>>,
    timer_at: Instant,
    dead: bool,
}

impl Counted {
    fn new(stream: TcpStream, slot: Slot) -> Counted {
        let killed = Box::pin(slot.state.kill.clone().cancelled_owned());
        let at = slot.state.accepted + slot.slots.limits.opening;
        Counted {
            stream,
            slot,
            killed,
            timer: Box::pin(tokio::time::sleep_until(at)),
            timer_at: at,
            dead: false,
        }
    }

    /// The state its protocol layers report to.
    pub(crate) fn state(&self) -> &Arc<ConnState> {
        &self.slot.state
    }

    fn die(&mut self, reason: Option<CloseReason>) -> io::Error {
        if !self.dead {
            self.dead = true;
            if let (Some(reason), Some(t)) = (reason, self.slot.slots.transport) {
                self.slot.slots.stats.close_connection(t, reason);
            }
        }
        io::Error::new(
            io::ErrorKind::TimedOut,
            "closed by the collector: no opening in time, idle too long, shed or shutting down",
        )
    }

    /// `Some` error when the connection is past its limits; otherwise arms the timer
    /// for the next check.
    fn check(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.dead {
            return Some(self.die(None));
        }
        loop {
            let state = self.slot.state.clone();
            let limits = self.slot.slots.limits;
            let now = Instant::now();
            let stopping = state.kill.is_cancelled();
            if stopping && state.shed.load(Ordering::SeqCst) {
                return Some(self.die(None));
            }
            let idle_since = state.idle_since();
            let deadline = match (stopping, state.is_open(), idle_since) {
                // Shutdown: unfinished or settled now; busy ones finish first.
                (true, false, Some(_)) => return Some(self.die(Some(CloseReason::Shutdown))),
                (true, true, Some(t)) => {
                    if now >= t + SETTLE {
                        return Some(self.die(Some(CloseReason::Shutdown)));
                    }
                    t + SETTLE
                }
                (false, false, Some(_)) => {
                    let at = state.accepted + limits.opening;
                    if now >= at {
                        return Some(self.die(Some(CloseReason::OpeningTimeout)));
                    }
                    at
                }
                (false, true, Some(t)) => {
                    let at = t + limits.idle;
                    if now >= at {
                        return Some(self.die(Some(CloseReason::IdleTimeout)));
                    }
                    at
                }
                // Busy: look again later (its end wakes the reader anyway).
                (_, _, None) if self.timer_at > now => self.timer_at,
                (_, _, None) => now + limits.idle.min(SETTLE * 4),
            };
            if !stopping && self.killed.as_mut().poll(cx).is_ready() {
                continue;
            }
            if deadline != self.timer_at {
                self.timer.as_mut().reset(deadline);
                self.timer_at = deadline;
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return None;
            }
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
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

/// Watches the plaintext a client sends for the end of the HTTP/2 opening: the
/// 24-byte preface, then a SETTINGS frame (its 9-byte header and its payload).
#[derive(Debug, Default)]
pub(crate) struct H2Opening {
    /// Bytes seen so far.
    seen: usize,
    /// The first frame's header.
    header: [u8; 9],
    done: bool,
}

impl H2Opening {
    const PREFACE: usize = 24;

    /// Feeds bytes read; true once the preface and a whole SETTINGS frame are in.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> bool {
        if self.done {
            return true;
        }
        for &b in bytes {
            let at = self.seen;
            self.seen += 1;
            if (Self::PREFACE..Self::PREFACE + 9).contains(&at) {
                self.header[at - Self::PREFACE] = b;
            }
            if self.seen >= Self::PREFACE + 9 {
                // Not SETTINGS: hyper refuses the connection; it never counts as opened.
                if self.header[3] != 0x4 {
                    return false;
                }
                let len = (usize::from(self.header[0]) << 16)
                    | (usize::from(self.header[1]) << 8)
                    | usize::from(self.header[2]);
                if self.seen >= Self::PREFACE + 9 + len {
                    self.done = true;
                    return true;
                }
            }
        }
        false
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

impl Conn {
    fn counted(&self) -> &Counted {
        match self {
            Conn::Plain(c) => c,
            Conn::Tls(c) => c.get_ref().0,
        }
    }
}

/// What tonic puts in each request's extensions: the connection's [`ConnState`],
/// where requests report their start and end.
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    pub(crate) state: Arc<ConnState>,
}

/// A gRPC connection: reads are watched for the end of the HTTP/2 opening.
pub(crate) struct GrpcConn {
    conn: Conn,
    opening: H2Opening,
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let read = Pin::new(&mut this.conn).poll_read(cx, buf);
        if !this.opening.done && matches!(read, Poll::Ready(Ok(()))) {
            let fresh = &buf.filled()[before..];
            if this.opening.feed(fresh) {
                this.conn.counted().state().open();
            }
        }
        read
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.conn.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for GrpcConn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        let counted = self.conn.counted();
        ConnInfo {
            state: counted.state().clone(),
        }
    }
}

/// Marks each request in flight on its connection ([`Busy`]) from the call to its
/// response: the connection's own state, or (under tonic) the [`ConnInfo`] in the
/// request's extensions.
#[derive(Clone)]
pub(crate) struct TrackRequests<S> {
    inner: S,
    state: Option<Arc<ConnState>>,
}

impl<S> TrackRequests<S> {
    /// Requests of the connection that tonic's [`ConnInfo`] names.
    pub(crate) fn from_extensions(inner: S) -> TrackRequests<S> {
        TrackRequests { inner, state: None }
    }
}

impl<S, B> tower::Service<http::Request<B>> for TrackRequests<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let state = self
            .state
            .clone()
            .or_else(|| req.extensions().get::<ConnInfo>().map(|c| c.state.clone()));
        let busy = state.map(Busy::new);
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await;
            drop(busy);
            response
        })
    }
}

/// `listener`'s connections as a stream (tonic's incoming), each TLS handshake done in
/// its own task when `tls` is set (bounded by the listener's opening limit), until
/// `cancel` or until the stream is dropped.
pub(crate) fn incoming(
    listener: LimitedListener,
    tls: Option<Arc<TlsListener>>,
    cancel: CancellationToken,
) -> impl futures_util::Stream<Item = io::Result<GrpcConn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<GrpcConn>(64);
    // The connection's own check ends a handshake past the limit first (and counts it
    // as an opening timeout); this is a backstop.
    let handshake_timeout = listener.limits().opening + Duration::from_secs(1);
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                conn = listener.accept() => conn,
            };
            match &tls {
                None => {
                    let conn = GrpcConn {
                        conn: Conn::Plain(conn),
                        opening: H2Opening::default(),
                    };
                    if tx.send(conn).await.is_err() {
                        return;
                    }
                }
                Some(tls) => {
                    let (tls, tx) = (tls.clone(), tx.clone());
                    tokio::spawn(async move {
                        if let Some(stream) = tls.handshake(conn, handshake_timeout).await {
                            let conn = GrpcConn {
                                conn: Conn::Tls(Box::new(stream)),
                                opening: H2Opening::default(),
                            };
                            let _ = tx.send(conn).await;
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

/// Serves `app` over HTTP/1 on `listener` until `cancel`: a connection is closed when
/// its TLS handshake and first request's headers take longer than the listener's
/// opening limit, or when it waits longer than its idle limit for the next request
/// (see the module docs). On `cancel` it stops accepting, closes unfinished and idle
/// connections at once and lets requests in flight finish; the caller bounds that wait
/// (`service.shutdown_timeout`), and dropping this future drops every connection.
pub(crate) async fn serve_http1(
    listener: LimitedListener,
    app: axum::Router,
    tls: Option<Arc<TlsListener>>,
    cancel: CancellationToken,
) {
    let limits = listener.limits();
    // Backstops: the connection's own checks come first (and count).
    let handshake_timeout = limits.opening + Duration::from_secs(1);
    let header_timeout = limits.opening.max(limits.idle) + Duration::from_secs(1);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let conn = tokio::select! {
            _ = cancel.cancelled() => break,
            conn = listener.accept() => conn,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let service = hyper_util::service::TowerToHyperService::new(TrackRequests {
            inner: app.clone(),
            state: Some(conn.state().clone()),
        });
        let cancel = cancel.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let conn = match tls {
                None => Conn::Plain(conn),
                Some(tls) => match tls.handshake(conn, handshake_timeout).await {
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

/// The listen backlog of every listener: a burst of connections (a fleet's ranks
/// starting at once, or a flood) waits in the kernel's queue instead of being reset
/// and having real exporters' handshakes dropped (tokio's `bind` asks for 1024).
const LISTEN_BACKLOG: u32 = 4096;

/// Takes `addr` for `what` (a component's key and role, for the error).
pub(crate) async fn bind(
    what: String,
    addr: SocketAddr,
) -> Result<TcpListener, crate::error::Error> {
    let listen = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // What `TcpListener::bind` does on Unix: a restart may rebind at once.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|source| crate::error::Error::Bind { what, addr, source })
}

/// The address a listener took (useful with port 0).
pub(crate) fn local_addr(l: &TcpListener) -> Result<SocketAddr, crate::error::Error> {
    l.local_addr().map_err(|source| crate::error::Error::Io {
        what: "reading a bound address",
        source,
    })
}

/// Resolves a listener's `host:port` (`path`: its key, for the error).
pub(crate) fn resolve(path: &str, endpoint: &str) -> Result<SocketAddr, crate::error::Error> {
    use std::net::ToSocketAddrs as _;
    let error = |message: String| crate::error::Error::Config {
        path: path.to_owned(),
        message,
    };
    let mut addrs = endpoint.to_socket_addrs().map_err(|e| {
        error(format!(
            "`{endpoint}` is not a host:port address ({e}); write e.g. 127.0.0.1:4317"
        ))
    })?;
    addrs
        .next()
        .ok_or_else(|| error(format!("`{endpoint}` resolves to no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(frame_type: u8, payload: usize) -> Vec<u8> {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let len = u32::try_from(payload).unwrap().to_be_bytes();
        bytes.extend_from_slice(&len[1..]);
        bytes.extend_from_slice(&[frame_type, 0, 0, 0, 0, 0]);
        bytes.extend(std::iter::repeat_n(0u8, payload));
        bytes
    }

    #[test]
    fn the_h2_opening_ends_with_the_whole_settings_frame() {
        let bytes = opening(0x4, 12);
        for split in [0, 1, 23, 24, 30, 33, 40, bytes.len() - 1] {
            let mut o = H2Opening::default();
            assert!(!o.feed(&bytes[..split]), "split {split}");
            assert!(o.feed(&bytes[split..]), "split {split}");
        }
        let mut o = H2Opening::default();
        assert!(!o.feed(&bytes[..bytes.len() - 1]));
        let mut empty = H2Opening::default();
        assert!(empty.feed(&opening(0x4, 0)));
    }

    #[test]
    fn a_first_frame_other_than_settings_never_opens() {
        let mut o = H2Opening::default();
        assert!(!o.feed(&opening(0x1, 4)));
        assert!(!o.feed(&[0; 64]));
    }

    fn state(open: bool, busy: bool) -> Arc<ConnState> {
        let s = Arc::new(ConnState::new(CancellationToken::new()));
        if open {
            s.open();
        }
        if busy {
            s.in_flight.store(1, Ordering::SeqCst);
        }
        s
    }

    #[test]
    fn the_newest_unfinished_goes_first_then_the_newest_settled_idle() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut t = Table::default();
        for (id, peer, s) in [
            (0, a, state(false, false)),
            (1, a, state(true, false)),
            (2, b, state(false, false)),
            (3, a, state(true, true)),
            (4, b, state(true, false)),
        ] {
            t.open.insert(id, (peer, s));
            *t.per_peer.entry(peer).or_insert(0) += 1;
        }
        let now = Instant::now();
        assert_eq!(t.victim(None, now), Some(2));
        assert_eq!(t.victim(Some(a), now), Some(0));
        t.remove(0);
        t.remove(2);
        assert_eq!(t.per_peer.get(&a), Some(&2));
        assert_eq!(t.per_peer.get(&b), Some(&1));
        // Idle ones only once settled; busy ones never.
        assert_eq!(t.victim(None, now), None);
        let later = now + SETTLE;
        assert_eq!(t.victim(None, later), Some(4));
        assert_eq!(t.victim(Some(a), later), Some(1));
        t.remove(1);
        t.remove(4);
        assert_eq!(t.victim(None, later), None);
        assert_eq!(t.per_peer.get(&b), None);
    }
}
