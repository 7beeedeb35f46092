//! No heap allocation per transition once warmed up, counted by a counting allocator.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use higgsmeter::{ActivityLayer, AppState, Tracker, track_state};
use tracing_subscriber::layer::SubscriberExt;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

#[allow(unsafe_code)]
// SAFETY: forwards to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

#[track_state(AppState::Cpu)]
fn decorated(x: u64) -> u64 {
    x + 1
}

#[test]
fn transitions_do_not_allocate_after_warm_up() {
    let tracker = Tracker::new();
    let global = higgsmeter::state_tracker().clone();
    let subscriber = tracing_subscriber::registry()
        .with(ActivityLayer::new(tracker.clone()))
        .with(ActivityLayer::new(global));
    let ops = ["inference", "upload_result", "fetch_metadata", ""];
    tracing::subscriber::with_default(subscriber, || {
        let work = |n: usize| {
            for i in 0..n {
                let _outer = tracker.scope(AppState::Io, ops[i % 4]);
                {
                    let _inner = tracker.scope(AppState::Gpu, ops[(i + 1) % 4]);
                    tracker.set_state(AppState::Cpu, ops[(i + 2) % 4]);
                }
                tracker.set_state(AppState::Idle, ops[(i + 3) % 4]);
                std::hint::black_box(decorated(i as u64));
            }
        };
        work(64); // warm-up: interning, the registry's slab pages, the frame vector
        let n = allocations_during(|| work(10_000));
        assert_eq!(
            n, 0,
            "allocations in 10k iterations of 2 scopes + 2 set_state + 1 #[track_state]"
        );
    });
    let snap = tracker.snapshot();
    assert_eq!(snap.sum(), snap.elapsed());
}

#[test]
fn the_disabled_path_does_not_allocate() {
    let tracker = Tracker::new();
    tracker.set_enabled(false);
    let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone()));
    tracing::subscriber::with_default(subscriber, || {
        let n = allocations_during(|| {
            for _ in 0..10_000 {
                let _s = tracker.scope(AppState::Gpu, "inference");
                tracker.set_state(AppState::Idle, "x");
            }
        });
        assert_eq!(n, 0);
    });
}

/// A training loop's marks: `record_step` is one atomic store, and a checkpoint's save
/// (its scope and its marks) allocates nothing once warmed up either.
#[test]
fn goodput_marks_do_not_allocate() {
    let tracker = Tracker::new();
    let subscriber = tracing_subscriber::registry().with(ActivityLayer::new(tracker.clone()));
    tracing::subscriber::with_default(subscriber, || {
        let work = |steps: std::ops::Range<u64>| {
            for step in steps {
                {
                    let _gpu = tracker.scope(AppState::Gpu, "train_step");
                }
                tracker.record_step(step);
                if step % 16 == 0 {
                    let _save = tracker.checkpoint_save(step);
                }
            }
        };
        work(0..64);
        let n = allocations_during(|| {
            for step in 0..10_000 {
                tracker.record_step(step);
            }
        });
        assert_eq!(n, 0, "allocations in 10k record_step");
        let n = allocations_during(|| work(64..10_064));
        assert_eq!(n, 0, "allocations in 10k steps with a save every 16");
    });
    assert_eq!(tracker.job_marks().step, Some(10_063));
    assert_eq!(tracker.job_marks().checkpoint_step, Some(10_048));
}
