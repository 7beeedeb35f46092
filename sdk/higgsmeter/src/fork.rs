//! Process-wide locks that `fork()` never leaves held in the child.
//!
//! `fork()` copies only the thread that calls it. A lock another thread held at that
//! instant is copied held, and no thread of the child will ever release it: the first
//! time the child takes it, the child hangs. Python workers fork all the time
//! (`multiprocessing`, DataLoader workers, Ray, Gunicorn) while this crate's exporter
//! threads read the process-wide table of operation names, so that table is registered
//! here (and `higgsmeter-python` registers its pipeline's slot): `fork()` first takes
//! each registered lock (waiting for a holder to finish, as glibc does for `malloc`'s
//! locks), the process forks with them held by the forking thread, and then both the
//! parent and the child release them. The child's copy of what they guard is whole.
//!
//! A [`Tracker`](crate::Tracker)'s own lock is not registered: a child records into a
//! tracker of its own, as the Python package's does (its tracker is replaced in every
//! child), not into one its parent's threads were recording into at the fork.
//!
//! A lock registered here must be held only for short work that never waits for
//! another lock (a registered one taken later included), nor for the Python GIL: the
//! forking thread waits for it holding the GIL and the locks registered before it.
//!
//! On platforms without `fork()` registering does nothing.

use std::any::Any;
#[cfg(unix)]
use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Takes one registered lock and returns its guard, boxed.
pub type Acquire = fn() -> Box<dyn Any>;

/// Every registered lock, in registration order.
static ACQUIRERS: Mutex<Vec<Acquire>> = Mutex::new(Vec::new());

fn acquirers() -> MutexGuard<'static, Vec<Acquire>> {
    ACQUIRERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes every later `fork()` of this process take the lock that `acquire` takes, and
/// release it in the parent and in the child once forked.
///
/// `acquire` takes a process-wide (`'static`) lock and returns its guard, boxed:
/// `|| Box::new(LOCK.lock().unwrap_or_else(PoisonError::into_inner))`. Locks are taken
/// in registration order and released in reverse. Register a lock before any thread can
/// hold it at a fork (where it is created), and only a lock held briefly, never while
/// waiting for another lock or the Python GIL (see the module's docs).
pub fn hold_across_fork(acquire: Acquire) {
    #[cfg(unix)]
    install();
    acquirers().push(acquire);
}

/// The guards the forking thread holds from `prepare` to `parent` or `child`: the
/// registry's own lock first (a registration cannot change the list meanwhile), then
/// each registered lock's.
#[cfg(unix)]
type Held = (MutexGuard<'static, Vec<Acquire>>, Vec<Box<dyn Any>>);

#[cfg(unix)]
thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

#[cfg(unix)]
fn install() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        #[allow(
            unsafe_code,
            reason = "pthread_atfork registers three handlers that take and release Rust \
                      locks; they never unwind (each is panic-free)"
        )]
        // SAFETY: the handlers are `extern "C"` functions with no arguments, valid for
        // the life of the process, and never unwind.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
        if rc != 0 {
            tracing::warn!(
                target: "higgsmeter",
                code = rc,
                "pthread_atfork failed: a child forked while another thread holds one of \
                 higgsmeter's locks may hang"
            );
        }
    });
}

/// Before the fork, in the forking thread: takes every registered lock.
#[cfg(unix)]
extern "C" fn prepare() {
    let registry = acquirers();
    let guards: Vec<Box<dyn Any>> = registry.iter().map(|acquire| acquire()).collect();
    // Where this thread's storage is gone (it is exiting), the guards drop here: the
    // fork goes on unguarded rather than not at all.
    let _ = HELD.try_with(|held| {
        if let Ok(mut held) = held.try_borrow_mut() {
            *held = Some((registry, guards));
        }
    });
}

/// After the fork, in the parent and in the (single-threaded) child: releases them.
#[cfg(unix)]
extern "C" fn release() {
    let taken = HELD
        .try_with(|held| held.try_borrow_mut().ok().and_then(|mut h| h.take()))
        .ok()
        .flatten();
    if let Some((registry, mut guards)) = taken {
        while let Some(guard) = guards.pop() {
            drop(guard);
        }
        drop(registry);
    }
}
