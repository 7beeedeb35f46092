//! The second pass of a request: the visitor that applies a request already validated
//! by [`walk`](super::walk) with [`Count`](super::Count) to the store.
//!
//! It holds the store's read lock while every source, metric and series it meets is
//! known (the steady state: each export repeats the last one's series), so requests
//! apply in parallel; the first time it must create one it trades the read lock for
//! the write lock and keeps that to the request's end.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::super::store::{Found, NameIx, Outcome, Store};
use super::super::{MetricKind, RefusalReason};
use super::{DataKind, DecodeError, HistPoint, Kv, MetricRef, NumberPoint, Visitor};

/// Applies a request already validated by [`walk`](super::walk) with
/// [`Count`](super::Count).
pub(crate) fn apply(
    lock: &RwLock<Store>,
    req: &[u8],
    now: u64,
    out: &mut Outcome,
) -> Result<(), DecodeError> {
    let mut v = Apply {
        lock,
        store: Guard::Read(lock.read().unwrap_or_else(PoisonError::into_inner)),
        now,
        out,
        resource: Vec::new(),
        source: None,
        source_refused: None,
        current: None,
    };
    super::walk(req, &mut v)
}

/// The store's lock as the visitor holds it.
enum Guard<'s> {
    Read(RwLockReadGuard<'s, Store>),
    Write(RwLockWriteGuard<'s, Store>),
    /// Between the two (never seen outside [`Apply::store_mut`]).
    Released,
}

/// The second pass: applies a validated request to the store.
struct Apply<'s, 'a> {
    lock: &'s RwLock<Store>,
    store: Guard<'s>,
    now: u64,
    out: &'s mut Outcome,
    resource: Vec<Kv<'a>>,
    source: Option<u32>,
    /// Why the current resource's source was refused (a new source the budget has no
    /// room for): its metrics' points are refused with this.
    source_refused: Option<String>,
    /// The current metric: its id, which of its names, kind and temporality, or `None` when refused.
    current: Option<(u32, NameIx, MetricKind, bool)>,
}

impl Apply<'_, '_> {
    fn store(&self) -> &Store {
        match &self.store {
            Guard::Read(g) => g,
            Guard::Write(g) => g,
            Guard::Released => unreachable!("a lock is held outside `store_mut`"),
        }
    }

    /// The store and the outcome, borrowed together.
    fn parts(&mut self) -> (&Store, &mut Outcome) {
        let store = match &self.store {
            Guard::Read(g) => &**g,
            Guard::Write(g) => &**g,
            Guard::Released => unreachable!("a lock is held outside `store_mut`"),
        };
        (store, &mut *self.out)
    }

    /// The store, for creating what this request is the first to send: the read lock
    /// is traded for the write lock (which whatever was found under the read lock
    /// survives: nothing is forgotten while a request marks it seen).
    fn store_mut(&mut self) -> &mut Store {
        if !matches!(self.store, Guard::Write(_)) {
            // The read lock is released before the write lock is asked for: a thread
            // holding both would wait for itself.
            self.store = Guard::Released;
            self.store = Guard::Write(self.lock.write().unwrap_or_else(PoisonError::into_inner));
        }
        match &mut self.store {
            Guard::Write(g) => g,
            Guard::Read(_) | Guard::Released => unreachable!("the write lock was just taken"),
        }
    }

    /// The current resource's source, or why it is refused.
    fn source(&mut self) -> Result<u32, String> {
        if let Some(id) = self.source {
            return Ok(id);
        }
        if let Some(msg) = &self.source_refused {
            return Err(msg.clone());
        }
        let id = match self.store().find_source(&self.resource, self.now) {
            Some(id) => id,
            None => {
                let (resource, now) = (std::mem::take(&mut self.resource), self.now);
                let found = self.store_mut().source_for(&resource, now);
                self.resource = resource;
                match found {
                    Ok(id) => id,
                    Err((_, msg)) => {
                        self.source_refused = Some(msg.clone());
                        return Err(msg);
                    }
                }
            }
        };
        self.source = Some(id);
        Ok(id)
    }

    /// Where a point of the current metric goes: its series or its source's overflow
    /// (`None`: refused, counted in the outcome).
    fn locate(
        &mut self,
        (source, metric, name): (u32, u32, NameIx),
        attrs: &[Kv<'_>],
        bounds: Option<&[f64]>,
    ) -> Option<Found> {
        let now = self.now;
        let found = match self.store().locate(source, metric, attrs) {
            Found::New => match self
                .store_mut()
                .series_for(source, metric, name, attrs, bounds, now)
            {
                Ok(found) => found,
                Err((reason, msg)) => {
                    self.out.refuse(reason, 1, || msg);
                    return None;
                }
            },
            found => found,
        };
        if let Found::Series(id) = found
            && let Err((reason, msg)) = self.store().check_series_name(id, name)
        {
            self.out.refuse(reason, 1, || msg);
            return None;
        }
        Some(found)
    }
}

impl<'a> Visitor<'a> for Apply<'_, 'a> {
    fn resource(&mut self, attrs: &[Kv<'a>]) {
        self.resource.clear();
        self.resource.extend_from_slice(attrs);
        self.source = None;
        self.source_refused = None;
    }

    fn metric(&mut self, m: &MetricRef<'a>) {
        let n = m.points.len() as u64;
        self.out.received += n;
        self.current = None;
        let (kind, delta) = match m.kind {
            DataKind::None => return,
            DataKind::Gauge => (MetricKind::Gauge, false),
            DataKind::Sum {
                monotonic: true,
                delta,
            } => (MetricKind::Counter, delta),
            DataKind::Sum {
                monotonic: false,
                delta,
            } => (MetricKind::Gauge, delta),
            DataKind::Histogram { delta } => (MetricKind::Histogram, delta),
            DataKind::ExponentialHistogram => {
                self.out.refuse(RefusalReason::UnsupportedType, n, || {
                    format!(
                        "metric `{}`: exponential histograms are not supported; configure an explicit-bucket histogram view",
                        m.name
                    )
                });
                return;
            }
            DataKind::Summary => {
                self.out.refuse(RefusalReason::UnsupportedType, n, || {
                    format!(
                        "metric `{}`: summaries are not supported; send a histogram",
                        m.name
                    )
                });
                return;
            }
        };
        let found = match self.store().find_metric(m, kind) {
            Some(found) => found,
            None => self.store_mut().metric_id(m, kind),
        };
        match found {
            Ok((id, name)) => match self.source() {
                Ok(_) => self.current = Some((id, name, kind, delta)),
                Err(msg) => self.out.refuse(RefusalReason::Cardinality, n, || msg),
            },
            Err((reason, msg)) => self.out.refuse(reason, n, || msg),
        }
    }

    fn number(&mut self, p: &NumberPoint<'a>) {
        let (Some((metric, name, kind, delta)), Some(source)) = (self.current, self.source) else {
            return;
        };
        let (store, out) = self.parts();
        let Some(v) = store.number_value(metric, kind, p, out) else {
            return;
        };
        let now = self.now;
        match self.locate((source, metric, name), &p.attrs, None) {
            Some(Found::Series(id)) => {
                let (store, out) = self.parts();
                store.number_point(source, id, delta, (p.start, p.time, v), now, out);
            }
            Some(Found::Fold(hash)) => {
                let (store, out) = self.parts();
                store.fold_number(source, metric, hash, delta, (p.start, p.time, v), now, out);
            }
            Some(Found::New) | None => {}
        }
    }

    fn histogram(&mut self, p: &HistPoint<'a>) {
        let (Some((metric, name, _, delta)), Some(source)) = (self.current, self.source) else {
            return;
        };
        let (store, out) = self.parts();
        if !store.histogram_valid(metric, p, out) {
            return;
        }
        let now = self.now;
        match self.locate((source, metric, name), &p.attrs, Some(&p.bounds)) {
            Some(Found::Series(id)) => {
                let (store, out) = self.parts();
                store.histogram_point(source, id, delta, p, now, out);
            }
            Some(Found::Fold(hash)) => {
                let (store, out) = self.parts();
                store.fold_histogram(source, metric, hash, delta, p, now, out);
            }
            Some(Found::New) | None => {}
        }
    }
}
