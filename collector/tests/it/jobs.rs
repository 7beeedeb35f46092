//! The job view through the real collector: a scripted 4-rank training job, pushed over
//! OTLP/HTTP as the SDK pushes it (activity seconds and progress marks per rank), one
//! crash and a restart of the whole job from a checkpoint, and a collector restart in
//! between. Every figure of `/api/jobs` and of `/metrics` equals the script's own
//! arithmetic, and goodput plus the causes sum to the job's time.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use crate::support::{
    CollectorProcess, exposition::parse as parse_exposition, kv, temp_dir, wait_for,
};

const JOB: &str = "train-42";
const RANKS: u32 = 4;
const STEP_GPU: f64 = 2.0;
const STEP_IO: f64 = 0.5;
const SAVE: f64 = 1.5;
const RESTORE: f64 = 5.0;
const RECOVERY: f64 = 45.0;

/// A rank's waiting at the collective each step: the slowest rank waits least.
fn wait(rank: u32) -> f64 {
    0.125 * f64::from(RANKS - 1 - rank)
}

/// One incarnation's cumulative activity seconds after `steps` steps (of which
/// `saves` checkpoint saves), with its fixed costs.
fn seconds(
    rank: u32,
    fixed: &[(&str, &str, f64)],
    steps: u32,
    saves: u32,
) -> Vec<(String, String, f64)> {
    let mut out: Vec<(String, String, f64)> = fixed
        .iter()
        .map(|(s, o, v)| ((*s).to_owned(), (*o).to_owned(), *v))
        .collect();
    let n = f64::from(steps);
    out.push(("gpu".into(), "train_step".into(), n * STEP_GPU));
    out.push(("io".into(), "next_batch".into(), n * STEP_IO));
    out.push(("idle".into(), "all_reduce".into(), n * wait(rank)));
    out.push((
        "io".into(),
        "checkpoint_save".into(),
        f64::from(saves) * SAVE,
    ));
    out
}

/// One export of one rank: the activity counter and the progress gauges.
fn export(
    rank: u32,
    incarnation: u32,
    end_unix_s: f64,
    seconds: &[(String, String, f64)],
    gauges: &[(&str, f64)],
) -> ExportMetricsServiceRequest {
    let time = (end_unix_s * 1e9) as u64;
    let start = time - (seconds.iter().map(|x| x.2).sum::<f64>() * 1e9) as u64;
    let point = |attributes: Vec<KeyValue>, value: f64| NumberDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    };
    let mut metrics = vec![Metric {
        name: higgsmeter_catalog::WORKER_ACTIVITY_TIME.name.into(),
        unit: "s".into(),
        data: Some(Data::Sum(Sum {
            data_points: seconds
                .iter()
                .map(|(s, o, v)| point(vec![kv("state", s), kv("operation", o)], *v))
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }];
    for (name, value) in gauges {
        metrics.push(Metric {
            name: (*name).into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![point(Vec::new(), *value)],
            })),
            ..Default::default()
        });
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "trainer"),
                    kv(
                        "service.instance.id",
                        &format!("rank{rank}-inc{incarnation}"),
                    ),
                    kv("rank", &rank.to_string()),
                    kv("job.id", JOB),
                    kv("job.incarnation", &incarnation.to_string()),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn post(addr: SocketAddr, req: &ExportMetricsServiceRequest) {
    let resp = reqwest::blocking::Client::new()
        .post(format!("http://{addr}/v1/metrics"))
        .header("content-type", "application/x-protobuf")
        .body(req.encode_to_vec())
        .send()
        .expect("POST");
    assert!(resp.status().is_success(), "{}", resp.status());
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{what}: got {got}, want {want}"
    );
}

/// `/api/jobs` once `ready` holds of its first job's ranks (at most 15 s).
fn jobs_when(
    collector: &CollectorProcess,
    what: &str,
    ready: impl Fn(&[serde_json::Value]) -> bool,
) -> serde_json::Value {
    wait_for(std::time::Duration::from_secs(15), what, || {
        let jobs: serde_json::Value = serde_json::from_str(&collector.scrape("/api/jobs")).ok()?;
        let ranks = jobs["jobs"][0]["ranks"].as_array()?.clone();
        ready(&ranks).then_some(jobs)
    })
}

#[test]
fn a_restart_from_a_checkpoint_through_a_collector_restart_adds_up_exactly() {
    let state = temp_dir("jobs-state");
    let storage = state.to_string_lossy().into_owned();
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        - 3600.0;
    // Incarnation 0: start-up 4 s, warm-up 6 s, an evaluation 2 s; checkpoints at steps
    // 10 and 20 (at 20 s and 40 s of gpu); killed after step 27.
    let fixed0 = [
        ("startup", "", 4.0),
        ("warmup", "load_model", 6.0),
        ("cpu", "badput.evaluation", 2.0),
    ];
    let mut truth_time = 0.0;
    let mut truth = BTreeMap::<&str, f64>::new();
    let mut good = 0.0;
    // Sources forgotten 2 s after their last push: once the store has let incarnation
    // 0 go, only the job ledger (and its checkpoint) remembers it.
    let config = "processors:\n  higgsmeter:\n    stale_after: 1s\n    forget_after: 2s\n";
    let collector = CollectorProcess::start(Some(config), &["--storage", &storage]);
    for rank in 0..RANKS {
        let mid = seconds(rank, &fixed0, 15, 1);
        let mid_end = base + mid.iter().map(|x| x.2).sum::<f64>();
        post(
            collector.http,
            &export(
                rank,
                0,
                mid_end,
                &mid,
                &[
                    ("higgsmeter_job_step", 15.0),
                    ("higgsmeter_job_checkpoint_step", 10.0),
                    ("higgsmeter_job_checkpoint_productive_seconds", 20.0),
                ],
            ),
        );
        // The ledger reads every second: it sees the mid-run checkpoint before the next
        // export replaces it (an SDK exports once a second, at most one mark of each kind).
        jobs_when(&collector, "step 15 in /api/jobs", |ranks| {
            ranks.iter().any(|r| {
                r["rank"].as_str() == Some(&*rank.to_string())
                    && r["incarnations"][0]["step"] == 15.0
            })
        });
        let last = seconds(rank, &fixed0, 27, 2);
        let tracked0: f64 = last.iter().map(|x| x.2).sum();
        post(
            collector.http,
            &export(
                rank,
                0,
                base + tracked0,
                &last,
                &[
                    ("higgsmeter_job_step", 27.0),
                    ("higgsmeter_job_checkpoint_step", 20.0),
                    ("higgsmeter_job_checkpoint_productive_seconds", 40.0),
                ],
            ),
        );
        // Incarnation 1 starts RECOVERY s after and restores step 10 (the checkpoint of
        // step 20 was bad, say): only the ledger's history still knows what step 10 kept.
        // It runs steps 11..=30.
        let fixed1 = [
            ("startup", "", 3.0),
            ("io", "checkpoint_restore", RESTORE),
            ("shutdown", "", 1.0),
        ];
        let second = seconds(rank, &fixed1, 20, 1);
        let tracked1: f64 = second.iter().map(|x| x.2).sum();
        truth_time += tracked0 + RECOVERY + tracked1;
        // Steps 1..=10 kept by the checkpoint (20 s), steps 11..=30 of incarnation 1.
        good += 20.0 + 20.0 * STEP_GPU;
        for (cause, v) in [
            ("startup", 4.0 + 3.0),
            ("initialization", 6.0),
            ("data_loading", 47.0 * STEP_IO),
            ("checkpoint_save", 3.0 * SAVE),
            ("checkpoint_restore", RESTORE),
            ("waiting", 47.0 * wait(rank)),
            ("wasted_progress", 27.0 * STEP_GPU - 20.0),
            ("recovery", RECOVERY),
            ("custom", 2.0),
            ("other", 1.0),
        ] {
            *truth.entry(cause).or_default() += v;
        }
        // Kept for after the collector's restart.
        let req = export(
            rank,
            1,
            base + tracked0 + RECOVERY + tracked1,
            &second,
            &[
                ("higgsmeter_job_step", 30.0),
                ("higgsmeter_job_restored_step", 10.0),
                ("higgsmeter_job_checkpoint_step", 30.0),
                ("higgsmeter_job_checkpoint_productive_seconds", 40.0),
            ],
        );
        std::fs::write(
            state.join(format!("inc1-rank{rank}.pb")),
            req.encode_to_vec(),
        )
        .expect("keep the request");
    }
    // The ledger has incarnation 0 of every rank before the restart (it reads every second).
    jobs_when(&collector, "incarnation 0 in /api/jobs", |ranks| {
        ranks.len() == RANKS as usize
    });
    wait_for(
        std::time::Duration::from_secs(30),
        "the store to forget incarnation 0",
        // /api/cluster lists every source the store holds, live or not.
        || (!collector.scrape("/api/cluster").contains("-inc0")).then_some(()),
    );
    assert!(collector.terminate().success());

    // A new collector process on the same state: incarnation 0 is remembered by the
    // ledger alone.
    let collector = CollectorProcess::start(Some(config), &["--storage", &storage]);
    for rank in 0..RANKS {
        let bytes = std::fs::read(state.join(format!("inc1-rank{rank}.pb"))).expect("request");
        let req = ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("decode");
        post(collector.http, &req);
    }
    let jobs = jobs_when(&collector, "incarnation 1 in /api/jobs", |ranks| {
        ranks
            .iter()
            .all(|r| r["incarnations"].as_array().is_some_and(|i| i.len() == 2))
    });
    let job = &jobs["jobs"][0];
    assert_eq!(job["job_id"], JOB);
    assert_eq!(job["disruptions"], 1);
    close(
        "time",
        job["time_seconds"].as_f64().expect("time"),
        truth_time,
    );
    close(
        "goodput",
        job["goodput_seconds"].as_f64().expect("goodput"),
        good,
    );
    close(
        "goodput ratio",
        job["goodput_ratio"].as_f64().expect("ratio"),
        good / truth_time,
    );
    let mut parts = job["goodput_seconds"].as_f64().expect("goodput");
    for (cause, want) in &truth {
        let got = job["badput_seconds"][cause].as_f64().unwrap_or(f64::NAN);
        close(&format!("badput {cause}"), got, *want);
        parts += got;
    }
    close("goodput + every cause", parts, truth_time);

    // The same figures on /metrics.
    // (503 until the restored sources report again or `stale_after` passes: the dead
    // incarnation's never will.)
    let url = format!("http://{}/metrics", collector.prometheus);
    let text = wait_for(std::time::Duration::from_secs(30), "/metrics ready", || {
        let resp = reqwest::blocking::get(&url).ok()?;
        resp.status()
            .is_success()
            .then(|| resp.text().ok())
            .flatten()
    });
    let fleet = parse_exposition(&text);
    let value = |name: &str, cause: Option<&str>| {
        fleet
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.get("job_id").map(String::as_str) == Some(JOB)
                    && s.labels.get("cause").map(String::as_str) == cause
            })
            .map(|s| s.value)
            .unwrap_or_else(|| panic!("no {name} {cause:?} on /metrics"))
    };
    close(
        "/metrics time",
        value("higgsmeter_job_time_seconds", None),
        truth_time,
    );
    close(
        "/metrics goodput",
        value("higgsmeter_job_goodput_seconds", None),
        good,
    );
    close(
        "/metrics disruptions",
        value("higgsmeter_job_disruptions", None),
        1.0,
    );
    for (cause, want) in &truth {
        close(
            &format!("/metrics badput {cause}"),
            value("higgsmeter_job_badput_seconds", Some(cause)),
            *want,
        );
    }
    let _ = std::fs::remove_dir_all(&state);
}

/// The cluster page in headless Chromium: the job section shows each job's goodput, a
/// bar of its causes and its incarnations per rank, as `/api/jobs` says; the timeline's
/// window fits the data (the collector's uptime, not 15 minutes); and every live lane's
/// "now" is the state its table row shows, at the same refresh.
#[test]
fn the_cluster_page_shows_each_job_and_fits_its_window() {
    use crate::cluster_page::{chromium, dump_dom, tags_with};
    chromium();
    let collector = CollectorProcess::start(None, &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let fixed = [("startup", "", 2.0), ("warmup", "load_model", 3.0)];
    let mut live = Vec::new();
    for rank in 0..2u32 {
        // Incarnation 0 ran 10 steps from 100 s ago, saved step 5, and died; incarnation
        // 1 restored step 5 and runs now, in gpu (rank 0) or idle (rank 1).
        let first = seconds(rank, &fixed, 10, 1);
        let t0 = now - 100.0;
        post(
            collector.http,
            &export(
                rank,
                0,
                t0 + first.iter().map(|x| x.2).sum::<f64>(),
                &first,
                &[
                    ("higgsmeter_job_step", 10.0),
                    ("higgsmeter_job_checkpoint_step", 5.0),
                    ("higgsmeter_job_checkpoint_productive_seconds", 10.0),
                ],
            ),
        );
        let second = seconds(rank, &fixed, 4, 0);
        let state = if rank == 0 { 3.0 } else { 0.0 };
        let req = export(
            rank,
            1,
            now,
            &second,
            &[
                ("higgsmeter_job_step", 9.0),
                ("higgsmeter_job_restored_step", 5.0),
                ("worker_current_state", state),
            ],
        );
        post(collector.http, &req);
        live.push(req);
    }
    // Incarnation 1 keeps pushing (the same totals) while the browser loads, however
    // slow the machine: its sources stay live.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pusher = {
        let (stop, addr) = (stop.clone(), collector.http);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for req in &live {
                    post(addr, req);
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        })
    };
    let jobs = jobs_when(&collector, "the job in /api/jobs", |ranks| {
        ranks.len() == 2
            && ranks
                .iter()
                .all(|r| r["incarnations"].as_array().is_some_and(|i| i.len() == 2))
    });
    let job = &jobs["jobs"][0];
    let html = dump_dom(&format!("http://{}/", collector.prometheus), 4000);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    pusher.join().expect("the pusher");

    let section = tags_with(&html, "id=\"jobs\"");
    assert_eq!(section[0]["data-jobs"], "1", "{section:?}");
    assert!(!section[0].contains_key("hidden"), "{section:?}");
    let shown = tags_with(&html, "class=\"job\"");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["data-job"], JOB);
    let ratio = job["goodput_ratio"].as_f64().expect("ratio");
    assert_eq!(shown[0]["data-goodput"], format!("{ratio:.4}"));
    assert_eq!(shown[0]["data-disruptions"], "1");
    // The bar: goodput and every cause with time, each as many seconds as the API says.
    let parts: BTreeMap<String, String> = tags_with(&html, "data-cause=\"")
        .into_iter()
        .map(|a| (a["data-cause"].clone(), a["data-seconds"].clone()))
        .collect();
    let mut want = BTreeMap::new();
    want.insert(
        "goodput".to_owned(),
        format!("{:.3}", job["goodput_seconds"].as_f64().expect("goodput")),
    );
    for (cause, secs) in job["badput_seconds"].as_object().expect("badput") {
        let secs = secs.as_f64().expect("seconds");
        if secs > 0.0 {
            want.insert(cause.clone(), format!("{secs:.3}"));
        }
    }
    assert_eq!(parts, want);
    assert!(parts.contains_key("wasted_progress") && parts.contains_key("recovery"));
    let strips = tags_with(&html, "data-incarnations=\"");
    assert_eq!(strips.len(), 2, "{strips:?}");
    assert!(
        strips.iter().all(|s| s["data-incarnations"] == "2"),
        "{strips:?}"
    );

    // The window fits the data: seconds of uptime, not the 15-minute default.
    let timeline = tags_with(&html, "id=\"timeline\"");
    let window: u64 = timeline[0]["data-window"].parse().expect("window");
    // (a few seconds here; a slow machine's browser start may add a minute)
    assert!(
        (10..=300).contains(&window),
        "window {window}: {timeline:?}"
    );
    assert_eq!(tags_with(&html, "id=\"zoom\"")[0]["data-auto"], "true");

    // Table and lanes agree on "now" for every live source that reports its state
    // (incarnation 0 never did, and may still be within `stale_after`).
    let rows: BTreeMap<String, String> = tags_with(&html, "class=\"row")
        .into_iter()
        .filter(|r| r["data-live"] == "true" && r["data-state"] != "unknown")
        .map(|r| (r["data-rank"].clone(), r["data-state"].clone()))
        .collect();
    let lanes: BTreeMap<String, String> = tags_with(&html, "class=\"lane")
        .into_iter()
        .filter(|l| l["data-silent"] == "false" && l["data-now"] != "unknown")
        .map(|l| (l["data-rank"].clone(), l["data-now"].clone()))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows, lanes);
    assert_eq!(rows["0"], "gpu");
    assert_eq!(rows["1"], "idle");
}
