//! The remote-write flavour of the rules (`otel-config/rules/remote-write/`) run by two
//! real rule engines on what the collector really remote-writes, nobody scraping it:
//!
//! - VictoriaMetrics single node (`/usr/bin/victoria-metrics`, or `$VICTORIA_METRICS`)
//!   receives the collector's remote write, and vmalert (`/usr/bin/vmalert`, or
//!   `$VMALERT`; both from Debian's `victoria-metrics`, installed by `.ci/setup`)
//!   evaluates the rules against it and writes the recorded series back;
//! - Prometheus (`/usr/bin/prometheus`) started with `--web.enable-remote-write-receiver`
//!   and the rule files, no scrape job.
//!
//! Three ranks of one service push OTLP/HTTP to the collector (gpu three times as long
//! as idle; ranks 0 and 1 in gpu now, rank 2 idle); the collector sends both views
//! (`include_sources: true`). Checked: every rule loads and evaluates without error; the
//! fleet and per-rank GPU shares, the per-rank time and the straggler signal come out
//! with the values the ranks sent; and when rank 2 stops pushing (it leaves the
//! collector's views after `stale_after`), `HiggsmeterWorkerStale` fires for it.
//!
//! Everything listens on 127.0.0.1 on free ports and is stopped by the test (the
//! processes it started, by handle); waits are bounded; no timing is asserted.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{CollectorProcess, PromClient, Prometheus, TempDir, eventually};
use higgsmeter_e2e::rules::{Flavour, rule_files};
use higgsmeter_testkit::http;
use higgsmeter_testkit::process::free_port;
use higgsmeter_testkit::victoria::{VictoriaMetrics, Vmalert};

const SERVICE: &str = "rw-rules";
const CLUSTER: &str = "rules-test";
/// Ranks 0 and 1 are in gpu now, rank 2 idle: rank 2 is the straggler.
const STATE_NOW: [u32; 3] = [3, 3, 0];

/// `POST path` with a JSON body: the status (0 when there was no answer).
fn post_json(addr: SocketAddr, path: &str, body: &str) -> u16 {
    http::post(addr, path, "application/json", body.as_bytes()).map_or(0, |(status, _)| status)
}

/// Rank `rank`'s cumulative state after `round` rounds, as OTLP/JSON: the activity
/// counter (gpu 3 s and idle 1 s per round, startup 1 s once) and its current state.
fn rank_body(rank: u32, round: u32, start_ns: u128) -> String {
    let now = start_ns + u128::from(round) * 250_000_000;
    let n = f64::from(round);
    let point = |state: &str, value: f64| {
        format!(
            r#"{{"attributes":[{{"key":"state","value":{{"stringValue":"{state}"}}}},{{"key":"operation","value":{{"stringValue":""}}}}],"startTimeUnixNano":"{start_ns}","timeUnixNano":"{now}","asDouble":{value}}}"#
        )
    };
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
        {{"key":"service.name","value":{{"stringValue":"{SERVICE}"}}}},
        {{"key":"service.instance.id","value":{{"stringValue":"{SERVICE}-{rank}"}}}},
        {{"key":"rank","value":{{"intValue":"{rank}"}}}}]}},
        "scopeMetrics":[{{"metrics":[
        {{"name":"worker_activity_time","unit":"s","sum":{{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[{},{},{}]}}}},
        {{"name":"worker_current_state","gauge":{{"dataPoints":[{{"timeUnixNano":"{now}","asInt":"{state}"}}]}}}}
        ]}}]}}]}}"#,
        point("gpu", 3.0 * n),
        point("idle", n),
        point("startup", 1.0),
        state = STATE_NOW[rank as usize],
    )
}

/// Pushes a round for every live rank every 250 ms until dropped (at most 10 min);
/// `ranks` ranks are live (lower it to stop the last ones).
struct Feeder {
    stop: Arc<AtomicBool>,
    ranks: Arc<AtomicU32>,
    thread: Option<JoinHandle<()>>,
}

impl Feeder {
    fn start(http: SocketAddr) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let ranks = Arc::new(AtomicU32::new(3));
        let start_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            - 60_000_000_000;
        let thread = {
            let (stop, ranks) = (stop.clone(), ranks.clone());
            std::thread::spawn(move || {
                for round in 1..=2400 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    for rank in 0..ranks.load(Ordering::Relaxed) {
                        let status =
                            post_json(http, "/v1/metrics", &rank_body(rank, round, start_ns));
                        assert_eq!(status, 200, "POST /v1/metrics");
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            })
        };
        Feeder {
            stop,
            ranks,
            thread: Some(thread),
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A collector that remote-writes both views to `endpoint` every 200 ms, with a
/// source leaving its views after 2 s of silence.
fn start_collector(endpoint: &str) -> CollectorProcess {
    let yaml = format!(
        "processors:\n  higgsmeter:\n    stale_after: 2s\n\
         exporters:\n  prometheus:\n  prometheusremotewrite:\n    endpoint: {endpoint}\n\
         \x20   interval: 200ms\n    include_sources: true\n    external_labels:\n\
         \x20     cluster: {CLUSTER}\n\
         service:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n\
         \x20     exporters: [prometheus, prometheusremotewrite]\n"
    );
    CollectorProcess::start(Some(&yaml), &["--storage", "none"])
}

/// The checks both engines must pass, `query` being the engine's query API.
fn check_rules_on_remote_written_data(
    query: PromClient,
    feeder: &Feeder,
    log: &dyn Fn() -> String,
) {
    let fleet = format!(r#"{{job="{SERVICE}"}}"#);
    // The fleet GPU share: gpu / (gpu + idle), startup left out.
    let gpu = eventually(240, || {
        let got = query
            .query(&format!("higgsmeter:worker_gpu:ratio5m{fleet}"))
            .map_err(|e| e.to_string())?;
        match got.as_slice() {
            [one] => Ok(one.value),
            other => Err(format!(
                "higgsmeter:worker_gpu:ratio5m: {other:?}\n{}",
                log()
            )),
        }
    });
    assert!((gpu - 0.75).abs() < 1e-6, "fleet gpu share {gpu}");
    let idle = query
        .scalar(&format!("higgsmeter:worker_idle:ratio5m{fleet}"))
        .unwrap();
    assert!((idle - 0.25).abs() < 1e-6, "fleet idle share {idle}");
    let shares = query
        .by_label(&format!("higgsmeter:worker_state:ratio5m{fleet}"), "state")
        .unwrap();
    assert_eq!(
        shares.keys().collect::<Vec<_>>(),
        ["gpu", "idle"],
        "{shares:?}"
    );

    // Per rank, from the per-source view (include_sources: true).
    let per_rank = eventually(120, || {
        let got = query
            .by_label(&format!("higgsmeter:rank_gpu:ratio5m{fleet}"), "rank")
            .map_err(|e| e.to_string())?;
        (got.len() == 3)
            .then_some(got.clone())
            .ok_or(format!("higgsmeter:rank_gpu:ratio5m: {got:?}"))
    });
    for (rank, share) in &per_rank {
        assert!(
            (share - 0.75).abs() < 1e-6,
            "rank {rank}: gpu share {share}"
        );
    }
    let activity = query
        .query(&format!(
            r#"higgsmeter:rank_activity_seconds:rate5m{{job="{SERVICE}",state="gpu"}}"#
        ))
        .unwrap();
    assert_eq!(activity.len(), 3, "{activity:?}");
    assert!(activity.iter().all(|s| s.value > 0.0), "{activity:?}");

    // The straggler signal, from the fleet view's worker_current_state.
    let straggler = eventually(120, || {
        let got = query
            .by_label(
                &format!("higgsmeter:rank_idle_while_others_gpu:bool{fleet}"),
                "rank",
            )
            .map_err(|e| e.to_string())?;
        (got.len() == 3).then_some(got.clone()).ok_or(format!(
            "higgsmeter:rank_idle_while_others_gpu:bool: {got:?}"
        ))
    });
    assert_eq!(
        straggler.into_iter().collect::<Vec<_>>(),
        [
            ("0".to_owned(), 0.0),
            ("1".to_owned(), 0.0),
            ("2".to_owned(), 1.0)
        ]
    );

    // Rank 2 stops pushing: it leaves the collector's views after stale_after, the
    // engine stops seeing it, and the stale-worker alert fires for it alone.
    feeder.ranks.store(2, Ordering::Relaxed);
    let stale = eventually(240, || {
        let got = query
            .query(r#"ALERTS{alertname="HiggsmeterWorkerStale",alertstate="firing"}"#)
            .map_err(|e| e.to_string())?;
        match got.as_slice() {
            [one] => Ok(one.clone()),
            other => Err(format!("firing HiggsmeterWorkerStale: {other:?}")),
        }
    });
    assert_eq!(
        (
            stale.label("job"),
            stale.label("rank"),
            stale.label("instance"),
            stale.label("cluster")
        ),
        (SERVICE, "2", "rw-rules-2", CLUSTER),
        "{stale:?}"
    );
}

/// The rule engine's own view of the rules: every group of both files loaded, every
/// rule evaluated, none with an error.
fn check_rules_healthy(addr: SocketAddr, want_groups: usize) {
    eventually(120, || {
        let (status, body) = http::get(addr, "/api/v1/rules").map_err(|e| e.to_string())?;
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {status}: {e}: {body}"))?;
        let groups = json["data"]["groups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if groups.len() != want_groups {
            return Err(format!("{} groups: {body}", groups.len()));
        }
        let mut rules = 0;
        for group in &groups {
            for rule in group["rules"].as_array().cloned().unwrap_or_default() {
                rules += 1;
                let error = rule["lastError"].as_str().unwrap_or("");
                assert!(error.is_empty(), "rule {}: {error}", rule["name"]);
                if rule["health"] != "ok" {
                    return Err(format!("rule {} not evaluated yet: {rule}", rule["name"]));
                }
            }
        }
        (rules >= 17)
            .then_some(())
            .ok_or(format!("only {rules} rules: {body}"))
    });
}

/// The rule groups the flavour's files hold (`  - name:` lines).
fn group_count(flavour: Flavour) -> usize {
    files(flavour)
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("  - name:"))
                .count()
        })
        .sum()
}

fn files(flavour: Flavour) -> Vec<PathBuf> {
    rule_files(&flavour.dir())
}

#[test]
fn vmalert_runs_the_remote_write_rules_on_what_the_collector_writes_to_victoria_metrics() {
    let tmp = TempDir::new("e2e-vmalert");
    let vm = VictoriaMetrics::start(
        tmp.path(),
        &[
            "-retentionPeriod=1d",
            // Answer queries with the newest samples (default: hide the last 30 s).
            "-search.latencyOffset=1s",
            // A short staleness window (with vmalert's -datasource.queryStep below) so
            // that a source that stopped is gone from instant queries within seconds;
            // by default vmalert's query step, 5 minutes, is the lookback.
            "-search.maxStalenessInterval=2s",
            "-loggerLevel=WARN",
        ],
    );
    // Nothing listens on the notifier's address: alerts are read from vmalert's API
    // and the ALERTS series it writes back.
    let no_notifier = free_port();
    let vm_addr = vm.addr;
    let vmalert = Vmalert::start(
        tmp.path(),
        &files(Flavour::RemoteWrite),
        &[
            format!("-datasource.url=http://{vm_addr}"),
            format!("-remoteWrite.url=http://{vm_addr}"),
            "-remoteWrite.flushInterval=500ms".into(),
            format!("-notifier.url=http://127.0.0.1:{no_notifier}"),
            "-evaluationInterval=1s".into(),
            "-datasource.queryStep=2s".into(),
            "-loggerLevel=WARN".into(),
        ],
    );
    let collector = start_collector(&format!("http://{vm_addr}/api/v1/write"));
    let feeder = Feeder::start(collector.http);
    let log = || format!("{}\n{}", vm.log(), vmalert.log());
    check_rules_healthy(vmalert.addr, group_count(Flavour::RemoteWrite));
    check_rules_on_remote_written_data(vm.client(), &feeder, &log);
    // vmalert's own list of firing alerts agrees.
    let (_, body) = http::get(vmalert.addr, "/api/v1/alerts").unwrap();
    assert!(
        body.contains("HiggsmeterWorkerStale") && body.contains(r#""rank":"2""#),
        "{body}"
    );
    drop(feeder);
}

#[test]
fn prometheus_runs_the_remote_write_rules_on_what_the_collector_writes_to_it() {
    let tmp = TempDir::new("e2e-prometheus-rw");
    let rules = files(Flavour::RemoteWrite)
        .iter()
        .map(|f| format!("  - {}\n", f.display()))
        .collect::<String>();
    let config =
        format!("global:\n  evaluation_interval: 1s\nrule_files:\n{rules}scrape_configs: []\n");
    let prom = Prometheus::start_with_flags(
        &tmp.join("prometheus"),
        &config,
        // A short lookback so that a source that stopped is gone from instant queries
        // within seconds, as it is after 5 minutes by default (see the rules' header).
        &[
            higgsmeter_testkit::prometheus::REMOTE_WRITE_RECEIVER,
            "--query.lookback-delta=3s",
        ],
    );
    let collector = start_collector(&prom.url("/api/v1/write"));
    let feeder = Feeder::start(collector.http);
    check_rules_healthy(prom.addr, group_count(Flavour::RemoteWrite));
    check_rules_on_remote_written_data(prom.client(), &feeder, &|| prom.log());
    drop(feeder);
}
