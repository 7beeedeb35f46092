//! Child processes: a guard that kills and reaps its child on drop, a stream's lines
//! read on a thread of their own, free ports, and a server started on one until it
//! answers.

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use crate::wait::Wait;

/// A child process that is killed and reaped when dropped (also while unwinding).
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    child: Child,
}

impl ChildGuard {
    /// Spawns `command` and guards it; `name` appears in messages. Panics when it
    /// cannot start.
    pub fn spawn(name: impl Into<String>, command: &mut Command) -> ChildGuard {
        let name = name.into();
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({command:?}): {e}"));
        ChildGuard { name, child }
    }

    /// Guards a child started elsewhere.
    pub fn new(name: impl Into<String>, child: Child) -> ChildGuard {
        ChildGuard {
            name: name.into(),
            child,
        }
    }

    /// The child process.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its exit status if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("wait for {}: {e}", self.name))
    }

    /// Waits up to `limit` (polling every 10 ms) for the child to exit on its own;
    /// `None` if it still runs.
    pub fn wait_exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        Wait::up_to(limit)
            .every(Duration::from_millis(10))
            .until(|| self.try_wait().ok_or(()))
            .ok()
    }

    /// Waits up to `limit` for the child to exit on its own; panics if it does not.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        self.wait_exit_within(limit)
            .unwrap_or_else(|| panic!("{} did not exit within {limit:?}", self.name))
    }

    /// Sends SIGTERM (with `kill`, to this child's own process id).
    pub fn sigterm(&mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("run kill -TERM for {}: {e}", self.name));
        assert!(status.success(), "kill -TERM {}: {status}", self.name);
    }

    /// SIGTERM, then waits up to `limit` for the exit; panics if it does not exit.
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        self.sigterm();
        self.wait_exit(limit)
    }

    /// Kills the child now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Reads a stream's lines (a child's stdout or stderr) on a thread of its own and
/// hands them over a channel, which disconnects at the end of the stream.
pub fn line_reader(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (up to `limit`) for a line satisfying `pred` and returns it; panics, naming
/// `what`, when none comes or the stream ends first.
pub fn wait_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("no {what} within {limit:?}"),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the process closed its output before {what}")
            }
        }
    }
}

/// The lines of a stream (a child's stderr), collected on a thread of their own as
/// they come, optionally echoed to the test's stderr with a prefix.
#[derive(Debug, Clone)]
pub struct LineLog {
    lines: Arc<Mutex<Vec<String>>>,
    ended: Arc<AtomicBool>,
}

impl LineLog {
    /// Starts collecting `stream`'s lines; `echo`: each is also printed to stderr after
    /// this prefix.
    pub fn capture(stream: impl std::io::Read + Send + 'static, echo: Option<&str>) -> LineLog {
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let ended = Arc::new(AtomicBool::new(false));
        let sink = Arc::clone(&lines);
        let end = Arc::clone(&ended);
        let echo = echo.map(str::to_owned);
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Some(prefix) = &echo {
                    eprintln!("{prefix}{line}");
                }
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
            end.store(true, Ordering::Release);
        });
        LineLog { lines, ended }
    }

    /// Every line, once the stream has ended (the process exited and closed it); waits
    /// up to `limit`, then returns what came.
    pub fn to_end(&self, limit: Duration) -> Vec<String> {
        let _ = Wait::up_to(limit)
            .every(Duration::from_millis(10))
            .until(|| self.ended.load(Ordering::Acquire).then_some(()).ok_or(()));
        self.lines()
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every line so far, one string with a newline after each line.
    pub fn text(&self) -> String {
        self.lines().iter().map(|l| format!("{l}\n")).collect()
    }

    /// Every line so far, once one contains `needle` (waits up to `limit`; panics
    /// with the lines otherwise).
    pub fn wait_for(&self, needle: &str, limit: Duration) -> Vec<String> {
        Wait::up_to(limit)
            .every(Duration::from_millis(20))
            .until(|| {
                let lines = self.lines();
                if lines.iter().any(|l| l.contains(needle)) {
                    Ok(lines)
                } else {
                    Err(lines)
                }
            })
            .unwrap_or_else(|lines| {
                panic!(
                    "no line with `{needle}` within {limit:?}; the lines:\n{}",
                    lines.join("\n")
                )
            })
    }

    /// The first line that contains `needle` (waits up to `limit`; panics otherwise).
    pub fn wait_line(&self, needle: &str, limit: Duration) -> String {
        self.wait_for(needle, limit)
            .into_iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with `{needle}`"))
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: a starter retries on a race).
pub fn free_port() -> u16 {
    free_addr().port()
}

/// A free 127.0.0.1 address ([`free_port`]), on a port outside the kernel's ephemeral
/// range where there is room (below it, as Linux's default 32768-60999 leaves).
///
/// The kernel gives ports of that range to outgoing connections: a port taken from it
/// and bound again later (a collector restarted on its address) may meanwhile be the
/// source port of some connection (one to it included: with nothing listening, a
/// connect to a port of the range can pick that very port and connect to itself), and
/// stays taken through its `TIME_WAIT`. Ports outside it are only ever bound on purpose.
pub fn free_addr() -> SocketAddr {
    use std::hash::{BuildHasher as _, Hasher as _};
    if let Some((from, to)) = outside_ephemeral_range() {
        let random = std::collections::hash_map::RandomState::new();
        for attempt in 0..200u64 {
            let mut h = random.build_hasher();
            h.write_u64(attempt);
            let port = from + u16::try_from(h.finish() % u64::from(to - from)).unwrap_or(0);
            if let Ok(addr) = TcpListener::bind(("127.0.0.1", port)).and_then(|l| l.local_addr()) {
                return addr;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0 for a free port")
}

/// The kernel's ephemeral port range (Linux's default where it cannot be read).
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut it = text.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// Ports `[from, to)` outside the ephemeral range, where it leaves room for them.
fn outside_ephemeral_range() -> Option<(u16, u16)> {
    let (low, high) = ephemeral_range();
    if low > 11_000 {
        Some((10_000, low))
    } else if high < 64_000 {
        Some((high + 1, u16::MAX))
    } else {
        None
    }
}

/// A server process on a free 127.0.0.1 port, started until an HTTP path answers 200;
/// killed on drop. Its stdout and stderr go to `NAME-ATTEMPT.log` in its directory.
#[derive(Debug)]
pub struct Server {
    /// The process.
    pub process: ChildGuard,
    /// Its HTTP address.
    pub addr: SocketAddr,
    name: String,
    dir: PathBuf,
}

impl Server {
    /// Starts `binary` with `args(addr)` on a free port (three tries, for a port taken
    /// in between) and waits up to 30 s until `GET ready_path` answers 200. Panics
    /// with the logs when it does not start; a missing binary's message names the
    /// package that installs it (`install`).
    pub fn start(
        name: &str,
        binary: &Path,
        install: &str,
        dir: &Path,
        ready_path: &str,
        args: impl Fn(SocketAddr) -> Vec<String>,
    ) -> Server {
        assert!(
            binary.exists(),
            "{name}: {} is missing: {install}",
            binary.display()
        );
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut failures = Vec::new();
        for attempt in 0..3 {
            let addr = free_addr();
            let log_path = dir.join(format!("{name}-{attempt}.log"));
            let log = std::fs::File::create(&log_path)
                .unwrap_or_else(|e| panic!("create {}: {e}", log_path.display()));
            let err = log
                .try_clone()
                .unwrap_or_else(|e| panic!("open {} twice: {e}", log_path.display()));
            let mut process = ChildGuard::spawn(
                name,
                Command::new(binary)
                    .args(args(addr))
                    .stdin(Stdio::null())
                    .stdout(log)
                    .stderr(err),
            );
            let ready = Wait::up_to(Duration::from_secs(30))
                .every(Duration::from_millis(100))
                .until(|| {
                    if let Some(status) = process.try_wait() {
                        return Ok(Err(format!("{name} exited: {status}")));
                    }
                    match crate::http::get(addr, ready_path) {
                        Ok((200, _)) => Ok(Ok(())),
                        _ => Err(()),
                    }
                })
                .unwrap_or_else(|()| Err(format!("{name} at {addr} not ready after 30 s")));
            match ready {
                Ok(()) => {
                    return Server {
                        process,
                        addr,
                        name: name.to_owned(),
                        dir: dir.to_path_buf(),
                    };
                }
                Err(why) => {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    failures.push(format!("{why}\n{log}"));
                }
            }
        }
        panic!(
            "{name} did not start (logs in {}):\n{}",
            dir.display(),
            failures.join("\n")
        )
    }

    /// What it logged, over every start attempt.
    pub fn log(&self) -> String {
        (0..3)
            .filter_map(|i| {
                std::fs::read_to_string(self.dir.join(format!("{}-{i}.log", self.name))).ok()
            })
            .collect()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.process.try_wait().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_bindable_and_outside_the_ephemeral_range() {
        let (low, high) = ephemeral_range();
        // Where the range leaves no room (a machine configured so), port 0's.
        let room = outside_ephemeral_range().is_some();
        for _ in 0..20 {
            let addr = free_addr();
            assert!(
                !room || addr.port() < low || addr.port() > high,
                "{addr} is in the ephemeral range {low}-{high}"
            );
            TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        }
    }
}
