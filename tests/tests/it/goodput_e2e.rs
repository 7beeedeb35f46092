//! Goodput on real processes: a 4-rank training job of `job-worker`s (the SDK's marks,
//! pushed over OTLP/HTTP) runs; rank 2 crashes at step 25 (right after an export), the
//! elastic agent stops the other ranks, the collector restarts (SIGTERM) on its state,
//! and the job restarts from the checkpoint of step 20. Every figure of the job view
//! (`/api/jobs`) equals the truth computed from the workers' own reports (their
//! snapshots, checkpoint marks and clocks) within 1 %, and the causes sum to the time.

#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use std::sync::mpsc;
use std::time::Duration;

use crate::support::*;
use higgsmeter_testkit::collector::CollectorProcess;
use higgsmeter_testkit::process::{ChildGuard, line_reader, wait_line};

const RANKS: u32 = 4;
const JOB: &str = "e2e-goodput";

struct Rank {
    process: ChildGuard,
    lines: mpsc::Receiver<String>,
}

fn start_rank(collector: &CollectorProcess, rank: u32, incarnation: u32, args: &[&str]) -> Rank {
    let mut process = ChildGuard::spawn(
        format!("job-worker rank {rank} incarnation {incarnation}"),
        Command::new(env!("CARGO_BIN_EXE_job-worker"))
            .args(["--rank", &rank.to_string()])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://{}", collector.http),
            )
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
            .env("OTEL_SERVICE_NAME", "trainer")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", RANKS.to_string())
            .env("HIGGSMETER_JOB_ID", JOB)
            .env("HIGGSMETER_JOB_INCARNATION", incarnation.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    let lines = line_reader(process.child().stdout.take().unwrap());
    Rank { process, lines }
}

/// What one incarnation of one rank reported: when it began and ended (unix s), its
/// seconds per `state/operation`, and the productive seconds of each checkpoint.
#[derive(Debug, Default)]
struct Report {
    begin: f64,
    end: f64,
    seconds: BTreeMap<String, f64>,
    checkpoints: BTreeMap<u64, f64>,
}

fn finish(rank: &mut Rank, what: &str) -> Report {
    let mut report = Report::default();
    loop {
        let line = wait_line(&rank.lines, Duration::from_secs(120), what, |_| true);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        match v["event"].as_str().unwrap() {
            "begin" => report.begin = v["unix"].as_f64().unwrap(),
            "checkpoint" => {
                report.checkpoints.insert(
                    v["step"].as_u64().unwrap(),
                    v["productive"].as_f64().unwrap(),
                );
            }
            "end" => {
                report.end = v["unix"].as_f64().unwrap();
                for (k, s) in v["seconds"].as_object().unwrap() {
                    report.seconds.insert(k.clone(), s.as_f64().unwrap());
                }
                let _ = rank.process.wait_exit_within(Duration::from_secs(30));
                return report;
            }
            other => panic!("unknown event {other}"),
        }
    }
}

/// The job view's cause of a `state/operation` (ADR 0021), goodput as "goodput".
fn cause(key: &str) -> &'static str {
    let (state, op) = key.split_once('/').unwrap();
    match (state, op) {
        (_, "checkpoint_save") => "checkpoint_save",
        (_, "checkpoint_restore") => "checkpoint_restore",
        (_, op) if op.starts_with("badput.") => "custom",
        ("gpu", _) => "goodput",
        ("startup", _) => "startup",
        ("warmup", _) => "initialization",
        ("io", _) => "data_loading",
        ("idle", _) => "waiting",
        _ => "other",
    }
}

fn jobs(collector: &CollectorProcess) -> serde_json::Value {
    serde_json::from_str(&collector.scrape("/api/jobs")).unwrap()
}

/// The first job's ranks in an `/api/jobs` document, each with its rank number.
fn job_ranks(doc: &serde_json::Value) -> Vec<(u32, &serde_json::Value)> {
    doc["jobs"][0]["ranks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["rank"].as_str().unwrap().parse().unwrap(), r))
        .collect()
}

#[test]
fn a_crash_a_collector_restart_and_a_restore_add_up_within_one_percent() {
    let tmp = TempDir::new("e2e-goodput");
    let state = tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let storage = ["--storage".to_owned(), state.display().to_string()];
    let collector = CollectorProcess::builder().args(&storage).start();

    // Incarnation 0: every rank trains; rank 2 crashes after step 25; the agent then
    // stops the others.
    let mut first: Vec<Rank> = (0..RANKS)
        .map(|r| {
            let crash = (r == 2).then_some(["--crash-at", "25"]);
            let mut args = vec!["--steps-to", "60"];
            args.extend(crash.iter().flatten());
            start_rank(&collector, r, 0, &args)
        })
        .collect();
    let crashed = finish(&mut first[2], "rank 2's crash");
    let mut reports0: BTreeMap<u32, Report> = BTreeMap::new();
    for (r, rank) in first.iter_mut().enumerate() {
        if r == 2 {
            continue;
        }
        drop(rank.process.child().stdin.take()); // the agent stops it
        reports0.insert(r as u32, finish(rank, "a stopped rank's end"));
    }
    reports0.insert(2, crashed);
    // The ledger reads every second: let it see every rank's last export.
    eventually(240, || {
        let doc = jobs(&collector);
        let ranks = job_ranks(&doc);
        let done = ranks.len() == RANKS as usize
            && ranks.iter().all(|(n, r)| {
                let inc = &r["incarnations"][0];
                let tracked: f64 = reports0[n].seconds.values().sum();
                (inc["tracked_seconds"].as_f64().unwrap_or(0.0) - tracked).abs() < 1e-6
            });
        if done { Ok(()) } else { Err(format!("{doc}")) }
    });

    // The collector restarts on its state (an upgrade), then the job restarts.
    let mut old = collector;
    assert!(old.process.terminate(Duration::from_secs(30)).success());
    drop(old);
    let collector = CollectorProcess::builder().args(&storage).start();
    std::thread::sleep(Duration::from_millis(300)); // the job is down a little longer
    let mut second: Vec<Rank> = (0..RANKS)
        .map(|r| start_rank(&collector, r, 1, &["--restore", "20", "--steps-to", "35"]))
        .collect();
    let reports1: BTreeMap<u32, Report> = second
        .iter_mut()
        .enumerate()
        .map(|(r, rank)| (r as u32, finish(rank, "incarnation 1's end")))
        .collect();

    // The truth, per the workers' own reports.
    let mut time = 0.0;
    let mut causes: BTreeMap<&str, f64> = BTreeMap::new();
    for r in 0..RANKS {
        let (a, b) = (&reports0[&r], &reports1[&r]);
        let gpu0: f64 = a
            .seconds
            .iter()
            .filter(|(k, _)| cause(k) == "goodput")
            .map(|(_, s)| s)
            .sum();
        let kept = a.checkpoints[&20];
        for report in [a, b] {
            for (k, s) in &report.seconds {
                *causes.entry(cause(k)).or_default() += s;
                time += s;
            }
        }
        *causes.entry("goodput").or_default() -= gpu0 - kept;
        *causes.entry("wasted_progress").or_default() += gpu0 - kept;
        let gap = b.begin - a.end;
        *causes.entry("recovery").or_default() += gap;
        time += gap;
    }

    let doc = eventually(240, || {
        let doc = jobs(&collector);
        let ranks = job_ranks(&doc);
        let done = ranks.len() == RANKS as usize
            && ranks.iter().all(|(n, r)| {
                let tracked: f64 = reports1[n].seconds.values().sum();
                r["incarnations"].as_array().is_some_and(|i| i.len() == 2)
                    && (r["incarnations"][1]["tracked_seconds"]
                        .as_f64()
                        .unwrap_or(0.0)
                        - tracked)
                        .abs()
                        < 1e-6
            });
        if done { Ok(doc) } else { Err(format!("{doc}")) }
    });
    let job = &doc["jobs"][0];
    assert_eq!(job["job_id"], JOB);
    assert_eq!(job["disruptions"], 1);
    let within = |what: &str, got: f64, want: f64| {
        assert!(
            (got - want).abs() <= 0.01 * want.abs().max(0.05),
            "{what}: the job view says {got}, the workers' truth {want}\n{doc}"
        );
    };
    within("time", job["time_seconds"].as_f64().unwrap(), time);
    within(
        "goodput",
        job["goodput_seconds"].as_f64().unwrap(),
        causes["goodput"],
    );
    let mut parts = job["goodput_seconds"].as_f64().unwrap();
    for (cause, got) in job["badput_seconds"].as_object().unwrap() {
        let got = got.as_f64().unwrap();
        parts += got;
        within(
            cause,
            got,
            causes.get(cause.as_str()).copied().unwrap_or(0.0),
        );
    }
    assert!(
        (parts - job["time_seconds"].as_f64().unwrap()).abs() < 1e-6,
        "{doc}"
    );
    assert!(causes["wasted_progress"] > 0.0 && causes["recovery"] > 0.0);
}
