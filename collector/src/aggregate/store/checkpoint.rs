//! The store's aggregation state as a checkpoint: what a restarted collector needs to
//! continue every fleet series without a reset or a spike, and every per-source
//! series where it was.
//!
//! The file is `MAGIC`, a little-endian `u32` format version, the payload's length
//! (`u64`) and CRC-32 (`u32`), then the payload: a protobuf [`StateFile`]. Versions
//! newer than [`VERSION`] are refused (a downgrade must not misread them); a torn or
//! corrupt file fails its length or checksum.
//!
//! What is kept: per source its resource and when it was last heard from; per series
//! its source, metric (and which of the metric's names created it), point attributes,
//! start and last point time, last cumulative value (or histogram) and last-seen age;
//! the fleet accumulators (counters and histograms) with their labels; and the metric
//! metadata (name, kind, help, unit, the names merged into it: ADR 13); and per
//! folded stream (ADR 20) its source, metric, key (the hash of its attributes), start,
//! last time, last value (or histogram) and last-seen age, so that an overflow series
//! goes on after a restart exactly as an ordinary one does.
//! Labels are derived again from the current configuration on restore, so a restart
//! with other `sum_over` or `static_labels` starts new fleet series beside the
//! restored ones instead of mixing them.

use std::io::{self, Seek, SeekFrom, Write};
use std::sync::PoisonError;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

use super::super::MetricKind;
use super::super::naming::render_labels;
use super::super::wire::{self, DataKind, Kv, MetricRef, Val};
use super::{Fleet, FleetRead, FleetValue, Hist, NameIx, Store, Value};

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"HGMSTATE";
/// The format this build writes and the newest it reads.
pub(crate) const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 8 + 4;

/// Why a checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    /// Not a state file, or cut short.
    #[error("not a higgsmeter-collector state file, or cut short ({0})")]
    Corrupt(&'static str),
    /// Written by a newer collector.
    #[error(
        "written by a newer higgsmeter-collector (state format {found}; this build reads up to {VERSION})"
    )]
    Newer {
        /// The file's version.
        found: u32,
    },
    /// The payload does not decode.
    #[error("the state does not decode: {0}")]
    Decode(String),
}

/// The decoded state file: the aggregator's identity and the store's state.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct StateFile {
    /// The `service.instance.id` this collector pushes upstream with.
    #[prost(string, tag = "1")]
    pub(crate) instance_id: String,
    /// When the state began (unix ns): the start time of every fleet series.
    #[prost(uint64, tag = "2")]
    pub(crate) origin_unix_nanos: u64,
    /// When it was written (unix ns).
    #[prost(uint64, tag = "3")]
    pub(crate) written_unix_nanos: u64,
    #[prost(message, repeated, tag = "4")]
    metrics: Vec<MetricState>,
    #[prost(message, repeated, tag = "5")]
    sources: Vec<SourceState>,
    #[prost(message, repeated, tag = "6")]
    fleet: Vec<FleetState>,
    #[prost(message, repeated, tag = "7")]
    series: Vec<SeriesState>,
    #[prost(message, repeated, tag = "8")]
    folded: Vec<FoldedState>,
}

/// A stream folded into its source's overflow series of a metric (ADR 0020).
#[derive(Clone, PartialEq, prost::Message)]
struct FoldedState {
    #[prost(uint32, tag = "1")]
    source: u32,
    #[prost(uint32, tag = "2")]
    metric: u32,
    /// The hash of its attributes.
    #[prost(fixed64, tag = "3")]
    key: u64,
    #[prost(fixed64, tag = "4")]
    start: u64,
    #[prost(fixed64, tag = "5")]
    time: u64,
    /// How long before the write it was last seen, ns.
    #[prost(uint64, tag = "6")]
    age: u64,
    /// A counter's last cumulative value or a gauge's value.
    #[prost(double, tag = "7")]
    value: f64,
    /// A histogram's last point, with its bounds.
    #[prost(message, optional, tag = "8")]
    hist: Option<HistState>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct MetricState {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    help: String,
    #[prost(string, tag = "3")]
    unit: String,
    /// 0 counter, 1 gauge, 2 histogram.
    #[prost(uint32, tag = "4")]
    kind: u32,
    /// Other OpenTelemetry names merged into this family, in order (ADR 0013).
    #[prost(string, repeated, tag = "5")]
    aliases: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SourceState {
    #[prost(message, repeated, tag = "1")]
    resource: Vec<KeyValue>,
    /// How long before the write it was last heard from, ns.
    #[prost(uint64, tag = "2")]
    age: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Pair {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HistState {
    #[prost(double, repeated, tag = "1")]
    bounds: Vec<f64>,
    #[prost(uint64, repeated, tag = "2")]
    counts: Vec<u64>,
    #[prost(uint64, tag = "3")]
    count: u64,
    #[prost(double, tag = "4")]
    sum: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FleetState {
    #[prost(uint32, tag = "1")]
    metric: u32,
    #[prost(message, repeated, tag = "2")]
    labels: Vec<Pair>,
    #[prost(double, tag = "3")]
    counter: f64,
    #[prost(message, optional, tag = "4")]
    hist: Option<HistState>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SeriesState {
    #[prost(uint32, tag = "1")]
    source: u32,
    #[prost(uint32, tag = "2")]
    metric: u32,
    #[prost(message, repeated, tag = "3")]
    attrs: Vec<Pair>,
    #[prost(fixed64, tag = "4")]
    start: u64,
    #[prost(fixed64, tag = "5")]
    time: u64,
    /// How long before the write it was last seen, ns.
    #[prost(uint64, tag = "6")]
    age: u64,
    /// A counter's last cumulative value or a gauge's value.
    #[prost(double, tag = "7")]
    value: f64,
    #[prost(message, optional, tag = "8")]
    hist: Option<HistState>,
    /// A gauge's last update, ns before the write.
    #[prost(uint64, tag = "9")]
    updated_age: u64,
    /// A histogram's fleet entry (an index into `StateFile.fleet`), whose bounds it
    /// has: its own `hist.bounds` are left empty.
    #[prost(uint32, tag = "10")]
    fleet: u32,
    /// Which of its metric's names created it: 0 the metric's `name`, `i + 1` its
    /// `aliases[i]` (ADR 0013).
    #[prost(uint32, tag = "11")]
    name: u32,
}

fn kind_code(kind: MetricKind) -> u32 {
    match kind {
        MetricKind::Counter => 0,
        MetricKind::Gauge => 1,
        MetricKind::Histogram => 2,
    }
}

fn hist(h: &HistState) -> Result<Hist, CheckpointError> {
    if h.counts.len() != h.bounds.len() + 1 {
        return Err(CheckpointError::Decode(
            "a histogram's bucket counts do not match its bounds".into(),
        ));
    }
    // What ingest refuses, no checkpoint holds (a NaN bound never equals itself: the
    // series could not rejoin its fleet entry).
    if h.bounds.windows(2).any(|w| w[0] >= w[1]) || h.bounds.iter().any(|b| !b.is_finite()) {
        return Err(CheckpointError::Decode(
            "a histogram's bounds are not finite and increasing".into(),
        ));
    }
    Ok(Hist {
        bounds: h.bounds.as_slice().into(),
        counts: h.counts.as_slice().into(),
        count: h.count,
        sum: h.sum,
    })
}

/// The header of a file whose payload has `len` bytes with CRC-32 `crc`: the magic,
/// the format version, the length and the checksum.
fn header(len: u64, crc: u32) -> [u8; HEADER] {
    let mut out = [0; HEADER];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..20].copy_from_slice(&len.to_le_bytes());
    out[20..24].copy_from_slice(&crc.to_le_bytes());
    out
}

impl StateFile {
    /// The file's bytes, encoded by prost (what [`StoreCopy::encode`] writes without
    /// building the message).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        let payload = self.encode_to_vec();
        let mut out = header(payload.len() as u64, crc32fast::hash(&payload)).to_vec();
        out.extend_from_slice(&payload);
        out
    }

    /// Reads a file's bytes.
    pub(crate) fn decode(bytes: &[u8]) -> Result<StateFile, CheckpointError> {
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(CheckpointError::Corrupt("no state file header"));
        }
        let word = |at: usize| -> [u8; 4] {
            let mut b = [0; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            b
        };
        let version = u32::from_le_bytes(word(8));
        if version > VERSION {
            return Err(CheckpointError::Newer { found: version });
        }
        if version == 0 {
            return Err(CheckpointError::Corrupt("format version 0"));
        }
        let mut len = [0; 8];
        len.copy_from_slice(&bytes[12..20]);
        let len = u64::from_le_bytes(len);
        let crc = u32::from_le_bytes(word(20));
        let payload = &bytes[HEADER..];
        if payload.len() as u64 != len {
            return Err(CheckpointError::Corrupt("the length does not match"));
        }
        if crc32fast::hash(payload) != crc {
            return Err(CheckpointError::Corrupt("the checksum does not match"));
        }
        StateFile::decode_payload(payload)
    }

    fn decode_payload(payload: &[u8]) -> Result<StateFile, CheckpointError> {
        <StateFile as prost::Message>::decode(payload)
            .map_err(|e| CheckpointError::Decode(e.to_string()))
    }
}

/// What a checkpoint copies under the store's lock: plain values, labels by reference,
/// and every histogram's counts, count and sum written into one buffer as the file
/// holds them; [`StoreCopy::write_to`] writes the file from it after the lock is
/// released. Kept between checkpoints (emptied): at 500,000 series about 72 bytes a
/// series and 25 a histogram.
pub(crate) struct StoreCopy {
    metrics: Vec<MetricState>,
    sources: Vec<SourceCopy>,
    fleet: Vec<FleetCopy>,
    series: Vec<SeriesCopy>,
    folded: Vec<FoldedCopy>,
    /// Every histogram's `HistState` fields but its bounds (counts packed, count,
    /// sum), protobuf-encoded, back to back: a quarter of the numbers' size.
    hists: Vec<u8>,
}

/// A source: its resource by reference.
struct SourceCopy {
    resource: std::sync::Arc<[KeyValue]>,
    age: u64,
}

/// A folded stream, as [`FoldedState`] (its source an index into the copy's).
pub(super) struct FoldedCopy {
    pub(super) source: u32,
    pub(super) metric: u32,
    pub(super) key: u64,
    pub(super) start: u64,
    pub(super) time: u64,
    pub(super) age: u64,
    /// A counter's or gauge's value.
    pub(super) value: f64,
    /// A histogram: its bounds and fields.
    pub(super) hist: Option<(std::sync::Arc<[f64]>, HistAt)>,
}

/// Where a histogram's fields are in [`StoreCopy::hists`].
#[derive(Clone, Copy)]
pub(super) struct HistAt {
    at: usize,
    len: usize,
}

struct FleetCopy {
    metric: u32,
    labels: std::sync::Arc<[(String, String)]>,
    counter: f64,
    /// Histograms: their bounds (shared with the series) and their fields.
    hist: Option<(std::sync::Arc<[f64]>, HistAt)>,
}

impl StoreCopy {
    /// An empty copy.
    pub(crate) fn empty() -> StoreCopy {
        StoreCopy {
            metrics: Vec::new(),
            sources: Vec::new(),
            fleet: Vec::new(),
            series: Vec::new(),
            folded: Vec::new(),
            hists: Vec::new(),
        }
    }

    /// Empties the copy, keeping its buffers' room for the next one (the labels it
    /// shared are let go). A buffer with room for more than twice what it held gives
    /// the rest back: a fleet that shrinks does not keep its largest copy's memory.
    pub(crate) fn clear(&mut self) {
        fn empty<T>(v: &mut Vec<T>) {
            let held = v.len();
            v.clear();
            if v.capacity() > 2 * held {
                v.shrink_to(held);
            }
        }
        empty(&mut self.metrics);
        empty(&mut self.sources);
        empty(&mut self.fleet);
        empty(&mut self.series);
        empty(&mut self.folded);
        empty(&mut self.hists);
    }

    /// Empties the copy, keeping all of its buffers' room.
    fn reset(&mut self) {
        self.metrics.clear();
        self.sources.clear();
        self.fleet.clear();
        self.series.clear();
        self.folded.clear();
        self.hists.clear();
    }

    /// A histogram's fields (empty if the copy does not hold them, which it always
    /// does).
    fn hist(&self, h: HistAt) -> &[u8] {
        self.hists.get(h.at..h.at + h.len).unwrap_or_default()
    }

    /// Writes the fields of `h` into `hists`.
    pub(super) fn copy_hist(hists: &mut Vec<u8>, h: &Hist) -> HistAt {
        let at = hists.len();
        pb::hist_fields(hists, &h.counts, h.count, h.sum);
        HistAt {
            at,
            len: hists.len() - at,
        }
    }
}

/// 72 bytes a series: the identity by id and reference, the values plain.
struct SeriesCopy {
    source: u32,
    metric: u32,
    fleet: u32,
    name: NameIx,
    /// A histogram: `value` and `aux` are its [`HistAt`].
    hist: bool,
    attrs: std::sync::Arc<[(String, String)]>,
    start: u64,
    time: u64,
    age: u64,
    /// A counter's or gauge's value (`f64` bits), or a histogram's `HistAt::at`.
    value: u64,
    /// A gauge's updated age, or a histogram's `HistAt::len`.
    aux: u64,
}

impl SeriesCopy {
    /// Its histogram's fields, if it is one.
    fn hist(&self) -> Option<HistAt> {
        self.hist.then_some(HistAt {
            at: self.value as usize,
            len: self.aux as usize,
        })
    }

    /// A counter's or gauge's value.
    fn value(&self) -> f64 {
        if self.hist {
            0.0
        } else {
            f64::from_bits(self.value)
        }
    }

    /// A gauge's updated age.
    fn updated_age(&self) -> u64 {
        if self.hist { 0 } else { self.aux }
    }
}

/// How much of the payload is encoded before it goes to the file: the checkpoint's
/// memory beyond the copy, whatever the state's size.
const CHUNK: usize = 256 * 1024;

/// The payload on its way to the file: encoded into `buf`, written out (and summed)
/// a chunk at a time.
struct Chunks<'a, W> {
    w: &'a mut W,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Chunks<'_, W> {
    /// Writes `buf` out once it holds a chunk.
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.crc.update(&self.buf);
        self.len += self.buf.len() as u64;
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

impl StoreCopy {
    /// The file's bytes in memory (tests, benchmarks): what [`StoreCopy::write_to`]
    /// writes.
    pub(crate) fn encode(
        &self,
        instance_id: &str,
        origin_unix_nanos: u64,
        written_unix_nanos: u64,
    ) -> Vec<u8> {
        let mut out = io::Cursor::new(Vec::new());
        match self.write_to(&mut out, instance_id, origin_unix_nanos, written_unix_nanos) {
            Ok(()) => out.into_inner(),
            // A `Vec` takes every write.
            Err(e) => unreachable!("writing into memory failed: {e}"),
        }
    }

    /// Writes the file to `w` from its current position (no lock held): the header,
    /// then the payload, written straight from the copy a [`CHUNK`] at a time, then
    /// the header again with the payload's length and checksum. Byte for byte what
    /// prost writes for the [`StateFile`] the copy holds (fields in tag order, proto3
    /// defaults left out, repeated numbers packed), without building that message or
    /// the whole payload in memory: no label is cloned, nothing is allocated per series.
    pub(crate) fn write_to<W: Write + Seek>(
        &self,
        w: &mut W,
        instance_id: &str,
        origin_unix_nanos: u64,
        written_unix_nanos: u64,
    ) -> io::Result<()> {
        let start = w.stream_position()?;
        w.write_all(&[0; HEADER])?;
        let mut out = Chunks {
            w,
            buf: Vec::with_capacity(CHUNK + 4096),
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        pb::string(&mut out.buf, 1, instance_id);
        pb::uint(&mut out.buf, 2, origin_unix_nanos);
        pb::uint(&mut out.buf, 3, written_unix_nanos);
        for m in &self.metrics {
            prost::encoding::message::encode(4, m, &mut out.buf);
            out.spill()?;
        }
        for s in &self.sources {
            pb::message(&mut out.buf, 5, |out| {
                for kv in s.resource.iter() {
                    prost::encoding::message::encode(1, kv, out);
                }
                pb::uint(out, 2, s.age);
            });
            out.spill()?;
        }
        for f in &self.fleet {
            pb::message(&mut out.buf, 6, |out| {
                pb::uint(out, 1, u64::from(f.metric));
                for (key, value) in f.labels.iter() {
                    pb::pair(out, 2, key, value);
                }
                pb::double(out, 3, f.counter);
                if let Some((bounds, h)) = &f.hist {
                    pb::hist(out, 4, bounds, self.hist(*h));
                }
            });
            out.spill()?;
        }
        for s in &self.series {
            pb::message(&mut out.buf, 7, |out| {
                pb::uint(out, 1, u64::from(s.source));
                pb::uint(out, 2, u64::from(s.metric));
                for (key, value) in s.attrs.iter() {
                    pb::pair(out, 3, key, value);
                }
                pb::fixed64(out, 4, s.start);
                pb::fixed64(out, 5, s.time);
                pb::uint(out, 6, s.age);
                pb::double(out, 7, s.value());
                if let Some(h) = s.hist() {
                    // Its bounds are its fleet entry's.
                    pb::hist(out, 8, &[], self.hist(h));
                }
                pb::uint(out, 9, s.updated_age());
                pb::uint(out, 10, u64::from(s.fleet));
                pb::uint(out, 11, u64::from(s.name));
            });
            out.spill()?;
        }
        for f in &self.folded {
            pb::message(&mut out.buf, 8, |out| {
                pb::uint(out, 1, u64::from(f.source));
                pb::uint(out, 2, u64::from(f.metric));
                pb::fixed64(out, 3, f.key);
                pb::fixed64(out, 4, f.start);
                pb::fixed64(out, 5, f.time);
                pb::uint(out, 6, f.age);
                pb::double(out, 7, f.value);
                if let Some((bounds, h)) = &f.hist {
                    pb::hist(out, 8, bounds, self.hist(*h));
                }
            });
            out.spill()?;
        }
        out.flush()?;
        let (len, crc) = (out.len, out.crc.finalize());
        w.seek(SeekFrom::Start(start))?;
        w.write_all(&header(len, crc))?;
        w.seek(SeekFrom::End(0))?;
        Ok(())
    }

    /// The file's message, as the first version built it before encoding it with prost:
    /// what [`StoreCopy::encode`] must write byte for byte.
    #[cfg(test)]
    pub(crate) fn to_state(&self) -> StateFile {
        let pairs = |labels: &[(String, String)]| -> Vec<Pair> {
            labels
                .iter()
                .map(|(k, v)| Pair {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect()
        };
        let fleet: Vec<FleetState> = self
            .fleet
            .iter()
            .map(|f| FleetState {
                metric: f.metric,
                labels: pairs(&f.labels),
                counter: f.counter,
                hist: f.hist.as_ref().map(|(bounds, h)| HistState {
                    bounds: bounds.to_vec(),
                    ..HistState::decode(self.hist(*h)).unwrap_or_default()
                }),
            })
            .collect();
        let series = self
            .series
            .iter()
            .map(|s| SeriesState {
                source: s.source,
                metric: s.metric,
                name: u32::from(s.name),
                attrs: pairs(&s.attrs),
                start: s.start,
                time: s.time,
                age: s.age,
                value: s.value(),
                hist: s
                    .hist()
                    .map(|h| HistState::decode(self.hist(h)).unwrap_or_default()),
                updated_age: s.updated_age(),
                fleet: s.fleet,
            })
            .collect();
        StateFile {
            instance_id: String::new(),
            origin_unix_nanos: 0,
            written_unix_nanos: 0,
            metrics: self.metrics.clone(),
            sources: self
                .sources
                .iter()
                .map(|s| SourceState {
                    resource: s.resource.to_vec(),
                    age: s.age,
                })
                .collect(),
            fleet,
            series,
            folded: self
                .folded
                .iter()
                .map(|f| FoldedState {
                    source: f.source,
                    metric: f.metric,
                    key: f.key,
                    start: f.start,
                    time: f.time,
                    age: f.age,
                    value: f.value,
                    hist: f.hist.as_ref().map(|(bounds, h)| HistState {
                        bounds: bounds.to_vec(),
                        ..HistState::decode(self.hist(*h)).unwrap_or_default()
                    }),
                })
                .collect(),
        }
    }
}

/// Protobuf fields written by hand into a `Vec<u8>`, as prost's derived messages write
/// them: a proto3 field equal to its default (0, 0.0, "", an empty repeated number) is
/// left out, repeated numbers are packed.
mod pb {
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
}

impl Store {
    /// Copies the state: this is what runs under the aggregator's lock; building the
    /// message, encoding and writing happen after it is released. Ages are relative
    /// to `now`.
    #[cfg(test)]
    pub(crate) fn checkpoint(&self, now: u64) -> StoreCopy {
        let mut copy = StoreCopy::empty();
        self.checkpoint_into(now, &mut copy);
        copy
    }

    /// [`Store::checkpoint`] into `copy` (emptied first), reusing its buffers: a
    /// checkpoint of a steady state allocates no more than the one before did.
    pub(crate) fn checkpoint_into(&self, now: u64, copy: &mut StoreCopy) {
        // Not `clear`: a copy handed back empty would give all of its room away.
        copy.reset();
        let StoreCopy {
            metrics,
            sources,
            fleet,
            series: copies,
            folded,
            hists,
        } = copy;
        let mut source_index = vec![u32::MAX; self.sources.len()];
        for (id, src) in self.sources.iter().enumerate() {
            if let Some(src) = src {
                source_index[id] = sources.len() as u32;
                sources.push(SourceCopy {
                    resource: src.resource.clone(),
                    age: now.saturating_sub(src.last_seen()),
                });
            }
        }
        metrics.extend(self.metrics.iter().map(|m| MetricState {
            name: m.otel_name.clone(),
            help: m.help.clone(),
            unit: m.unit.clone(),
            kind: kind_code(m.kind),
            aliases: m.aliases.clone(),
        }));
        let mut fleet_index = vec![u32::MAX; self.fleet.len()];
        fleet.reserve(self.fleet.len());
        for (id, f) in self.fleet.iter().enumerate() {
            let (counter, hist) = match f.value() {
                FleetRead::Counter(v) => (v, None),
                FleetRead::Histogram(h) => (
                    0.0,
                    Some((h.bounds.clone(), StoreCopy::copy_hist(hists, &h))),
                ),
                FleetRead::Gauge => continue,
            };
            fleet_index[id] = fleet.len() as u32;
            fleet.push(FleetCopy {
                metric: f.metric,
                labels: f.label_pairs.clone(),
                counter,
                hist,
            });
        }
        copies.reserve(self.series_held);
        for series in self.series.iter().flatten() {
            let s = series.state();
            if s.fresh {
                continue;
            }
            let (hist, value, aux) = match &s.value {
                Value::Counter { value } => (false, value.to_bits(), 0),
                Value::Gauge { value, updated } => {
                    (false, value.to_bits(), now.saturating_sub(*updated))
                }
                Value::Histogram(h) => {
                    let h = StoreCopy::copy_hist(hists, h);
                    (true, h.at as u64, h.len as u64)
                }
            };
            copies.push(SeriesCopy {
                source: source_index[series.source as usize],
                metric: series.metric,
                fleet: fleet_index[series.fleet as usize],
                name: series.name,
                hist,
                attrs: series.attrs.clone(),
                start: s.start,
                time: s.time,
                age: now.saturating_sub(s.last_seen),
                value,
                aux,
            });
        }
        for (id, src) in self.sources.iter().enumerate() {
            if let Some(src) = src {
                self.copy_folded(src, source_index[id], now, folded, hists);
            }
        }
    }

    /// Loads a checkpoint into this empty store. `now` is the monotonic time, and
    /// `elapsed` how long ago (ns) the file was written. Sources live when it was
    /// written are awaited: the views hold until each has reported again, or for at
    /// most `stale_after`. Returns how many series were restored; what the current
    /// configuration refuses (a limit, a type conflict) is left out and counted.
    pub(crate) fn restore(
        &mut self,
        state: &StateFile,
        now: u64,
        elapsed: u64,
    ) -> Result<RestoreCount, CheckpointError> {
        let at = |age: u64| now.saturating_sub(elapsed.saturating_add(age)).max(1);
        let mut count = RestoreCount::default();
        let mut metric_ids = Vec::with_capacity(state.metrics.len());
        for m in &state.metrics {
            let kind = match m.kind {
                0 => MetricKind::Counter,
                1 => MetricKind::Gauge,
                2 => MetricKind::Histogram,
                _ => return Err(CheckpointError::Decode("unknown metric kind".into())),
            };
            let data = match kind {
                MetricKind::Counter => DataKind::Sum {
                    monotonic: true,
                    delta: false,
                },
                MetricKind::Gauge => DataKind::Gauge,
                MetricKind::Histogram => DataKind::Histogram { delta: false },
            };
            let r = MetricRef {
                name: &m.name,
                description: &m.help,
                unit: &m.unit,
                kind: data,
                points: Vec::new(),
            };
            let Ok((id, _)) = self.metric_id(&r, kind) else {
                metric_ids.push(None);
                continue;
            };
            // The merged names again, in their order, so that each gets its index back.
            let mut names: Vec<Option<NameIx>> = vec![Some(0)];
            for alias in &m.aliases {
                let r = MetricRef {
                    name: alias,
                    description: &m.help,
                    unit: &m.unit,
                    kind: data,
                    points: Vec::new(),
                };
                let got = self.metric_id(&r, kind).ok();
                names.push(got.filter(|(a, _)| *a == id).map(|(_, n)| n));
            }
            metric_ids.push(Some((id, names)));
        }
        for f in &state.fleet {
            let Some(Some(&(metric, _))) = metric_ids.get(f.metric as usize).map(|m| m.as_ref())
            else {
                count.left_out += 1;
                continue;
            };
            let label_pairs: std::sync::Arc<[(String, String)]> = f
                .labels
                .iter()
                .map(|p| (p.key.clone(), p.value.clone()))
                .collect();
            let labels = render_labels(&label_pairs);
            let value = match (&f.hist, self.metrics[metric as usize].kind) {
                (Some(h), MetricKind::Histogram) => FleetValue::Histogram(hist(h)?),
                // Never below 0 and never NaN (it may have overflowed to +inf).
                (None, MetricKind::Counter) if f.counter >= 0.0 => FleetValue::Counter(f.counter),
                (None, MetricKind::Counter) => {
                    return Err(CheckpointError::Decode(format!(
                        "a fleet counter is {}",
                        f.counter
                    )));
                }
                _ => {
                    count.left_out += 1;
                    continue;
                }
            };
            if self.fleet_index.contains_key(&(metric, labels.clone())) {
                return Err(CheckpointError::Decode(
                    "a fleet series appears twice".into(),
                ));
            }
            let id = self.fleet.len() as u32;
            self.fleet.push(Fleet::new(
                metric,
                label_pairs,
                labels.as_str().into(),
                value,
            ));
            self.fleet_index.insert((metric, labels), id);
            self.layout = self.layout.wrapping_add(1);
        }
        let mut source_ids = Vec::with_capacity(state.sources.len());
        let mut raw = Vec::new();
        for s in &state.sources {
            raw.clear();
            raw.extend(s.resource.iter().map(|kv| kv.encode_to_vec()));
            let kvs = raw
                .iter()
                .map(|b| wire::key_value(b))
                .collect::<Result<Vec<Kv<'_>>, _>>()
                .map_err(|e| CheckpointError::Decode(e.to_string()))?;
            let id = self
                .find_or_add_source(&kvs, now, false)
                .map_err(|(_, msg)| CheckpointError::Decode(msg))?;
            let live = self.is_live(at(s.age), now);
            if let Some(src) = self.sources[id as usize].as_mut() {
                *src.last_seen.get_mut() = at(s.age);
                src.baseline_until = 0;
                if live && !src.awaited {
                    src.awaited = true;
                    self.awaiting += 1;
                }
            }
            source_ids.push(id);
        }
        self.hold_until = now.saturating_add(self.stale_after);
        for s in &state.series {
            let (Some(&source), Some(Some((metric, names)))) = (
                source_ids.get(s.source as usize),
                metric_ids.get(s.metric as usize),
            ) else {
                count.left_out += 1;
                continue;
            };
            let (metric, Some(Some(name))) = (*metric, names.get(s.name as usize).copied()) else {
                count.left_out += 1;
                continue;
            };
            let kvs: Vec<Kv<'_>> = s
                .attrs
                .iter()
                .map(|p| Kv {
                    key: &p.key,
                    val: Val::Str(&p.value),
                })
                .collect();
            let kind = self.metrics[metric as usize].kind;
            // Ingest keeps only finite values, and counters not below 0.
            if s.hist.is_none()
                && (!s.value.is_finite() || (kind == MetricKind::Counter && s.value < 0.0))
            {
                return Err(CheckpointError::Decode(format!(
                    "a series' value is {}",
                    s.value
                )));
            }
            let value = match (kind, &s.hist) {
                (MetricKind::Counter, None) => Value::Counter { value: s.value },
                (MetricKind::Gauge, None) => Value::Gauge {
                    value: s.value,
                    updated: at(s.updated_age),
                },
                (MetricKind::Histogram, Some(h)) => {
                    let bounds = state
                        .fleet
                        .get(s.fleet as usize)
                        .and_then(|f| f.hist.as_ref())
                        .map(|f| f.bounds.clone())
                        .ok_or_else(|| {
                            CheckpointError::Decode("a histogram without its fleet entry".into())
                        })?;
                    Value::Histogram(hist(&HistState {
                        bounds,
                        counts: h.counts.clone(),
                        count: h.count,
                        sum: h.sum,
                    })?)
                }
                _ => {
                    count.left_out += 1;
                    continue;
                }
            };
            let bounds = match &value {
                Value::Histogram(h) => Some(h.bounds.clone()),
                _ => None,
            };
            let Ok(id) = self.restore_series(source, metric, name, &kvs, bounds.as_deref(), now)
            else {
                count.left_out += 1;
                continue;
            };
            if let Some(series) = self.series[id as usize].as_mut() {
                let series = series
                    .state
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner);
                if !series.fresh {
                    return Err(CheckpointError::Decode("a series appears twice".into()));
                }
                series.fresh = false;
                series.start = s.start;
                series.time = s.time;
                series.last_seen = at(s.age);
                series.value = value;
                count.series += 1;
            }
            if self.series[id as usize]
                .as_ref()
                .is_some_and(|s| s.overflow)
            {
                self.restored_overflow(source, metric, id);
            }
        }
        for f in &state.folded {
            let (Some(&source), Some(Some((metric, _)))) = (
                source_ids.get(f.source as usize),
                metric_ids.get(f.metric as usize),
            ) else {
                count.left_out += 1;
                continue;
            };
            let hist = f.hist.as_ref().map(hist).transpose()?;
            let last = (f.start, f.time, f.value, hist);
            if !self.restore_folded(source, *metric, f.key, last, at(f.age)) {
                count.left_out += 1;
            }
        }
        count.sources = source_ids.len();
        Ok(count)
    }
}

/// What a restore brought back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestoreCount {
    /// Sources.
    pub(crate) sources: usize,
    /// Per-source series.
    pub(crate) series: usize,
    /// Entries the current configuration refuses (limits, type conflicts).
    pub(crate) left_out: usize,
}
