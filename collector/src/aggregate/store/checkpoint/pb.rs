//! Protobuf fields written by hand into a `Vec<u8>`, as prost's derived messages write
//! them: a proto3 field equal to its default (0, 0.0, "", an empty repeated number) is
//! left out, repeated numbers are packed.

use prost::encoding::{encode_varint, encoded_len_varint};

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

fn key(out: &mut Vec<u8>, tag: u32, wire_type: u32) {
    encode_varint(u64::from(tag << 3 | wire_type), out);
}

/// A `uint32`/`uint64` field.
pub(super) fn uint(out: &mut Vec<u8>, tag: u32, v: u64) {
    if v != 0 {
        key(out, tag, VARINT);
        encode_varint(v, out);
    }
}

/// A `fixed64` field.
pub(super) fn fixed64(out: &mut Vec<u8>, tag: u32, v: u64) {
    if v != 0 {
        key(out, tag, FIXED64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `double` field (-0.0 is its default too; a NaN is not).
pub(super) fn double(out: &mut Vec<u8>, tag: u32, v: f64) {
    if v != 0.0 {
        key(out, tag, FIXED64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn string_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        encoded_len_varint(u64::from(tag << 3)) + encoded_len_varint(s.len() as u64) + s.len()
    }
}

/// A `string` field.
pub(super) fn string(out: &mut Vec<u8>, tag: u32, s: &str) {
    if !s.is_empty() {
        key(out, tag, LEN);
        encode_varint(s.len() as u64, out);
        out.extend_from_slice(s.as_bytes());
    }
}

/// A message field whose fields `body` writes: its length is written in one byte
/// before them, and moved to make room for more when they took 128 bytes or more.
pub(super) fn message(out: &mut Vec<u8>, tag: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(out, tag, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let len = (out.len() - at - 1) as u64;
    let n = encoded_len_varint(len);
    if n > 1 {
        out.splice(at + 1..at + 1, std::iter::repeat_n(0, n - 1));
    }
    let mut slot = &mut out[at..at + n];
    encode_varint(len, &mut slot);
}

/// A `Pair { key = 1, value = 2 }` message field.
pub(super) fn pair(out: &mut Vec<u8>, tag: u32, k: &str, v: &str) {
    key(out, tag, LEN);
    encode_varint((string_len(1, k) + string_len(2, v)) as u64, out);
    string(out, 1, k);
    string(out, 2, v);
}

/// A `HistState { bounds = 1, counts = 2, count = 3, sum = 4 }` message field:
/// `bounds`, then `fields` (the rest, as [`hist_fields`] wrote them).
pub(super) fn hist(out: &mut Vec<u8>, tag: u32, bounds: &[f64], fields: &[u8]) {
    let bounds_len = 8 * bounds.len();
    let len = if bounds_len == 0 {
        0
    } else {
        1 + encoded_len_varint(bounds_len as u64) + bounds_len
    } + fields.len();
    key(out, tag, LEN);
    encode_varint(len as u64, out);
    if !bounds.is_empty() {
        key(out, 1, LEN);
        encode_varint(bounds_len as u64, out);
        for b in bounds {
            out.extend_from_slice(&b.to_le_bytes());
        }
    }
    out.extend_from_slice(fields);
}

/// A `HistState`'s fields after its bounds: `counts` (packed), `count`, `sum`.
pub(super) fn hist_fields(out: &mut Vec<u8>, counts: &[u64], count: u64, sum: f64) {
    if !counts.is_empty() {
        let len: usize = counts.iter().map(|&c| encoded_len_varint(c)).sum();
        key(out, 2, LEN);
        encode_varint(len as u64, out);
        for &c in counts {
            encode_varint(c, out);
        }
    }
    uint(out, 3, count);
    double(out, 4, sum);
}
