//! End to end against a real Prometheus server: four `e2e-worker` processes (ranks
//! 0..3, known workloads) push OTLP/gRPC to a real `higgsmeter-collector`; a real
//! Prometheus (Debian's `/usr/bin/prometheus`, scrape and rule interval 1 s, the
//! shipped otel-config/prometheus.yml and rules) scrapes both of its views. Then,
//! through Prometheus's HTTP API:
//!
//! - every query of the Python higgsmeter README (GPU utilisation %, idle %, I/O
//!   breakdown by operation, current state, top-5 operations) against the fleet view,
//!   and per-rank versions against the per-source view, each checked against what the
//!   workers recorded themselves (ground truth written at exit);
//! - the README's GPU-utilisation and idle queries as printed return nothing, and the
//!   corrected ones (and the recording rules) answer what they meant;
//! - `histogram_quantile` over `mstar_step_seconds` and rates of
//!   `mstar_transfer_bytes_total`, from collector-aggregated data;
//! - every PromQL expression of the Grafana dashboard is accepted by the server.
//!
//! Shares are checked within half a percentage point: Prometheus is scraping before
//! any worker starts, and every series exists before its time counts (the workers visit
//! each (state, operation) for an instant first), so every rate's window holds each
//! series' whole life and what Prometheus cannot see is microseconds. Totals are
//! checked to the microsecond. `E2E_VERBOSE=1` prints every comparison's margin.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::support::*;

use higgsmeter_e2e::{EXPORT_INTERVAL, GroundTruth, SERVICE_NAME, SyntheticGpu, WORKLOADS};
use higgsmeter_testkit::process::wait_line;

#[test]
fn seed_queries_rules_and_dashboard_against_real_prometheus() {
    let tmp = TempDir::new("e2e");
    let collector = CollectorProcess::start(None, &["--storage", "none"]);
    let mut prometheus = Prometheus::start(
        &tmp.join("prometheus"),
        &prometheus_config(collector.prometheus),
    );
    let prom = prometheus.client();
    // A second server scraping only the fleet view, under a job name of its own, the
    // way the Python higgsmeter's users scraped their one endpoint: the seed's queries
    // run there exactly as printed.
    let mut seed_prometheus = Prometheus::start(
        &tmp.join("prometheus-seed"),
        &fleet_only_config(collector.prometheus),
    );
    let seed = seed_prometheus.client();

    // Prometheus scrapes its first targets only after its discovery settles (about
    // 5 s): wait for a scrape of both views before any worker starts, so every series
    // is seen from its first instant.
    wait_scraped(&prom, 2);
    wait_scraped(&seed, 1);

    let endpoint = format!("http://{}", collector.grpc);
    let mut workers: Vec<Worker> = (0..WORKLOADS.len())
        .map(|rank| spawn_worker(rank, &endpoint, tmp.path(), &[]))
        .collect();
    for w in &workers {
        let what = format!("HOLD from {}", w.process.name());
        wait_line(&w.lines, Duration::from_secs(90), &what, |l| {
            l.starts_with("HOLD")
        });
    }

    // Every worker now holds one known (state, operation) until released.
    check_current_state(&prom);
    check_current_state_as_printed(&seed);
    // With every source live, every panel of the dashboard has data.
    check_dashboard(&prom);

    let truth = release_and_collect(&mut workers);

    // Every worker flushed before exiting: one more scrape of each view has its totals.
    let exited = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for client in [&prom, &seed] {
        eventually(40, || {
            let scraped = client
                .scalar("min(timestamp(up))")
                .map_err(|e| e.to_string())?;
            (scraped > exited + 0.2).then_some(()).ok_or(format!(
                "last scrape at {scraped}, workers exited at {exited}"
            ))
        });
    }
    // And every recording rule checked below has been evaluated on that scrape.
    let scraped = prom.scalar("max(timestamp(up))").unwrap();
    for rule in [
        "higgsmeter:worker_state:ratio5m",
        "higgsmeter:worker_gpu:ratio5m",
        "higgsmeter:worker_idle:ratio5m",
        "higgsmeter:rank_gpu:ratio5m",
        "higgsmeter:rank_idle:ratio5m",
    ] {
        eventually(40, || {
            let evaluated = prom
                .scalar(&format!("min(timestamp({rule}))"))
                .map_err(|e| e.to_string())?;
            (evaluated > scraped).then_some(()).ok_or(format!(
                "{rule} evaluated at {evaluated}, last scrape at {scraped}"
            ))
        });
    }

    check_totals(&prom, &truth);
    check_seed_queries_as_printed(&prom);
    check_seed_queries_as_printed(&seed);
    check_utilisation_and_idle(&prom, &truth);
    check_corrected_on_fleet_only(&seed, &truth);
    check_io_breakdown(&prom, FLEET_MATCHER, &truth);
    check_io_breakdown(&seed, "", &truth);
    check_io_breakdown_per_rank(&prom, &truth);
    check_top5(&prom, FLEET_MATCHER, &truth);
    check_top5(&seed, "", &truth);
    check_top5_per_rank(&prom, &truth);
    check_engine_families(&prom, &truth);

    assert!(
        prometheus.is_running(),
        "prometheus died:\n{}",
        prometheus.log()
    );
    assert!(
        seed_prometheus.is_running(),
        "prometheus died:\n{}",
        seed_prometheus.log()
    );
    drop(collector);
}

/// The seed's "current state" query, fleet and per rank, and the collector's derived
/// per-state count, while every worker holds a known state; and the straggler rule.
fn check_current_state(prom: &PromClient) {
    let expected: BTreeMap<String, f64> = WORKLOADS
        .iter()
        .enumerate()
        .map(|(rank, w)| (rank.to_string(), code(w.hold.0)))
        .collect();
    for view in [FLEET, SOURCES] {
        let query = format!("worker_current_state{{{view}}}");
        eventually(60, || {
            let got = prom.by_label(&query, "rank").map_err(|e| e.to_string())?;
            (got == expected)
                .then_some(())
                .ok_or(format!("{query}: {got:?}, want {expected:?}"))
        });
    }
    let samples = prom
        .query(&format!("worker_current_state{{{FLEET}}}"))
        .unwrap();
    assert!(
        samples
            .iter()
            .all(|s| s.label("exported_job") == SERVICE_NAME),
        "{samples:?}"
    );

    // One live source in each of gpu, io, cpu and idle; none elsewhere.
    let in_state = format!("worker_sources_in_state{{{FLEET}}}");
    let want: BTreeMap<String, f64> = higgsmeter::AppState::ALL
        .iter()
        .map(|s| {
            let n = if WORKLOADS.iter().any(|w| w.hold.0 == s.as_str()) {
                1.0
            } else {
                0.0
            };
            (s.as_str().to_owned(), n)
        })
        .collect();
    eventually(40, || {
        let got = prom
            .by_label(&in_state, "state")
            .map_err(|e| e.to_string())?;
        (got == want)
            .then_some(())
            .ok_or(format!("{in_state}: {got:?}, want {want:?}"))
    });

    // Rank 3 holds idle while rank 0 holds gpu: the straggler signal, for it alone.
    let want: BTreeMap<String, f64> = WORKLOADS
        .iter()
        .enumerate()
        .map(|(rank, w)| (rank.to_string(), if w.hold.0 == "idle" { 1.0 } else { 0.0 }))
        .collect();
    eventually(40, || {
        let got = prom
            .by_label("higgsmeter:rank_idle_while_others_gpu:bool", "rank")
            .map_err(|e| e.to_string())?;
        (got == want)
            .then_some(())
            .ok_or(format!("straggler rule: {got:?}, want {want:?}"))
    });
}

/// The seed's "current state" query exactly as printed, on the fleet-only server: one
/// series per rank (the fleet view keeps this gauge per source), each the held state.
fn check_current_state_as_printed(prom: &PromClient) {
    let expected: BTreeMap<String, f64> = WORKLOADS
        .iter()
        .enumerate()
        .map(|(rank, w)| (rank.to_string(), code(w.hold.0)))
        .collect();
    eventually(60, || {
        let got = prom
            .by_label("worker_current_state", "rank")
            .map_err(|e| e.to_string())?;
        (got == expected)
            .then_some(())
            .ok_or(format!("worker_current_state: {got:?}, want {expected:?}"))
    });
}

/// The collector's sums, as Prometheus stored them, equal the workers' own totals.
fn check_totals(prom: &PromClient, truth: &[GroundTruth]) {
    let want = fleet_totals(truth);
    let got: BTreeMap<_, _> = prom
        .query(&format!("{W}{{{FLEET}}}"))
        .unwrap()
        .iter()
        .map(|s| (key(s), s.value))
        .collect();
    assert_eq!(
        got.keys().collect::<BTreeSet<_>>(),
        want.keys().collect::<BTreeSet<_>>(),
        "fleet (state, operation) pairs"
    );
    for (k, &w) in &want {
        if k.0 == "shutdown" {
            // Keeps counting until the final export, after the snapshot.
            assert!(got[k] >= w, "{k:?}: {} < {w}", got[k]);
        } else {
            close(&format!("fleet total {k:?}"), got[k], w, 1e-6);
        }
    }
    // Per source: each rank's last value before it left the per-source view.
    let per_source = prom
        .query(&format!("last_over_time({W}{{{SOURCES}}}[5m])"))
        .unwrap();
    assert!(!per_source.is_empty());
    for s in &per_source {
        let rank: usize = s.label("rank").parse().unwrap();
        let (state, op) = key(s);
        let w = truth[rank].seconds(&state, &op);
        if state != "shutdown" {
            close(&format!("rank {rank} total {state}/{op}"), s.value, w, 1e-6);
        }
    }
    let ranks: BTreeSet<_> = per_source
        .iter()
        .map(|s| s.label("rank").to_owned())
        .collect();
    assert_eq!(ranks.len(), WORKLOADS.len(), "{ranks:?}");
}

/// The seed's GPU-utilisation and idle queries, exactly as printed: a rate that keeps
/// its labels divided by an unlabelled sum matches nothing, so the answer is empty —
/// although both sides have data.
fn check_seed_queries_as_printed(prom: &PromClient) {
    for state in ["gpu", "idle"] {
        let numerator = format!(r#"rate({W}{{state="{state}"}}[5m])"#);
        let denominator = format!("sum(rate({W}{{{WORKING}}}[5m]))");
        let seed = format!("{numerator}\n/\n{denominator}\n* 100");
        assert!(!prom.query(&numerator).unwrap().is_empty(), "{numerator}");
        assert_eq!(prom.query(&denominator).unwrap().len(), 1, "{denominator}");
        let got = prom.query(&seed).unwrap();
        assert!(got.is_empty(), "the seed's query returned {got:?}");
    }
}

/// The corrected GPU-utilisation and idle queries (OPERATIONS.md), fleet-wide and per
/// rank, and the recording rules that carry them.
fn check_utilisation_and_idle(prom: &PromClient, truth: &[GroundTruth]) {
    let working: f64 = truth.iter().map(GroundTruth::working_seconds).sum();
    for state in ["gpu", "idle", "io", "cpu"] {
        let want = truth.iter().map(|t| t.state_seconds(state)).sum::<f64>() / working;
        let fleet = format!(
            r#"sum(rate({W}{{{FLEET},state="{state}"}}[5m])) / sum(rate({W}{{{FLEET},{WORKING}}}[5m])) * 100"#
        );
        close(
            &fleet,
            prom.scalar(&fleet).unwrap(),
            want * 100.0,
            SHARE_TOLERANCE * 100.0,
        );
        let rule = format!(r#"higgsmeter:worker_state:ratio5m{{state="{state}"}}"#);
        close(&rule, prom.scalar(&rule).unwrap(), want, SHARE_TOLERANCE);

        let per_rank = format!(
            r#"sum by (rank) (rate({W}{{{SOURCES},state="{state}"}}[5m])) / sum by (rank) (rate({W}{{{SOURCES},{WORKING}}}[5m])) * 100"#
        );
        let got = prom.by_label(&per_rank, "rank").unwrap();
        assert_eq!(got.len(), truth.len(), "{per_rank}: {got:?}");
        for t in truth {
            let want = t.state_seconds(state) / t.working_seconds() * 100.0;
            close(
                &format!("rank {}: {per_rank}", t.rank),
                got[&t.rank.to_string()],
                want,
                SHARE_TOLERANCE * 100.0,
            );
        }
    }
    for (rule, state) in [
        ("higgsmeter:worker_gpu:ratio5m", "gpu"),
        ("higgsmeter:worker_idle:ratio5m", "idle"),
    ] {
        let want = truth.iter().map(|t| t.state_seconds(state)).sum::<f64>() / working;
        let got = prom.query(rule).unwrap();
        assert_eq!(got.len(), 1, "{rule}: {got:?}");
        assert_eq!(got[0].label("exported_job"), SERVICE_NAME);
        close(rule, got[0].value, want, SHARE_TOLERANCE);
    }
    for (rule, state) in [
        ("higgsmeter:rank_gpu:ratio5m", "gpu"),
        ("higgsmeter:rank_idle:ratio5m", "idle"),
    ] {
        let got = prom.by_label(rule, "rank").unwrap();
        assert_eq!(got.len(), truth.len(), "{rule}: {got:?}");
        for t in truth {
            let want = t.state_seconds(state) / t.working_seconds();
            close(
                &format!("{rule} rank {}", t.rank),
                got[&t.rank.to_string()],
                want,
                SHARE_TOLERANCE,
            );
        }
    }
    // The workloads differ by more than the tolerance: a query mixing ranks would fail.
    let idle: Vec<f64> = truth
        .iter()
        .map(|t| t.state_seconds("idle") / t.working_seconds())
        .collect();
    assert!(idle[3] > idle[0] + 0.5, "rank 3 is the straggler: {idle:?}");
}

/// The corrected GPU-utilisation and idle queries as OPERATIONS.md gives them for a
/// Prometheus that scrapes only the fleet view (no `job` matcher needed).
fn check_corrected_on_fleet_only(prom: &PromClient, truth: &[GroundTruth]) {
    let working: f64 = truth.iter().map(GroundTruth::working_seconds).sum();
    for state in ["gpu", "idle"] {
        let want = truth.iter().map(|t| t.state_seconds(state)).sum::<f64>() / working;
        let query = format!(
            r#"sum(rate({W}{{state="{state}"}}[5m])) / sum(rate({W}{{{WORKING}}}[5m])) * 100"#
        );
        close(
            &query,
            prom.scalar(&query).unwrap(),
            want * 100.0,
            SHARE_TOLERANCE * 100.0,
        );
        // The seed's shape, told which label to ignore.
        let query = format!(
            r#"sum by (state) (rate({W}{{state="{state}"}}[5m])) / ignoring (state) sum(rate({W}{{{WORKING}}}[5m])) * 100"#
        );
        close(
            &query,
            prom.scalar(&query).unwrap(),
            want * 100.0,
            SHARE_TOLERANCE * 100.0,
        );
    }
}

/// The seed's "I/O operations breakdown" against the fleet view (`fleet`: the matcher
/// that picks it, `""` on the fleet-only server), as shares of I/O time.
fn check_io_breakdown(prom: &PromClient, fleet: &str, truth: &[GroundTruth]) {
    let fleet = format!(r#"sum by (operation) (rate({W}{{{fleet}state="io"}}[5m]))"#);
    let got = prom.by_label(&fleet, "operation").unwrap();
    let io_total: f64 = got.values().sum();
    let want_total: f64 = truth.iter().map(|t| t.state_seconds("io")).sum();
    let ops: BTreeSet<&str> = WORKLOADS
        .iter()
        .flat_map(|w| {
            w.cycle
                .iter()
                .filter(|p| p.state == "io")
                .map(|p| p.operation)
        })
        .collect();
    assert_eq!(got.keys().map(String::as_str).collect::<BTreeSet<_>>(), ops);
    for op in &ops {
        let want = truth.iter().map(|t| t.seconds("io", op)).sum::<f64>() / want_total;
        close(
            &format!("{fleet} [{op}] share"),
            got[*op] / io_total,
            want,
            SHARE_TOLERANCE,
        );
    }
}

/// The I/O breakdown per rank, from the per-source view.
fn check_io_breakdown_per_rank(prom: &PromClient, truth: &[GroundTruth]) {
    let ops: BTreeSet<&str> = WORKLOADS
        .iter()
        .flat_map(|w| {
            w.cycle
                .iter()
                .filter(|p| p.state == "io")
                .map(|p| p.operation)
        })
        .collect();

    let per_rank = format!(r#"sum by (rank, operation) (rate({W}{{{SOURCES},state="io"}}[5m]))"#);
    let samples = prom.query(&per_rank).unwrap();
    assert_eq!(samples.len(), truth.len() * ops.len(), "{samples:?}");
    for t in truth {
        let rank = t.rank.to_string();
        let mine: Vec<_> = samples.iter().filter(|s| s.label("rank") == rank).collect();
        let total: f64 = mine.iter().map(|s| s.value).sum();
        for s in mine {
            let op = s.label("operation");
            let want = t.seconds("io", op) / t.state_seconds("io");
            close(
                &format!("rank {rank} io share of {op}"),
                s.value / total,
                want,
                SHARE_TOLERANCE,
            );
        }
    }
}

/// The seed's "top 5 slowest operations": the same five (operation, state) pairs as
/// the workers' own totals, in the same proportions.
fn check_top5(prom: &PromClient, fleet: &str, truth: &[GroundTruth]) {
    let totals = fleet_totals(truth);
    let mut ranked: Vec<_> = totals.iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(a.1));
    assert!(
        ranked[4].1 - ranked[5].1 > 1.0,
        "the workloads must separate the fifth pair from the sixth: {ranked:?}"
    );
    let want: BTreeSet<_> = ranked[..5].iter().map(|(k, _)| (*k).clone()).collect();

    let selector = match fleet.trim_end_matches(',') {
        "" => W.to_owned(),
        matchers => format!("{W}{{{matchers}}}"),
    };
    let query = format!("topk(5, sum by (operation, state) (rate({selector}[5m])))");
    let got = prom.query(&query).unwrap();
    let got_keys: BTreeSet<_> = got.iter().map(key).collect();
    assert_eq!(got_keys, want, "{query}");
    let top_want = *ranked[0].1;
    let top_got = got.iter().map(|s| s.value).fold(f64::MIN, f64::max);
    for s in &got {
        close(
            &format!("{query}: {:?} relative to the top", key(s)),
            s.value / top_got,
            totals[&key(s)] / top_want,
            0.03,
        );
    }
}

/// The top 5 per rank, from the per-source view: for each rank, the five pairs returned
/// are the rank's five largest by its own totals. Working pairs are visible to the
/// microsecond (primed); `startup` starts counting before its series' first sample, so
/// Prometheus may see up to one push and one scrape interval less of it.
fn check_top5_per_rank(prom: &PromClient, truth: &[GroundTruth]) {
    let query =
        format!("topk by (rank) (5, sum by (rank, operation, state) (rate({W}{{{SOURCES}}}[5m])))");
    let got = prom.query(&query).unwrap();
    let unseen_startup = EXPORT_INTERVAL.as_secs_f64() + 1.0;
    for t in truth {
        let rank = t.rank.to_string();
        let chosen: BTreeSet<_> = got
            .iter()
            .filter(|s| s.label("rank") == rank)
            .map(key)
            .collect();
        assert_eq!(chosen.len(), 5, "rank {rank}: {query}: {got:?}");
        let least_chosen = chosen
            .iter()
            .map(|k| t.seconds(&k.0, &k.1))
            .fold(f64::MAX, f64::min);
        for e in &t.entries {
            if chosen.contains(&(e.state.clone(), e.operation.clone())) {
                continue;
            }
            let visible_at_least = if e.state == "startup" {
                e.seconds - unseen_startup
            } else {
                e.seconds
            };
            assert!(
                least_chosen >= visible_at_least - 0.05,
                "rank {rank}: {query} chose {chosen:?} (least {least_chosen} s) over {e:?}"
            );
        }
    }
}

/// `mstar_step_seconds` quantiles and `mstar_transfer_bytes_total`, recorded by the
/// workers' engine recorders and aggregated by the collector.
fn check_engine_families(prom: &PromClient, truth: &[GroundTruth]) {
    let bounds = higgsmeter::catalog::MSTAR_STEP_SECONDS.buckets;
    let bucket_of = |v: f64| -> (f64, f64) {
        let i = bounds.iter().position(|&b| v <= b).unwrap();
        (if i == 0 { 0.0 } else { bounds[i - 1] }, bounds[i])
    };
    let mut steps: Vec<f64> = truth.iter().flat_map(|t| t.steps.iter().copied()).collect();
    steps.sort_by(f64::total_cmp);
    assert!(steps.len() > 100, "{} steps", steps.len());
    // Quantiles in the middle of one rank's block of steps (each rank's steps fall in
    // one bucket of their own).
    for q in [0.1, 0.4, 0.6, 0.9] {
        let truth_q = steps[(q * steps.len() as f64) as usize];
        let (lo, hi) = bucket_of(truth_q);
        let query = format!(
            "histogram_quantile({q}, sum by (le) (rate(mstar_step_seconds_bucket{{{FLEET}}}[5m])))"
        );
        let got = prom.scalar(&query).unwrap();
        assert!(
            lo <= got && got <= hi,
            "{query} = {got}: the workers' {q} quantile {truth_q} is in ({lo}, {hi}]"
        );
    }
    let per_rank = format!(
        "histogram_quantile(0.5, sum by (rank, le) (rate(mstar_step_seconds_bucket{{{SOURCES}}}[5m])))"
    );
    let got = prom.by_label(&per_rank, "rank").unwrap();
    for t in truth {
        let mut mine = t.steps.clone();
        mine.sort_by(f64::total_cmp);
        let (lo, hi) = bucket_of(mine[mine.len() / 2]);
        let v = got[&t.rank.to_string()];
        assert!(
            lo <= v && v <= hi,
            "rank {}: {per_rank} = {v}, want in ({lo}, {hi}]",
            t.rank
        );
    }
    // Step counts: the fleet histogram's count is every step of every worker.
    let count = prom
        .scalar(&format!("sum(mstar_step_seconds_count{{{FLEET}}})"))
        .unwrap();
    assert_eq!(count, steps.len() as f64);

    // Transfer bytes: exact totals, and the byte rate per working second.
    let bytes: u64 = truth.iter().map(|t| t.transfer_bytes).sum();
    let total = prom
        .scalar(&format!("sum(mstar_transfer_bytes_total{{{FLEET}}})"))
        .unwrap();
    assert_eq!(total, bytes as f64);
    let working: f64 = truth.iter().map(GroundTruth::working_seconds).sum();
    let query = format!(
        "sum(rate(mstar_transfer_bytes_total{{{FLEET}}}[5m])) / sum(rate({W}{{{FLEET},{WORKING}}}[5m]))"
    );
    let got = prom.scalar(&query).unwrap();
    let want = bytes as f64 / working;
    close(&query, got / want, 1.0, SHARE_TOLERANCE);
    let per_rank = format!("sum by (rank) (rate(mstar_transfer_bytes_total{{{SOURCES}}}[5m]))");
    let got = prom.by_label(&per_rank, "rank").unwrap();
    let got_total: f64 = got.values().sum();
    for t in truth {
        close(
            &format!("rank {} share of {per_rank}", t.rank),
            got[&t.rank.to_string()] / got_total,
            t.transfer_bytes as f64 / bytes as f64,
            SHARE_TOLERANCE,
        );
    }
}

/// Every PromQL expression in the Grafana dashboard is accepted by this Prometheus;
/// those over families the test produces (all but the NVML `hw_*` ones) return data.
fn check_dashboard(prom: &PromClient) {
    let path = repo_root().join("otel-config/grafana/higgsmeter.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exprs = higgsmeter_e2e::dashboard_exprs(&dashboard);
    assert!(
        exprs.len() >= 10,
        "{} expressions in {}",
        exprs.len(),
        path.display()
    );
    for (title, expr) in &exprs {
        let query = higgsmeter_e2e::grafana_to_promql(expr);
        let json = prom
            .query_raw(&query)
            .unwrap_or_else(|e| panic!("panel {title:?}: {e}"));
        let empty = json["data"]["result"].as_array().is_some_and(Vec::is_empty);
        // No GPU here: the NVML families (and the rules over them) stay empty. And this
        // collector pushes nowhere: its exporter families show configured exporters only
        // (ADR 0016), so they have no series.
        let no_gpu = query.contains("hw_") || query.contains("higgsmeter:gpu_");
        let no_exporter = query.contains("higgsmeter_collector_export")
            || query.contains("higgsmeter_collector_spans_exported");
        // No e2e worker belongs to a training job (no `job.id`): the job view's
        // families and rules stay empty here (the collector's jobs tests and the rule
        // unit tests cover them).
        let no_job = query.contains("higgsmeter_job_") || query.contains("higgsmeter:job_");
        if !no_gpu && !no_exporter && !no_job {
            assert!(!empty, "panel {title:?}: {query} returned nothing");
        }
    }
}

/// The GPU families (the NVML meter's instrument names, from a synthetic GPU per
/// worker) through the collector and the GPU recording rules.
#[test]
fn gpu_families_and_rules_against_real_prometheus() {
    let tmp = TempDir::new("e2e");
    let (collector, prometheus) = start_stack(&tmp);
    let prom = prometheus.client();
    let endpoint = format!("http://{}", collector.grpc);
    let mut workers: Vec<Worker> = (0..2)
        .map(|rank| spawn_worker(rank, &endpoint, tmp.path(), &["--steady-secs", "4"]))
        .collect();
    for w in &workers {
        let what = format!("HOLD from {}", w.process.name());
        wait_line(&w.lines, Duration::from_secs(90), &what, |l| {
            l.starts_with("HOLD")
        });
    }
    // Gauges, per source: each rank's device with its reading.
    for (family, reading) in [
        ("hw_gpu_utilization", 0),
        ("hw_gpu_memory_utilization", 1),
        ("hw_power", 2),
        ("hw_gpu_temperature", 3),
    ] {
        let query = format!("{family}{{{SOURCES}}}");
        let want: BTreeMap<String, f64> = (0..2u32)
            .map(|rank| {
                let gpu = SyntheticGpu::of_rank(rank);
                let v = [
                    gpu.utilization,
                    gpu.memory_utilization,
                    gpu.power,
                    gpu.temperature,
                ];
                (rank.to_string(), v[reading])
            })
            .collect();
        eventually(40, || {
            let got = prom.by_label(&query, "rank").map_err(|e| e.to_string())?;
            (got == want)
                .then_some(())
                .ok_or(format!("{query}: {got:?}, want {want:?}"))
        });
        let samples = prom.query(&query).unwrap();
        for s in &samples {
            let rank: u32 = s.label("rank").parse().unwrap();
            assert_eq!(s.label("hw_id"), SyntheticGpu::device_id(rank), "{s:?}");
        }
    }
    // GPU health families, per source with the rank: hw_status (a gauge kept per
    // source) and the XID counter (rank 1 only, code 79).
    let failed = format!("hw_status{{{SOURCES},hw_state=\"failed\"}}");
    let want = BTreeMap::from([("0".to_owned(), 0.0), ("1".to_owned(), 1.0)]);
    eventually(40, || {
        let got = prom.by_label(&failed, "rank").map_err(|e| e.to_string())?;
        (got == want)
            .then_some(())
            .ok_or(format!("{failed}: {got:?}, want {want:?}"))
    });
    let ok = format!("hw_status{{{SOURCES},hw_state=\"ok\"}}");
    let want = BTreeMap::from([("0".to_owned(), 1.0), ("1".to_owned(), 0.0)]);
    assert_eq!(prom.by_label(&ok, "rank").unwrap(), want, "{ok}");
    let xid = format!("hw_gpu_xid_errors_total{{{SOURCES}}}");
    let got = prom.query(&xid).unwrap();
    assert_eq!(got.len(), 1, "{xid}: {got:?}");
    assert_eq!(
        (
            got[0].label("rank"),
            got[0].label("hw_gpu_xid_code"),
            got[0].value
        ),
        ("1", "79", 1.0),
        "{got:?}"
    );
    assert_eq!(got[0].label("hw_id"), SyntheticGpu::device_id(1));
    let truth = release_and_collect(&mut workers);
    let exited = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    eventually(40, || {
        let scraped = prom
            .scalar("min(timestamp(up))")
            .map_err(|e| e.to_string())?;
        (scraped > exited + 0.2).then_some(()).ok_or(format!(
            "last scrape at {scraped}, workers exited at {exited}"
        ))
    });
    std::thread::sleep(Duration::from_millis(1500));

    // The session counter per rank and state, to the microsecond.
    let got = prom
        .query(&format!(
            "last_over_time(hw_gpu_session_active_time_total{{{SOURCES}}}[5m])"
        ))
        .unwrap();
    assert_eq!(got.len(), 4, "{got:?}");
    for s in &got {
        let rank: usize = s.label("rank").parse().unwrap();
        let want = truth[rank].gpu_active_seconds[s.label("state")];
        close(&format!("rank {rank} {s:?}"), s.value, want, 1e-6);
    }
    // GPU busy while the worker is in io: the rules against the workers' own totals.
    let ratio = prom
        .by_label("higgsmeter:gpu_active_while_io:ratio5m", "rank")
        .unwrap();
    let seconds = prom
        .by_label("higgsmeter:gpu_active_while_io_seconds:rate5m", "rank")
        .unwrap();
    assert_eq!(seconds.len(), truth.len(), "{seconds:?}");
    for t in &truth {
        let io = t.gpu_active_seconds["io"];
        let total: f64 = t.gpu_active_seconds.values().sum();
        let rank = t.rank.to_string();
        close(
            &format!("rank {rank} gpu busy while io"),
            ratio[&rank],
            io / total,
            SHARE_TOLERANCE,
        );
        assert!(seconds[&rank] > 0.0, "{seconds:?}");
    }
    drop(collector);
}

/// A worker killed mid-run: the stale-worker alert fires for its rank in a real
/// Prometheus (the collector drops it from the per-source view after `stale_after`),
/// and resolves when the rank restarts under a new instance id; through the kill and
/// the restart the fleet counter keeps counting and never goes down (no counter reset
/// in Prometheus's eyes).
#[test]
fn killed_worker_alerts_and_restarted_rank_keeps_the_fleet_counting() {
    let tmp = TempDir::new("e2e");
    let (collector, prometheus) = start_stack(&tmp);
    let prom = prometheus.client();
    let endpoint = format!("http://{}", collector.grpc);
    let long = ["--steady-secs", "120"];
    let mut workers: Vec<Worker> = (0..2)
        .map(|rank| spawn_worker(rank, &endpoint, tmp.path(), &long))
        .collect();
    let live = format!("worker_current_state{{{SOURCES}}}");
    let first_instance = eventually(120, || {
        let got = prom.query(&live).map_err(|e| e.to_string())?;
        let one = got.iter().find(|s| s.label("rank") == "1");
        match (got.len(), one) {
            (2, Some(s)) => Ok(s.label("exported_instance").to_owned()),
            _ => Err(format!("{live}: {got:?}")),
        }
    });
    let fleet_sum = format!("sum({W}{{{FLEET}}})");
    // The fleet job is scraped at its own offset: wait for it to have both ranks too.
    let before = eventually(40, || {
        let by_rank = prom
            .query(&format!("worker_current_state{{{FLEET}}}"))
            .map_err(|e| e.to_string())?;
        if by_rank.len() != 2 {
            return Err(format!("fleet view: {by_rank:?}"));
        }
        prom.scalar(&fleet_sum).map_err(|e| e.to_string())
    });

    // Kill rank 1 without a chance to reach shutdown.
    workers[1].process.child().kill().unwrap();
    workers[1].process.wait_exit(Duration::from_secs(10));
    let stale = r#"ALERTS{alertname="HiggsmeterWorkerStale",alertstate="firing"}"#;
    eventually(120, || {
        let got = prom.query(stale).map_err(|e| e.to_string())?;
        match got.as_slice() {
            [one]
                if one.label("rank") == "1" && one.label("exported_instance") == first_instance =>
            {
                Ok(())
            }
            _ => Err(format!("{stale}: {got:?}")),
        }
    });
    let after_kill = prom.scalar(&fleet_sum).unwrap();
    assert!(after_kill >= before, "{after_kill} < {before}");

    // Rank 1 comes back as a new process (a new service.instance.id).
    workers[1] = spawn_worker(1, &endpoint, tmp.path(), &long);
    eventually(120, || {
        let got = prom.query(&live).map_err(|e| e.to_string())?;
        got.iter()
            .any(|s| s.label("rank") == "1" && s.label("exported_instance") != first_instance)
            .then_some(())
            .ok_or(format!("{live}: {got:?}"))
    });
    eventually(120, || {
        let got = prom.query(stale).map_err(|e| e.to_string())?;
        got.is_empty()
            .then_some(())
            .ok_or(format!("still firing: {got:?}"))
    });
    eventually(120, || {
        let now = prom.scalar(&fleet_sum).map_err(|e| e.to_string())?;
        (now > after_kill + 1.0)
            .then_some(())
            .ok_or(format!("fleet sum {now}, after the kill {after_kill}"))
    });

    // Prometheus saw both instances of rank 1, and no fleet series ever went down.
    let instances = prom
        .scalar(&format!(
            r#"count(count by (exported_instance) (last_over_time({W}{{{SOURCES},rank="1"}}[5m])))"#
        ))
        .unwrap();
    assert_eq!(instances, 2.0);
    let resets = prom
        .scalar(&format!("sum(resets({W}{{{FLEET}}}[5m]))"))
        .unwrap();
    assert_eq!(resets, 0.0, "the fleet counter went down");
    let refusing = prom
        .query(r#"ALERTS{alertname=~"HiggsmeterCollector.*"}"#)
        .unwrap();
    assert!(refusing.is_empty(), "{refusing:?}");
    drop(workers);
    drop(collector);
}
