//! A real Prometheus server (Debian's `/usr/bin/prometheus`, or `$PROMETHEUS`) on a
//! free 127.0.0.1 port with its config and storage in a directory of the test's, and
//! [`PromClient`], the Prometheus HTTP query API (VictoriaMetrics answers the same).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::http::{get, url_encode};
use crate::process::Server;

/// The flag that turns on Prometheus' remote write receiver (`/api/v1/write`).
pub const REMOTE_WRITE_RECEIVER: &str = "--web.enable-remote-write-receiver";

/// The Prometheus binary: `$PROMETHEUS`, else `/usr/bin/prometheus`.
pub fn binary() -> PathBuf {
    std::env::var_os("PROMETHEUS").map_or_else(|| "/usr/bin/prometheus".into(), PathBuf::from)
}

/// A config scraping and evaluating every second, with `scrape_configs` (YAML for the
/// `scrape_configs:` list) when not empty.
pub fn config(scrape_configs: &str) -> String {
    let scrape = if scrape_configs.is_empty() {
        String::new()
    } else {
        format!("scrape_configs:\n{scrape_configs}")
    };
    format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{scrape}")
}

/// A real Prometheus server; killed (by its own process id) on drop.
#[derive(Debug)]
pub struct Prometheus {
    server: Server,
    /// Its HTTP address.
    pub addr: SocketAddr,
}

impl Prometheus {
    /// Writes `config` (a prometheus.yml) into `dir` and starts Prometheus on a free
    /// port, waiting until `/-/ready` answers 200.
    pub fn start(dir: &Path, config: &str) -> Prometheus {
        Prometheus::start_with_flags(dir, config, &[])
    }

    /// Prometheus with no scrape job and its remote write receiver on
    /// ([`REMOTE_WRITE_RECEIVER`], `/api/v1/write`).
    pub fn receiver(dir: &Path) -> Prometheus {
        Prometheus::start_with_flags(dir, &config(""), &[REMOTE_WRITE_RECEIVER])
    }

    /// [`Prometheus::start`] with extra command-line flags, e.g.
    /// [`REMOTE_WRITE_RECEIVER`].
    pub fn start_with_flags(dir: &Path, config: &str, flags: &[&str]) -> Prometheus {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config)
            .unwrap_or_else(|e| panic!("write {}: {e}", config_path.display()));
        let attempt = std::sync::atomic::AtomicU32::new(0);
        let server = Server::start(
            "prometheus",
            &binary(),
            "install Debian's prometheus (bash .ci/setup), or set PROMETHEUS",
            dir,
            "/-/ready",
            |addr| {
                let n = attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut args = vec![
                    format!("--config.file={}", config_path.display()),
                    format!(
                        "--storage.tsdb.path={}",
                        dir.join(format!("data-{n}")).display()
                    ),
                    format!("--web.listen-address={addr}"),
                    "--log.level=warn".to_owned(),
                ];
                args.extend(flags.iter().map(|f| (*f).to_owned()));
                args
            },
        );
        Prometheus {
            addr: server.addr,
            server,
        }
    }

    /// The query client.
    pub fn client(&self) -> PromClient {
        PromClient { addr: self.addr }
    }

    /// An instant query that must succeed: its samples (panics otherwise).
    pub fn query(&self, promql: &str) -> Vec<Sample> {
        self.client()
            .query(promql)
            .unwrap_or_else(|e| panic!("{e}\nprometheus log:\n{}", self.log()))
    }

    /// `http://ADDR` and `path` (e.g. the remote write receiver's `/api/v1/write`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What the server logged, over every start attempt.
    pub fn log(&self) -> String {
        self.server.log()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.server.is_running()
    }
}

/// One sample of an instant-vector result.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its labels (the metric name under `__name__` when kept).
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// A label's value, `""` when absent (as PromQL reads it).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// The Prometheus HTTP query API (Prometheus, VictoriaMetrics). Its errors are
/// strings, for tests that retry until a query answers.
#[derive(Debug, Clone, Copy)]
pub struct PromClient {
    /// The server's address.
    pub addr: SocketAddr,
}

impl PromClient {
    /// `GET /api/v1/query`: the whole JSON answer, an error unless `status` is
    /// `success`.
    pub fn query_raw(&self, promql: &str) -> Result<serde_json::Value, String> {
        let path = format!("/api/v1/query?query={}", url_encode(promql));
        let (status, body) = get(self.addr, &path).map_err(|e| format!("query {promql:?}: {e}"))?;
        let json: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| format!("query {promql:?}: HTTP {status}, not JSON ({e}): {body}"))?;
        if json["status"] != "success" {
            return Err(format!("query {promql:?} failed (HTTP {status}): {body}"));
        }
        Ok(json)
    }

    /// An instant query that must return a vector: its samples.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        let json = self.query_raw(promql)?;
        let data = &json["data"];
        if data["resultType"] != "vector" {
            return Err(format!("query {promql:?}: expected a vector, got {data}"));
        }
        let result = data["result"]
            .as_array()
            .ok_or_else(|| format!("query {promql:?}: result is not an array: {data}"))?;
        result
            .iter()
            .map(|item| {
                let labels = item["metric"]
                    .as_object()
                    .ok_or_else(|| format!("query {promql:?}: a sample without metric: {item}"))?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                    .collect();
                let value = item["value"][1]
                    .as_str()
                    .ok_or_else(|| format!("query {promql:?}: a sample without value: {item}"))?;
                let value = match value {
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v
                        .parse::<f64>()
                        .map_err(|e| format!("query {promql:?}: value {v:?}: {e}"))?,
                };
                Ok(Sample { labels, value })
            })
            .collect()
    }

    /// A query whose answer must be exactly one sample: its value.
    pub fn scalar(&self, promql: &str) -> Result<f64, String> {
        match self.query(promql)?.as_slice() {
            [one] => Ok(one.value),
            other => Err(format!(
                "query {promql:?}: expected one sample, got {other:?}"
            )),
        }
    }

    /// A query answered per value of `label`: label value → sample value (an error if
    /// a value repeats).
    pub fn by_label(&self, promql: &str, label: &str) -> Result<BTreeMap<String, f64>, String> {
        let mut out = BTreeMap::new();
        for s in self.query(promql)? {
            let key = s.label(label).to_owned();
            if out.insert(key.clone(), s.value).is_some() {
                return Err(format!("query {promql:?}: {label}={key:?} appears twice"));
            }
        }
        Ok(out)
    }
}
