//! `init()` works from a plain `fn main` and inside tokio, for both OTLP transports, and
//! neither building nor dropping the guard panics, even when the endpoint is down.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use higgsmeter::{AppState, Protocol, Telemetry, Tracker};

fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port() // closed again when `l` drops
}

fn build(protocol: Protocol, tracker: &Tracker) -> Telemetry {
    crate::support::isolated(tracker)
        .with_otlp_endpoint(format!("http://127.0.0.1:{}", closed_port()))
        .with_otlp_protocol(protocol)
        .with_export_interval(Duration::from_millis(100))
        .with_prometheus_addr("127.0.0.1:0".parse().unwrap())
        .init()
        .expect("init succeeds even when the collector is down")
}

#[test]
fn from_a_plain_main_with_the_collector_down() {
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let tracker = Tracker::new();
        let telemetry = build(protocol, &tracker);
        tracker.set_state(AppState::Gpu, "work");
        let (status, body) =
            higgsmeter_testkit::http::get(telemetry.prometheus_addr().unwrap(), "/metrics")
                .unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("worker_current_state 3"), "{body}");
        telemetry.force_flush(); // fails to export: logged, not returned, not panicking
        drop(telemetry);
    }
}

#[test]
fn inside_a_tokio_runtime_with_the_collector_down() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
            let tracker = Tracker::new();
            let telemetry = build(protocol, &tracker);
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(telemetry); // dropped inside an async context
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tracker = Tracker::new();
        let telemetry = build(Protocol::Grpc, &tracker);
        drop(telemetry);
    });
}

#[test]
fn bad_settings_are_clear_errors() {
    let err = crate::support::isolated(&Tracker::new())
        .with_otlp_endpoint("not a url")
        .with_otlp_protocol(Protocol::Grpc)
        .init()
        .unwrap_err()
        .to_string();
    assert!(err.contains("OTLP") && err.contains("not a url"), "{err}");
}

#[test]
fn a_failed_init_inside_tokio_cleans_up_without_panicking() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
            let err = crate::support::isolated(&Tracker::new())
                .with_otlp_endpoint(format!("http://127.0.0.1:{}", closed_port()))
                .with_otlp_protocol(protocol)
                .with_prometheus_addr(taken.local_addr().unwrap())
                .init()
                .unwrap_err();
            assert!(err.to_string().contains("could not listen"), "{err}");
        }
    });
}

/// An OTLP/HTTP endpoint that answers every request `503 Service Unavailable` (a
/// retryable status) and counts the requests.
fn unavailable_endpoint() -> (
    String,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (count, done) = (Arc::clone(&requests), Arc::clone(&stop));
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            let Ok((stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            count.fetch_add(1, Ordering::SeqCst);
            let _ = reader.get_mut().write_all(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    (endpoint, requests, stop)
}

/// A cumulative export carries every total so far, so a failed one is retried once, not
/// three times (the next periodic export makes up for it, and a worker's exit is not
/// held by backoff); a delta export, whose increments are lost with it, keeps the
/// exporter's recommended three retries.
#[test]
fn a_failed_cumulative_export_is_retried_once_and_a_delta_one_three_times() {
    use opentelemetry_sdk::metrics::Temporality;
    use std::sync::atomic::Ordering;
    for (temporality, attempts) in [(None, 2), (Some(Temporality::Delta), 4)] {
        let (endpoint, requests, stop) = unavailable_endpoint();
        let tracker = Tracker::new();
        let mut builder = crate::support::isolated(&tracker)
            .with_otlp_endpoint(endpoint)
            .with_otlp_protocol(Protocol::HttpProtobuf)
            .with_export_interval(Duration::from_secs(3600));
        if let Some(t) = temporality {
            builder = builder.with_temporality(t);
        }
        let telemetry = builder.init().unwrap();
        tracker.set_state(AppState::Gpu, "work");
        telemetry.force_flush();
        assert_eq!(
            requests.load(Ordering::SeqCst),
            attempts,
            "{temporality:?}: one export's requests"
        );
        stop.store(true, Ordering::Relaxed);
        drop(telemetry);
    }
}
