//! Operation names, interned once: a transition carries a small integer, never a string.
//!
//! The global table maps each distinct operation to an [`OpId`]; a small direct-mapped
//! cache per thread answers repeated look-ups without a lock or an allocation. The
//! table is bounded: past [`MAX_OPERATIONS`] distinct names, new names are counted under
//! [`OVERFLOW_OPERATION`] (with one warning), so a per-request value passed as an
//! operation cannot grow memory or label cardinality without bound.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

/// At most this many distinct operation names are kept.
pub const MAX_OPERATIONS: usize = 4096;

/// The operation that names beyond [`MAX_OPERATIONS`] are counted under.
pub const OVERFLOW_OPERATION: &str = "_overflow";

/// An interned operation name. `OpId(0)` is the empty operation `""`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct OpId(pub(crate) u32);

impl OpId {
    pub(crate) const NONE: OpId = OpId(0);

    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

struct Table {
    ids: HashMap<Arc<str>, OpId>,
    names: Vec<Arc<str>>,
}

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Exporter threads read it all the time: a child forked meanwhile must still
        // be able to take it (see `fork`).
        crate::fork::hold_across_fork(|| {
            Box::new(table().write().unwrap_or_else(PoisonError::into_inner))
        });
        let empty: Arc<str> = Arc::from("");
        let overflow: Arc<str> = Arc::from(OVERFLOW_OPERATION);
        let mut ids = HashMap::new();
        ids.insert(empty.clone(), OpId(0));
        ids.insert(overflow.clone(), OpId(1));
        RwLock::new(Table {
            ids,
            names: vec![empty, overflow],
        })
    })
}

const CACHE_SLOTS: usize = 64;

/// One entry of the per-thread cache: a name and its id.
type CacheSlot = Option<(Arc<str>, OpId)>;

thread_local! {
    static CACHE: RefCell<[CacheSlot; CACHE_SLOTS]> =
        const { RefCell::new([const { None }; CACHE_SLOTS]) };
}

#[inline]
fn slot(name: &str) -> usize {
    let b = name.as_bytes();
    let (first, last) = match (b.first(), b.last()) {
        (Some(f), Some(l)) => (usize::from(*f), usize::from(*l)),
        _ => (0, 0),
    };
    let mid = b.get(b.len() / 2).map_or(0, |m| usize::from(*m));
    (b.len().wrapping_mul(31) ^ first.wrapping_mul(7) ^ last.wrapping_mul(13) ^ mid) % CACHE_SLOTS
}

/// The id of `name`, interning it on first sight. Never panics, never fails.
#[inline]
pub(crate) fn intern(name: &str) -> OpId {
    if name.is_empty() {
        return OpId::NONE;
    }
    let slot = slot(name);
    let cached = CACHE
        .try_with(|cache| match &cache.try_borrow().ok()?[slot] {
            Some((cached, id)) if **cached == *name => Some(*id),
            _ => None,
        })
        .ok()
        .flatten();
    if let Some(id) = cached {
        return id;
    }
    let (arc, id) = intern_slow(name);
    let _ = CACHE.try_with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            cache[slot] = Some((arc, id));
        }
    });
    id
}

#[cold]
fn intern_slow(name: &str) -> (Arc<str>, OpId) {
    let mut t = table().write().unwrap_or_else(PoisonError::into_inner);
    if let Some((arc, id)) = t.ids.get_key_value(name) {
        return (arc.clone(), *id);
    }
    if t.names.len() >= MAX_OPERATIONS {
        let overflow = (t.names[1].clone(), OpId(1));
        // Warned with the table released: it is held only for short work (see `fork`).
        drop(t);
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: "higgsmeter",
                limit = MAX_OPERATIONS,
                "more than {MAX_OPERATIONS} distinct operation names: new ones are counted \
                 as operation=\"{OVERFLOW_OPERATION}\"; operations must be bounded (a \
                 function or step name, never a request id)"
            );
        }
        return overflow;
    }
    let id = OpId(u32::try_from(t.names.len()).unwrap_or(1));
    let arc: Arc<str> = Arc::from(name);
    t.names.push(arc.clone());
    t.ids.insert(arc.clone(), id);
    (arc, id)
}

/// The name of an interned id (`""` for an id this table never gave out).
pub(crate) fn name(id: OpId) -> Arc<str> {
    let t = table().read().unwrap_or_else(PoisonError::into_inner);
    t.names
        .get(id.index())
        .cloned()
        .unwrap_or_else(|| Arc::from(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_the_empty_operation_is_zero() {
        assert_eq!(intern(""), OpId::NONE);
        let a = intern("inference");
        let b = intern(&String::from("inference"));
        assert_eq!(a, b);
        assert_ne!(a, intern("upload"));
        assert_eq!(&*name(a), "inference");
        assert_eq!(&*name(OpId::NONE), "");
        // From another thread (another cache) the id is the same.
        let c = std::thread::spawn(|| intern("inference")).join().unwrap();
        assert_eq!(a, c);
    }

    #[test]
    fn colliding_cache_slots_still_return_the_right_ids() {
        let ids: Vec<_> = (0..500).map(|i| (i, intern(&format!("op{i}")))).collect();
        for (i, id) in ids {
            assert_eq!(intern(&format!("op{i}")), id);
            assert_eq!(&*name(id), format!("op{i}"));
        }
    }
}
