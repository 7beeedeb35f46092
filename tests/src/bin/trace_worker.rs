//! A worker for the trace tests (`tests/tests/it/traces_e2e.rs`): `higgsmeter::init()` from
//! the environment (the test sets `OTEL_TRACES_EXPORTER`, the endpoint, the sampler,
//! `RANK`, …), one request's worth of nested spans, then, once the `Telemetry` guard
//! has flushed, what it measured as one JSON line on stdout.
//!
//! The spans, as nested in the code:
//!
//! ```text
//! warmup                      state scope (a trace of its own)
//! handle_request              #[tracing::instrument], request_id = 7
//! ├── gpu                     state scope, operation "inference"
//! │   ├── mstar_step          step_span("decoder", "decode", Some(32))
//! │   └── cpu                 #[track_state(AppState::Cpu)] fn tokenize
//! ├── mstar_transfer          transfer_span("api_server", "decoder", "shm", Some(4096))
//! └── io                      #[track_state(AppState::Io)] async fn download
//!     └── s3_get              a span of the user's inside the instrumented future
//! ```
//!
//! For each, `outer` is the time from just before the span was created to just after it
//! closed, `inner` the time its body took, both in nanoseconds: its exported duration
//! must lie between them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use higgsmeter::{AppState, state_tracker, track_state};
use serde_json::{Value, json};

/// Spans' measured times: name → {"outer": ns, "inner": ns}.
type Measured = BTreeMap<&'static str, Value>;

fn measured(m: &mut Measured, name: &'static str, outer: Duration, inner: Duration) {
    m.insert(
        name,
        json!({"outer": outer.as_nanos() as u64, "inner": inner.as_nanos() as u64}),
    );
}

#[track_state(AppState::Cpu)]
fn tokenize() -> Duration {
    let began = Instant::now();
    std::thread::sleep(Duration::from_millis(10));
    began.elapsed()
}

#[track_state(AppState::Io)]
async fn download() -> (Duration, Duration, Duration) {
    let began = Instant::now();
    let before_s3 = Instant::now();
    let (s3_inner, s3_outer);
    {
        let s3 = tracing::info_span!("s3_get", bucket = "weights");
        let _entered = s3.enter();
        let inner = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        s3_inner = inner.elapsed();
    }
    s3_outer = before_s3.elapsed();
    tokio::time::sleep(Duration::from_millis(15)).await;
    (began.elapsed(), s3_outer, s3_inner)
}

#[tracing::instrument(skip(m))]
fn handle_request(request_id: u64, m: &mut Measured) -> anyhow::Result<()> {
    let before_gpu = Instant::now();
    {
        let _gpu = state_tracker().scope(AppState::Gpu, "inference");
        let gpu_began = Instant::now();

        let before_step = Instant::now();
        let step = higgsmeter::step_span("decoder", "decode", Some(32));
        let step_began = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let step_inner = step_began.elapsed();
        drop(step);
        measured(m, "mstar_step", before_step.elapsed(), step_inner);

        let before_cpu = Instant::now();
        let cpu_inner = tokenize();
        measured(m, "cpu", before_cpu.elapsed(), cpu_inner);
        let gpu_inner = gpu_began.elapsed();
        drop(_gpu);
        measured(m, "gpu", before_gpu.elapsed(), gpu_inner);
    }

    let before_transfer = Instant::now();
    let transfer = higgsmeter::transfer_span("api_server", "decoder", "shm", Some(4096));
    let transfer_began = Instant::now();
    std::thread::sleep(Duration::from_millis(5));
    let transfer_inner = transfer_began.elapsed();
    drop(transfer);
    measured(
        m,
        "mstar_transfer",
        before_transfer.elapsed(),
        transfer_inner,
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let before_io = Instant::now();
    let (io_inner, s3_outer, s3_inner) = runtime.block_on(download());
    measured(m, "io", before_io.elapsed(), io_inner);
    measured(m, "s3_get", s3_outer, s3_inner);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let telemetry = higgsmeter::init()?;
    let mut m = Measured::new();

    let before_warmup = Instant::now();
    {
        let _warmup = state_tracker().scope(AppState::Warmup, "model_loading");
        let began = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let inner = began.elapsed();
        drop(_warmup);
        measured(&mut m, "warmup", before_warmup.elapsed(), inner);
    }

    let before_request = Instant::now();
    let began = Instant::now();
    handle_request(7, &mut m)?;
    let request_inner = began.elapsed();
    measured(
        &mut m,
        "handle_request",
        before_request.elapsed(),
        request_inner,
    );

    state_tracker().set_state(AppState::Shutdown, "");
    let snapshot = state_tracker().snapshot();
    let counts = telemetry.trace_counts();
    drop(telemetry); // flushes the spans and the metrics

    let activity: BTreeMap<String, u64> = snapshot
        .entries()
        .iter()
        .map(|e| (format!("{}/{}", e.state, e.operation), e.nanos))
        .collect();
    println!(
        "{}",
        json!({
            "spans": m,
            "activity": activity,
            "traces_on": counts.is_some(),
            "spans_ended": counts.map(|c| c.ended),
        })
    );
    Ok(())
}
