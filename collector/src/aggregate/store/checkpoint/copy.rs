//! What a checkpoint copies under the store's lock ([`Store::checkpoint_into`]), and
//! the state file written from that copy after the lock is released
//! ([`StoreCopy::write_to`]).

use std::io::{self, Seek, SeekFrom, Write};

use opentelemetry_proto::tonic::common::v1::KeyValue;
#[cfg(test)]
use prost::Message as _;

use super::super::{FleetRead, Hist, NameIx, Store, Value};
#[cfg(test)]
use super::{FleetState, FoldedState, HistState, Pair, SeriesState, SourceState, StateFile};
use super::{HEADER, MetricState, header, kind_code, pb};

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
    /// The job ledger as JSON (`views::jobs`; the aggregator sets it), field 9.
    jobs_json: String,
}

/// A source: its resource by reference.
struct SourceCopy {
    resource: std::sync::Arc<[KeyValue]>,
    age: u64,
}

/// A folded stream, as [`FoldedState`] (its source an index into the copy's).
pub(crate) struct FoldedCopy {
    pub(crate) source: u32,
    pub(crate) metric: u32,
    pub(crate) key: u64,
    pub(crate) start: u64,
    pub(crate) time: u64,
    pub(crate) age: u64,
    /// A counter's or gauge's value.
    pub(crate) value: f64,
    /// A histogram: its bounds and fields.
    pub(crate) hist: Option<(std::sync::Arc<[f64]>, HistAt)>,
}

/// Where a histogram's fields are in [`StoreCopy::hists`].
#[derive(Clone, Copy)]
pub(crate) struct HistAt {
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
            jobs_json: String::new(),
        }
    }

    /// Sets the job ledger's JSON the file carries (field 9).
    pub(crate) fn set_jobs_json(&mut self, json: String) {
        self.jobs_json = json;
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
        self.jobs_json.clear();
    }

    /// Empties the copy, keeping all of its buffers' room.
    fn reset(&mut self) {
        self.metrics.clear();
        self.sources.clear();
        self.fleet.clear();
        self.series.clear();
        self.folded.clear();
        self.hists.clear();
        self.jobs_json.clear();
    }

    /// A histogram's fields (empty if the copy does not hold them, which it always
    /// does).
    fn hist(&self, h: HistAt) -> &[u8] {
        self.hists.get(h.at..h.at + h.len).unwrap_or_default()
    }

    /// Writes the fields of `h` into `hists`.
    pub(crate) fn copy_hist(hists: &mut Vec<u8>, h: &Hist) -> HistAt {
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
        pb::string(&mut out.buf, 9, &self.jobs_json);
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
            jobs_json: self.jobs_json.clone(),
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
            jobs_json: _,
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
}
