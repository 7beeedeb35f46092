//! The allocator push against a real HTTP server on 127.0.0.1.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::{Server, assert_same_counters, fixture};
use higgsmeter_session::{Error, Pusher, SessionCounters, parse_timestamp, replay};
use serde_json::Value;

/// The fixture's counters, with `sample_count` replaced by a number that grows at each
/// read, so every body says which read it carries.
fn counters_source() -> (
    Arc<AtomicU64>,
    impl Fn() -> SessionCounters + Send + 'static,
) {
    let base = replay(
        parse_timestamp("2025-03-01T09:00:00+00:00").unwrap(),
        std::io::BufReader::new(std::fs::File::open(fixture("samples.jsonl")).unwrap()),
    )
    .unwrap();
    let reads = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&reads);
    (reads, move || {
        let mut c = base.clone();
        c.sample_count = 1000 + counter.fetch_add(1, Ordering::SeqCst);
        c
    })
}

fn body(r: &crate::support::Received) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn pushes_the_seed_json_retries_after_503_with_the_latest_counters_and_pushes_on_stop() {
    let server = Server::start(vec![503, 503]);
    let (reads, source) = counters_source();
    let pusher = Pusher::builder(server.url("/api/sessions/7/counters"))
        .with_interval(Duration::from_millis(100))
        .with_backoff(Duration::from_millis(50), Duration::from_millis(200))
        .with_header("Authorization", "Bearer lab-token")
        .start(source)
        .unwrap();
    let got = server.wait_for(3);
    let statuses: Vec<u16> = got.iter().take(3).map(|r| r.status).collect();
    assert_eq!(statuses, vec![503, 503, 200]);

    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    let mut previous = 0;
    for r in &got {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/api/sessions/7/counters");
        assert_eq!(r.content_type.as_deref(), Some("application/json"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer lab-token"));
        let mut b = body(r);
        // Each attempt, retries included, carries the counters as they were then.
        let count = b["sample_count"].as_u64().unwrap();
        assert!(count > previous, "{count} after {previous}");
        previous = count;
        b["sample_count"] = expected["sample_count"].clone();
        // Every other field, by name, order and value, is the seed's.
        assert_same_counters(&b, &expected, "push body");
    }

    assert!(
        pusher.stop(Duration::from_secs(5)),
        "the final push is delivered"
    );
    let after = server.received();
    let last = after.last().unwrap();
    assert_eq!(last.status, 200);
    // The final push carries the latest counters: the last read of the source.
    assert_eq!(
        body(last)["sample_count"].as_u64().unwrap(),
        1000 + reads.load(Ordering::SeqCst) - 1
    );
}

#[test]
fn a_final_push_to_a_dead_allocator_gives_up_at_its_deadline() {
    // A port nothing listens on: bound, then released.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (reads, source) = counters_source();
    let pusher = Pusher::builder(format!("http://{addr}/counters"))
        .with_interval(Duration::from_secs(3600))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(50))
        .start(source)
        .unwrap();
    assert!(!pusher.stop(Duration::from_millis(300)));
    // It tried, with the latest counters, more than once.
    assert!(reads.load(Ordering::SeqCst) >= 2);
}

#[test]
fn only_absolute_http_and_https_urls_are_accepted() {
    let (_, source) = counters_source();
    match Pusher::builder("ftp://allocator.lab/counters").start(source) {
        Err(Error::InvalidUrl { reason, .. }) => assert!(reason.contains("https://"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let (_, source) = counters_source();
    assert!(matches!(
        Pusher::builder("allocator/counters").start(source),
        Err(Error::InvalidUrl { .. })
    ));
}
