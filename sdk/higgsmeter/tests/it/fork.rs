//! `fork()` while other threads hold locks: a child never hangs on the process-wide
//! operation table, which exporter threads read all the time (a lock one of the
//! parent's threads held at the fork would never be released in the child, where that
//! thread does not exist), its copy of the table is whole, and any lock registered with
//! `higgsmeter::fork::hold_across_fork` is free in every child.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use higgsmeter::{AppState, Tracker};

const CHILDREN: usize = 200;

/// Forks; in the child runs `child` and exits with its code, never returning.
#[allow(unsafe_code, reason = "fork, waitpid, kill and _exit from libc")]
fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `child` (this crate's code under test, which must not
    // depend on the parent's other threads) and leaves with `_exit`, running no
    // destructors or atexit handlers of the parent's copy.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(4);
        unsafe { libc::_exit(code) }
    }
    pid
}

/// Waits for `pid` until `deadline`: its exit code, or `None` (it hung; it is killed).
#[allow(unsafe_code, reason = "waitpid and kill from libc")]
fn wait(pid: libc::pid_t, deadline: Instant) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our own child; `status` is a valid out-pointer.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            });
        }
        if Instant::now() >= deadline {
            // SAFETY: as above; it is ours to stop.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_forked_child_never_hangs_on_the_operation_table() {
    // Readers hold the table's lock to resolve names (a snapshot of many operations,
    // as every export makes); a writer interns new names all along.
    let parent = Arc::new(Tracker::new());
    for i in 0..400 {
        parent.set_state(AppState::Cpu, &format!("fork_parent_{i}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (parent, stop) = (parent.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(parent.snapshot());
            }
        }));
    }
    {
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let t = Tracker::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                t.set_state(AppState::Io, &format!("fork_writer_{}", i % 3000));
                i += 1;
            }
        }));
    }

    let mut pids = Vec::new();
    for i in 0..CHILDREN {
        pids.push(fork(move || {
            // A tracker of the child's own; a name the table has never seen (a write)
            // and one the parent's readers resolve (a read).
            let t = Tracker::new();
            t.set_state(AppState::Gpu, &format!("fork_child_{i}"));
            t.set_state(AppState::Cpu, "fork_parent_7");
            let snap = t.snapshot();
            let ok = snap
                .get(AppState::Gpu, &format!("fork_child_{i}"))
                .is_some()
                && snap.get(AppState::Cpu, "fork_parent_7").is_some();
            if ok { 0 } else { 3 }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let codes: Vec<_> = pids.into_iter().map(|pid| wait(pid, deadline)).collect();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a parent thread panicked");
    }
    let hung = codes.iter().filter(|c| c.is_none()).count();
    assert_eq!(hung, 0, "{hung} of {CHILDREN} children hung after fork");
    assert!(
        codes.iter().all(|c| *c == Some(0)),
        "a child saw a wrong snapshot: {codes:?}"
    );
}

/// Held by a thread of the parent nearly all the time; registered with `fork`.
static BUSY: Mutex<u64> = Mutex::new(0);

fn busy() -> std::sync::MutexGuard<'static, u64> {
    BUSY.lock().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn a_registered_lock_is_free_in_every_child() {
    higgsmeter::fork::hold_across_fork(|| Box::new(busy()));
    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut n = busy();
                for _ in 0..10_000 {
                    *n = std::hint::black_box(*n + 1);
                }
            }
        })
    };
    let pids: Vec<_> = (0..50)
        .map(|_| {
            fork(|| {
                *busy() += 1;
                0
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let codes: Vec<_> = pids.into_iter().map(|pid| wait(pid, deadline)).collect();
    stop.store(true, Ordering::Relaxed);
    holder.join().expect("the holder panicked");
    assert!(codes.iter().all(|c| *c == Some(0)), "children: {codes:?}");
    assert!(*busy() > 0, "the holder never held the lock");
}
