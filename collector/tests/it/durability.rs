//! The collector's durability and shutdown, against the real binary: a state file that
//! cannot be used, a read-only and a full state directory (real filesystems: a tmpfs
//! mounted in a private mount namespace with `unshare`), a restart that continues the
//! per-source and fleet series, a bounded SIGTERM with 250 stuck connections, and the
//! connection cap.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use higgsmeter_testkit::process::{ChildGuard, LineLog, line_reader};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

/// A collector process with its stderr lines, which may refuse to start (the kit's
/// `CollectorProcess` is one that started).
struct Proc {
    process: ChildGuard,
    addrs: Option<[SocketAddr; 3]>,
    stderr: LineLog,
    /// Its stdout after the first line, read (and kept) so that it never blocks.
    _stdout: std::sync::mpsc::Receiver<String>,
}

impl Proc {
    /// Runs `program args…` (the collector, or `unshare … collector`) with the
    /// collector's flags, and waits for its listening line (or its exit).
    fn start(program: &Path, args: &[&str]) -> Proc {
        let mut process = ChildGuard::spawn(
            "higgsmeter-collector",
            Command::new(program)
                .args(args)
                .args(EPHEMERAL_PORTS)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let stderr = LineLog::capture(
            process.child().stderr.take().expect("stderr"),
            Some("collector: "),
        );
        let stdout = line_reader(process.child().stdout.take().expect("stdout"));
        // The first line, or none when it exits.
        let line = stdout
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_default();
        Proc {
            process,
            addrs: parse_listening(&line),
            stderr,
            _stdout: stdout,
        }
    }

    fn collector(args: &[&str]) -> Proc {
        Proc::start(&bins::collector(), args)
    }

    fn http(&self) -> SocketAddr {
        self.addrs.expect("listening")[1]
    }

    fn prometheus(&self) -> SocketAddr {
        self.addrs.expect("listening")[2]
    }

    fn scrape(&self, path: &str) -> String {
        let url = format!("http://{}{path}", self.prometheus());
        let resp = reqwest::blocking::get(&url).expect("GET");
        assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
        resp.text().expect("body")
    }

    /// Every stderr line so far, once one contains `needle` (bounded wait).
    fn wait_log(&self, needle: &str) -> Vec<String> {
        self.stderr.wait_for(needle, Duration::from_secs(20))
    }

    fn sigterm(&mut self) {
        self.process.sigterm();
    }

    /// Waits (bounded) for the process to exit.
    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        self.process.wait_exit(limit)
    }
}

/// One cumulative counter point per series `0..series` of source `rank`.
fn counters(rank: u32, series: u32, value: f64, start: u64) -> ExportMetricsServiceRequest {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let data_points = (0..series)
        .map(|i| NumberDataPoint {
            attributes: vec![kv("shard", &i.to_string())],
            start_time_unix_nano: start,
            time_unix_nano: now,
            value: Some(number_data_point::Value::AsDouble(value)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "durable"),
                    kv("service.instance.id", &format!("rank-{rank}")),
                    kv("rank", &rank.to_string()),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "work".into(),
                    data: Some(Data::Sum(Sum {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn post(addr: SocketAddr, req: &ExportMetricsServiceRequest) -> reqwest::blocking::Response {
    reqwest::blocking::Client::new()
        .post(format!("http://{addr}/v1/metrics"))
        .header("content-type", "application/x-protobuf")
        .body(req.encode_to_vec())
        .send()
        .expect("POST")
}

/// The start time of a process that started after the collector (its whole value counts).
fn started_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
}

fn config_file(dir: &Path, yaml: &str) -> String {
    let path = dir.join("collector.yaml");
    std::fs::write(&path, yaml).expect("write config");
    path.display().to_string()
}

/// Seconds since the Unix epoch, now.
fn unix_s() -> f64 {
    started_now() as f64 / 1e9
}

/// `/api/cluster`'s times against wall time: the uptime is within the seconds since
/// just before the process was started (a generous bound: never a timing assertion),
/// and the process start within the wall-clock seconds around it. Returns the document.
fn check_times(p: &Proc, before_unix: f64, before: std::time::Instant) -> serde_json::Value {
    let doc: serde_json::Value =
        serde_json::from_str(&p.scrape("/api/cluster")).expect("/api/cluster is JSON");
    let up = doc["uptime_s"].as_f64().expect("uptime_s");
    let wall = before.elapsed().as_secs_f64();
    assert!(
        (0.0..=wall + 1.0).contains(&up),
        "uptime {up} s after {wall} s: {doc}"
    );
    let started = doc["started_at_unix_s"]
        .as_f64()
        .expect("started_at_unix_s");
    assert!(
        (before_unix - 1.0..=unix_s() + 1.0).contains(&started),
        "started at {started}, started between {before_unix} and now: {doc}"
    );
    doc
}

#[test]
fn state_survives_a_restart_with_both_views() {
    let dir = temp_dir("restart");
    let state = dir.join("state");
    let s = state.display().to_string();
    let (first_unix, first_at) = (unix_s(), std::time::Instant::now());
    let mut first = Proc::collector(&["--storage", &s]);
    let start = started_now();
    assert_eq!(
        post(first.http(), &counters(0, 3, 10.0, start)).status(),
        200
    );
    assert_eq!(
        post(first.http(), &counters(1, 3, 5.0, start)).status(),
        200
    );
    let before_fleet = sum(
        &exposition::parse(&first.scrape("/metrics")),
        "work_total",
        &[],
    );
    let before_sources = first.scrape("/metrics/sources");
    assert_eq!(before_fleet, 45.0);
    let doc = check_times(&first, first_unix, first_at);
    assert_eq!(doc["restored"], false, "{doc}");
    let counting_since = doc["counting_since_unix_s"]
        .as_f64()
        .expect("counting since");
    assert_eq!(Some(counting_since), doc["started_at_unix_s"].as_f64());
    first.sigterm();
    assert!(first.wait_exit(Duration::from_secs(20)).success());
    assert!(state.join(higgsmeter_collector::STATE_FILE).exists());
    let (second_unix, second_at) = (unix_s(), std::time::Instant::now());
    let second = Proc::collector(&["--storage", &s]);
    // Until both sources report again the views are held (a scraper sees a failed
    // scrape, never a lower value).
    let url = format!("http://{}/metrics", second.prometheus());
    let held = reqwest::blocking::get(&url).expect("GET");
    assert_eq!(held.status().as_u16(), 503);
    assert!(held.text().unwrap_or_default().contains("restoring"));
    assert_eq!(
        post(second.http(), &counters(0, 3, 12.0, start)).status(),
        200
    );
    assert_eq!(
        post(second.http(), &counters(1, 3, 5.0, start)).status(),
        200
    );
    let fleet = exposition::parse(&second.scrape("/metrics"));
    assert_eq!(
        sum(&fleet, "work_total", &[]),
        51.0,
        "continued, not restarted"
    );
    let sources = exposition::parse(&second.scrape("/metrics/sources"));
    assert_eq!(sum(&sources, "work_total", &[("rank", "0")]), 36.0);
    // The page says the restored state has counted since the first process started.
    let doc = check_times(&second, second_unix, second_at);
    assert_eq!(doc["restored"], true, "{doc}");
    assert_eq!(doc["counting_since_unix_s"].as_f64(), Some(counting_since));
    assert!(before_sources.contains("work_total"));
    second.wait_log("restored the aggregation state");
}

/// A gauge no rule and no catalog family covers is logged once, by name, with what to
/// add, and stays out of the fleet view.
#[test]
fn a_gauge_without_a_rule_is_logged_once() {
    let p = Proc::collector(&["--storage", "none"]);
    for (rank, value) in [(0, 60.0), (1, 61.0), (0, 62.0)] {
        let mut req = counters(rank, 1, value, started_now());
        let metric = &mut req.resource_metrics[0].scope_metrics[0].metrics[0];
        metric.name = "board_temperature".into();
        if let Some(Data::Sum(sum)) = metric.data.take() {
            metric.data = Some(Data::Gauge(Gauge {
                data_points: sum.data_points,
            }));
        }
        assert_eq!(post(p.http(), &req).status(), 200);
    }
    let log = p.wait_log("gauge `board_temperature` has no fleet rule");
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("has no fleet rule"))
            .count(),
        1,
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("processors.higgsmeter.gauges"))
    );
    assert!(!p.scrape("/metrics").contains("board_temperature"));
    assert!(p.scrape("/metrics/sources").contains("board_temperature"));
}

#[test]
fn a_corrupt_state_file_is_moved_aside_with_one_clear_line() {
    let dir = temp_dir("corrupt");
    std::fs::write(
        dir.join(higgsmeter_collector::STATE_FILE),
        b"HGMSTATE\x01\0\0\0 torn in half",
    )
    .expect("write");
    let d = dir.display().to_string();
    let collector = Proc::collector(&["--storage", &d]);
    assert!(collector.addrs.is_some(), "it starts");
    assert_eq!(
        post(collector.http(), &counters(0, 1, 3.0, started_now())).status(),
        200
    );
    let fleet = exposition::parse(&collector.scrape("/metrics"));
    assert_eq!(sum(&fleet, "work_total", &[]), 3.0);
    let log = collector.wait_log("moved aside");
    let lines: Vec<&String> = log.iter().filter(|l| l.contains("moved aside")).collect();
    assert_eq!(lines.len(), 1, "{log:?}");
    assert!(lines[0].contains(&d) && lines[0].contains(higgsmeter_collector::STATE_FILE));
    let aside = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().contains(".bad-"));
    assert!(aside);
}

/// A tmpfs mounted for the collector alone: `unshare` gives it a private mount
/// namespace (as a mapped root in a user namespace), so nothing outside sees it.
fn in_tmpfs(dir: &Path, options: &str, collector_args: &[&str]) -> Proc {
    let d = dir.display().to_string();
    let script = format!("mount -t tmpfs -o {options} tmpfs '{d}' && exec \"$0\" \"$@\"");
    let collector = bins::collector();
    let collector = collector.to_str().expect("a UTF-8 path");
    let mut args = vec!["-rm", "sh", "-c", &script, collector];
    args.extend_from_slice(collector_args);
    Proc::start(Path::new("unshare"), &args)
}

#[test]
fn a_read_only_directory_refuses_to_start_unless_storage_is_off() {
    let dir = temp_dir("readonly");
    let d = dir.display().to_string();
    let mut p = in_tmpfs(&dir, "ro,size=64k", &["--storage", &d]);
    assert!(p.addrs.is_none(), "it must not start");
    let status = p.wait_exit(Duration::from_secs(20));
    assert!(!status.success());
    let log = p.wait_log("cannot keep").join("\n");
    assert!(
        log.contains("cannot keep the aggregation state in")
            && log.contains(&d)
            && log.contains("storage: none"),
        "{log}"
    );
    // Storage off: it starts.
    let p = in_tmpfs(&dir, "ro,size=64k", &["--storage", "none"]);
    assert!(p.addrs.is_some());
}

#[test]
fn a_full_disk_is_logged_once_counted_and_ingest_goes_on() {
    let dir = temp_dir("full");
    let d = dir.display().to_string();
    let cfg_dir = temp_dir("full-config");
    let config = config_file(
        &cfg_dir,
        &format!(
            "extensions:\n  file_storage:\n    directory: '{d}'\nprocessors:\n  higgsmeter:\n    checkpoint_interval: 100ms\n"
        ),
    );
    // 16 KiB: the lock file and the first small state fit, 2,000 series do not.
    let p = in_tmpfs(&dir, "size=16k", &["--config", &config]);
    assert!(p.addrs.is_some(), "it starts");
    let start = started_now();
    assert_eq!(post(p.http(), &counters(0, 2, 1.0, start)).status(), 200);
    wait_for(Duration::from_secs(20), "a successful checkpoint", || {
        let text = p.scrape("/metrics");
        let ok = sum(
            &exposition::parse(&text),
            "higgsmeter_collector_checkpoints_total",
            &[("outcome", "ok")],
        );
        (ok >= 1.0).then_some(())
    });
    assert_eq!(post(p.http(), &counters(1, 2000, 1.0, start)).status(), 200);
    wait_for(Duration::from_secs(20), "failed checkpoints", || {
        let text = p.scrape("/metrics");
        let failed = sum(
            &exposition::parse(&text),
            "higgsmeter_collector_checkpoints_total",
            &[("outcome", "failed")],
        );
        (failed >= 3.0).then_some(())
    });
    // Ingest goes on.
    assert_eq!(post(p.http(), &counters(2, 1, 7.0, start)).status(), 200);
    let fleet = exposition::parse(&p.scrape("/metrics"));
    assert_eq!(sum(&fleet, "work_total", &[]), 2.0 + 2000.0 + 7.0);
    let log = p.wait_log("cannot write the aggregation state");
    let errors = log
        .iter()
        .filter(|l| l.contains("cannot write the aggregation state"))
        .count();
    assert_eq!(errors, 1, "logged once a minute at most: {log:?}");
}

#[test]
fn sigterm_ends_within_the_deadline_whatever_250_stuck_clients_do() {
    let dir = temp_dir("stuck");
    let state = dir.join("state").display().to_string();
    let config = config_file(
        &dir,
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n      http:\n        read_header_timeout: 10m\n        read_timeout: 10m\nservice:\n  shutdown_timeout: 3s\n",
    );
    let mut p = Proc::collector(&["--config", &config, "--storage", &state]);
    let [grpc, http, _] = p.addrs.expect("listening");
    assert_eq!(
        post(http, &counters(0, 2, 4.0, started_now())).status(),
        200
    );
    let mut stuck = Vec::new();
    for i in 0..250 {
        if i % 2 == 0 {
            // Half a request: headers never finished.
            let mut s = TcpStream::connect(http).expect("connect");
            s.write_all(b"POST /v1/metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n")
                .expect("write");
            stuck.push(s);
        } else if i % 4 == 1 {
            // Headers sent, the body never arrives.
            let mut s = TcpStream::connect(http).expect("connect");
            s.write_all(b"POST /v1/metrics HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-length: 100\r\n\r\nabc")
                .expect("write");
            stuck.push(s);
        } else {
            // A bare connection to the gRPC port: no HTTP/2 preface, nothing.
            stuck.push(TcpStream::connect(grpc).expect("connect"));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    p.sigterm();
    let status = p.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}");
    drop(stuck);
    // The final checkpoint was written.
    let state_file = Path::new(&state).join(higgsmeter_collector::STATE_FILE);
    assert!(state_file.exists());
    let again = Proc::collector(&["--storage", &state]);
    again.wait_log("restored the aggregation state");
}

#[test]
fn connections_past_the_limit_are_refused_clearly_and_counted() {
    let dir = temp_dir("limit");
    let config = config_file(
        &dir,
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n      http:\n        max_connections: 4\n",
    );
    let p = Proc::collector(&["--config", &config, "--storage", "none"]);
    // Four busy connections: headers sent, the body still coming. (Idle or unfinished
    // ones would make room for the newcomer instead: see tests/it/connections.rs.)
    let held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(p.http()).expect("connect");
            s.write_all(b"POST /v1/metrics HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-length: 100\r\n\r\nabc")
                .expect("write");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(p.http()).expect("connect");
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("max_connections"),
        "{answer}"
    );
    let text = p.scrape("/metrics");
    let refused = sum(
        &exposition::parse(&text),
        "higgsmeter_collector_connections_refused_total",
        &[("transport", "http")],
    );
    assert!(refused >= 1.0, "{text}");
    drop(held);
    // Places free up when connections close.
    wait_for(
        Duration::from_secs(20),
        "a request after the others closed",
        || {
            let r = reqwest::blocking::Client::new()
                .post(format!("http://{}/v1/metrics", p.http()))
                .header("content-type", "application/x-protobuf")
                .body(counters(0, 1, 1.0, started_now()).encode_to_vec())
                .send()
                .ok()?;
            (r.status() == 200).then_some(())
        },
    );
}

#[test]
fn check_config_says_where_state_lives() {
    let out = Command::new(bins::collector())
        .args(["--storage", "/var/lib/higgsmeter", "--check-config"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("aggregation state: /var/lib/higgsmeter/higgsmeter-collector.state"),
        "{text}"
    );
    let out = Command::new(bins::collector())
        .args(["--storage", "none", "--check-config"])
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("aggregation state: none"));
    // An upstream-shaped `service.extensions` that does not list file_storage: the
    // storage key decides (default file_storage), and the output says where.
    let dir = temp_dir("unlisted");
    let config = config_file(
        &dir,
        "extensions:\n  file_storage:\n    directory: /tmp/x\nservice:\n  extensions: []\n",
    );
    let out = Command::new(bins::collector())
        .args(["--config", &config, "--check-config"])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("aggregation state: /tmp/x/higgsmeter-collector.state"),
        "{text}"
    );
}
