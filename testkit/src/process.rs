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

/// A free 127.0.0.1 address ([`free_port`]).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0 for a free port")
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
