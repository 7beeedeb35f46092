//! Mutations of valid bytes: what libFuzzer's mutators do, as proptest values (so a
//! failure shrinks to the fewest, smallest mutations), plus format-aware ones (huge
//! varints and lengths, tokens of the format, deep nesting).

use proptest::prelude::*;
use proptest::sample::Index;

/// One edit of an input.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    /// Flips one bit.
    FlipBit(Index, u8),
    /// Sets one byte.
    SetByte(Index, u8),
    /// Cuts the input short.
    Truncate(Index),
    /// Removes up to `n` bytes.
    Delete(Index, usize),
    /// Inserts bytes.
    Insert(Index, Vec<u8>),
    /// Repeats up to `n` bytes in place.
    Duplicate(Index, usize),
    /// Replaces the tail from a point with another seed's tail from another point.
    Splice(Index, Index, Index),
    /// Writes a varint of `bits` significant bits over the bytes at a point (a
    /// length or a tag that promises far more than there is).
    HugeVarint(Index, u8),
    /// Inserts one of the format's tokens.
    Token(Index, Index),
    /// Wraps a point of the input in `depth` levels of the format's nesting.
    Nest(Index, u16),
}

/// The format-specific parts of the mutations.
pub(crate) struct Format {
    /// Tokens worth inserting.
    pub(crate) tokens: &'static [&'static [u8]],
    /// What opens and closes one level of nesting.
    pub(crate) nest: (&'static [u8], &'static [u8]),
}

/// Protobuf: tags of every wire type, lengths, an end group.
pub(crate) const PROTOBUF: Format = Format {
    tokens: &[
        b"\x0a\x00",
        b"\x0a\x7f",
        b"\x0a\xff\xff\xff\xff\x0f",
        b"\x12\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
        b"\x09\xff\xff\xff\xff\xff\xff\xef\x7f",
        b"\x09\x00\x00\x00\x00\x00\x00\xf8\x7f",
        b"\x11\x00\x00\x00\x00\x00\x00\xf0\xff",
        b"\x0b",
        b"\x0c",
        b"\x0d\xff\xff\xff\xff",
        b"\x0e",
        b"\x0f",
        b"\x00",
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        b"\x1a\x02\xc3\x28",
        b"\xf8\xff\xff\xff\x0f\x01",
    ],
    // A field-1 message around the rest (the byte count is fixed up by nesting).
    nest: (b"\x0a", b""),
};

/// JSON: numbers at and past every limit, special floats, odd strings and shapes.
pub(crate) const JSON: Format = Format {
    tokens: &[
        b"-1",
        b"0",
        b"1e999",
        b"-1e999",
        b"18446744073709551615",
        b"18446744073709551616",
        b"-9223372036854775809",
        b"\"NaN\"",
        b"\"Infinity\"",
        b"\"-Infinity\"",
        b"\"18446744073709551616\"",
        b"\"-1\"",
        b"\"0x10\"",
        b"1.5",
        b"null",
        b"true",
        b"[]",
        b"{}",
        b"\"\"",
        b"\"\\ud800\"",
        b"\"\\u0000\"",
        b"\"zz\"",
        b"\"AAAA\"",
        b"\"====\"",
        b",",
        b":",
        b"\"",
        b"{\"stringValue\":\"x\"}",
        b"{\"kvlistValue\":{\"values\":[{\"key\":\"k\",\"value\":{\"intValue\":\"7\"}}]}}",
        b"{\"arrayValue\":{\"values\":[{\"doubleValue\":\"NaN\"}]}}",
        b"{\"bytesValue\":\"!!\"}",
        b"\"asDouble\":1",
        b"\"asInt\":\"-5\"",
        b"\"aggregationTemporality\":1",
        b"\"isMonotonic\":false",
        b"\"bucketCounts\":[\"1\",\"2\"]",
        b"\"explicitBounds\":[\"NaN\",1,0]",
        b"\"traceId\":\"zz\"",
    ],
    nest: (b"[", b"]"),
};

/// YAML: anchors, aliases, tags, documents, flow and block shapes, odd scalars.
pub(crate) const YAML: Format = Format {
    tokens: &[
        b"&a ",
        b"*a",
        b"<<: *a\n",
        b"!!binary ",
        b"!!str ",
        b"!!int ",
        b"!custom ",
        b"---\n",
        b"...\n",
        b"\t",
        b"\n",
        b"  ",
        b": ",
        b"- ",
        b"? ",
        b"{",
        b"}",
        b"[",
        b"]",
        b"~",
        b"null",
        b"''",
        b"\"\\x00\"",
        b"0",
        b"-1",
        b"18446744073709551616",
        b"1e999",
        b".nan",
        b"0s",
        b"-5s",
        b"99999999999999999999h",
        b"1.5ms",
        b"127.0.0.1:0",
        b"[::1]:99999",
        b"http://",
        b"none",
        b"sum",
        b"per_source",
        b"receivers: ",
        b"processors: {higgsmeter: {gauges: [{match: '*', aggregation: max}]}}\n",
        b"exporters: {prometheusremotewrite: {endpoint: 'http://127.0.0.1:1/x'}}\n",
        b"service: {pipelines: {metrics: {receivers: [otlp], exporters: [nope]}}}\n",
        b"tls: {cert_file: /nonexistent}\n",
        b"\xff\xfe",
    ],
    nest: (b"[", b"]"),
};

/// Up to `max` mutations.
pub(crate) fn mutations(max: usize) -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        4 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        2 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        2 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, s, b)| Mutation::Splice(a, s, b)),
        2 => (any::<Index>(), 7u8..=64).prop_map(|(i, b)| Mutation::HugeVarint(i, b)),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::Token(i, t)),
        1 => (any::<Index>(), prop_oneof![1u16..8, 90u16..140, 1000u16..20_000])
            .prop_map(|(i, d)| Mutation::Nest(i, d)),
    ];
    prop::collection::vec(one, 0..=max)
}

fn at(i: &Index, len: usize) -> usize {
    // An insertion point: 0..=len.
    i.index(len + 1)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Applies `m` to `data`; `donors` are the other seeds a splice may take from.
pub(crate) fn apply(data: &mut Vec<u8>, m: &Mutation, donors: &[&[u8]], format: &Format) {
    let len = data.len();
    match m {
        Mutation::FlipBit(i, b) => {
            if len > 0 {
                data[i.index(len)] ^= 1 << b;
            }
        }
        Mutation::SetByte(i, v) => {
            if len > 0 {
                data[i.index(len)] = *v;
            }
        }
        Mutation::Truncate(i) => data.truncate(i.index(len + 1)),
        Mutation::Delete(i, n) => {
            if len > 0 {
                let from = i.index(len);
                data.drain(from..(from + n).min(len));
            }
        }
        Mutation::Insert(i, bytes) => {
            let p = at(i, len);
            data.splice(p..p, bytes.iter().copied());
        }
        Mutation::Duplicate(i, n) => {
            if len > 0 {
                let from = i.index(len);
                let piece = data[from..(from + n).min(len)].to_vec();
                data.splice(from..from, piece);
            }
        }
        Mutation::Splice(a, s, b) => {
            if !donors.is_empty() {
                let donor = donors[s.index(donors.len())];
                let cut = at(a, len);
                data.truncate(cut);
                data.extend_from_slice(&donor[at(b, donor.len())..]);
            }
        }
        Mutation::HugeVarint(i, bits) => {
            let mut v = Vec::new();
            let value = if *bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            varint(value, &mut v);
            let p = at(i, len);
            let end = (p + v.len()).min(len);
            data.splice(p..end, v);
        }
        Mutation::Token(i, t) => {
            let token = format.tokens[t.index(format.tokens.len())];
            let p = at(i, len);
            data.splice(p..p, token.iter().copied());
        }
        Mutation::Nest(i, depth) => {
            let p = at(i, len);
            let (open, close) = format.nest;
            if close.is_empty() {
                // Protobuf: wrap the tail in `depth` length-delimited field-1 messages,
                // innermost first, each with its true length.
                let mut inner = data.split_off(p);
                for _ in 0..*depth {
                    let mut outer = open.to_vec();
                    varint(inner.len() as u64, &mut outer);
                    outer.extend_from_slice(&inner);
                    inner = outer;
                    if inner.len() > 1 << 20 {
                        break;
                    }
                }
                data.extend_from_slice(&inner);
            } else {
                let tail = data.split_off(p);
                for _ in 0..*depth {
                    data.extend_from_slice(open);
                }
                data.extend_from_slice(&tail);
                for _ in 0..*depth {
                    data.extend_from_slice(close);
                }
            }
        }
    }
}

/// `seed` after `ms`.
pub(crate) fn mutated(seed: &[u8], ms: &[Mutation], donors: &[&[u8]], format: &Format) -> Vec<u8> {
    let mut data = seed.to_vec();
    for m in ms {
        apply(&mut data, m, donors, format);
    }
    data
}
