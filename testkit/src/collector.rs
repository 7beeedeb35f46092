//! The collector as a process ([`CollectorProcess`]: the binary on ports the system
//! picks, its addresses read from its startup line) and, with the `in-process`
//! feature, as a library in the test's own process (`InProcess`).

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::exposition::{self, Sample};
use crate::process::{ChildGuard, LineLog, line_reader};

/// Every listener of the collector on a port the system picks.
pub const EPHEMERAL_PORTS: [&str; 6] = [
    "--grpc",
    "127.0.0.1:0",
    "--http",
    "127.0.0.1:0",
    "--prometheus",
    "127.0.0.1:0",
];

/// How long a collector may take to print its startup line.
const STARTUP_LIMIT: Duration = Duration::from_secs(30);

/// The start of the line the collector prints once it listens.
pub const LISTENING: &str = "higgsmeter-collector listening ";

/// Parses `higgsmeter-collector listening grpc=A http=B prometheus=C`: [grpc, http,
/// prometheus].
pub fn parse_listening(line: &str) -> Option<[SocketAddr; 3]> {
    let rest = line.trim().strip_prefix(LISTENING.trim_end())?;
    let mut out = [None, None, None];
    for part in rest.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        let i = match k {
            "grpc" => 0,
            "http" => 1,
            "prometheus" => 2,
            _ => continue,
        };
        out[i] = v.parse().ok();
    }
    Some([out[0]?, out[1]?, out[2]?])
}

/// How to start a [`CollectorProcess`]: built by [`CollectorProcess::builder`].
#[derive(Debug, Clone)]
pub struct Builder {
    config_yaml: Option<String>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    capture_stderr: Option<Option<String>>,
    current_dir: Option<PathBuf>,
}

impl Builder {
    /// Writes `yaml` to a fresh file and passes it as `--config`.
    pub fn config(mut self, yaml: &str) -> Builder {
        self.config_yaml = Some(yaml.to_owned());
        self
    }

    /// Arguments after the ephemeral ports (the last of a repeated flag wins: `--grpc
    /// ADDR` takes an address again after a restart). Without `--storage` here or a
    /// `storage` in the config, the collector gets a fresh state directory.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Builder {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// An environment variable (the default `RUST_LOG` is `warn`, unless the test's
    /// environment sets one).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Builder {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Removes an environment variable the test's environment may set.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Builder {
        self.env_remove.push(key.as_ref().to_owned());
        self
    }

    /// Collects the collector's stderr ([`CollectorProcess::log`]) instead of passing it
    /// through; `echo`: each line is also printed after this prefix.
    pub fn capture_stderr(mut self, echo: Option<&str>) -> Builder {
        self.capture_stderr = Some(echo.map(str::to_owned));
        self
    }

    /// Runs it in `dir` (the default state directory's parent, when storage is on by
    /// default).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Builder {
        self.current_dir = Some(dir.into());
        self
    }

    /// Starts it and waits (up to 30 s) for its startup line; panics if it exits or
    /// prints something else first.
    pub fn start(self) -> CollectorProcess {
        let mut cmd = Command::new(crate::bins::collector());
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        cmd.args(EPHEMERAL_PORTS);
        if let Some(yaml) = &self.config_yaml {
            let path = crate::temp_dir("collector-config").join("collector.yaml");
            std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            cmd.arg("--config").arg(path);
        }
        // Each collector its own state directory (the default is the working
        // directory's: a test that sets the working directory keeps it).
        let storage_set = self.current_dir.is_some()
            || self.args.iter().any(|a| a == "--storage")
            || self
                .config_yaml
                .as_ref()
                .is_some_and(|y| y.contains("storage"));
        if !storage_set {
            cmd.arg("--storage").arg(crate::temp_dir("collector-state"));
        }
        let rust_log_set =
            std::env::var_os("RUST_LOG").is_some() || self.env.iter().any(|(k, _)| k == "RUST_LOG");
        if !rust_log_set {
            cmd.env("RUST_LOG", "warn");
        }
        for key in &self.env_remove {
            cmd.env_remove(key);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if self.capture_stderr.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            });
        let mut process = ChildGuard::spawn("higgsmeter-collector", &mut cmd);
        let stderr = self.capture_stderr.as_ref().map(|echo| {
            let stream = process
                .child()
                .stderr
                .take()
                .expect("the collector's stderr");
            LineLog::capture(stream, echo.as_deref())
        });
        let stdout = line_reader(
            process
                .child()
                .stdout
                .take()
                .expect("the collector's stdout"),
        );
        let line = stdout.recv_timeout(STARTUP_LIMIT).unwrap_or_else(|e| {
            let exit = process.wait_exit_within(Duration::from_secs(5));
            let log = stderr.as_ref().map(LineLog::text).unwrap_or_default();
            panic!("no startup line from the collector ({e}; exit: {exit:?})\n{log}")
        });
        let [grpc, http, prometheus] =
            parse_listening(&line).unwrap_or_else(|| panic!("unexpected startup line {line:?}"));
        CollectorProcess {
            process,
            grpc,
            http,
            prometheus,
            stdout,
            stderr,
        }
    }
}

/// A running `higgsmeter-collector` process; killed on drop.
#[derive(Debug)]
pub struct CollectorProcess {
    /// The process.
    pub process: ChildGuard,
    /// The OTLP/gRPC address.
    pub grpc: SocketAddr,
    /// The OTLP/HTTP address.
    pub http: SocketAddr,
    /// The Prometheus endpoint's address (`/metrics`, `/metrics/sources`, `/`).
    pub prometheus: SocketAddr,
    /// Its stdout after the startup line.
    pub stdout: mpsc::Receiver<String>,
    stderr: Option<LineLog>,
}

impl CollectorProcess {
    /// How to start one: no config, a fresh state directory, stderr passed through.
    pub fn builder() -> Builder {
        Builder {
            config_yaml: None,
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            capture_stderr: None,
            current_dir: None,
        }
    }

    /// Starts the collector on ephemeral ports with an optional YAML config and extra
    /// flags.
    pub fn start(config_yaml: Option<&str>, extra: &[&str]) -> CollectorProcess {
        Self::start_with_env(config_yaml, extra, &[])
    }

    /// [`start`](Self::start) with environment variables (e.g. a quieter `RUST_LOG`).
    pub fn start_with_env(
        config_yaml: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> CollectorProcess {
        let mut b = Self::builder().args(extra);
        if let Some(yaml) = config_yaml {
            b = b.config(yaml);
        }
        for (k, v) in env {
            b = b.env(k, v);
        }
        b.start()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// `http://` and its OTLP/gRPC address.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// `http://` and its OTLP/HTTP address.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// GET a path of the Prometheus endpoint; panics unless it answers 2xx.
    pub fn scrape(&self, path: &str) -> String {
        let (status, body) = crate::http::get(self.prometheus, path)
            .unwrap_or_else(|e| panic!("GET http://{}{path}: {e}", self.prometheus));
        assert!(
            (200..300).contains(&status),
            "GET http://{}{path}: {status}: {body}",
            self.prometheus
        );
        body
    }

    /// The fleet view (`/metrics`), parsed.
    pub fn fleet(&self) -> Vec<Sample> {
        exposition::parse(&self.scrape("/metrics"))
    }

    /// The per-source view (`/metrics/sources`), parsed.
    pub fn sources(&self) -> Vec<Sample> {
        exposition::parse(&self.scrape("/metrics/sources"))
    }

    /// Every stderr line so far (with [`Builder::capture_stderr`]).
    pub fn log(&self) -> Vec<String> {
        self.captured().lines()
    }

    /// Every stderr line so far as one string.
    pub fn log_text(&self) -> String {
        self.captured().text()
    }

    /// Its whole stderr, once the process has ended and closed it (waits up to
    /// `limit`; after [`CollectorProcess::sigterm`] and an exit).
    pub fn log_to_end(&self, limit: Duration) -> String {
        self.captured()
            .to_end(limit)
            .iter()
            .map(|l| format!("{l}\n"))
            .collect()
    }

    /// Every stderr line so far, once one contains `needle` (waits up to 20 s).
    pub fn wait_log(&self, needle: &str) -> Vec<String> {
        self.captured().wait_for(needle, Duration::from_secs(20))
    }

    /// The first stderr line that contains `needle` (waits up to `limit`).
    pub fn wait_log_line(&self, needle: &str, limit: Duration) -> String {
        self.captured().wait_line(needle, limit)
    }

    fn captured(&self) -> &LineLog {
        self.stderr
            .as_ref()
            .expect("the collector's stderr is captured only with Builder::capture_stderr")
    }

    /// Sends SIGTERM (no wait).
    pub fn sigterm(&mut self) {
        self.process.sigterm();
    }

    /// Waits (up to `limit`) for the process to exit; panics if it does not.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        self.process.wait_exit(limit)
    }

    /// Sends SIGTERM and waits (up to 30 s) for the exit.
    pub fn terminate(mut self) -> ExitStatus {
        self.process.terminate(Duration::from_secs(30))
    }

    /// The resident set size, MiB.
    pub fn rss_mib(&self) -> f64 {
        rss_mib(self.pid())
    }
}

/// The resident set size of the running process `pid`, MiB (`VmRSS` of its
/// `/proc/PID/status`; panics when it cannot be read).
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"));
    kib / 1024.0
}

#[cfg(feature = "in-process")]
pub use in_process::InProcess;

#[cfg(feature = "in-process")]
mod in_process {
    use higgsmeter_collector::{Addresses, Collector, Config, Overrides, RunningCollector};

    /// A collector in this process on free ports, no state kept, shut down when
    /// dropped.
    #[derive(Debug)]
    pub struct InProcess {
        rt: tokio::runtime::Runtime,
        running: Option<RunningCollector>,
    }

    impl InProcess {
        /// Starts it on its own one-thread runtime: every listener on 127.0.0.1:0,
        /// `storage: none`.
        pub fn start() -> InProcess {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime for the in-process collector");
            let mut config = Config::default();
            config.apply(&Overrides {
                grpc: Some("127.0.0.1:0".into()),
                http: Some("127.0.0.1:0".into()),
                prometheus: Some("127.0.0.1:0".into()),
                storage: Some("none".into()),
                ..Default::default()
            });
            let plan = config.plan().expect("the default config plans");
            let running = rt
                .block_on(Collector::start(plan))
                .expect("start the in-process collector");
            InProcess {
                rt,
                running: Some(running),
            }
        }

        /// The running collector.
        pub fn running(&self) -> &RunningCollector {
            self.running
                .as_ref()
                .expect("the collector runs until shutdown")
        }

        /// Its listeners' addresses.
        pub fn addresses(&self) -> Addresses {
            self.running().addresses()
        }

        /// `value` with the default OTLP ports (`127.0.0.1:4317`, `:4318`) replaced by
        /// this collector's.
        pub fn redirect(&self, value: &str) -> String {
            let a = self.addresses();
            let grpc = a.grpc.expect("a gRPC listener");
            let http = a.http.expect("an HTTP listener");
            value
                .replace("127.0.0.1:4317", &grpc.to_string())
                .replace("127.0.0.1:4318", &http.to_string())
        }

        /// Shuts it down; whether it finished within its deadline.
        pub fn shutdown(mut self) -> bool {
            match self.running.take() {
                Some(running) => self.rt.block_on(running.shutdown()),
                None => true,
            }
        }
    }

    impl Drop for InProcess {
        fn drop(&mut self) {
            if let Some(running) = self.running.take() {
                self.rt.block_on(running.shutdown());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_startup_line_gives_the_three_addresses() {
        let got = parse_listening(
            "higgsmeter-collector listening grpc=127.0.0.1:1 http=127.0.0.1:2 prometheus=127.0.0.1:3\n",
        )
        .expect("a listening line");
        assert_eq!(
            got.map(|a| a.port()),
            [1, 2, 3],
            "grpc, http, prometheus in that order"
        );
        assert!(parse_listening("higgsmeter-collector listening grpc=127.0.0.1:1").is_none());
        assert!(parse_listening("something else").is_none());
    }
}
