//! Every connection earns its slot (`docs/state-contract.md`; ADR 0015; issue 20, item
//! 1), against real sockets on 127.0.0.1: thousands of connections that send nothing,
//! or only part of their opening (the HTTP/2 preface, a request's headers, a TLS
//! ClientHello, or a finished TLS handshake and then half an opening), on both
//! receivers, plaintext and TLS, while real exporters keep pushing (the Python
//! OpenTelemetry SDK's gRPC and HTTP exporters, over TLS too; the repo's demo workers,
//! on the Rust SDK, in plaintext). Checked: the
//! exporters' totals arrive exactly (their retries included), every stuck connection is
//! closed within the opening limit (or sooner, shed for a newcomer), each close is
//! counted, the collector's memory stays bounded, and SIGTERM with stuck connections
//! open is clean and quick.
//!
//! The counts are the (1,100 silent and 1,100 partial per receiver; 2,000 from
//! one peer address) when the process's file-descriptor limit allows, scaled down (and
//! said so on stderr) when it does not. Timing bounds are generous upper bounds; what
//! was measured is printed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use higgsmeter_catalog::WORKER_ACTIVITY_TIME;
use higgsmeter_testkit::pki::Pki;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// One of these tests at a time: each holds thousands of sockets.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A generous upper bound on "closed within the limit" (the receivers' opening limit
/// here is 2 s; a loaded 2-core machine).
const CLOSED_WITHIN: Duration = Duration::from_secs(25);

/// The soft fd limit, raised to the hard one where allowed (the collector inherits it).
fn fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct passed.
    #[allow(
        unsafe_code,
        reason = "getrlimit/setrlimit: the test scales to the fd limit"
    )]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max.min(65_536),
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = raised.rlim_cur;
            }
        }
    }
    lim.rlim_cur
}

/// `wanted` stuck connections per kind and receiver, or fewer when `per_kind_fds`
/// sockets each would not fit the fd limit (with room for the rest of the process).
fn scaled(wanted: usize, kinds: usize) -> usize {
    let limit = fd_limit();
    let room = usize::try_from(limit.saturating_sub(600)).unwrap_or(usize::MAX) / kinds;
    let n = wanted.min(room);
    if n < wanted {
        eprintln!(
            "connections test: fd limit (ulimit -n) is {limit}: {n} connections per kind instead of {wanted}"
        );
    }
    n
}

/// A collector with its stderr captured (to check the shutdown was clean).
fn start_collector(yaml: &str) -> CollectorProcess {
    CollectorProcess::builder()
        .config(yaml)
        .args(["--storage", "none"])
        .env("RUST_LOG", "info")
        .capture_stderr(None)
        .start()
}

/// SIGTERM; how long the exit took, and the log.
fn terminate(mut c: CollectorProcess) -> (std::process::ExitStatus, Duration, String) {
    let started = Instant::now();
    c.sigterm();
    let status = c.wait_exit(Duration::from_secs(30));
    let took = started.elapsed();
    (status, took, c.log_to_end(Duration::from_secs(5)))
}

/// A TLS client trusting only `pki`'s CA, offering `alpn`.
fn tls_client(pki: &Pki, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(pki.ca().der()))
        .expect("the CA");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What a stuck connection does after connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stuck {
    /// Nothing at all.
    Silent,
    /// Part of its opening in plaintext: half the HTTP/2 preface (gRPC), half a
    /// request's headers (HTTP), or the start of a TLS ClientHello (TLS ports).
    Partial,
    /// A finished TLS handshake, then part of the opening inside it.
    TlsThenPartial,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Port {
    Grpc,
    Http,
}

const HALF_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";
const HALF_HEADERS: &[u8] =
    b"POST /v1/metrics HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/x-protobuf\r\n";
/// A TLS handshake record header announcing 512 bytes, and 6 of them.
const HALF_CLIENT_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

/// TCP keep-alive probes after 3 s idle, every second. A burst can overflow the
/// listen backlog: the kernel then drops the client's last handshake ACK, the client
/// believes it is connected, and the server side (never accepted, so never seen by the
/// collector) may be forgotten without a word; a silent client would wait forever. A
/// probe either completes the handshake once the backlog has room (the collector then
/// times the connection out as usual) or draws a reset.
fn keepalive(tcp: &TcpStream) {
    use std::os::fd::AsRawFd as _;
    let fd = tcp.as_raw_fd();
    for (level, option, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 3),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
    ] {
        let value: libc::c_int = value;
        // SAFETY: a valid open socket, and a c_int option value of the size passed.
        #[allow(unsafe_code, reason = "setsockopt: TCP keep-alive timing")]
        unsafe {
            libc::setsockopt(
                fd,
                level,
                option,
                (&raw const value).cast::<libc::c_void>(),
                libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4),
            );
        }
    }
}

/// Opens one stuck connection and waits until the collector closes it: how long that
/// took from the connect, or an error (connect failed, or still open after
/// [`CLOSED_WITHIN`]).
async fn stuck(
    addr: SocketAddr,
    port: Port,
    kind: Stuck,
    tls: Option<tokio_rustls::TlsConnector>,
    connecting: tokio::sync::OwnedSemaphorePermit,
) -> Result<Duration, String> {
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    keepalive(&tcp);
    let mut connecting = Some(connecting);
    let started = Instant::now();
    let partial = match port {
        Port::Grpc => HALF_PREFACE,
        Port::Http => HALF_HEADERS,
    };
    let wait = async {
        let mut buf = [0u8; 512];
        match (kind, tls) {
            (Stuck::Silent, _) => {}
            (Stuck::Partial, None) => {
                let _ = tcp.write_all(partial).await;
            }
            (Stuck::Partial, Some(_)) => {
                let _ = tcp.write_all(HALF_CLIENT_HELLO).await;
            }
            (Stuck::TlsThenPartial, Some(tls)) => {
                let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
                // A handshake the collector ends (past the limit, or shed) is a close.
                let Ok(mut stream) = tls.connect(name, tcp).await else {
                    return;
                };
                let _ = stream.write_all(partial).await;
                let _ = stream.flush().await;
                drop(connecting.take());
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                }
                return;
            }
            (Stuck::TlsThenPartial, None) => unreachable!("TLS only"),
        }
        drop(connecting.take());
        // The collector closes it (EOF or reset); whatever it answers first (a 503, a
        // GOAWAY) is read and skipped.
        while let Ok(n) = tcp.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(CLOSED_WITHIN, wait)
        .await
        .map_err(|_| format!("still open after {CLOSED_WITHIN:?}"))?;
    Ok(started.elapsed())
}

/// Opens `n` stuck connections of each kind in `kinds` on each port in `ports` (at most
/// 256 connecting at once) and waits for all of them to be closed: the times it took.
fn attack(
    ports: &[(Port, SocketAddr)],
    kinds: &[Stuck],
    n: usize,
    tls: Option<&Pki>,
) -> Vec<Duration> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let connecting = Arc::new(tokio::sync::Semaphore::new(256));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            for &(port, addr) in ports {
                for &kind in kinds {
                    let connector = tls.map(|pki| {
                        tls_client(
                            pki,
                            match port {
                                Port::Grpc => b"h2",
                                Port::Http => b"http/1.1",
                            },
                        )
                    });
                    let permit = connecting.clone().acquire_owned().await.expect("semaphore");
                    tasks.spawn(async move {
                        stuck(addr, port, kind, connector, permit)
                            .await
                            .map_err(|e| format!("{port:?} {kind:?}: {e}"))
                    });
                }
            }
        }
        let mut times = Vec::new();
        let mut errors = BTreeMap::<String, usize>::new();
        while let Some(done) = tasks.join_next().await {
            match done.expect("task") {
                Ok(t) => times.push(t),
                Err(e) => *errors.entry(e).or_default() += 1,
            }
        }
        // A connect that fails (the machine's accept backlog or ports, under load) is no
        // stuck connection; a few are tolerated and shown. One left open is a failure.
        let failed_connects: usize = errors
            .iter()
            .filter(|(e, _)| e.contains("connect:"))
            .map(|(_, n)| n)
            .sum();
        assert!(
            errors.keys().all(|e| e.contains("connect:")) && failed_connects * 100 <= times.len(),
            "stuck connections: {errors:?}"
        );
        if failed_connects > 0 {
            eprintln!("{failed_connects} connects failed: {errors:?}");
        }
        times
    })
}

/// The collector's `connections_closed_total` for `transport`, by reason, and its
/// `connections_refused_total`.
fn closes(c: &CollectorProcess, transport: &str) -> (BTreeMap<String, f64>, f64) {
    let m = c.fleet();
    let closed = m
        .iter()
        .filter(|s| {
            s.name == "higgsmeter_collector_connections_closed_total"
                && s.label("transport") == Some(transport)
        })
        .map(|s| (s.label("reason").unwrap_or("").to_owned(), s.value))
        .collect();
    let refused = sum(
        &m,
        "higgsmeter_collector_connections_refused_total",
        &[("transport", transport)],
    );
    (closed, refused)
}

fn summary(times: &mut [Duration]) -> String {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    format!(
        "{} closed: median {:?}, p99 {:?}, max {:?}",
        times.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// Starts the Python SDK's exporters (gRPC and HTTP) pushing for `seconds`.
fn python_pushers(c: &CollectorProcess, pki: Option<&Pki>, seconds: f64) -> Vec<(u32, Child)> {
    let script = repo_root().join("collector/tests/python/push_loop.py");
    let (grpc, http) = match pki {
        Some(_) => (
            format!("localhost:{}", c.grpc.port()),
            format!("https://localhost:{}", c.http.port()),
        ),
        None => (format!("http://{}", c.grpc), format!("http://{}", c.http)),
    };
    [(10, "grpc", grpc), (11, "http", http)]
        .into_iter()
        .map(|(rank, protocol, endpoint)| {
            let mut cmd = Command::new(python());
            cmd.arg(&script)
                .args(["--protocol", protocol, "--endpoint", &endpoint])
                .args([
                    "--rank",
                    &rank.to_string(),
                    "--seconds",
                    &seconds.to_string(),
                ])
                .env_remove("REQUESTS_CA_BUNDLE")
                .env_remove("CURL_CA_BUNDLE")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            if let Some(pki) = pki {
                cmd.args(["--ca", &pki.path("ca.pem")]);
            }
            (rank, cmd.spawn().expect("start the Python exporter"))
        })
        .collect()
}

/// Waits for a Python pusher: the total it added.
fn pushed(child: Child) -> f64 {
    let out = child.wait_with_output().expect("wait for the exporter");
    assert!(out.status.success(), "the Python exporter failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad output {line:?}: {e}"));
    v["total"].as_f64().expect("total")
}

/// Starts the repo's demo workers (the Rust SDK's OTLP exporters, gRPC and HTTP),
/// plaintext only: ranks 20 (gRPC) and 21 (HTTP).
fn sdk_workers(c: &CollectorProcess, seconds: f64) -> Vec<(u32, Child)> {
    let secs = seconds.to_string();
    let extra = ["--duration", secs.as_str(), "--print-totals"];
    vec![
        (
            20,
            spawn_worker(20, &format!("http://{}", c.grpc), false, &extra),
        ),
        (
            21,
            spawn_worker(21, &format!("http://{}", c.http), true, &extra),
        ),
    ]
}

/// A demo worker's `worker_activity_time` per `state/operation` as the collector has it.
fn activity(c: &CollectorProcess, rank: u32) -> BTreeMap<String, f64> {
    let rank = rank.to_string();
    c.sources()
        .iter()
        .filter(|s| s.name == WORKER_ACTIVITY_TIME.name && s.label("rank") == Some(&rank))
        .map(|s| {
            (
                format!(
                    "{}/{}",
                    s.label("state").unwrap_or(""),
                    s.label("operation").unwrap_or("")
                ),
                s.value,
            )
        })
        .collect()
}

/// The worker's own totals are the collector's (the shutdown state, read by the
/// exporter a moment after the worker's snapshot, at least).
fn worker_totals_arrived(c: &CollectorProcess, name: &str, rank: u32, own: &BTreeMap<String, f64>) {
    let matches = |seen: &BTreeMap<String, f64>| {
        own.iter().all(|(key, secs)| {
            seen.get(key).is_some_and(|got| {
                if key.starts_with("shutdown/") {
                    *got >= secs - 1e-9
                } else {
                    (got - secs).abs() < 1e-9
                }
            })
        })
    };
    wait_for_or(
        Duration::from_secs(20),
        || {
            format!(
                "{name}: demo worker {rank}: its totals {own:?}, the collector's {:?}",
                activity(c, rank)
            )
        },
        || matches(&activity(c, rank)).then_some(()),
    );
}

/// The collector's `py_push_requests_total` of `rank`.
fn received(c: &CollectorProcess, rank: u32) -> f64 {
    sum(
        &c.sources(),
        "py_push_requests_total",
        &[("rank", &rank.to_string())],
    )
}

fn config(tls: Option<&Pki>, per_peer: Option<usize>) -> String {
    let tls = tls.map_or(String::new(), |pki| {
        format!(
            "        tls: {{cert_file: {}, key_file: {}}}\n",
            pki.path("server.pem"),
            pki.path("server.key")
        )
    });
    let per_peer = per_peer.map_or(String::new(), |n| {
        format!("        max_connections_per_peer: {n}\n")
    });
    format!(
        "receivers:\n  otlp:\n    protocols:\n\
         \x20     grpc:\n        endpoint: 127.0.0.1:0\n        handshake_timeout: 2s\n{per_peer}{tls}\
         \x20     http:\n        endpoint: 127.0.0.1:0\n        read_header_timeout: 2s\n{per_peer}{tls}\
         exporters:\n  prometheus:\n    endpoint: 127.0.0.1:0\n\
         processors:\n  higgsmeter:\n    stale_after: 10m\n\
         service:\n  shutdown_timeout: 5s\n"
    )
}

/// The whole scenario on one collector: real exporters push while `n` stuck
/// connections of each kind hit both receivers; then SIGTERM with a fresh batch open.
fn scenario(name: &str, tls: Option<&Pki>, per_peer: Option<usize>, kinds: &[Stuck], n: usize) {
    let c = start_collector(&config(tls, per_peer));
    let ports = [(Port::Grpc, c.grpc), (Port::Http, c.http)];
    let pushing = 14.0;
    let pushers = python_pushers(&c, tls, pushing);
    // The demo workers speak plaintext only.
    let workers = if tls.is_none() {
        sdk_workers(&c, pushing - 2.0)
    } else {
        Vec::new()
    };
    // Let the exporters connect first, then attack while they push.
    std::thread::sleep(Duration::from_secs(3));
    let attack_started = Instant::now();
    let mut times = attack(&ports, kinds, n, tls);
    let attack_took = attack_started.elapsed();
    let rss = c.rss_mib();
    for (rank, child) in pushers {
        let total = pushed(child);
        // The final export is in once the exporter has exited.
        wait_for_or(
            Duration::from_secs(20),
            || {
                format!(
                    "{name}: rank {rank}: the exporter added {total}, the collector has {}",
                    received(&c, rank)
                )
            },
            || ((received(&c, rank) - total).abs() < 1e-9).then_some(()),
        );
    }
    for (rank, child) in workers {
        let own = worker_totals(child);
        assert!(own.len() >= 4, "{name}: worker {rank}: {own:?}");
        worker_totals_arrived(&c, name, rank, &own);
    }
    let stuck_per_port = n * kinds.len();
    let mut report = Vec::new();
    for transport in ["grpc", "http"] {
        let (closed, refused) = closes(&c, transport);
        let by_limit = closed.get("opening_timeout").copied().unwrap_or(0.0)
            + closed.get("shed").copied().unwrap_or(0.0);
        assert!(
            // All of them, but for the few a burst on a loaded machine leaves in the
            // kernel (never accepted, so never the collector's to count).
            by_limit + refused >= stuck_per_port as f64 * 0.97,
            "{name} {transport}: {stuck_per_port} stuck, closed {closed:?}, refused {refused}"
        );
        report.push(format!("{transport}: closed {closed:?}, refused {refused}"));
    }
    assert!(rss < 1024.0, "{name}: RSS {rss} MiB");
    let max = *times.iter().max().expect("some");
    assert!(
        max <= CLOSED_WITHIN,
        "{name}: a stuck connection took {max:?}"
    );
    eprintln!(
        "{name}: {} stuck connections ({n} per kind {kinds:?} per receiver) in {attack_took:?}; {}; RSS after {rss:.0} MiB; {}",
        times.len(),
        summary(&mut times),
        report.join("; ")
    );

    // SIGTERM with stuck connections open: clean, and quick.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let held = runtime.block_on(async {
        let mut held = Vec::new();
        for _ in 0..(n / 4).max(50) {
            for (port, addr) in ports {
                let mut s = TcpStream::connect(addr).await.expect("connect");
                held.push(TcpStream::connect(addr).await.expect("connect"));
                let partial = match (tls.is_some(), port) {
                    (true, _) => HALF_CLIENT_HELLO,
                    (false, Port::Grpc) => HALF_PREFACE,
                    (false, Port::Http) => HALF_HEADERS,
                };
                s.write_all(partial).await.expect("write");
                held.push(s);
            }
        }
        held
    });
    std::thread::sleep(Duration::from_millis(300));
    let (status, took, log) = terminate(c);
    drop(held);
    assert!(status.success(), "{name}: exit {status}: {log}");
    assert!(
        !log.contains("not clean") && !log.contains("did not stop"),
        "{name}: shutdown was not clean: {log}"
    );
    // Generous: the issue asks for about 1 s (printed below).
    assert!(
        took < Duration::from_secs(4),
        "{name}: SIGTERM took {took:?}"
    );
    eprintln!(
        "{name}: SIGTERM with {} stuck connections open: exit in {took:?}",
        (n / 4).max(50) * 4
    );
}

#[test]
fn stuck_connections_never_lock_out_real_exporters() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // 2 kinds x 2 receivers, each a socket here and (for a while) one in the collector.
    let n = scaled(1100, 2 * 2 * 2);
    scenario("plaintext", None, None, &[Stuck::Silent, Stuck::Partial], n);
}

#[test]
fn stuck_connections_never_lock_out_real_exporters_over_tls() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let pki = Pki::new("connections test CA");
    let n = scaled(1100, 2 * 2 * 2);
    scenario("tls", Some(&pki), None, &[Stuck::Silent, Stuck::Partial], n);
    // A finished handshake, then half an opening inside it (fewer: each is a real TLS
    // handshake on this machine's two cores).
    let pki = Pki::new("connections test CA");
    scenario(
        "tls-then-partial",
        Some(&pki),
        None,
        &[Stuck::TlsThenPartial],
        100,
    );
}

/// 2,000 connections from one peer address with the per-peer cap at
/// `max_connections`: the receiver itself is full, and it still sheds the newest stuck
/// connection for a real exporter's.
#[test]
fn a_full_receiver_sheds_stuck_connections_for_real_exporters() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = scaled(1000, 2 * 2 * 2);
    scenario(
        "one-peer-full",
        None,
        Some(1024),
        &[Stuck::Silent, Stuck::Partial],
        n,
    );
}

/// A connection that finished its opening and then sends nothing is closed after the
/// receiver's idle limit (gRPC `max_connection_idle`, HTTP `read_header_timeout`) and
/// counted as `idle_timeout`.
#[test]
fn idle_connections_are_closed_after_their_limit_and_counted() {
    use std::io::{Read as _, Write as _};
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let c = start_collector(
        "receivers:\n  otlp:\n    protocols:\n\
         \x20     grpc:\n        endpoint: 127.0.0.1:0\n        max_connection_idle: 1s\n\
         \x20     http:\n        endpoint: 127.0.0.1:0\n        read_header_timeout: 1s\n\
         exporters:\n  prometheus:\n    endpoint: 127.0.0.1:0\n",
    );
    let started = Instant::now();
    let closed_after = |mut s: std::net::TcpStream| {
        s.set_read_timeout(Some(CLOSED_WITHIN)).expect("timeout");
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return started.elapsed(),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return started.elapsed();
                }
                Err(e) => panic!("the idle connection stayed open: {e}"),
            }
        }
    };
    // gRPC: the preface and an empty SETTINGS frame, then nothing.
    let mut grpc = std::net::TcpStream::connect(c.grpc).expect("connect");
    grpc.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .expect("write");
    // HTTP: one whole request, then nothing.
    let mut http = std::net::TcpStream::connect(c.http).expect("connect");
    http.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("write");
    let (g, h) = (closed_after(grpc), closed_after(http));
    eprintln!("idle: gRPC closed after {g:?}, HTTP after {h:?} (limits 1 s)");
    assert!(g >= Duration::from_millis(900) && h >= Duration::from_millis(900));
    for transport in ["grpc", "http"] {
        let (closed, _) = closes(&c, transport);
        assert_eq!(
            closed.get("idle_timeout").copied(),
            Some(1.0),
            "{transport}: {closed:?}"
        );
        assert_eq!(
            closed.get("opening_timeout").copied(),
            Some(0.0),
            "{transport}: {closed:?}"
        );
    }
}
