//! The seed's quick start through the Python higgsmeter 0.1.1 and through this SDK:
//! same metric names, TYPE, HELP, label sets and state codes, and on a shared fake
//! clock the very same values, each side summing to its wall time. The Rust side is
//! scraped from the real in-process Prometheus endpoint and passes `promtool`.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use crate::support::ms;
use higgsmeter::catalog::{WORKER_ACTIVITY_TIME, WORKER_CURRENT_STATE};
use higgsmeter::{AppState, ManualClock, Tracker};
use higgsmeter_testkit::exposition::{self, Family};
use higgsmeter_testkit::tools::{promtool_check, python, venv};
use higgsmeter_testkit::{http, repo_root};

fn python_exposition() -> String {
    let script = repo_root().join("sdk/higgsmeter/tests/python/seed_quickstart.py");
    // The seed itself, from the venv's `seed/` (`.ci/setup` installs it in
    // `.venv/seed`): the venv's own `higgsmeter` is this repository's Python package.
    let out = std::process::Command::new(python())
        .arg(script)
        .env("PYTHONPATH", venv().join("seed"))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The same scenario as seed_quickstart.py, on a ManualClock.
fn rust_exposition() -> String {
    let clock = ManualClock::new();
    let tracker = Tracker::with_clock(clock.clone());
    let telemetry = crate::support::isolated(&tracker)
        .with_prometheus_addr("127.0.0.1:0".parse().unwrap())
        .init()
        .expect("init");
    let addr = telemetry.prometheus_addr().expect("prometheus endpoint on");
    let subscriber = tracing_subscriber::layer::SubscriberExt::with(
        tracing_subscriber::registry(),
        telemetry.activity_layer(),
    );
    let download_data = |_url: &str| {
        let _io = tracker.scope(AppState::Io, "download_data");
        clock.advance(ms(250));
    };
    tracing::subscriber::with_default(subscriber, || {
        clock.advance(ms(500));
        tracker.set_state(AppState::Idle, "waiting_for_work");
        clock.advance(ms(1000));
        {
            let _gpu = tracker.scope(AppState::Gpu, "inference");
            clock.advance(ms(2000));
        }
        download_data("s3://bucket/key");
        clock.advance(ms(500));
        tracker.set_state(AppState::Shutdown, "");
        clock.advance(ms(125));
        tracker.finalize();
    });
    let (status, body) = http::get(addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let (missing, _) = http::get(addr, "/nope").unwrap();
    assert_eq!(missing, 404);
    drop(telemetry);
    body
}

fn family<'a>(
    all: &'a std::collections::BTreeMap<String, Family>,
    name: &str,
    side: &str,
) -> &'a Family {
    all.get(name)
        .unwrap_or_else(|| panic!("{side} exposition has no {name}: {all:#?}"))
}

#[test]
fn the_seed_quick_start_matches_the_python_higgsmeter() {
    let py_text = python_exposition();
    let rs_text = rust_exposition();
    promtool_check(&rs_text);
    let py = exposition::families(&py_text);
    let rs = exposition::families(&rs_text);

    for name in [WORKER_ACTIVITY_TIME.name, WORKER_CURRENT_STATE.name] {
        let (p, r) = (family(&py, name, "python"), family(&rs, name, "rust"));
        assert_eq!(p.kind, r.kind, "{name}: TYPE");
        assert_eq!(p.help, r.help, "{name}: HELP");
        let label_sets = |f: &Family| -> std::collections::BTreeSet<(String, Vec<String>)> {
            f.samples
                .keys()
                .map(|(n, l)| (n.clone(), l.iter().map(|(k, _)| k.clone()).collect()))
                .collect()
        };
        assert_eq!(
            label_sets(p),
            label_sets(r),
            "{name}: sample names and label keys"
        );
        assert_eq!(p.samples.len(), r.samples.len(), "{name}: same series");
        for (key, pv) in &p.samples {
            let rv = r
                .samples
                .get(key)
                .unwrap_or_else(|| panic!("rust lacks {key:?}"));
            assert!((pv - rv).abs() < 1e-9, "{key:?}: python {pv} vs rust {rv}");
        }
    }
    assert_eq!(
        family(&rs, WORKER_ACTIVITY_TIME.name, "rust").kind,
        "counter"
    );
    // Final state: shutdown = 6 on both sides.
    let state_value = |f: &Family| *f.samples.values().next().unwrap();
    assert_eq!(
        state_value(family(&py, WORKER_CURRENT_STATE.name, "python")),
        6.0
    );
    assert_eq!(
        state_value(family(&rs, WORKER_CURRENT_STATE.name, "rust")),
        6.0
    );
    // Each side sums to its wall time: 0.5 + 1.0 + 2.0 + 0.25 + 0.5 + 0.125 s.
    for (side, all) in [("python", &py), ("rust", &rs)] {
        let total: f64 = family(all, WORKER_ACTIVITY_TIME.name, side)
            .samples
            .values()
            .sum();
        assert!(
            (total - 4.375).abs() < 1e-9,
            "{side}: activity sums to {total}, wall time 4.375"
        );
    }
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = crate::support::isolated(&Tracker::new())
        .with_prometheus_addr(taken.local_addr().unwrap())
        .init()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("could not listen for Prometheus scrapes"),
        "{err}"
    );
    let _ = Duration::ZERO;
}
