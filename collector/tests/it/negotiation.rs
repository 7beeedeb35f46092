//! Content negotiation of the Prometheus endpoints (`/metrics`, `/metrics/sources`):
//! text, OpenMetrics and the protobuf exposition by `Accept`, gzip by
//! `Accept-Encoding`, checked with raw requests, and a real Prometheus (Debian's 2.42,
//! `--enable-feature=native-histograms`, so that it asks for protobuf first) scraping
//! each of them and storing the same values.
//!
//! Prometheus 2.42 always sends `Accept-Encoding: gzip` and one `Accept` for every job,
//! so the test puts a small proxy between it and the collector: per job (a path prefix)
//! the proxy replaces those two headers (text, OpenMetrics, text with gzip) or passes
//! Prometheus' own (protobuf with gzip), relays the collector's answer byte for byte,
//! and records which format and coding the collector served.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::prometheus_client::{MetricFamily, MetricType};
use prost::Message as _;

use crate::support::*;
use higgsmeter_testkit::prometheus::{Prometheus, config as prometheus_config};

/// What client_golang and the collector call the text format.
const TEXT_ACCEPT: &str = "text/plain;version=0.0.4";
/// Prometheus 2.42's `Accept` without native histograms.
const OPENMETRICS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
/// Prometheus 2.42's `Accept` with `--enable-feature=native-histograms`.
const PROTOBUF_ACCEPT: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const PROTOBUF_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// Two ranks: counters (one label value that needs escaping), a summed gauge, a
/// histogram with bounds and one without.
fn body(rank: u32) -> String {
    let r = f64::from(rank + 1);
    started_json(&format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
  {{"key":"service.name","value":{{"stringValue":"neg"}}}},{{"key":"service.instance.id","value":{{"stringValue":"i-{rank}"}}}},
  {{"key":"rank","value":{{"intValue":"{rank}"}}}},{{"key":"host.name","value":{{"stringValue":"node \"{rank}\""}}}}]}},
  "scopeMetrics":[{{"metrics":[
    {{"name":"neg.steps","unit":"{{step}}","description":"Steps \"done\"\nso far","sum":{{"aggregationTemporality":2,"isMonotonic":true,
      "dataPoints":[{{"attributes":[{{"key":"phase","value":{{"stringValue":"a\"b\\c\nd é"}}}}],"startTimeUnixNano":"1","timeUnixNano":"2","asInt":"{steps}"}},
                    {{"attributes":[{{"key":"phase","value":{{"stringValue":"plain"}}}}],"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":{frac}}}]}}}},
    {{"name":"neg.energy","unit":"J","sum":{{"aggregationTemporality":2,"isMonotonic":true,
      "dataPoints":[{{"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":{energy}}}]}}}},
    {{"name":"neg.queue.depth","gauge":{{"dataPoints":[{{"timeUnixNano":"2","asDouble":{queue}}}]}}}},
    {{"name":"neg.latency","unit":"s","histogram":{{"aggregationTemporality":2,
      "dataPoints":[{{"attributes":[{{"key":"op","value":{{"stringValue":"read"}}}}],"startTimeUnixNano":"1","timeUnixNano":"2","count":"10","sum":{lat_sum},
        "bucketCounts":["1","2","3","0","4","0"],"explicitBounds":[0.005,0.1,1.0,2.5,10.0]}}]}}}},
    {{"name":"neg.nobounds","histogram":{{"aggregationTemporality":2,
      "dataPoints":[{{"startTimeUnixNano":"1","timeUnixNano":"2","count":"5","sum":1.5,"bucketCounts":["5"]}}]}}}}
  ]}}]}}]}}"#,
        steps = 3 * (rank + 1),
        frac = 0.37 * r,
        energy = 12.5 * r,
        queue = 2.5 * r,
        lat_sum = 17.25 * r,
    ))
}

const CONFIG: &str = "processors:\n  higgsmeter:\n    stale_after: 300s\n    gauges:\n      - match: neg_queue_depth*\n        aggregation: sum\n";

fn feed(collector: &CollectorProcess) {
    let client = reqwest::blocking::Client::new();
    for rank in 0..2 {
        let resp = client
            .post(format!("{}/v1/metrics", collector.http_url()))
            .header("content-type", "application/json")
            .body(body(rank))
            .send()
            .expect("POST");
        assert_eq!(resp.status().as_u16(), 200);
        let text = resp.text().expect("body");
        let resp: serde_json::Value = serde_json::from_str(&text).expect("JSON response");
        assert!(
            resp.get("partialSuccess").is_none_or(|p| p.is_null()),
            "{resp}"
        );
    }
}

/// One answer: its content type and coding, and its body inflated.
struct Answer {
    content_type: String,
    content_encoding: Option<String>,
    vary: String,
    body: Vec<u8>,
}

fn get(addr: SocketAddr, path: &str, accept: Option<&str>, encoding: Option<&str>) -> Answer {
    // reqwest is built without its gzip feature here: the body comes as sent.
    let mut req = reqwest::blocking::Client::new().get(format!("http://{addr}{path}"));
    if let Some(accept) = accept {
        req = req.header("accept", accept);
    }
    if let Some(encoding) = encoding {
        req = req.header("accept-encoding", encoding);
    }
    let resp = req.send().expect("GET");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header("content-type").unwrap_or_default();
    let content_encoding = header("content-encoding");
    let vary = header("vary").unwrap_or_default();
    let raw = resp.bytes().expect("body").to_vec();
    let body = match content_encoding.as_deref() {
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(raw.as_slice())
                .read_to_end(&mut out)
                .expect("a valid gzip body");
            assert!(raw.len() < out.len(), "compressed");
            out
        }
        None => raw,
        Some(other) => panic!("unexpected content-encoding {other}"),
    };
    Answer {
        content_type,
        content_encoding,
        vary,
        body,
    }
}

/// A series' name and labels (`le` as a number formatted by Rust, so that `1`, `1.0`
/// and `1e+00` are one key).
type Key = (String, BTreeMap<String, String>);

fn normalize_le(mut labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    if let Some(le) = labels.get_mut("le") {
        let v: f64 = match le.as_str() {
            "+Inf" => f64::INFINITY,
            other => other.parse().expect("a numeric le"),
        };
        *le = if v.is_infinite() {
            "+Inf".into()
        } else {
            v.to_string()
        };
    }
    labels
}

/// The `neg_` samples of a text or OpenMetrics body.
fn text_samples(body: &[u8]) -> BTreeMap<Key, f64> {
    exposition::parse(std::str::from_utf8(body).expect("UTF-8"))
        .into_iter()
        .filter(|s| s.name.starts_with("neg_"))
        .map(|s| ((s.name, normalize_le(s.labels)), s.value))
        .collect()
}

/// The `neg_` samples of a protobuf body, as Prometheus reads them.
fn proto_samples(mut body: &[u8]) -> BTreeMap<Key, f64> {
    let mut out = BTreeMap::new();
    while !body.is_empty() {
        let family = MetricFamily::decode_length_delimited(&mut body).expect("a MetricFamily");
        if !family.name.starts_with("neg_") {
            continue;
        }
        for m in &family.metric {
            let labels: BTreeMap<String, String> = m
                .label
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            let mut put = |suffix: &str, extra: Option<f64>, value: f64| {
                let mut l = labels.clone();
                if let Some(le) = extra {
                    l.insert(
                        "le".into(),
                        if le.is_infinite() {
                            "+Inf".into()
                        } else {
                            le.to_string()
                        },
                    );
                }
                out.insert((format!("{}{suffix}", family.name), l), value);
            };
            match family.r#type() {
                MetricType::Counter => put("", None, m.counter.as_ref().expect("counter").value),
                MetricType::Gauge => put("", None, m.gauge.as_ref().expect("gauge").value),
                MetricType::Histogram => {
                    let h = m.histogram.as_ref().expect("histogram");
                    for b in &h.bucket {
                        put("_bucket", Some(b.upper_bound), b.cumulative_count as f64);
                    }
                    if h.bucket.last().is_none_or(|b| b.upper_bound.is_finite()) {
                        put("_bucket", Some(f64::INFINITY), h.sample_count as f64);
                    }
                    put("_sum", None, h.sample_sum);
                    put("_count", None, h.sample_count as f64);
                }
                other => panic!("unexpected type {other:?}"),
            }
        }
    }
    out
}

/// Both endpoints answer every format, plain or gzip, with the same samples; the
/// headers say which; a client without `Accept-Encoding` gets the plain body.
#[test]
fn each_endpoint_negotiates_format_and_gzip() {
    let collector = CollectorProcess::start(Some(CONFIG), &[]);
    feed(&collector);
    for path in ["/metrics", "/metrics/sources"] {
        let want = text_samples(&get(collector.prometheus, path, None, None).body);
        assert!(
            want.keys().any(|(n, _)| n == "neg_latency_seconds_bucket"),
            "{want:?}"
        );
        assert!(want.keys().any(|(n, _)| n == "neg_steps_total"));
        let cases = [
            (None, "text/plain; version=0.0.4"),
            (Some(TEXT_ACCEPT), "text/plain; version=0.0.4"),
            (
                Some(OPENMETRICS_ACCEPT),
                "application/openmetrics-text; version=1.0.0",
            ),
            (Some(PROTOBUF_ACCEPT), PROTOBUF_TYPE),
            (
                Some("text/plain;q=0.2,application/openmetrics-text;q=0.9"),
                "application/openmetrics-text",
            ),
            (
                Some("application/openmetrics-text;q=0.3,text/plain;version=0.0.4;q=0.6"),
                "text/plain",
            ),
            (Some("application/json"), "text/plain; version=0.0.4"),
        ];
        for (accept, content_type) in cases {
            for encoding in [None, Some("gzip"), Some("deflate, br"), Some("gzip;q=0")] {
                let answer = get(collector.prometheus, path, accept, encoding);
                let what = format!("{path} Accept {accept:?} Accept-Encoding {encoding:?}");
                assert!(
                    answer.content_type.starts_with(content_type),
                    "{what}: {}",
                    answer.content_type
                );
                let gzip = encoding == Some("gzip");
                assert_eq!(
                    answer.content_encoding.as_deref(),
                    gzip.then_some("gzip"),
                    "{what}"
                );
                assert!(answer.vary.contains("Accept-Encoding"), "{what}");
                let got = if content_type == PROTOBUF_TYPE {
                    proto_samples(&answer.body)
                } else {
                    if content_type.starts_with("application/openmetrics-text") {
                        assert!(answer.body.ends_with(b"# EOF\n"), "{what}");
                    }
                    text_samples(&answer.body)
                };
                assert_eq!(got, want, "{what}");
            }
        }
    }
}

/// What the proxy forwarded for one scrape and what the collector answered.
#[derive(Debug, Clone)]
struct Served {
    route: String,
    accept: String,
    content_type: String,
    content_encoding: String,
}

/// A loopback HTTP proxy in front of the collector's Prometheus endpoint: the first
/// path segment picks the headers it sends (`text`, `openmetrics`, `gzip`; anything else
/// passes the scraper's own), the rest of the path is the collector's.
struct HeaderProxy {
    addr: SocketAddr,
    served: Arc<Mutex<Vec<Served>>>,
    stop: Arc<AtomicBool>,
}

impl HeaderProxy {
    fn start(upstream: SocketAddr) -> HeaderProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("its address");
        let served = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log, done) = (served.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let log = log.clone();
                std::thread::spawn(move || {
                    let _ = relay(conn, upstream, &log);
                });
            }
        });
        HeaderProxy { addr, served, stop }
    }

    fn served(&self) -> Vec<Served> {
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for HeaderProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Relays one request (then closes the connection).
fn relay(client: TcpStream, upstream: SocketAddr, log: &Mutex<Vec<Served>>) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let target = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (route, path) = target
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((target, ""));
    let (accept, encoding) = match route {
        "text" => (Some(TEXT_ACCEPT.to_owned()), None),
        "openmetrics" => (Some(OPENMETRICS_ACCEPT.to_owned()), None),
        "gzip" => (Some(TEXT_ACCEPT.to_owned()), Some("gzip".to_owned())),
        _ => (header("accept"), header("accept-encoding")),
    };
    let mut up = TcpStream::connect(upstream)?;
    let mut request = format!("GET /{path} HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\n");
    if let Some(accept) = &accept {
        request.push_str(&format!("Accept: {accept}\r\n"));
    }
    if let Some(encoding) = &encoding {
        request.push_str(&format!("Accept-Encoding: {encoding}\r\n"));
    }
    request.push_str("\r\n");
    up.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    up.read_to_end(&mut response)?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(response.len());
    let head = String::from_utf8_lossy(&response[..head_end]).to_ascii_lowercase();
    let response_header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(Served {
            route: route.to_owned(),
            accept: accept.unwrap_or_default(),
            content_type: response_header("content-type"),
            content_encoding: response_header("content-encoding"),
        });
    let mut client = client;
    client.write_all(&response)?;
    client.flush()?;
    client.shutdown(Shutdown::Both)
}

/// The `neg_` and `target_info` series Prometheus holds, by job (their labels without
/// the scrape's `job` and `instance`, `le` normalized).
fn stored(prom: &Prometheus) -> BTreeMap<String, BTreeMap<Key, f64>> {
    let mut out: BTreeMap<String, BTreeMap<Key, f64>> = BTreeMap::new();
    for sample in prom.query(r#"{__name__=~"neg_.+|target_info"}"#) {
        let (mut labels, value) = (sample.labels, sample.value);
        let job = labels.remove("job").unwrap_or_default();
        labels.remove("instance");
        let name = labels.remove("__name__").unwrap_or_default();
        out.entry(job)
            .or_default()
            .insert((name, normalize_le(labels)), value);
    }
    out
}

/// A real Prometheus scraping `/metrics` as text, OpenMetrics, gzip-compressed text and
/// (asking itself, native histograms on) gzip-compressed protobuf, and `/metrics/sources`
/// as protobuf, stores the same series with the same values from each.
#[test]
fn prometheus_stores_the_same_values_from_every_format() {
    let collector = CollectorProcess::start(Some(CONFIG), &[]);
    feed(&collector);
    let proxy = HeaderProxy::start(collector.prometheus);
    let jobs = [
        ("text", "/text/metrics"),
        ("openmetrics", "/openmetrics/metrics"),
        ("gzip", "/gzip/metrics"),
        ("protobuf", "/native/metrics"),
        ("protobuf_sources", "/native/metrics/sources"),
        ("text_sources", "/text/metrics/sources"),
    ];
    let scrape_configs: String = jobs
        .iter()
        .map(|(job, path)| {
            format!(
                "  - job_name: {job}\n    metrics_path: {path}\n    static_configs: [{{targets: [\"{}\"]}}]\n",
                proxy.addr
            )
        })
        .collect();
    let prom = Prometheus::start_with_flags(
        &temp_dir("prom-negotiation"),
        &prometheus_config(&scrape_configs),
        &["--enable-feature=native-histograms"],
    );
    let stored = wait_for_or(
        Duration::from_secs(60),
        || {
            format!(
                "every job's series in Prometheus; served: {:?}; log: {}",
                proxy.served(),
                prom.log()
            )
        },
        || {
            let stored = stored(&prom);
            let complete = jobs.iter().all(|(job, _)| {
                stored
                    .get(*job)
                    .is_some_and(|s| s.keys().any(|(n, _)| n == "neg_latency_seconds_bucket"))
            }) && stored.get("text").map(BTreeMap::len)
                == stored.get("gzip").map(BTreeMap::len)
                && stored.get("text").map(BTreeMap::len)
                    == stored.get("protobuf").map(BTreeMap::len)
                && stored.get("text").map(BTreeMap::len)
                    == stored.get("openmetrics").map(BTreeMap::len)
                && stored.get("text_sources").map(BTreeMap::len)
                    == stored.get("protobuf_sources").map(BTreeMap::len);
            complete.then_some(stored)
        },
    );
    let text = &stored["text"];
    assert!(text.len() >= 15, "{text:?}");
    for job in ["openmetrics", "gzip", "protobuf"] {
        assert_eq!(
            &stored[job], text,
            "job {job} stored other values than text"
        );
    }
    assert_eq!(stored["protobuf_sources"], stored["text_sources"]);
    // The fleet sums of the two ranks, as every job stored them.
    let value = |name: &str, with: &[(&str, &str)]| {
        text.iter()
            .find(|((n, l), _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name} {with:?} not stored: {text:?}"))
    };
    assert_eq!(value("neg_steps_total", &[("phase", "a\"b\\c\nd é")]), 9.0);
    assert_eq!(value("neg_queue_depth", &[]), 7.5);
    assert_eq!(
        value("neg_latency_seconds_bucket", &[("op", "read"), ("le", "1")]),
        12.0
    );
    assert_eq!(
        value(
            "neg_latency_seconds_bucket",
            &[("op", "read"), ("le", "+Inf")]
        ),
        20.0
    );
    assert_eq!(value("neg_latency_seconds_sum", &[("op", "read")]), 51.75);
    assert_eq!(value("neg_nobounds_bucket", &[("le", "+Inf")]), 10.0);

    // Which format each job was served: the collector's own answer, as relayed.
    let served = proxy.served();
    let answer = |route: &str| {
        served
            .iter()
            .find(|s| s.route == route)
            .cloned()
            .unwrap_or_else(|| panic!("no scrape through {route}: {served:?}"))
    };
    let text_answer = answer("text");
    assert!(
        text_answer
            .content_type
            .starts_with("text/plain; version=0.0.4")
    );
    assert_eq!(text_answer.content_encoding, "");
    let om = answer("openmetrics");
    assert!(om.content_type.starts_with("application/openmetrics-text"));
    assert_eq!(om.content_encoding, "");
    let gzip = answer("gzip");
    assert!(gzip.content_type.starts_with("text/plain; version=0.0.4"));
    assert_eq!(gzip.content_encoding, "gzip");
    let native = answer("native");
    assert!(
        native
            .accept
            .starts_with("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"),
        "Prometheus asked for {:?}",
        native.accept
    );
    assert_eq!(native.content_type, PROTOBUF_TYPE.to_ascii_lowercase());
    assert_eq!(native.content_encoding, "gzip");
}
