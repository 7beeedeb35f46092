//! The push driver of every exporter that sends to an upstream (OTLP gRPC and HTTP,
//! Prometheus remote write, traces), after the OpenTelemetry Collector's
//! `exporterhelper`: one typed send result, one backoff, one way of counting and
//! logging, and for the exporters that push a view periodically one bounded queue.
//!
//! - A send either succeeds ([`Accepted`], maybe with a partial success's rejected
//!   part), should be tried again ([`Failure::Retry`]: 5xx, 429, `UNAVAILABLE`,
//!   `RESOURCE_EXHAUSTED`, connection errors, timeouts; after the upstream's
//!   `Retry-After` or `RetryInfo` when it gave one, else the exponential backoff), or
//!   was refused for good ([`Failure::Refused`]: any other 4xx, `INVALID_ARGUMENT`,
//!   ...). What is refused, or rejected in a partial success, is dropped and counted
//!   with its [`DropReason`] in `higgsmeter_collector_export_dropped_points_total`
//!   (spans: `higgsmeter_collector_spans_exported_total{outcome}`); it is never
//!   retried.
//! - [`run_periodic`] reads the exporter's view every `interval` into a bounded queue
//!   (the oldest reading dropped and counted when full) and sends its front; reading
//!   runs off the async workers and sending never holds the aggregator, so ingest
//!   never waits for the upstream. On shutdown the newest view is sent once more.
//! - [`deliver`] sends one batch until it is taken or refused (the traces pipeline,
//!   whose batches are not superseded by the next reading).
//!
//! An exporter keeps only what it reads and how it encodes ([`Push`]); the clients
//! (TLS, headers, compression, timeouts) are `client.rs`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::settings::RetryOnFailure;
pub(crate) use crate::self_metrics::DropReason;
pub(crate) use crate::self_metrics::Signal;
use crate::self_metrics::{ExporterStats, SpanOutcome, add};

/// An upstream took a request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// Items (points, spans) the upstream rejected in a partial success: dropped,
    /// counted, never retried.
    pub(crate) rejected: u64,
    /// The upstream's word on them.
    pub(crate) message: String,
}

/// Why a send did not go through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Worth sending again: not before `after` when the upstream said so
    /// (`Retry-After`, gRPC `RetryInfo`), else after the backoff.
    Retry {
        /// What happened, for the log.
        error: String,
        /// The upstream's own delay.
        after: Option<Duration>,
    },
    /// Refused for good: the request is dropped and counted, never retried.
    Refused {
        /// What the upstream said, for the log.
        error: String,
    },
}

/// What one send came to.
pub(crate) type SendResult = Result<Accepted, Failure>;

/// Exponential backoff between attempts: `initial_interval`, doubling up to
/// `max_interval`; an upstream's own delay wins.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// The backoff of `retry_on_failure`.
    pub(crate) fn new(retry: &RetryOnFailure) -> Backoff {
        Backoff {
            initial: retry.initial_interval,
            max: retry.max_interval.max(retry.initial_interval),
            next: retry.initial_interval,
        }
    }

    /// After a success: the next failure waits `initial_interval` again.
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }

    /// How long to wait after a failure (`after`: the upstream's own delay).
    pub(crate) fn delay(&mut self, after: Option<Duration>) -> Duration {
        let wait = after.unwrap_or(self.next);
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

/// One exporter's counters and logs: a failure is logged when the upstream starts
/// failing (or refusing) and again when it takes requests again, not per attempt;
/// partial successes at most once a minute.
pub(crate) struct Outcomes {
    signal: Signal,
    endpoint: String,
    stats: Arc<ExporterStats>,
    failing: bool,
    refusing: bool,
    last_partial_log: Option<std::time::Instant>,
}

impl Outcomes {
    /// The outcomes of the exporter whose counters are `stats` pushing `signal` to
    /// `endpoint`.
    pub(crate) fn new(signal: Signal, endpoint: &str, stats: Arc<ExporterStats>) -> Outcomes {
        Outcomes {
            signal,
            endpoint: endpoint.to_owned(),
            stats,
            failing: false,
            refusing: false,
            last_partial_log: None,
        }
    }

    /// The exporter's key (`type[/name]`), for logs.
    pub(crate) fn name(&self) -> &str {
        &self.stats.name
    }

    /// Counts `n` items dropped for `reason`.
    pub(crate) fn dropped(&self, reason: DropReason, n: u64) {
        if n == 0 {
            return;
        }
        match self.signal {
            Signal::Metrics => {
                add(&self.stats.dropped[reason], n);
            }
            Signal::Traces => {
                let outcome = if reason == DropReason::Rejected {
                    SpanOutcome::Rejected
                } else {
                    SpanOutcome::Dropped
                };
                add(&self.stats.spans[outcome], n);
            }
        }
    }

    /// Counts one request sent, by whether it went through.
    fn request(&self, ok: bool) {
        if self.signal == Signal::Metrics {
            let counter = if ok {
                &self.stats.exports_ok
            } else {
                &self.stats.exports_failed
            };
            add(counter, 1);
        }
    }

    /// The self-metric that counts what is dropped for `reason`, for the logs.
    fn counted_in(&self, reason: DropReason) -> String {
        match self.signal {
            Signal::Metrics => format!(
                "higgsmeter_collector_export_dropped_points_total{{reason=\"{}\"}}",
                reason.as_str()
            ),
            Signal::Traces => format!(
                "higgsmeter_collector_spans_exported_total{{outcome=\"{}\"}}",
                if reason == DropReason::Rejected {
                    "rejected"
                } else {
                    "dropped"
                }
            ),
        }
    }

    /// Sets the queue depth gauge.
    fn depth(&self, n: usize) {
        self.stats.queue_depth.store(n as u64, Ordering::Relaxed);
    }

    /// Counts and logs one send's result for a request of `items` points (or spans);
    /// what the caller should do next with the request.
    pub(crate) fn record(&mut self, result: &SendResult, items: u64, what: &str) -> Next {
        let stats = self.stats.clone();
        let name = stats.name.as_str();
        match result {
            Ok(accepted) => {
                self.request(true);
                if self.failing || self.refusing {
                    tracing::info!(exporter = name, endpoint = %self.endpoint, "the upstream takes {what} again");
                    self.failing = false;
                    self.refusing = false;
                }
                if accepted.rejected > 0 {
                    self.dropped(DropReason::Rejected, accepted.rejected);
                    if self
                        .last_partial_log
                        .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
                    {
                        self.last_partial_log = Some(std::time::Instant::now());
                        let counted = self.counted_in(DropReason::Rejected);
                        tracing::warn!(exporter = name, endpoint = %self.endpoint, rejected = accepted.rejected, message = %accepted.message, "the upstream rejected part of the {what} (partial success); dropped, counted in {counted}, logged at most once a minute");
                    }
                }
                Next::Done
            }
            Err(Failure::Refused { error }) => {
                self.request(false);
                self.dropped(DropReason::Refused, items);
                if !self.refusing {
                    let counted = self.counted_in(DropReason::Refused);
                    tracing::warn!(exporter = name, endpoint = %self.endpoint, %error, "the upstream refused the {what}; dropped, not retried (counted in {counted}; logged again once it takes requests)");
                    self.refusing = true;
                }
                Next::Done
            }
            Err(Failure::Retry { error, after }) => {
                self.request(false);
                if !self.failing {
                    tracing::warn!(exporter = name, endpoint = %self.endpoint, %error, retry_after = ?after, items, "sending the {what} failed; retrying with backoff (logged again once it succeeds)");
                    self.failing = true;
                }
                Next::Retry(*after)
            }
        }
    }
}

/// What to do with a request after a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// It is settled (taken, partly rejected, or refused): on to the next one.
    Done,
    /// Send it again, after the upstream's delay if it gave one, else the backoff.
    Retry(Option<Duration>),
}

/// One encoded request and how many points it carries.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    /// The request as sent.
    pub(crate) body: Bytes,
    /// Points (or samples) it carries: what is counted if it is dropped.
    pub(crate) points: u64,
}

/// One reading of an exporter's view.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// The requests to send, in order.
    pub(crate) batches: Vec<Batch>,
    /// Points that could not be encoded (counted as dropped, reason `encode`).
    pub(crate) lost: u64,
}

/// A periodic exporter: what it reads and how it encodes, and its client.
pub(crate) trait Push: Send + Sync + 'static {
    /// Reads the view now and encodes it; `None` when there is nothing to send yet
    /// (right after a restore, until the sources reported again). Runs off the async
    /// workers.
    fn read(&self) -> Option<Reading>;
    /// Sends one request.
    fn send(&self, body: Bytes) -> impl Future<Output = SendResult> + Send;
}

/// How often a periodic exporter reads, how much it queues, how it retries.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    /// How often the view is read.
    pub(crate) interval: Duration,
    /// Readings held while the upstream is down or slow.
    pub(crate) queue_size: usize,
    /// The backoff.
    pub(crate) retry: RetryOnFailure,
}

/// Reads `push`'s view on the blocking pool; `None` if there is nothing to send or
/// the reading task failed.
async fn read<P: Push>(push: &Arc<P>) -> Option<Reading> {
    let push = push.clone();
    tokio::task::spawn_blocking(move || push.read())
        .await
        .ok()
        .flatten()
}

/// Pushes `push`'s view every `schedule.interval` until `cancel`, then sends the newest
/// view once more (older queued readings are left out: the views are cumulative, the
/// newest holds them).
pub(crate) async fn run_periodic<P: Push>(
    push: Arc<P>,
    schedule: Schedule,
    mut outcomes: Outcomes,
    cancel: CancellationToken,
) {
    let mut queue: VecDeque<VecDeque<Batch>> = VecDeque::new();
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    ticker.tick().await;
    let mut backoff = Backoff::new(&schedule.retry);
    let mut next_attempt = Instant::now();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {
                if let Some(reading) = read(&push).await {
                    outcomes.dropped(DropReason::Encode, reading.lost);
                    if !reading.batches.is_empty() {
                        if queue.len() >= schedule.queue_size
                            && let Some(oldest) = queue.pop_front()
                        {
                            outcomes.dropped(DropReason::QueueFull, oldest.iter().map(|b| b.points).sum());
                        }
                        queue.push_back(reading.batches.into());
                    }
                }
                outcomes.depth(queue.len());
            }
            _ = tokio::time::sleep_until(next_attempt), if !queue.is_empty() => {
                let Some(batch) = queue.front().and_then(|r| r.front()).cloned() else {
                    queue.pop_front();
                    continue;
                };
                let result = push.send(batch.body).await;
                match outcomes.record(&result, batch.points, "request") {
                    Next::Done => {
                        if result.is_ok() {
                            backoff.reset();
                        }
                        next_attempt = Instant::now();
                        if let Some(front) = queue.front_mut() {
                            front.pop_front();
                            if front.is_empty() {
                                queue.pop_front();
                            }
                        }
                    }
                    Next::Retry(after) => {
                        next_attempt = Instant::now() + backoff.delay(after);
                    }
                }
                outcomes.depth(queue.len());
            }
        }
    }
    queue.clear();
    outcomes.depth(0);
    let Some(reading) = read(&push).await else {
        return;
    };
    outcomes.dropped(DropReason::Encode, reading.lost);
    let mut batches = reading.batches.into_iter();
    while let Some(batch) = batches.next() {
        let result = push.send(batch.body).await;
        if outcomes.record(&result, batch.points, "final flush") == Next::Done {
            continue;
        }
        // No retry past the shutdown: this batch and the rest are dropped.
        let rest: u64 = batches.by_ref().map(|b| b.points).sum();
        outcomes.dropped(DropReason::Shutdown, batch.points + rest);
        tracing::warn!(
            exporter = outcomes.name(),
            "the final flush on shutdown failed; its points are counted as dropped (reason=\"shutdown\")"
        );
        return;
    }
}

/// Sends `body` until the upstream takes or refuses it: retried with `backoff` (or
/// the upstream's delay) for as long as it takes; the caller bounds it (at shutdown
/// it is aborted). Counted and logged in `outcomes`.
pub(crate) async fn deliver<F, Fut>(
    mut send: F,
    items: u64,
    what: &str,
    backoff: &mut Backoff,
    outcomes: &mut Outcomes,
) -> SendResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = SendResult>,
{
    loop {
        let result = send().await;
        match outcomes.record(&result, items, what) {
            Next::Done => {
                if result.is_ok() {
                    backoff.reset();
                }
                return result;
            }
            Next::Retry(after) => tokio::time::sleep(backoff.delay(after)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_the_upstream_delay_wins() {
        let mut b = Backoff::new(&RetryOnFailure {
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_millis(350),
        });
        let ms = Duration::from_millis;
        assert_eq!(b.delay(None), ms(100));
        assert_eq!(b.delay(None), ms(200));
        assert_eq!(b.delay(Some(ms(7))), ms(7));
        assert_eq!(b.delay(None), ms(350));
        b.reset();
        assert_eq!(b.delay(None), ms(100));
    }
}
