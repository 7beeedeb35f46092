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
    mix(acc ^ (u64::from(source) << 32 | u64::from(metric)).wrapping_mul(0x9e37_79b9_7f4a_7c15))
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
