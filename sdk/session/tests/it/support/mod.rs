//! The session agent's own test helpers: comparing counters JSON, the Python
//! transcription of the seed, a real HTTP server that records what it is sent. Waits,
//! processes, the in-process collector and the fake NVML are the workspace's test kit
//! (`higgsmeter-testkit`).

#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    reason = "test code: each module uses a part; a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use higgsmeter_testkit::wait::Wait;
use serde_json::Value;

/// `tests/fixtures/…`.
/// Held while a test runs processes with SLEAP's names or an agent that scans for them:
/// processes are visible system-wide, so one test's `sleap-train` would be another's
/// agent's finding.
pub static SLEAP_PROCESSES: Mutex<()> = Mutex::new(());

/// Takes [`SLEAP_PROCESSES`] (a failed holder's poison is ignored).
pub fn sleap_processes() -> std::sync::MutexGuard<'static, ()> {
    SLEAP_PROCESSES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs the seed's `apply_sample`, transcribed in `fixtures/aggregator.py`, over a
/// samples file and returns its counters JSON.
pub fn python_counters(started: &str, samples: &Path) -> Value {
    let output = Command::new("python3")
        .arg(fixture("aggregator.py"))
        .arg(started)
        .arg(samples)
        .output()
        .expect("run python3 (the parity tests run the seed's Python arithmetic)");
    assert!(
        output.status.success(),
        "aggregator.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("aggregator.py prints JSON")
}

/// Asserts two counters objects are equal field for field: the same keys, numbers equal as f64 (Python writes `4` where Rust writes `4.0`), the rest
/// equal.
pub fn assert_same_counters(rust: &Value, python: &Value, context: &str) {
    let (Value::Object(r), Value::Object(p)) = (rust, python) else {
        panic!("{context}: not two objects: {rust} / {python}");
    };
    let rk: Vec<&String> = r.keys().collect();
    let pk: Vec<&String> = p.keys().collect();
    assert_eq!(rk, pk, "{context}: field names differ");
    for (key, rv) in r {
        let pv = &p[key];
        let same = match (rv, pv) {
            (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
            (a, b) => a == b,
        };
        assert!(same, "{context}: `{key}`: rust {rv} != python {pv}");
    }
}

/// One request the test server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub authorization: Option<String>,
    pub body: Vec<u8>,
    /// The status the server answered.
    pub status: u16,
}

/// A real HTTP/1 server (hyper) on 127.0.0.1 that records every request and answers
/// with the next status of a script (then 200 for ever).
pub struct Server {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    runtime: tokio::runtime::Runtime,
}

impl Server {
    pub fn start(script: Vec<u16>) -> Server {
        use http_body_util::{BodyExt, Full};
        use hyper::service::service_fn;
        use hyper_util::rt::TokioIo;

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
        let log = Arc::clone(&received);
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let log = Arc::clone(&log);
                let script = Arc::clone(&script);
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let log = Arc::clone(&log);
                        let script = Arc::clone(&script);
                        async move {
                            let header = |name: &str| {
                                req.headers()
                                    .get(name)
                                    .and_then(|v| v.to_str().ok())
                                    .map(str::to_owned)
                            };
                            let (content_type, authorization) =
                                (header("content-type"), header("authorization"));
                            let method = req.method().to_string();
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await?.to_bytes().to_vec();
                            let status = script.lock().unwrap().pop_front().unwrap_or(200);
                            log.lock().unwrap().push(Received {
                                method,
                                path,
                                content_type,
                                authorization,
                                body,
                                status,
                            });
                            let mut response =
                                hyper::Response::new(Full::new(bytes::Bytes::from_static(b"{}")));
                            *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            Ok::<_, hyper::Error>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Server {
            addr,
            received,
            runtime,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (bounded: 30 s) until `n` requests have arrived; returns them.
    pub fn wait_for(&self, n: usize) -> Vec<Received> {
        Wait::up_to(Duration::from_secs(30))
            .every(Duration::from_millis(20))
            .until(|| {
                let got = self.received();
                if got.len() >= n { Ok(got) } else { Err(got) }
            })
            .unwrap_or_else(|got| {
                panic!(
                    "only {} of {n} requests arrived within 30 s: {got:?}",
                    got.len()
                )
            })
    }
}
