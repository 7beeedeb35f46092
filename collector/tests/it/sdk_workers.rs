//! higgsmeter SDK workers in separate processes → collector → scrape.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;
use higgsmeter_catalog::WORKER_ACTIVITY_TIME;

const CONFIG: &str = "
processors:
  higgsmeter:
    expected_interval: 200ms
    stale_after: 60s
";

fn per_source(samples: &[Sample], rank: &str) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|s| s.name == WORKER_ACTIVITY_TIME.name && s.label("rank") == Some(rank))
        .map(|s| {
            (
                format!(
                    "{}/{}",
                    s.label("state").unwrap_or(""),
                    s.label("operation").unwrap_or("")
                ),
                s.value,
            )
        })
        .collect()
}

/// Three ranks (two over gRPC, one over HTTP) run to completion: each rank's
/// per-source series equal the worker's own totals, and the fleet series are the sums.
#[test]
fn ranks_match_their_own_totals_and_the_fleet_is_their_sum() {
    let collector = CollectorProcess::start(Some(CONFIG), &[]);
    let workers: Vec<_> = (0..3u32)
        .map(|rank| {
            let (endpoint, http) = if rank == 2 {
                (collector.http_url(), true)
            } else {
                (collector.grpc_url(), false)
            };
            spawn_worker(
                rank,
                &endpoint,
                http,
                &["--duration", "1.2", "--print-totals"],
            )
        })
        .collect();
    let totals: Vec<BTreeMap<String, f64>> = workers.into_iter().map(worker_totals).collect();

    // The final export happened before each worker exited; wait until all three are in.
    let sources = wait_for(Duration::from_secs(20), "every rank's final export", || {
        let s = collector.sources();
        (0..3)
            .all(|r| per_source(&s, &r.to_string()).contains_key("shutdown/"))
            .then_some(s)
    });
    let fleet = collector.fleet();
    let mut expected_fleet: BTreeMap<String, f64> = BTreeMap::new();
    for (rank, own) in totals.iter().enumerate() {
        let seen = per_source(&sources, &rank.to_string());
        assert!(
            own.len() >= 4,
            "rank {rank} visited too few states: {own:?}"
        );
        for (key, secs) in own {
            let got = seen
                .get(key)
                .copied()
                .unwrap_or_else(|| panic!("rank {rank}: no series {key}: {seen:?}"));
            if key.starts_with("shutdown/") {
                // The exporter read the shutdown state a moment after the worker's snapshot.
                assert!(
                    got >= *secs - 1e-9 && got < secs + 5.0,
                    "rank {rank} {key}: {got} vs {secs}"
                );
            } else {
                assert!(
                    (got - secs).abs() < 1e-9,
                    "rank {rank} {key}: collector {got}, worker {secs}"
                );
            }
        }
        for (key, got) in seen {
            *expected_fleet.entry(key).or_default() += got;
        }
    }
    for (key, want) in &expected_fleet {
        let (state, op) = key.split_once('/').unwrap_or((key, ""));
        let got = sum(
            &fleet,
            WORKER_ACTIVITY_TIME.name,
            &[("state", state), ("operation", op), ("job", "demo-worker")],
        );
        assert!(
            (got - want).abs() < 1e-6,
            "fleet {key}: {got} vs sum of ranks {want}"
        );
    }
    // The fleet view has no per-rank counter series; the per-source gauge stays per rank.
    assert!(
        fleet
            .iter()
            .filter(|s| s.name == WORKER_ACTIVITY_TIME.name)
            .all(|s| s.label("rank").is_none())
    );
    let states: Vec<_> = fleet
        .iter()
        .filter(|s| s.name == "worker_current_state")
        .collect();
    assert_eq!(states.len(), 3, "{states:?}");
    assert_eq!(
        sum(&fleet, "worker_sources_in_state", &[("state", "shutdown")]),
        3.0
    );
    assert_eq!(sum(&fleet, "higgsmeter_collector_sources", &[]), 3.0);
    promtool_check(&collector.scrape("/metrics"));
    promtool_check(&collector.scrape("/metrics/sources"));
}

fn fleet_total(c: &CollectorProcess) -> f64 {
    sum(&c.fleet(), WORKER_ACTIVITY_TIME.name, &[])
}

/// A worker is killed mid-run and restarted: the aggregate never decreases, and the
/// dead incarnation's counted time stays in it after it leaves the per-source view.
#[test]
fn killing_and_restarting_a_worker_never_decreases_the_aggregate() {
    let collector = CollectorProcess::start(
        Some("processors:\n  higgsmeter:\n    expected_interval: 200ms\n    stale_after: 1s\n"),
        &[],
    );
    let endpoint = collector.grpc_url();
    let mut keep = spawn_worker(0, &endpoint, false, &["--exit-on-stdin-eof"]);
    let mut victim = spawn_worker(1, &endpoint, false, &["--exit-on-stdin-eof"]);
    let mut last = 0.0;
    let mut check = |c: &CollectorProcess| {
        let t = fleet_total(c);
        assert!(t >= last, "the aggregate decreased: {last} -> {t}");
        last = t;
        t
    };
    wait_for(Duration::from_secs(20), "both ranks reporting", || {
        check(&collector);
        let s = collector.sources();
        (!per_source(&s, "0").is_empty() && per_source(&s, "1").values().sum::<f64>() > 0.3)
            .then_some(())
    });
    victim.kill().expect("kill rank 1");
    victim.wait().expect("reap rank 1");
    // Its last report is final now.
    let dead = collector.sources();
    let dead_total: f64 = per_source(&dead, "1").values().sum();
    let dead_instance = dead
        .iter()
        .find(|x| x.name == WORKER_ACTIVITY_TIME.name && x.label("rank") == Some("1"))
        .and_then(|x| x.label("instance"))
        .expect("rank 1's instance")
        .to_owned();
    let before_restart = check(&collector);
    assert!(before_restart >= dead_total);

    let mut reborn = spawn_worker(1, &endpoint, false, &["--exit-on-stdin-eof"]);
    // The dead incarnation goes stale; the new one reports; the aggregate keeps growing.
    wait_for(
        Duration::from_secs(20),
        "the dead incarnation to leave and the new one to report",
        || {
            check(&collector);
            let s = collector.sources();
            let instances: std::collections::BTreeSet<_> = s
                .iter()
                .filter(|x| x.name == WORKER_ACTIVITY_TIME.name && x.label("rank") == Some("1"))
                .filter_map(|x| x.label("instance").map(str::to_owned))
                .collect();
            let fresh = instances.len() == 1 && !instances.contains(&dead_instance);
            (fresh && per_source(&s, "1").values().sum::<f64>() > 0.3).then_some(())
        },
    );
    // Stop both live workers; after their final exports the aggregate is exactly the
    // live sources' totals plus the dead incarnation's.
    drop(keep.stdin.take());
    drop(reborn.stdin.take());
    keep.wait().expect("rank 0 exits");
    reborn.wait().expect("rank 1 exits");
    let sources = wait_for(Duration::from_secs(20), "the final exports", || {
        check(&collector);
        let s = collector.sources();
        (per_source(&s, "0").contains_key("shutdown/")
            && per_source(&s, "1").contains_key("shutdown/"))
        .then_some(s)
    });
    let live: f64 = sources
        .iter()
        .filter(|s| s.name == WORKER_ACTIVITY_TIME.name)
        .map(|s| s.value)
        .sum();
    let total = check(&collector);
    assert!(
        (total - (live + dead_total)).abs() < 1e-6,
        "aggregate {total} != live {live} + dead {dead_total}"
    );
}
