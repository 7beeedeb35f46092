//! The allocator push: the counters as the seed's JSON, POSTed every push interval.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::counters::SessionCounters;
use crate::error::Error;

/// The push interval unless set: 60 s. A crash loses at most this much counting.
pub const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(60);

/// How long one POST may take unless set: 10 s.
pub const DEFAULT_PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The first retry's delay after a failed push unless set: 1 s, doubled at each
/// further failure up to the push interval.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);

/// How long the final push (on stop, SIGTERM) keeps retrying unless told: 5 s.
pub const DEFAULT_FINAL_PUSH_DEADLINE: Duration = Duration::from_secs(5);

/// Configures and starts a [`Pusher`]; from [`Pusher::builder`].
#[derive(Debug, Clone)]
#[must_use = "call start() to start pushing"]
pub struct PusherBuilder {
    url: String,
    interval: Duration,
    timeout: Duration,
    initial_backoff: Duration,
    max_backoff: Option<Duration>,
    headers: Vec<(String, String)>,
}

impl PusherBuilder {
    /// How often to push (default 60 s).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How long one POST may take, connection included (default 10 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Retry delays after a failed push: `initial` (default 1 s), doubled at each
    /// further failure up to `max` (default: the push interval).
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = Some(max);
        self
    }

    /// Adds a header to every push, e.g. `Authorization: Bearer …`.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Starts the push thread, which reads the counters from `counters` at each push.
    ///
    /// # Errors
    ///
    /// When the URL is not an absolute `http://` or `https://` URL, a header is not a valid HTTP
    /// header, a duration is 0, or the thread or its HTTP client cannot start.
    pub fn start<F>(self, counters: F) -> Result<Pusher, Error>
    where
        F: Fn() -> SessionCounters + Send + 'static,
    {
        let url = reqwest::Url::parse(&self.url).map_err(|e| Error::InvalidUrl {
            url: self.url.clone(),
            reason: e.to_string(),
        })?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(Error::InvalidUrl {
                url: self.url,
                reason: "write an http:// or https:// URL (https: verified against the \
                         system's CA certificates)"
                    .to_owned(),
            });
        }
        if self.interval.is_zero() || self.timeout.is_zero() || self.initial_backoff.is_zero() {
            return Err(Error::InvalidSetting {
                name: "push",
                reason: "the push interval, timeout and backoff must be more than 0",
            });
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &self.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes());
            let value = reqwest::header::HeaderValue::from_str(value);
            let (Ok(name), Ok(value)) = (name, value) else {
                return Err(Error::InvalidSetting {
                    name: "header",
                    reason: "a push header is not a valid HTTP header name and value",
                });
            };
            headers.insert(name, value);
        }
        let plan = Plan {
            url,
            interval: self.interval,
            timeout: self.timeout,
            initial_backoff: self.initial_backoff,
            max_backoff: self.max_backoff.unwrap_or(self.interval),
            headers,
        };
        let (stop_tx, stop_rx) = mpsc::channel::<Duration>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (done_tx, done_rx) = mpsc::channel::<bool>();
        let thread = std::thread::Builder::new()
            .name("higgsmeter-session-push".into())
            .spawn(move || {
                // The blocking client runs a runtime of its own: built here, never on
                // the caller's thread, which may be inside an async runtime.
                let client = match reqwest::blocking::Client::builder()
                    .default_headers(plan.headers.clone())
                    .build()
                {
                    Ok(client) => {
                        let _ = ready_tx.send(Ok(()));
                        client
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let delivered = run(&plan, &client, &counters, &stop_rx);
                drop(client);
                let _ = done_tx.send(delivered);
            })
            .map_err(Error::Spawn)?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(Error::Spawn(std::io::Error::other(format!(
                    "the HTTP client: {e}"
                ))));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Spawn(std::io::Error::other(
                    "the push thread ended before its HTTP client was built",
                )));
            }
        }
        Ok(Pusher {
            stop: Some(stop_tx),
            done: done_rx,
            thread: Some(thread),
        })
    }
}

struct Plan {
    url: reqwest::Url,
    interval: Duration,
    timeout: Duration,
    initial_backoff: Duration,
    max_backoff: Duration,
    headers: reqwest::header::HeaderMap,
}

/// POSTs one body; `Err` says why it was not accepted.
fn post(
    plan: &Plan,
    client: &reqwest::blocking::Client,
    body: String,
    timeout: Duration,
) -> Result<(), String> {
    let response = client
        .post(plan.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .timeout(timeout)
        .body(body)
        .send()
        .map_err(|e| format!("{e}"))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().unwrap_or_default();
    let text: String = text.chars().take(200).collect();
    Err(format!("HTTP {status}: {text}"))
}

/// The push loop; on stop, the final push. Returns whether the final push was delivered.
fn run<F>(
    plan: &Plan,
    client: &reqwest::blocking::Client,
    counters: &F,
    stop: &mpsc::Receiver<Duration>,
) -> bool
where
    F: Fn() -> SessionCounters,
{
    let mut next = Instant::now() + plan.interval;
    let mut backoff = plan.initial_backoff;
    let mut failures: u32 = 0;
    loop {
        let deadline = match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => None,
            Ok(deadline) => Some(deadline),
            Err(RecvTimeoutError::Disconnected) => Some(DEFAULT_FINAL_PUSH_DEADLINE),
        };
        if let Some(deadline) = deadline {
            return final_push(plan, client, counters, deadline);
        }
        // Only the latest counters matter: every attempt, retries included, sends the
        // counters as they are now; nothing older is kept.
        let body = counters().to_json();
        match post(plan, client, body, plan.timeout) {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(failures, "allocator push delivered again");
                }
                failures = 0;
                backoff = plan.initial_backoff;
                next = Instant::now() + plan.interval;
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(
                    url = %plan.url,
                    error = %e,
                    attempt = failures,
                    retry_in_ms = backoff.as_millis() as u64,
                    "allocator push failed; retrying with the latest counters"
                );
                next = Instant::now() + backoff;
                backoff = (backoff * 2).min(plan.max_backoff.max(plan.initial_backoff));
            }
        }
    }
}

/// Pushes the latest counters until delivered or `deadline` has passed.
fn final_push<F>(
    plan: &Plan,
    client: &reqwest::blocking::Client,
    counters: &F,
    deadline: Duration,
) -> bool
where
    F: Fn() -> SessionCounters,
{
    let end = Instant::now() + deadline;
    let mut backoff = plan.initial_backoff;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            tracing::error!(url = %plan.url, "the final allocator push was not delivered before its deadline; the allocator keeps the previous push");
            return false;
        }
        match post(plan, client, counters().to_json(), plan.timeout.min(left)) {
            Ok(()) => {
                tracing::info!(url = %plan.url, "final allocator push delivered");
                return true;
            }
            Err(e) => {
                tracing::warn!(url = %plan.url, error = %e, "the final allocator push failed; retrying until its deadline");
                std::thread::sleep(backoff.min(end.saturating_duration_since(Instant::now())));
                backoff = (backoff * 2).min(plan.max_backoff.max(plan.initial_backoff));
            }
        }
    }
}

/// POSTs the session counters, as the seed's JSON object, to the allocator: every push
/// interval, with retries, and once more when stopped.
///
/// - **Body**: [`SessionCounters::to_json`] — the seed's field names,
///   `session_started_at` in ISO 8601, `Content-Type: application/json`. Any 2xx is
///   delivery.
/// - **Retries**: a failed push (connection error, timeout, non-2xx) is retried after
///   1 s, 2 s, 4 s, … up to the push interval, until one is delivered; then the regular
///   interval resumes.
/// - **Backlog**: one slot. The counters are running totals, so the latest supersede
///   every earlier copy: each attempt, retries included, sends the counters as they are
///   at that moment, and no older body is queued. Memory stays constant however long
///   the allocator is down.
/// - **Stop** ([`stop`](Pusher::stop), dropping it, or SIGTERM in the binary): one final
///   push of the latest counters, retried until delivered or its deadline passes.
///
/// What a crash loses: the allocator holds the counters of the last delivered push, so
/// a crash (SIGKILL, power loss) loses at most one push interval of counting — more only
/// if pushes were already failing.
#[must_use = "pushing stops (with a final push) when this handle is dropped"]
pub struct Pusher {
    stop: Option<mpsc::Sender<Duration>>,
    done: mpsc::Receiver<bool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher").finish_non_exhaustive()
    }
}

impl Pusher {
    /// A builder pushing to `url` (an absolute `http://` URL) with the defaults: every
    /// 60 s, 10 s timeout, backoff from 1 s to the push interval.
    pub fn builder(url: impl Into<String>) -> PusherBuilder {
        PusherBuilder {
            url: url.into(),
            interval: DEFAULT_PUSH_INTERVAL,
            timeout: DEFAULT_PUSH_TIMEOUT,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: None,
            headers: Vec::new(),
        }
    }

    /// Stops pushing after one final push of the latest counters, retried for at most
    /// `deadline` (plus one request in flight when it is called). Returns whether the
    /// final push was delivered.
    pub fn stop(mut self, deadline: Duration) -> bool {
        self.finish(deadline)
    }

    fn finish(&mut self, deadline: Duration) -> bool {
        let Some(stop) = self.stop.take() else {
            return false;
        };
        let _ = stop.send(deadline);
        let delivered = self
            .done
            .recv_timeout(deadline + DEFAULT_PUSH_TIMEOUT + Duration::from_secs(1))
            .unwrap_or(false);
        if let Some(thread) = self.thread.take()
            && thread.is_finished()
        {
            let _ = thread.join();
        }
        delivered
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        self.finish(DEFAULT_FINAL_PUSH_DEADLINE);
    }
}
