//! One rank of a scripted training job for the goodput end-to-end test.
//!
//! ```text
//! job-worker --rank R --steps-to N [--restore STEP] [--crash-at STEP]
//!            [--checkpoint-every 10] [--gpu-ms 60] [--io-ms 15] [--wait-ms 10]
//! ```
//!
//! Settings from the environment as any worker (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `HIGGSMETER_JOB_ID`, `HIGGSMETER_JOB_INCARNATION`, `RANK`, ...). Its timeline:
//! start-up 100 ms; with `--restore` a checkpoint restore of that step (150 ms); warm-up
//! 100 ms; then per step: `io`/`next_batch`, `gpu`/`train_step`, `idle`/`all_reduce`
//! (`--wait-ms` × (3 − rank): the slower ranks wait less), the step marked, and every
//! `--checkpoint-every` steps a checkpoint save (30 ms). It prints one JSON line per
//! event on stdout: `begin` (unix seconds: when counting began, in `init`), `checkpoint` (step, the
//! productive seconds the save kept), and at the end `end` (unix seconds, its
//! snapshot's seconds per `state/operation`): after the last step, or when stdin closes
//! (the elastic agent stopping it), after `finalize()` with the final export made. With
//! `--crash-at`, at that step it stops its clock, exports, prints `end` and aborts: a
//! crash right after an export (ADR 0021: what a crash's last export did not carry
//! counts as recovery).

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use higgsmeter::{AppState, job, state_tracker};

struct Args {
    rank: u32,
    steps_to: u64,
    restore: Option<u64>,
    crash_at: Option<u64>,
    checkpoint_every: u64,
    gpu: Duration,
    io: Duration,
    wait: Duration,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        rank: 0,
        steps_to: 0,
        restore: None,
        crash_at: None,
        checkpoint_every: 10,
        gpu: Duration::from_millis(60),
        io: Duration::from_millis(15),
        wait: Duration::from_millis(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--rank" => a.rank = value()?.parse()?,
            "--steps-to" => a.steps_to = value()?.parse()?,
            "--restore" => a.restore = Some(value()?.parse()?),
            "--crash-at" => a.crash_at = Some(value()?.parse()?),
            "--checkpoint-every" => a.checkpoint_every = value()?.parse()?,
            "--gpu-ms" => a.gpu = Duration::from_millis(value()?.parse()?),
            "--io-ms" => a.io = Duration::from_millis(value()?.parse()?),
            "--wait-ms" => a.wait = Duration::from_millis(value()?.parse()?),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if a.steps_to == 0 || a.checkpoint_every == 0 {
        bail!("--steps-to and --checkpoint-every must be positive");
    }
    Ok(a)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn emit(value: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// The tracker's seconds per `state/operation`.
fn seconds() -> serde_json::Value {
    let snap = state_tracker().snapshot();
    let mut map = serde_json::Map::new();
    for e in snap.entries() {
        map.insert(
            format!("{}/{}", e.state.as_str(), e.operation),
            serde_json::Value::from(e.seconds()),
        );
    }
    serde_json::Value::Object(map)
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    let telemetry = higgsmeter::init().context("higgsmeter init")?;
    // When counting began (inside `init`): now less the time tracked since.
    let begin = unix_now() - state_tracker().snapshot().elapsed().as_secs_f64();
    emit(serde_json::json!({ "event": "begin", "unix": begin, "rank": a.rank }));
    // The elastic agent stops a rank by closing its stdin.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
                line.clear();
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
    let tracker = state_tracker();
    tracker.set_state(AppState::Startup, "");
    std::thread::sleep(Duration::from_millis(100));
    if let Some(step) = a.restore {
        let _restore = job::checkpoint_restore(step);
        std::thread::sleep(Duration::from_millis(150));
    }
    {
        let _warmup = tracker.scope(AppState::Warmup, "load_model");
        std::thread::sleep(Duration::from_millis(100));
    }
    let first = a.restore.map_or(1, |s| s + 1);
    for step in first..=a.steps_to {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        {
            let _io = tracker.scope(AppState::Io, "next_batch");
            std::thread::sleep(a.io);
        }
        {
            let _gpu = tracker.scope(AppState::Gpu, "train_step");
            std::thread::sleep(a.gpu);
        }
        {
            let _wait = tracker.scope(AppState::Idle, "all_reduce");
            std::thread::sleep(a.wait * 3u32.saturating_sub(a.rank));
        }
        job::record_step(step);
        if step.is_multiple_of(a.checkpoint_every) {
            {
                let _save = job::checkpoint_save(step);
                std::thread::sleep(Duration::from_millis(30));
            }
            let kept = job::marks()
                .checkpoint_productive
                .map_or(0.0, |d| d.as_secs_f64());
            emit(serde_json::json!({ "event": "checkpoint", "step": step, "productive": kept }));
        }
        if a.crash_at == Some(step) {
            tracker.finalize();
            telemetry.force_flush();
            emit(serde_json::json!({
                "event": "end", "crashed": true, "unix": unix_now(), "seconds": seconds()
            }));
            std::process::abort();
        }
    }
    tracker.set_state(AppState::Shutdown, "");
    std::thread::sleep(Duration::from_millis(20));
    tracker.finalize();
    emit(serde_json::json!({
        "event": "end", "crashed": false, "unix": unix_now(), "seconds": seconds()
    }));
    drop(telemetry); // the final export
    Ok(())
}
