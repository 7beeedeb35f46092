//! The serving engine's catalog families: typed recorders and the step/transfer spans.
//!
//! Every instrument is built once from its `higgsmeter-catalog` family (name, help,
//! unit, and the catalog's exact histogram buckets), and every recorder binds its label
//! values once, checked against the family's labels: a wrong or missing label is an
//! error when the recorder is made, never at a call. Recording is then one call into
//! the OpenTelemetry instrument with a pre-built attribute set (no allocation).
//!
//! ```
//! use higgsmeter::{EngineRecorders, catalog};
//! use std::time::Duration;
//!
//! let meter = opentelemetry::global::meter("my-engine");
//! let engine = EngineRecorders::new(&meter);
//! let step = engine.step("decoder", "prefill")?;
//! step.record(Duration::from_millis(12), Some(32));
//! let kv = engine.kv_pages("decoder", "gpu0")?;
//! kv.set(4096, 1200, 300);
//! // The generic, checked form: the labels must be exactly the family's.
//! let err = engine.counter(&catalog::MSTAR_TRANSFERS_TOTAL, &[("src", "a")]).unwrap_err();
//! assert!(err.to_string().contains("dst"));
//! # Ok::<(), higgsmeter::Error>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter};

use higgsmeter_catalog::{
    CONDUCTOR_REQUEST_STATES, Family, Kind, MSTAR_BATCH_SIZE, MSTAR_COMPONENT_IN_FLIGHT,
    MSTAR_COMPONENT_PENDING_STEPS, MSTAR_CONDUCTOR_REQUESTS, MSTAR_KV_PAGES_CACHED,
    MSTAR_KV_PAGES_TOTAL, MSTAR_KV_PAGES_USED, MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL,
    MSTAR_PREFIX_CACHE_QUERY_TOKENS_TOTAL, MSTAR_STEP_SECONDS, MSTAR_TRANSFER_BYTES_TOTAL,
    MSTAR_TRANSFER_SECONDS, MSTAR_TRANSFERS_TOTAL, STATUS_FAMILIES,
};

use crate::error::Error;

/// The target of step spans ([`step_span`]).
pub const STEP_SPAN_TARGET: &str = "higgsmeter::step";
/// The target of transfer spans ([`transfer_span`]).
pub const TRANSFER_SPAN_TARGET: &str = "higgsmeter::transfer";

/// A step span: from its creation to its close, one engine step of `component` on
/// `graph_walk`. When it closes, the [`ActivityLayer`](crate::ActivityLayer) records its
/// wall duration into `mstar_step_seconds` and its batch size (given here, or recorded
/// later with `span.record("batch_size", n)`) into `mstar_batch_size`.
///
/// ```
/// # fn forward() {}
/// let span = higgsmeter::step_span("decoder", "prefill", None);
/// forward();
/// span.record("batch_size", 32u64);
/// drop(span); // recorded here
/// ```
#[inline]
pub fn step_span(component: &str, graph_walk: &str, batch_size: Option<u64>) -> tracing::Span {
    tracing::span!(
        target: "higgsmeter::step",
        tracing::Level::INFO,
        "mstar_step",
        component = component,
        graph_walk = graph_walk,
        // As i64: a trace backend gets a number (tracing-opentelemetry records u64 as text).
        batch_size = batch_size.map(saturating_i64),
    )
}

/// A transfer span: the consumer reading one edge's tensors from `src` to `dst` over
/// `transport`. When it closes, its duration goes to `mstar_transfer_seconds`, one to
/// `mstar_transfers_total` and its `bytes` (given here or recorded later) to
/// `mstar_transfer_bytes_total`. Use [`TRANSFER_API_SERVER`](crate::catalog::TRANSFER_API_SERVER)
/// for the API server's side of an edge.
#[inline]
pub fn transfer_span(src: &str, dst: &str, transport: &str, bytes: Option<u64>) -> tracing::Span {
    tracing::span!(
        target: "higgsmeter::transfer",
        tracing::Level::INFO,
        "mstar_transfer",
        src = src,
        dst = dst,
        transport = transport,
        bytes = bytes.map(saturating_i64),
    )
}

#[inline]
fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every engine instrument, built once from the catalog.
#[derive(Debug, Clone)]
pub struct EngineRecorders {
    step_seconds: Histogram<f64>,
    batch_size: Histogram<f64>,
    transfer_seconds: Histogram<f64>,
    transfers: Counter<u64>,
    transfer_bytes: Counter<u64>,
    hit_tokens: Counter<u64>,
    query_tokens: Counter<u64>,
    kv_total: Gauge<i64>,
    kv_used: Gauge<i64>,
    kv_cached: Gauge<i64>,
    pending_steps: Gauge<i64>,
    in_flight: Gauge<i64>,
    conductor_requests: Gauge<i64>,
}

fn histogram(meter: &Meter, f: &'static Family) -> Histogram<f64> {
    meter
        .f64_histogram(f.name)
        .with_description(f.help)
        .with_unit(f.unit)
        .with_boundaries(f.buckets.to_vec())
        .build()
}

fn counter(meter: &Meter, f: &'static Family) -> Counter<u64> {
    meter
        .u64_counter(f.name)
        .with_description(f.help)
        .with_unit(f.unit)
        .build()
}

fn gauge(meter: &Meter, f: &'static Family) -> Gauge<i64> {
    meter
        .i64_gauge(f.name)
        .with_description(f.help)
        .with_unit(f.unit)
        .build()
}

/// Checks `labels` are exactly `family`'s label keys (any order) with non-empty values,
/// and returns them in the family's order as an attribute set.
fn bind(
    family: &'static Family,
    kind: Kind,
    labels: &[(&str, &str)],
) -> Result<Arc<[KeyValue]>, Error> {
    if !STATUS_FAMILIES.iter().any(|f| f.name == family.name) {
        return Err(Error::NotAnEngineFamily(family.name));
    }
    if family.kind != kind {
        return Err(Error::WrongKind {
            family: family.name,
            kind: family.kind.as_str(),
            asked: kind.as_str(),
        });
    }
    let mut out = Vec::with_capacity(family.labels.len());
    for key in family.labels {
        let value = labels.iter().find(|(k, _)| k == key).map(|(_, v)| *v);
        match value {
            Some(v) if !v.is_empty() => out.push(KeyValue::new(*key, v.to_owned())),
            _ => {
                return Err(Error::Labels {
                    family: family.name,
                    expected: family.labels.join(", "),
                    problem: format!("label `{key}` is missing or empty"),
                });
            }
        }
    }
    if let Some((extra, _)) = labels.iter().find(|(k, _)| !family.labels.contains(k)) {
        return Err(Error::Labels {
            family: family.name,
            expected: family.labels.join(", "),
            problem: format!("`{extra}` is not one of its labels"),
        });
    }
    if family.name == MSTAR_CONDUCTOR_REQUESTS.name {
        let state = labels
            .iter()
            .find(|(k, _)| *k == "state")
            .map_or("", |(_, v)| *v);
        if !CONDUCTOR_REQUEST_STATES.contains(&state) {
            return Err(Error::Labels {
                family: family.name,
                expected: family.labels.join(", "),
                problem: format!("state {state:?} is not one of {CONDUCTOR_REQUEST_STATES:?}"),
            });
        }
    }
    Ok(out.into())
}

impl EngineRecorders {
    /// Builds every engine instrument on `meter`.
    pub fn new(meter: &Meter) -> EngineRecorders {
        EngineRecorders {
            step_seconds: histogram(meter, &MSTAR_STEP_SECONDS),
            batch_size: histogram(meter, &MSTAR_BATCH_SIZE),
            transfer_seconds: histogram(meter, &MSTAR_TRANSFER_SECONDS),
            transfers: counter(meter, &MSTAR_TRANSFERS_TOTAL),
            transfer_bytes: counter(meter, &MSTAR_TRANSFER_BYTES_TOTAL),
            hit_tokens: counter(meter, &MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL),
            query_tokens: counter(meter, &MSTAR_PREFIX_CACHE_QUERY_TOKENS_TOTAL),
            kv_total: gauge(meter, &MSTAR_KV_PAGES_TOTAL),
            kv_used: gauge(meter, &MSTAR_KV_PAGES_USED),
            kv_cached: gauge(meter, &MSTAR_KV_PAGES_CACHED),
            pending_steps: gauge(meter, &MSTAR_COMPONENT_PENDING_STEPS),
            in_flight: gauge(meter, &MSTAR_COMPONENT_IN_FLIGHT),
            conductor_requests: gauge(meter, &MSTAR_CONDUCTOR_REQUESTS),
        }
    }

    /// `mstar_step_seconds` and `mstar_batch_size` for one (component, graph_walk).
    pub fn step(&self, component: &str, graph_walk: &str) -> Result<StepRecorder, Error> {
        let labels = [("component", component), ("graph_walk", graph_walk)];
        Ok(StepRecorder {
            attrs: bind(&MSTAR_STEP_SECONDS, Kind::Histogram, &labels)?,
            seconds: self.step_seconds.clone(),
            batch: self.batch_size.clone(),
        })
    }

    /// `mstar_transfer_seconds`, `mstar_transfers_total` and `mstar_transfer_bytes_total`
    /// for one edge.
    pub fn transfer(
        &self,
        src: &str,
        dst: &str,
        transport: &str,
    ) -> Result<TransferRecorder, Error> {
        let labels = [("src", src), ("dst", dst), ("transport", transport)];
        Ok(TransferRecorder {
            attrs: bind(&MSTAR_TRANSFER_SECONDS, Kind::Histogram, &labels)?,
            seconds: self.transfer_seconds.clone(),
            count: self.transfers.clone(),
            bytes: self.transfer_bytes.clone(),
        })
    }

    /// The prefix-cache token counters of one component.
    pub fn prefix_cache(&self, component: &str) -> Result<PrefixCacheRecorder, Error> {
        Ok(PrefixCacheRecorder {
            attrs: bind(
                &MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL,
                Kind::Counter,
                &[("component", component)],
            )?,
            hit: self.hit_tokens.clone(),
            query: self.query_tokens.clone(),
        })
    }

    /// The paged KV cache gauges of one (component, resource).
    pub fn kv_pages(&self, component: &str, resource: &str) -> Result<KvPagesRecorder, Error> {
        let labels = [("component", component), ("resource", resource)];
        Ok(KvPagesRecorder {
            attrs: bind(&MSTAR_KV_PAGES_TOTAL, Kind::Gauge, &labels)?,
            total: self.kv_total.clone(),
            used: self.kv_used.clone(),
            cached: self.kv_cached.clone(),
        })
    }

    /// `mstar_component_pending_steps` of one component.
    pub fn pending_steps(&self, component: &str) -> Result<GaugeRecorder, Error> {
        self.gauge(&MSTAR_COMPONENT_PENDING_STEPS, &[("component", component)])
    }

    /// `mstar_component_in_flight` of one component (the conductor's).
    pub fn in_flight(&self, component: &str) -> Result<GaugeRecorder, Error> {
        self.gauge(&MSTAR_COMPONENT_IN_FLIGHT, &[("component", component)])
    }

    /// `mstar_conductor_requests` for the seed's three states (the conductor's).
    pub fn conductor_requests(&self) -> Result<ConductorRequestsRecorder, Error> {
        let [waiting, running, draining] = CONDUCTOR_REQUEST_STATES
            .map(|s| self.gauge(&MSTAR_CONDUCTOR_REQUESTS, &[("state", s)]));
        Ok(ConductorRequestsRecorder {
            waiting: waiting?,
            running: running?,
            draining: draining?,
        })
    }

    /// A counter of any engine family, its labels checked against the catalog.
    pub fn counter(
        &self,
        family: &'static Family,
        labels: &[(&str, &str)],
    ) -> Result<CounterRecorder, Error> {
        let attrs = bind(family, Kind::Counter, labels)?;
        let counter = match family.name {
            n if n == MSTAR_TRANSFERS_TOTAL.name => &self.transfers,
            n if n == MSTAR_TRANSFER_BYTES_TOTAL.name => &self.transfer_bytes,
            n if n == MSTAR_PREFIX_CACHE_HIT_TOKENS_TOTAL.name => &self.hit_tokens,
            _ => &self.query_tokens,
        };
        Ok(CounterRecorder {
            attrs,
            counter: counter.clone(),
        })
    }

    /// A gauge of any engine family, its labels checked against the catalog.
    pub fn gauge(
        &self,
        family: &'static Family,
        labels: &[(&str, &str)],
    ) -> Result<GaugeRecorder, Error> {
        let attrs = bind(family, Kind::Gauge, labels)?;
        let gauge = match family.name {
            n if n == MSTAR_KV_PAGES_TOTAL.name => &self.kv_total,
            n if n == MSTAR_KV_PAGES_USED.name => &self.kv_used,
            n if n == MSTAR_KV_PAGES_CACHED.name => &self.kv_cached,
            n if n == MSTAR_COMPONENT_PENDING_STEPS.name => &self.pending_steps,
            n if n == MSTAR_COMPONENT_IN_FLIGHT.name => &self.in_flight,
            _ => &self.conductor_requests,
        };
        Ok(GaugeRecorder {
            attrs,
            gauge: gauge.clone(),
        })
    }

    /// A histogram of any engine family, its labels checked against the catalog.
    pub fn histogram(
        &self,
        family: &'static Family,
        labels: &[(&str, &str)],
    ) -> Result<HistogramRecorder, Error> {
        let attrs = bind(family, Kind::Histogram, labels)?;
        let histogram = match family.name {
            n if n == MSTAR_STEP_SECONDS.name => &self.step_seconds,
            n if n == MSTAR_BATCH_SIZE.name => &self.batch_size,
            _ => &self.transfer_seconds,
        };
        Ok(HistogramRecorder {
            attrs,
            histogram: histogram.clone(),
        })
    }
}

/// Records engine steps of one (component, graph_walk).
#[derive(Debug, Clone)]
pub struct StepRecorder {
    attrs: Arc<[KeyValue]>,
    seconds: Histogram<f64>,
    batch: Histogram<f64>,
}

impl StepRecorder {
    /// One step: its duration, and the rows its forward ran when known.
    #[inline]
    pub fn record(&self, duration: Duration, batch_size: Option<u64>) {
        self.seconds.record(duration.as_secs_f64(), &self.attrs);
        if let Some(rows) = batch_size {
            self.batch.record(rows as f64, &self.attrs);
        }
    }
}

/// Records tensor reads over one edge.
#[derive(Debug, Clone)]
pub struct TransferRecorder {
    attrs: Arc<[KeyValue]>,
    seconds: Histogram<f64>,
    count: Counter<u64>,
    bytes: Counter<u64>,
}

impl TransferRecorder {
    /// One edge read: its consumer-side duration and the bytes read.
    #[inline]
    pub fn record(&self, duration: Duration, bytes: u64) {
        self.seconds.record(duration.as_secs_f64(), &self.attrs);
        self.count.add(1, &self.attrs);
        self.bytes.add(bytes, &self.attrs);
    }
}

/// Records prefix-cache look-ups of one component.
#[derive(Debug, Clone)]
pub struct PrefixCacheRecorder {
    attrs: Arc<[KeyValue]>,
    hit: Counter<u64>,
    query: Counter<u64>,
}

impl PrefixCacheRecorder {
    /// One request's look-up: prompt tokens looked up, and those the cache already held.
    #[inline]
    pub fn record_lookup(&self, query_tokens: u64, hit_tokens: u64) {
        self.query.add(query_tokens, &self.attrs);
        self.hit.add(hit_tokens.min(query_tokens), &self.attrs);
    }
}

/// Sets the paged KV cache gauges of one (component, resource).
#[derive(Debug, Clone)]
pub struct KvPagesRecorder {
    attrs: Arc<[KeyValue]>,
    total: Gauge<i64>,
    used: Gauge<i64>,
    cached: Gauge<i64>,
}

impl KvPagesRecorder {
    /// Pages requests can hold, pages not on the free list, pages the prefix cache names.
    #[inline]
    pub fn set(&self, total: u64, used: u64, cached: u64) {
        let v = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.total.record(v(total), &self.attrs);
        self.used.record(v(used), &self.attrs);
        self.cached.record(v(cached), &self.attrs);
    }
}

/// Sets `mstar_conductor_requests` for each of the three request states.
#[derive(Debug, Clone)]
pub struct ConductorRequestsRecorder {
    waiting: GaugeRecorder,
    running: GaugeRecorder,
    draining: GaugeRecorder,
}

impl ConductorRequestsRecorder {
    /// The requests the conductor holds, by state.
    #[inline]
    pub fn set(&self, waiting: u64, running: u64, draining: u64) {
        self.waiting.set(waiting);
        self.running.set(running);
        self.draining.set(draining);
    }
}

/// A counter series with bound, checked labels.
#[derive(Debug, Clone)]
pub struct CounterRecorder {
    attrs: Arc<[KeyValue]>,
    counter: Counter<u64>,
}

impl CounterRecorder {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.counter.add(n, &self.attrs);
    }
}

/// A gauge series with bound, checked labels.
#[derive(Debug, Clone)]
pub struct GaugeRecorder {
    attrs: Arc<[KeyValue]>,
    gauge: Gauge<i64>,
}

impl GaugeRecorder {
    /// Sets the value.
    #[inline]
    pub fn set(&self, value: u64) {
        self.gauge
            .record(i64::try_from(value).unwrap_or(i64::MAX), &self.attrs);
    }
}

/// A histogram series with bound, checked labels (the catalog's buckets).
#[derive(Debug, Clone)]
pub struct HistogramRecorder {
    attrs: Arc<[KeyValue]>,
    histogram: Histogram<f64>,
}

impl HistogramRecorder {
    /// Records one observation.
    #[inline]
    pub fn record(&self, value: f64) {
        self.histogram.record(value, &self.attrs);
    }
}
