//! Prometheus remote write against a real Prometheus (Debian's `/usr/bin/prometheus`,
//! or `$PROMETHEUS`, started with `--web.enable-remote-write-receiver` on a free
//! 127.0.0.1 port with a temporary data directory): what it stores equals a scrape of
//! the collector's `/metrics` (plus the external labels), counters show no reset
//! through a collector restart with its state restored, a refusing receiver (a
//! Prometheus without the receiver: 404) and a receiver that never answers count
//! their drops, and ingest goes on meanwhile.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::support::*;

/// The ranks' start time: an hour before the test began, so before every collector
/// here. A collector without state would count only what a rank adds after its first
/// point (a restart without state shows Prometheus a reset); with state it continues.
fn start_time() -> u64 {
    static AT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *AT.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64
            - 3_600_000_000_000
    })
}

/// Rank `rank`'s cumulative state after `round` rounds, as OTLP/JSON: two activity
/// counters, a gauge, a histogram.
fn rank_body(rank: u32, round: u32) -> String {
    let (r, n) = (f64::from(rank + 1), f64::from(round));
    let start = start_time();
    let now = start + u64::from(round) * 1_000_000_000;
    let c = |i: u32| u64::from(i * (rank + 1) * round);
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
        {{"key":"service.name","value":{{"stringValue":"rw-worker"}}}},
        {{"key":"service.instance.id","value":{{"stringValue":"id-{rank}"}}}},
        {{"key":"rank","value":{{"intValue":"{rank}"}}}}]}},
        "scopeMetrics":[{{"metrics":[
        {{"name":"worker_activity_time","unit":"s","sum":{{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[
          {{"attributes":[{{"key":"state","value":{{"stringValue":"gpu"}}}}],"startTimeUnixNano":"{start}","timeUnixNano":"{now}","asDouble":{gpu}}},
          {{"attributes":[{{"key":"state","value":{{"stringValue":"io"}}}},{{"key":"path","value":{{"stringValue":"a\"b\\c é"}}}}],"startTimeUnixNano":"{start}","timeUnixNano":"{now}","asDouble":{io}}}]}}}},
        {{"name":"kv_cache_usage","gauge":{{"dataPoints":[{{"timeUnixNano":"{now}","asDouble":{gauge}}}]}}}},
        {{"name":"step_seconds","unit":"s","histogram":{{"aggregationTemporality":2,"dataPoints":[
          {{"startTimeUnixNano":"{start}","timeUnixNano":"{now}","count":"{count}","sum":{sum},
           "bucketCounts":["{b0}","{b1}","0","{b3}"],"explicitBounds":[0.005,0.1,2.5]}}]}}}}
        ]}}]}}]}}"#,
        gpu = 1.5 * r * n,
        io = 0.25 * r * n,
        gauge = 0.125 * r + n,
        count = c(1) + c(2) + c(3),
        sum = 0.5 * r * n,
        b0 = c(1),
        b1 = c(2),
        b3 = c(3),
    )
}

fn post(collector: &CollectorProcess, body: String) {
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/v1/metrics", collector.http_url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("POST /v1/metrics");
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.text());
}

fn config(endpoint: &str, extra: &str) -> String {
    format!(
        "processors:\n  higgsmeter:\n    stale_after: 5m\n    gauges:\n      - match: kv_cache_usage\n        aggregation: mean\nexporters:\n  prometheus:\n  prometheusremotewrite:\n    endpoint: {endpoint}\n    interval: 200ms\n    external_labels:\n      cluster: rw-test\n{extra}service:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [prometheus, prometheusremotewrite]\n"
    )
}

type Series = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// The collector's `/metrics` without its own families (they change with every
/// send), each series with the external label, as Prometheus should hold them.
fn scraped(collector: &CollectorProcess) -> Series {
    collector
        .fleet()
        .into_iter()
        .filter(|s| !s.name.starts_with("higgsmeter_collector_"))
        .map(|s| {
            let mut labels = s.labels;
            labels.insert("cluster".into(), "rw-test".into());
            ((s.name, labels), s.value)
        })
        .collect()
}

/// What Prometheus holds from the collector (latest samples), its own families left
/// out.
fn stored(prom: &Prometheus) -> Series {
    prom.query(r#"{cluster="rw-test",__name__!~"higgsmeter_collector_.*"}"#)
        .into_iter()
        .map(|s| {
            let mut labels = s.labels;
            let name = labels.remove("__name__").expect("a name");
            ((name, labels), s.value)
        })
        .collect()
}

/// Waits until Prometheus holds exactly what the collector's `/metrics` shows.
fn wait_equal(prom: &Prometheus, collector: &CollectorProcess) -> Series {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let want = scraped(collector);
        let got = stored(prom);
        if want == got && !want.is_empty() {
            return want;
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .collect();
            let extra: Vec<_> = got
                .iter()
                .filter(|(k, v)| want.get(*k) != Some(*v))
                .collect();
            panic!(
                "Prometheus never held what /metrics shows\nscrape only or different: {missing:#?}\nPrometheus only or different: {extra:#?}\nprometheus log: {}",
                prom.log()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn self_metric(collector: &CollectorProcess, name: &str, with: &[(&str, &str)]) -> f64 {
    sum(&collector.fleet(), name, with)
}

#[test]
fn prometheus_holds_what_metrics_shows_and_sees_no_reset_through_a_restart() {
    let tmp = temp_dir("remote-write");
    let prom_dir = tmp.join("prometheus");
    std::fs::create_dir_all(&prom_dir).expect("dir");
    let prom = Prometheus::receiver(&prom_dir);
    let state = tmp.join("state");
    let state_arg = state.to_string_lossy().into_owned();
    let yaml = config(&prom.url("/api/v1/write"), "");

    let collector = CollectorProcess::start(Some(&yaml), &["--storage", &state_arg]);
    for round in 1..=3 {
        for rank in 0..3 {
            post(&collector, rank_body(rank, round));
        }
    }
    let first = wait_equal(&prom, &collector);
    // What was compared: the counters of every state, the gauge, the histogram's
    // buckets, sum and count, summed over the three ranks.
    let fleet = |series: &Series, name: &str, with: &[(&str, &str)]| -> f64 {
        series
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(
        fleet(
            &first,
            "worker_activity_time_seconds_total",
            &[("state", "gpu")]
        ),
        1.5 * 6.0 * 2.0
    );
    assert_eq!(
        fleet(
            &first,
            "worker_activity_time_seconds_total",
            &[("state", "io"), ("path", "a\"b\\c é")]
        ),
        0.25 * 6.0 * 2.0
    );
    assert_eq!(
        fleet(&first, "step_seconds_bucket", &[("le", "0.005")]),
        6.0 * 2.0
    );
    assert_eq!(
        fleet(&first, "step_seconds_bucket", &[("le", "0.1")]),
        3.0 * 6.0 * 2.0
    );
    assert_eq!(
        fleet(&first, "step_seconds_bucket", &[("le", "+Inf")]),
        6.0 * 6.0 * 2.0
    );
    assert_eq!(fleet(&first, "step_seconds_count", &[]), 6.0 * 6.0 * 2.0);
    assert!(
        first.keys().any(|(n, _)| n == "kv_cache_usage"),
        "{first:#?}"
    );
    // The collector's own families arrive too, with exporter="prometheusremotewrite"
    // (a send counts itself from the next one on).
    wait_for(
        Duration::from_secs(30),
        "exports_total{ok} >= 1 in Prometheus",
        || {
            let ok = prom.query(r#"higgsmeter_collector_exports_total{exporter="prometheusremotewrite",outcome="ok",cluster="rw-test"}"#);
            ok.first().is_some_and(|s| s.value >= 1.0).then_some(())
        },
    );

    // A restart with the state restored: the ranks go on, Prometheus sees no reset.
    assert!(collector.terminate().success());
    let collector = CollectorProcess::start(Some(&yaml), &["--storage", &state_arg]);
    for round in 4..=5 {
        for rank in 0..3 {
            post(&collector, rank_body(rank, round));
        }
    }
    let second = wait_equal(&prom, &collector);
    for expr in [
        r#"resets(worker_activity_time_seconds_total{cluster="rw-test"}[10m])"#,
        r#"resets(step_seconds_bucket{cluster="rw-test"}[10m])"#,
        r#"resets(step_seconds_count{cluster="rw-test"}[10m])"#,
    ] {
        let resets = prom.query(expr);
        assert!(!resets.is_empty(), "{expr}: no series");
        assert!(resets.iter().all(|s| s.value == 0.0), "{expr}: {resets:?}");
    }
    assert_eq!(
        fleet(
            &second,
            "worker_activity_time_seconds_total",
            &[("state", "gpu")]
        ),
        1.5 * 6.0 * 4.0
    );
    // Both runs' samples are there: the counter went up across the restart.
    let before = prom.query(
        r#"min_over_time(worker_activity_time_seconds_total{state="gpu",cluster="rw-test"}[10m])"#,
    );
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(before[0].value <= 1.5 * 6.0 * 2.0, "{before:?}");
    assert!(collector.terminate().success());
}

#[test]
fn refused_and_unanswered_requests_are_counted_and_ingest_goes_on() {
    let tmp = temp_dir("remote-write-refused");
    let prom_dir = tmp.join("prometheus");
    std::fs::create_dir_all(&prom_dir).expect("dir");
    // Without --web.enable-remote-write-receiver Prometheus answers 404.
    let prom = Prometheus::start(&prom_dir, &prometheus::config(""));
    let refusing = CollectorProcess::start(Some(&config(&prom.url("/api/v1/write"), "")), &[]);
    post(&refusing, rank_body(0, 1));
    let rw = [("exporter", "prometheusremotewrite")];
    wait_for(
        Duration::from_secs(30),
        "refused samples counted as dropped",
        || {
            (self_metric(
                &refusing,
                "higgsmeter_collector_export_dropped_points_total",
                &rw,
            ) > 0.0)
                .then_some(())
        },
    );
    let failed = [("exporter", "prometheusremotewrite"), ("outcome", "failed")];
    assert!(self_metric(&refusing, "higgsmeter_collector_exports_total", &failed) > 0.0);

    // A receiver that accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_addr = silent.local_addr().expect("addr");
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        silent.set_nonblocking(true).expect("nonblocking");
        let mut held = Vec::new();
        while stop_rx.try_recv().is_err() {
            if let Ok((conn, _)) = silent.accept() {
                held.push(conn);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        held.len()
    });
    let slow = CollectorProcess::start(
        Some(&config(
            &format!("http://{silent_addr}/api/v1/write"),
            "    timeout: 300ms\n    sending_queue:\n      queue_size: 2\n    retry_on_failure:\n      initial_interval: 50ms\n      max_interval: 200ms\n",
        )),
        &[],
    );
    post(&slow, rank_body(1, 1));
    wait_for(
        Duration::from_secs(30),
        "queue drops while the receiver hangs",
        || {
            (self_metric(
                &slow,
                "higgsmeter_collector_export_dropped_points_total",
                &rw,
            ) > 0.0)
                .then_some(())
        },
    );
    let fleet = slow.fleet();
    assert!(sum(&fleet, "higgsmeter_collector_exports_total", &failed) > 0.0);
    assert_eq!(
        sum(
            &fleet,
            "higgsmeter_collector_exports_total",
            &[("exporter", "prometheusremotewrite"), ("outcome", "ok")]
        ),
        0.0
    );
    assert!(sum(&fleet, "higgsmeter_collector_export_queue_depth", &rw) <= 2.0);
    // Ingest is not held up by the hanging receiver.
    post(&slow, rank_body(1, 2));
    wait_for(
        Duration::from_secs(10),
        "the second round in /metrics",
        || {
            (sum(
                &slow.fleet(),
                "worker_activity_time_seconds_total",
                &[("state", "gpu")],
            ) == 1.5 * 2.0)
                .then_some(())
        },
    );
    // Shutdown stays bounded with the receiver still hanging.
    assert!(slow.terminate().success());
    let _ = stop_tx.send(());
    assert!(
        holder.join().expect("holder thread") > 0,
        "the collector never connected"
    );
    drop(refusing);
}

/// Two named remote-write exporters (`prometheusremotewrite/a`, `/b`, as a gateway
/// writing to two tenants' TSDBs): each Prometheus holds exactly what `/metrics`
/// shows, and the collector's own metrics count each exporter under its key.
#[test]
fn two_named_remote_write_targets_each_hold_the_scrape() {
    let tmp = temp_dir("remote-write-named");
    let dirs = [tmp.join("a"), tmp.join("b")];
    let proms: Vec<Prometheus> = dirs
        .iter()
        .map(|d| {
            std::fs::create_dir_all(d).expect("dir");
            Prometheus::receiver(d)
        })
        .collect();
    let target = |name: &str, prom: &Prometheus| {
        format!(
            "  prometheusremotewrite/{name}:\n    endpoint: {}\n    interval: 200ms\n    external_labels:\n      cluster: rw-test\n",
            prom.url("/api/v1/write")
        )
    };
    let yaml = format!(
        "processors:\n  higgsmeter:\n    storage: none\n    stale_after: 5m\n    gauges:\n      - match: kv_cache_usage\n        aggregation: mean\nexporters:\n  prometheus:\n{}{}service:\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [prometheus, prometheusremotewrite/a, prometheusremotewrite/b]\n",
        target("a", &proms[0]),
        target("b", &proms[1])
    );
    let collector = CollectorProcess::start(Some(&yaml), &[]);
    for rank in 0..2 {
        post(&collector, rank_body(rank, 1));
    }
    let a = wait_equal(&proms[0], &collector);
    let b = wait_equal(&proms[1], &collector);
    assert_eq!(a, b);
    for name in ["prometheusremotewrite/a", "prometheusremotewrite/b"] {
        let ok = [("exporter", name), ("outcome", "ok")];
        assert!(self_metric(&collector, "higgsmeter_collector_exports_total", &ok) > 0.0);
    }
    let unnamed = [("exporter", "prometheusremotewrite")];
    assert_eq!(
        self_metric(&collector, "higgsmeter_collector_exports_total", &unnamed),
        0.0
    );
}
