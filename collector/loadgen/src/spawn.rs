//! A target process started by the generator, stopped when the run ends.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A spawned target; stopped (SIGTERM, then SIGKILL after 3 s) on [`Spawned::stop`] or drop.
#[derive(Debug)]
pub(crate) struct Spawned {
    child: Option<Child>,
    cmd: String,
}

impl Spawned {
    /// Starts `cmd` through `sh -c 'exec …'`, so the pid measured is the target's own.
    pub(crate) fn start(cmd: &str, log: Option<&str>) -> anyhow::Result<Self> {
        let (out, err) = match log {
            Some(path) => {
                let f = std::fs::File::create(path)
                    .with_context(|| format!("creating the spawn log {path}"))?;
                let g = f.try_clone().context("duplicating the spawn log handle")?;
                (Stdio::from(f), Stdio::from(g))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {cmd}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        Ok(Self {
            child: Some(child),
            cmd: cmd.to_owned(),
        })
    }

    /// The target's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits until `endpoint`'s host:port accepts TCP connections.
    pub(crate) async fn wait_ready(&self, endpoint: &str, timeout: Duration) -> anyhow::Result<()> {
        let uri: hyper::Uri = endpoint
            .parse()
            .with_context(|| format!("invalid endpoint {endpoint:?}"))?;
        let host = uri.host().context("the endpoint has no host")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(80);
        let deadline = Instant::now() + timeout;
        loop {
            if tokio::net::TcpStream::connect((host, port)).await.is_ok() {
                return Ok(());
            }
            if !self.running() {
                bail!(
                    "{:?} exited before listening on {host}:{port}; see --spawn-log",
                    self.cmd
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{:?} did not listen on {host}:{port} within {timeout:?}",
                    self.cmd
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .map(|s| {
                // State is the first field after the command name; Z means it exited.
                s.rfind(')')
                    .and_then(|i| s.get(i + 1..))
                    .and_then(|r| r.split_whitespace().next())
                    .is_some_and(|st| st != "Z")
            })
            .unwrap_or(false)
    }

    /// Stops the target: SIGTERM, then SIGKILL if it is still there after 3 s.
    pub(crate) fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
