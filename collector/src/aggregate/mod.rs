//! Aggregation: per-source series and reset-safe fleet aggregates (the heart).
//!
//! Every OTLP resource is a source. A counter's fleet series accumulates increments:
//! a cumulative point adds what it grew by since the source's previous point (all of
//! it when the source restarted: a new start time or a lower value), a delta point
//! adds itself. So a fleet counter never decreases and keeps a dead source's counted
//! contribution forever. Histograms do the same bucket by bucket, with equal bounds
//! only. Gauges are combined over live sources when rendered (sum, max, min, last) or
//! kept per source.

mod config;
pub(crate) mod naming;
mod store;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

pub use config::{AggregateConfig, GaugeAggregation, GaugeRule, SERIES_PER_MIB};
use store::Store;
pub(crate) use store::{CheckpointError, Outcome, RestoreCount, StateFile};
pub use wire::DecodeError;

use crate::self_metrics::{SelfMetrics, Transport};
use crate::views::{
    self,
    cluster::{ClusterReading, CollectorClock},
    exposition::{self, Format},
    jobs::{JobLedger, JobSummary},
    rows::{OtlpRows, Rows},
};

pub(crate) use crate::labels::{MetricKind, RefusalReason};
pub use crate::views::View;

/// The result of ingesting one export request, for the OTLP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestResult {
    /// Points read.
    pub received: u64,
    /// Points refused (OTLP `rejected_data_points`).
    pub rejected: u64,
    /// Why (the first refusal's message), empty when nothing was refused.
    pub message: String,
}

/// Why an OTLP/JSON body was refused as a whole ([`Aggregator::ingest_json`]).
#[derive(Debug, thiserror::Error)]
#[error("body is not OTLP/JSON ExportMetricsServiceRequest: {0}")]
pub struct JsonError(serde_json::Error);

/// A copy of the aggregation state taken by [`Aggregator::snapshot_state`].
pub struct StateSnapshot {
    copy: store::StoreCopy,
    /// Where the copy goes back to when the snapshot is dropped, emptied, for the
    /// next checkpoint to fill (its aggregator's [`Aggregator::spare_copy`]).
    spare: Arc<Mutex<Option<store::StoreCopy>>>,
    instance_id: String,
    origin_unix_nanos: u64,
    written_unix_nanos: u64,
}

impl std::fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSnapshot")
            .field("instance_id", &self.instance_id)
            .finish_non_exhaustive()
    }
}

impl Drop for StateSnapshot {
    fn drop(&mut self) {
        let mut copy = std::mem::replace(&mut self.copy, store::StoreCopy::empty());
        copy.clear();
        *self.spare.lock().unwrap_or_else(PoisonError::into_inner) = Some(copy);
    }
}

impl StateSnapshot {
    /// The state file's bytes (versioned, checksummed; what the collector writes to
    /// `extensions.file_storage.directory`), built without the aggregator's lock.
    pub fn encode(&self) -> Vec<u8> {
        self.copy.encode(
            &self.instance_id,
            self.origin_unix_nanos,
            self.written_unix_nanos,
        )
    }

    /// Writes the state file's bytes to `w` from its current position, a chunk at a
    /// time (the file is never whole in memory), then seeks back to fill in the
    /// header's length and checksum: what the collector's checkpoints do.
    pub fn write_to<W: std::io::Write + std::io::Seek>(&self, w: &mut W) -> std::io::Result<()> {
        self.copy.write_to(
            w,
            &self.instance_id,
            self.origin_unix_nanos,
            self.written_unix_nanos,
        )
    }
}

/// The shared aggregation state: ingest from any receiver, render for any exporter.
pub struct Aggregator {
    /// Read-locked by ingest (in parallel) and by the views; write-locked to create
    /// sources, metrics and series, to forget them, and to copy a checkpoint.
    store: RwLock<Store>,
    stats: Arc<SelfMetrics>,
    epoch: Instant,
    /// When the aggregation state began (unix ns): this process's start, or the
    /// restored state's. The start time of every fleet series pushed upstream.
    origin_unix_nanos: u64,
    /// When this process's aggregator was built (unix ns), at `epoch`.
    started_unix_nanos: u64,
    /// Whether the state was restored from a checkpoint (then `origin_unix_nanos` is
    /// the restored state's, earlier than `started_unix_nanos`).
    restored: bool,
    instance_id: String,
    /// Set at shutdown, before the final checkpoint: later requests are refused as
    /// unavailable (the sender retries against the next process), never half-counted.
    closed: AtomicBool,
    /// The last checkpoint's copy, emptied: the next one fills the same buffers, so
    /// checkpoints of a steady state neither allocate nor move the RSS (at 500,000
    /// series a fresh copy was 50 MB allocated and freed every interval).
    spare_copy: Arc<Mutex<Option<store::StoreCopy>>>,
    /// Every job's incarnations (`views::jobs`), read from the store every sweep and
    /// checkpointed with it.
    jobs: Mutex<JobLedger>,
}

/// The monotonic clock's value at this process's start: ages of restored state are
/// subtracted from it, so it starts far from 0.
const CLOCK_BASE: u64 = 1 << 60;

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A random-enough `service.instance.id` for this collector's own OTLP exports, so
/// that an upstream tells several collectors apart.
fn instance_id() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(unix_nanos());
    h.write_u32(std::process::id());
    format!("higgsmeter-collector-{:016x}", h.finish())
}

impl Aggregator {
    /// An aggregator of its own, outside a running collector (to embed the aggregation,
    /// or to benchmark it): validates `config` first.
    ///
    /// ```
    /// use higgsmeter_collector::{AggregateConfig, Aggregator, Transport, View};
    /// let aggregator = Aggregator::standalone(AggregateConfig::default())?;
    /// let result = aggregator.ingest_protobuf(&[], Transport::Http)?; // an empty request
    /// assert_eq!(result.received, 0);
    /// assert!(aggregator.render(View::Fleet).contains("higgsmeter_collector_sources 0"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn standalone(config: AggregateConfig) -> Result<Aggregator, crate::Error> {
        config
            .validate()
            .map_err(|(path, message)| crate::Error::Config { path, message })?;
        Ok(Aggregator::new(config, Arc::new(SelfMetrics::default())))
    }

    /// An empty aggregator (the configuration is assumed validated): a fresh state
    /// whose origin is now, with a new instance id.
    pub(crate) fn new(config: AggregateConfig, stats: Arc<SelfMetrics>) -> Aggregator {
        let origin = unix_nanos();
        let mut store = Store::new(config);
        store.set_baseline_before(origin);
        Aggregator {
            store: RwLock::new(store),
            stats,
            epoch: Instant::now(),
            origin_unix_nanos: origin,
            started_unix_nanos: origin,
            restored: false,
            instance_id: instance_id(),
            closed: AtomicBool::new(false),
            spare_copy: Arc::default(),
            jobs: Mutex::default(),
        }
    }

    /// An aggregator that continues a checkpointed state: its origin, instance id,
    /// sources, series and fleet accumulators. On an error nothing is half-restored:
    /// the caller starts without state.
    pub(crate) fn restored(
        config: AggregateConfig,
        stats: Arc<SelfMetrics>,
        state: &StateFile,
    ) -> Result<(Aggregator, RestoreCount), CheckpointError> {
        if state.instance_id.is_empty() || state.origin_unix_nanos == 0 {
            return Err(CheckpointError::Decode(
                "no instance id or origin time".into(),
            ));
        }
        let epoch = Instant::now();
        let started = unix_nanos();
        let mut store = Store::new(config);
        store.set_baseline_before(state.origin_unix_nanos);
        let elapsed = started.saturating_sub(state.written_unix_nanos);
        let count = store.restore(state, CLOCK_BASE, elapsed)?;
        let jobs = JobLedger::from_json(&state.jobs_json)
            .map_err(|e| CheckpointError::Decode(format!("the job ledger: {e}")))?;
        Ok((
            Aggregator {
                store: RwLock::new(store),
                stats,
                epoch,
                origin_unix_nanos: state.origin_unix_nanos,
                started_unix_nanos: started,
                restored: true,
                instance_id: state.instance_id.clone(),
                closed: AtomicBool::new(false),
                spare_copy: Arc::default(),
                jobs: Mutex::new(jobs),
            },
            count,
        ))
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(CLOCK_BASE)
    }

    /// A copy of the whole aggregation state, as a checkpoint holds it: the part of
    /// a checkpoint that holds the lock (to embed the aggregation, or measure it).
    pub fn snapshot_state(&self) -> StateSnapshot {
        let now = self.now();
        // Alone: a series' state and its fleet entry's are copied as of one moment.
        let mut copy = self
            .spare_copy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(store::StoreCopy::empty);
        self.write().checkpoint_into(now, &mut copy);
        copy.set_jobs_json(self.jobs().to_json());
        StateSnapshot {
            copy,
            spare: self.spare_copy.clone(),
            instance_id: self.instance_id.clone(),
            origin_unix_nanos: self.origin_unix_nanos,
            written_unix_nanos: unix_nanos(),
        }
    }

    /// Whether the fleet values can be served: not waiting for restored sources to
    /// report again (at most `stale_after` after a restore). Until then a restored
    /// counter may lag what Prometheus or an upstream last read, which they would
    /// take for a counter reset.
    pub fn ready(&self) -> bool {
        let now = self.now();
        self.read().ready(now)
    }

    /// Restored sources the views still wait for (see [`Aggregator::ready`]).
    pub(crate) fn awaiting(&self) -> usize {
        self.read().awaiting()
    }

    /// The `service.instance.id` of this collector's own OTLP pushes.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Refuses every later request (see [`Aggregator::accepting`]).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether requests are still taken: false once shutdown has begun its final
    /// checkpoint.
    pub(crate) fn accepting(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }

    /// The store, shared with ingest.
    fn read(&self) -> RwLockReadGuard<'_, Store> {
        self.store.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store, alone.
    fn write(&self) -> RwLockWriteGuard<'_, Store> {
        self.store.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads one OTLP export request; never fails as a whole (refused points are
    /// counted and reported).
    pub(crate) fn ingest(
        &self,
        req: &ExportMetricsServiceRequest,
        transport: Transport,
    ) -> IngestResult {
        use prost::Message as _;
        // A prost-encoded request is always well-formed.
        self.ingest_protobuf(&req.encode_to_vec(), transport)
            .unwrap_or_else(|e| IngestResult {
                received: 0,
                rejected: 0,
                message: e.to_string(),
            })
    }

    /// Reads one protobuf-encoded OTLP `ExportMetricsServiceRequest` (what the
    /// receivers do with every request). The whole request is validated first
    /// (outside the lock): a malformed one is refused as a whole and changes nothing;
    /// otherwise refused points are counted and reported in the result.
    pub fn ingest_protobuf(
        &self,
        bytes: &[u8],
        transport: Transport,
    ) -> Result<IngestResult, DecodeError> {
        wire::walk(bytes, &mut wire::Count::default())?;
        let mut outcome = Outcome::default();
        let now = self.now();
        wire::apply(&self.store, bytes, now, &mut outcome)?;
        crate::self_metrics::add(&self.stats.points_received[transport], outcome.received);
        for (reason, n) in RefusalReason::ALL.into_iter().zip(outcome.refused) {
            if n > 0 {
                crate::self_metrics::add(&self.stats.points_refused[reason], n);
            }
        }
        let rejected = outcome.refused_total();
        if rejected > 0 {
            tracing::debug!(rejected, message = ?outcome.first_message, "refused data points");
        }
        Ok(IngestResult {
            received: outcome.received,
            rejected,
            message: outcome.first_message.unwrap_or_default(),
        })
    }

    /// Reads one OTLP/JSON `ExportMetricsServiceRequest` (the HTTP receiver's
    /// `application/json`): parsed into the protobuf message, then read as
    /// [`Aggregator::ingest_protobuf`] reads bytes, by the same validating walker, so
    /// both encodings are refused and counted by one set of rules (ADR 0019 measures
    /// what the re-encoding costs next to the parse). A body that is not OTLP/JSON is
    /// refused as a whole and changes nothing.
    pub fn ingest_json(
        &self,
        bytes: &[u8],
        transport: Transport,
    ) -> Result<IngestResult, JsonError> {
        let request =
            serde_json::from_slice::<ExportMetricsServiceRequest>(bytes).map_err(JsonError)?;
        Ok(self.ingest(&request, transport))
    }

    /// Forgets series silent for longer than `forget_after`.
    pub(crate) fn sweep(&self) {
        let now = self.now();
        self.write().sweep(now);
        drop(self.update_jobs());
    }

    /// Reads the job sources into the job ledger.
    fn update_jobs(&self) -> std::sync::MutexGuard<'_, JobLedger> {
        let now = self.now();
        let readings = store::job_read(&self.read(), now);
        let mut jobs = self.jobs();
        jobs.update(&readings);
        jobs
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, JobLedger> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every job's goodput and badput (the job view, `/api/jobs`), as of now.
    pub(crate) fn job_view(&self) -> Vec<JobSummary> {
        self.update_jobs().view()
    }

    /// The rows of a view, read under the lock; encoders format them after it.
    pub(crate) fn rows(&self, view: View) -> Rows {
        let jobs = match view {
            View::Fleet => self.job_view(),
            View::Sources => Vec::new(),
        };
        let now = self.now();
        let store = self.read();
        let mut rows = store::rows(&store, view, now, &self.stats);
        store::job_rows(&store, &jobs, &mut rows);
        rows
    }

    /// The OTLP push's rows, read under the lock; `views::otlp` builds the request
    /// after it.
    pub(crate) fn otlp_rows(&self, include_sources: bool) -> OtlpRows {
        let now = self.now();
        let store = self.read();
        store::otlp_rows(&store, now, include_sources)
    }

    /// Every source's identity, state, seconds per state, GPU utilisation and
    /// staleness, read under the lock (the cluster page's model).
    pub(crate) fn cluster_reading(&self) -> ClusterReading {
        let now = self.now();
        let mut reading = store::cluster_read(&self.read(), now);
        reading.clock = CollectorClock {
            uptime: now.saturating_sub(CLOCK_BASE),
            started_unix_nanos: self.started_unix_nanos,
            counting_since_unix_nanos: self.origin_unix_nanos,
            restored: self.restored,
        };
        reading
    }

    /// Renders a view as Prometheus text exposition (format 0.0.4).
    pub fn render(&self, view: View) -> String {
        exposition::encode(self.rows(view), Format::Text)
    }

    /// Renders a view as OpenMetrics 1.0 text (what a scraper asking for
    /// `application/openmetrics-text` gets).
    pub fn render_openmetrics(&self, view: View) -> String {
        exposition::encode(self.rows(view), Format::OpenMetrics)
    }

    /// Renders a view as the Prometheus protobuf exposition: length-delimited
    /// `io.prometheus.client.MetricFamily` messages (what a scraper asking for
    /// `application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
    /// encoding=delimited` gets), the families and values of [`Aggregator::render`].
    pub fn render_protobuf(&self, view: View) -> Vec<u8> {
        views::exposition_proto::encode(self.rows(view))
    }

    /// The OTLP export of the fleet view (and of every live source's series when
    /// `include_sources`), with the number of points it carries: the rows are read under
    /// the lock, the request built after it.
    pub(crate) fn export_request(
        &self,
        include_sources: bool,
    ) -> (ExportMetricsServiceRequest, u64) {
        let rows = self.otlp_rows(include_sources);
        views::otlp::encode(
            &rows,
            self.origin_unix_nanos(),
            unix_nanos(),
            self.instance_id(),
        )
    }

    /// When the aggregation state began (unix ns): the start time of every fleet series.
    pub(crate) fn origin_unix_nanos(&self) -> u64 {
        self.origin_unix_nanos
    }

    /// Sources heard from within `stale_after`, and per-source series held.
    pub fn counts(&self) -> (usize, usize) {
        let now = self.now();
        let store = self.read();
        (store.live_sources(now), store.series_held())
    }
}

#[cfg(test)]
mod tests;
