//! The fleet view outlives the collector process, checked through a real Prometheus:
//! three SDK ranks push cumulative activity time, one rank dies, then the collector is
//! restarted (SIGTERM, as an upgrade does; SIGKILL, as a crash does) on the same
//! addresses and state directory. Prometheus must see no counter reset and no spike,
//! and the final fleet value must equal every rank's own total, the dead rank's
//! included.
//!
//! A second scenario loses the state (storage off): the fleet restarts near 0 as one
//! clean reset, never as a jump.

#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::*;
use higgsmeter_e2e::GroundTruth;
use higgsmeter_testkit::process::{free_port, wait_line};

/// The fleet's total activity seconds, all series, from the collector directly.
fn fleet_total(collector: &CollectorProcess) -> Result<f64, String> {
    let (status, body) = higgsmeter_testkit::http::get(collector.prometheus, "/metrics")
        .map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("/metrics: HTTP {status}: {body}"));
    }
    Ok(body
        .lines()
        .filter(|l| l.starts_with(W))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Prometheus's raw samples of the fleet counter, summed per scrape: (unix s, total).
fn scraped_totals(prom: &Prometheus) -> Vec<(f64, f64)> {
    let json = prom
        .client()
        .query_raw(&format!("{W}{{job=\"workers\"}}[10m]"))
        .unwrap();
    let mut by_time: BTreeMap<i64, f64> = BTreeMap::new();
    for series in json["data"]["result"].as_array().unwrap() {
        for pair in series["values"].as_array().unwrap() {
            let t = pair[0].as_f64().unwrap();
            let v: f64 = pair[1].as_str().unwrap().parse().unwrap();
            *by_time.entry((t * 1000.0).round() as i64).or_insert(0.0) += v;
        }
    }
    by_time
        .into_iter()
        .map(|(ms, v)| (ms as f64 / 1000.0, v))
        .collect()
}

fn sigterm(collector: &mut CollectorProcess) {
    let exit = collector.process.terminate(Duration::from_secs(20));
    assert!(
        exit.success(),
        "the collector exited with {exit} on SIGTERM"
    );
}

fn total_seconds(truth: &[GroundTruth]) -> f64 {
    truth
        .iter()
        .flat_map(|t| t.entries.iter())
        .map(|e| e.seconds)
        .sum()
}

struct Run {
    truth: Vec<GroundTruth>,
    final_total: f64,
    scraped: Vec<(f64, f64)>,
}

/// Runs the scenario; `restart` stops the first collector. With `exact`, waits until
/// the second collector's fleet total equals the ranks' ground truth.
fn scenario(
    tmp: &TempDir,
    storage: &Path,
    exact: bool,
    restart: impl FnOnce(&mut CollectorProcess),
) -> Run {
    let grpc = format!("127.0.0.1:{}", free_port());
    let prom = format!("127.0.0.1:{}", free_port());
    let args = [
        "--grpc".to_owned(),
        grpc.clone(),
        "--prometheus".to_owned(),
        prom,
        "--storage".to_owned(),
        storage.display().to_string(),
    ];
    let mut first = CollectorProcess::builder().args(&args).start();
    let prometheus = Prometheus::start(
        &tmp.join("prometheus"),
        &fleet_only_config(first.prometheus),
    );
    wait_scraped(&prometheus.client(), 1);
    let endpoint = format!("http://{grpc}");
    let steady = ["--prime-secs", "0.3", "--steady-secs", "1"];
    let mut workers: Vec<Worker> = (0..3)
        .map(|rank| spawn_worker(rank, &endpoint, tmp.path(), &steady))
        .collect();
    for w in &workers {
        wait_line(&w.lines, Duration::from_secs(60), "HOLD", |l| {
            l.starts_with("HOLD")
        });
    }
    // Rank 2 dies (it pushes its final value first); the others go on.
    let mut truth = release_and_collect(&mut workers[2..3]);
    std::thread::sleep(Duration::from_secs(4));
    restart(&mut first);
    drop(first);
    std::thread::sleep(Duration::from_millis(1500));
    let second = CollectorProcess::builder().args(&args).start();
    std::thread::sleep(Duration::from_secs(5));
    truth.extend(release_and_collect(&mut workers[0..2]));
    let want = total_seconds(&truth);
    // Each rank's final push holds a little more than its ground truth (the shutdown
    // state until the flush): within one export interval each.
    let final_total = if exact {
        eventually(80, || {
            let got = fleet_total(&second)?;
            (got >= want - 0.05 && got <= want + 3.0 * 0.35)
                .then_some(got)
                .ok_or(format!("fleet {got}, ranks {want}"))
        })
    } else {
        std::thread::sleep(Duration::from_secs(2));
        fleet_total(&second).unwrap()
    };
    // Two more scrapes of the final value.
    std::thread::sleep(Duration::from_secs(3));
    let scraped = scraped_totals(&prometheus);
    Run {
        truth,
        final_total,
        scraped,
    }
}

/// Between any two scrapes the fleet total never decreased, and grew by no more than
/// three ranks' wall-clock time (plus one export interval of jitter per rank).
fn assert_continuous(scraped: &[(f64, f64)]) {
    assert!(scraped.len() >= 10, "too few scrapes: {scraped:?}");
    for pair in scraped.windows(2) {
        let ((t0, v0), (t1, v1)) = (pair[0], pair[1]);
        assert!(
            v1 >= v0 - 1e-9,
            "the fleet counter went down {v0} -> {v1} at {t1}: Prometheus sees a reset\n{scraped:?}"
        );
        let most = 3.0 * (t1 - t0) + 3.0 * 0.4;
        assert!(
            v1 - v0 <= most,
            "the fleet counter jumped by {} in {:.1} s (most {most:.2}): a spike\n{scraped:?}",
            v1 - v0,
            t1 - t0
        );
    }
}

#[test]
fn sigterm_restart_continues_the_fleet_exactly() {
    let tmp = TempDir::new("e2e");
    let run = scenario(&tmp, &tmp.join("state"), true, sigterm);
    assert_eq!(run.truth.len(), 3);
    assert_continuous(&run.scraped);
    assert!(run.final_total > 10.0, "{}", run.final_total);
}

#[test]
fn sigkill_restart_continues_the_fleet_exactly() {
    let tmp = TempDir::new("e2e");
    let run = scenario(&tmp, &tmp.join("state"), true, |c| {
        c.process.kill();
    });
    assert_eq!(run.truth.len(), 3);
    assert_continuous(&run.scraped);
}

/// Without state, the live ranks' pasts are a baseline: the fleet restarts near 0,
/// one clean reset and no jump; the dead rank's time is gone from the new process.
#[test]
fn without_state_the_fleet_restarts_near_zero_never_jumps() {
    let tmp = TempDir::new("e2e");
    let run = scenario(&tmp, Path::new("none"), false, sigterm);
    let resets = run
        .scraped
        .windows(2)
        .filter(|p| p[1].1 < p[0].1 - 1e-9)
        .count();
    assert_eq!(resets, 1, "one clean reset: {:?}", run.scraped);
    let after = run
        .scraped
        .windows(2)
        .position(|p| p[1].1 < p[0].1 - 1e-9)
        .map(|i| run.scraped[i + 1].1)
        .unwrap();
    assert!(after < 3.0 * 3.0, "restarted near 0, not at {after}");
    assert!(
        run.final_total < total_seconds(&run.truth) / 2.0,
        "only what the live ranks added after the restart: {}",
        run.final_total
    );
}
