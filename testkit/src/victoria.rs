//! VictoriaMetrics single node and vmalert (Debian's `victoria-metrics` package:
//! `/usr/bin/victoria-metrics` and `/usr/bin/vmalert`, or `$VICTORIA_METRICS` and
//! `$VMALERT`), each on a free 127.0.0.1 port, started until `/health` answers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::process::Server;
use crate::prometheus::PromClient;

const INSTALL: &str = "install Debian's victoria-metrics (bash .ci/setup)";

/// `$var`, else `default`.
fn binary(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| default.into(), PathBuf::from)
}

/// The VictoriaMetrics binary: `$VICTORIA_METRICS`, else `/usr/bin/victoria-metrics`.
pub fn victoria_metrics_binary() -> PathBuf {
    binary("VICTORIA_METRICS", "/usr/bin/victoria-metrics")
}

/// The vmalert binary: `$VMALERT`, else `/usr/bin/vmalert`.
pub fn vmalert_binary() -> PathBuf {
    binary("VMALERT", "/usr/bin/vmalert")
}

/// A VictoriaMetrics single node; killed on drop.
#[derive(Debug)]
pub struct VictoriaMetrics {
    server: Server,
    /// Its HTTP address (queries, and remote write on `/api/v1/write`).
    pub addr: SocketAddr,
}

impl VictoriaMetrics {
    /// Starts it with its data in `dir/vm-data` and `flags` after the listen address
    /// and storage flags; logs in `dir/victoria-metrics-N.log`.
    pub fn start(dir: &Path, flags: &[&str]) -> VictoriaMetrics {
        let data = dir.join("vm-data");
        let server = Server::start(
            "victoria-metrics",
            &victoria_metrics_binary(),
            INSTALL,
            dir,
            "/health",
            |addr| {
                let mut args = vec![
                    format!("-httpListenAddr={addr}"),
                    format!("-storageDataPath={}", data.display()),
                ];
                args.extend(flags.iter().map(|f| (*f).to_owned()));
                args
            },
        );
        VictoriaMetrics {
            addr: server.addr,
            server,
        }
    }

    /// Its Prometheus-compatible query API.
    pub fn client(&self) -> PromClient {
        PromClient { addr: self.addr }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        self.server.log()
    }
}

/// vmalert; killed on drop.
#[derive(Debug)]
pub struct Vmalert {
    server: Server,
    /// Its HTTP address (`/api/v1/rules`, `/api/v1/alerts`).
    pub addr: SocketAddr,
}

impl Vmalert {
    /// Starts it with `-rule=` each of `rules` and `flags` (datasource, remote write,
    /// notifier, intervals) after its listen address; logs in `dir/vmalert-N.log`.
    pub fn start(dir: &Path, rules: &[PathBuf], flags: &[String]) -> Vmalert {
        let server = Server::start(
            "vmalert",
            &vmalert_binary(),
            INSTALL,
            dir,
            "/health",
            |addr| {
                let mut args: Vec<String> = rules
                    .iter()
                    .map(|f| format!("-rule={}", f.display()))
                    .collect();
                args.push(format!("-httpListenAddr={addr}"));
                args.extend(flags.iter().cloned());
                args
            },
        );
        Vmalert {
            addr: server.addr,
            server,
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        self.server.log()
    }
}
