//! The store's index: hashing of point attributes and the map from hash to series.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::super::wire::{Kv, Val};
use super::labels::val_string;

/// Hashes are already mixed: the map takes them as they are.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(super) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// The series by the hash of their source, metric and attributes: one `u32` per
/// series (16 bytes a slot), and a second map for the ids whose hash another series
/// already has (64-bit hashes: next to never). A `Vec` per hash, as before, cost
/// 32 bytes a slot and a 16-byte allocation per series.
#[derive(Default)]
pub(super) struct SeriesIndex {
    first: IdMap<u32>,
    more: IdMap<Vec<u32>>,
}

impl SeriesIndex {
    /// The first series with `hash` that `is` accepts.
    pub(super) fn find(&self, hash: u64, is: impl Fn(u32) -> bool) -> Option<u32> {
        let first = *self.first.get(&hash)?;
        if is(first) {
            return Some(first);
        }
        self.more.get(&hash)?.iter().copied().find(|&id| is(id))
    }

    /// Adds series `id` under `hash`.
    pub(super) fn insert(&mut self, hash: u64, id: u32) {
        match self.first.entry(hash) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.more.entry(hash).or_default().push(id);
            }
        }
    }

    /// Removes series `id` from under `hash`.
    pub(super) fn remove(&mut self, hash: u64, id: u32) {
        if let Some(more) = self.more.get_mut(&hash) {
            more.retain(|&x| x != id);
            let moved = if self.first.get(&hash) == Some(&id) {
                more.pop()
            } else {
                None
            };
            if more.is_empty() {
                self.more.remove(&hash);
            }
            if let Some(next) = moved {
                self.first.insert(hash, next);
            }
        } else if self.first.get(&hash) == Some(&id) {
            self.first.remove(&hash);
        }
    }
}

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

pub(super) fn attrs_hash(source: u32, metric: u32, attrs: &[Kv<'_>]) -> u64 {
    salted(stream_key(attrs), source, metric)
}

/// The hash of point attributes alone, in any order: what tells a source's folded
/// streams of one metric apart (kept in the checkpoint, where ids change).
pub(super) fn stream_key(attrs: &[Kv<'_>]) -> u64 {
    let mut acc = 0u64;
    for kv in attrs {
        let h = fnv(kv.key.as_bytes(), 0xcbf2_9ce4_8422_2325);
        let h = fnv(b"=", h);
        let h = match kv.val {
            Val::Str(s) => fnv(s.as_bytes(), h),
            _ => fnv(val_string(&kv.val).as_bytes(), h),
        };
        acc = acc.wrapping_add(mix(h));
    }
    acc
}

/// [`stream_key`] with the series' source and metric: the index's hash.
pub(super) fn salted(key: u64, source: u32, metric: u32) -> u64 {
    mix(key ^ (u64::from(source) << 32 | u64::from(metric)).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

pub(super) fn attrs_equal(stored: &[(String, String)], attrs: &[Kv<'_>]) -> bool {
    if stored.len() != attrs.len() {
        return false;
    }
    attrs.iter().all(
        |kv| match stored.binary_search_by(|(k, _)| k.as_str().cmp(kv.key)) {
            Ok(i) => stored[i].1 == val_string(&kv.val),
            Err(_) => false,
        },
    )
}

pub(super) fn canonical(attrs: &[Kv<'_>]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = attrs
        .iter()
        .map(|kv| (kv.key.to_owned(), val_string(&kv.val).into_owned()))
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
mod tests {
    use super::SeriesIndex;

    #[test]
    fn ids_that_share_a_hash_are_all_found_and_removed_one_by_one() {
        let mut index = SeriesIndex::default();
        for id in [7, 8, 9] {
            index.insert(42, id);
        }
        index.insert(43, 1);
        for id in [7, 8, 9] {
            assert_eq!(index.find(42, |x| x == id), Some(id));
        }
        assert_eq!(index.find(42, |x| x == 1), None);
        index.remove(42, 7); // the first: another takes its slot
        assert_eq!(index.find(42, |x| x == 7), None);
        assert_eq!(index.find(42, |x| x == 8), Some(8));
        assert_eq!(index.find(42, |x| x == 9), Some(9));
        index.remove(42, 9);
        index.remove(42, 8);
        assert_eq!(index.find(42, |_| true), None);
        assert!(index.more.is_empty(), "no empty overflow list is kept");
        assert_eq!(index.find(43, |_| true), Some(1));
        index.remove(43, 2); // not there: nothing changes
        assert_eq!(index.find(43, |_| true), Some(1));
    }
}
