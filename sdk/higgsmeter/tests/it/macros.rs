//! `#[track_state]` on sync and async functions, through the process-wide tracker.
//!
//! The only test of the `it` binary that uses the global tracker (every other module's
//! telemetry gets a tracker of its own: `support::isolated`), so nothing else touches it
//! meanwhile.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use higgsmeter::{ActivityLayer, AppState, state_tracker, track_state};
use tracing_subscriber::layer::SubscriberExt;

#[track_state(AppState::Io)]
fn download_data(url: &str) -> usize {
    if state_tracker().is_enabled() {
        assert_eq!(
            state_tracker().current(),
            (AppState::Io, "download_data".into())
        );
    }
    std::thread::sleep(Duration::from_millis(2));
    url.len()
}

#[track_state(AppState::Io, operation = "s3_download")]
async fn get(key: &str) -> Result<String, std::num::ParseIntError> {
    assert_eq!(
        state_tracker().current(),
        (AppState::Io, "s3_download".into())
    );
    tokio::time::sleep(Duration::from_millis(2)).await; // awaiting counts as io
    let n: u32 = key.parse()?; // `?` infers through the instrumented body
    if n == 0 {
        return Ok("zero".to_owned()); // early return from the body
    }
    Ok(n.to_string())
}

struct S3Client;

impl S3Client {
    #[track_state(AppState::Cpu)]
    fn checksum(&self, data: &[u8]) -> u32 {
        assert_eq!(
            state_tracker().current(),
            (AppState::Cpu, "checksum".into())
        );
        data.iter().map(|b| u32::from(*b)).sum()
    }

    #[track_state(AppState::Gpu, operation = "inference")]
    async fn infer(&self, n: u64) -> u64 {
        tokio::task::yield_now().await;
        n * 2
    }
}

#[track_state(AppState::Cpu)]
fn fails() -> Result<(), String> {
    Err("bad input".into())
}

#[test]
fn track_state_covers_sync_and_async_functions() {
    let tracker = state_tracker().clone();
    let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone()));
    tracing::subscriber::with_default(subscriber, || {
        tracker.set_state(AppState::Idle, "waiting_for_work");
        assert_eq!(download_data("s3://b/k"), 8);
        assert_eq!(
            tracker.current(),
            (AppState::Idle, "waiting_for_work".into())
        );
        assert_eq!(S3Client.checksum(&[1, 2, 3]), 6);
        assert!(fails().is_err());

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(get("7").await.unwrap(), "7");
            assert_eq!(get("0").await.unwrap(), "zero");
            assert!(get("x").await.is_err());
            assert_eq!(S3Client.infer(21).await, 42);
            assert_eq!(tracker.current_state(), AppState::Idle);
        });
    });
    let snap = tracker.snapshot();
    assert_eq!(snap.sum(), snap.elapsed());
    for (state, op) in [
        (AppState::Io, "download_data"),
        (AppState::Io, "s3_download"),
        (AppState::Cpu, "checksum"),
        (AppState::Cpu, "fails"),
        (AppState::Gpu, "inference"),
    ] {
        assert!(
            snap.get(state, op).is_some(),
            "{state}/{op} was tracked: {snap:#?}"
        );
    }
    // The sleeps inside the scopes were counted there (at least their nominal length).
    assert!(snap.get(AppState::Io, "download_data").unwrap() >= Duration::from_millis(2));
    assert!(snap.get(AppState::Io, "s3_download").unwrap() >= Duration::from_millis(6));

    // The seed's rank-0 mode: other ranks are no-ops.
    higgsmeter::enable_tracker(1);
    assert!(!tracker.is_enabled());
    let before = tracker.snapshot().entries().len();
    tracker.set_state(AppState::Gpu, "rank1_work");
    assert_eq!(download_data("x"), 1);
    higgsmeter::enable_tracker(0);
    assert!(tracker.is_enabled());
    assert_eq!(tracker.snapshot().entries().len(), before);
}
