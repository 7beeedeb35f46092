//! A real Prometheus server for the tests (Debian's `/usr/bin/prometheus`, or
//! `$PROMETHEUS`) on a free 127.0.0.1 port with a temporary data directory.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A real Prometheus server; killed (by its PID, through its handle) on drop.
pub(crate) struct Prometheus {
    child: Child,
    pub(crate) addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus with no scrape jobs; `receiver`: with the remote write
    /// receiver on.
    pub(crate) fn start(dir: &Path, receiver: bool) -> Prometheus {
        Prometheus::start_scraping(dir, receiver, "")
    }

    /// Starts Prometheus with `scrape_configs` (YAML for the `scrape_configs:` list, or
    /// empty), scraping every second; `receiver`: with the remote write receiver on.
    pub(crate) fn start_scraping(dir: &Path, receiver: bool, scrape_configs: &str) -> Prometheus {
        let binary = std::env::var_os("PROMETHEUS").unwrap_or_else(|| "/usr/bin/prometheus".into());
        let config = dir.join("prometheus.yml");
        let scrape = if scrape_configs.is_empty() {
            String::new()
        } else {
            format!("scrape_configs:\n{scrape_configs}")
        };
        std::fs::write(
            &config,
            format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{scrape}"),
        )
        .expect("write config");
        for attempt in 0..3 {
            // A port the system picked, free again (a race with another process is
            // retried).
            let addr = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port");
            let log = std::fs::File::create(dir.join(format!("prometheus-{attempt}.log")))
                .expect("log file");
            let mut cmd = Command::new(&binary);
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join(format!("data-{attempt}")).display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            if receiver {
                cmd.arg("--web.enable-remote-write-receiver");
            }
            let child = cmd.spawn().unwrap_or_else(|e| {
                panic!(
                    "start {}: {e} (install Debian's prometheus: bash .ci/setup)",
                    binary.to_string_lossy()
                )
            });
            let mut prom = Prometheus {
                child,
                addr,
                dir: dir.to_path_buf(),
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if prom.child.try_wait().expect("wait").is_some() {
                    break;
                }
                let ready = reqwest::blocking::get(format!("http://{addr}/-/ready"))
                    .is_ok_and(|r| r.status().is_success());
                if ready {
                    return prom;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(prom);
        }
        panic!("prometheus did not start; logs in {}", dir.display());
    }

    pub(crate) fn write_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// An instant query: each series' labels (`__name__` included) and value.
    pub(crate) fn query(&self, expr: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let resp = reqwest::blocking::Client::new()
            .post(format!("http://{}/api/v1/query", self.addr))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("query={}", encode(expr)))
            .send()
            .expect("query prometheus");
        let body: serde_json::Value =
            serde_json::from_str(&resp.text().expect("body")).expect("JSON");
        assert_eq!(body["status"], "success", "{expr}: {body}");
        body["data"]["result"]
            .as_array()
            .expect("a vector")
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .expect("labels")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = match r["value"][1].as_str().expect("a value") {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().expect("a number"),
                };
                (labels, value)
            })
            .collect()
    }

    pub(crate) fn log(&self) -> String {
        (0..3)
            .filter_map(|i| {
                std::fs::read_to_string(self.dir.join(format!("prometheus-{i}.log"))).ok()
            })
            .collect()
    }
}

pub(crate) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
