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
            crate::support::http_get(telemetry.prometheus_addr().unwrap(), "/metrics");
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
