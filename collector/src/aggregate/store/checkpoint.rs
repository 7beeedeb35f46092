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

//!
//! Its parts: this file, the file's format (the messages, the header, reading);
//! `copy.rs`, what is copied under the lock and how the file is written from the copy;
//! `pb.rs`, the protobuf fields written by hand; `restore.rs`, loading a file into an
//! empty store.

use opentelemetry_proto::tonic::common::v1::KeyValue;
#[cfg(test)]
use prost::Message as _;

use super::super::MetricKind;
use super::Hist;

mod copy;
mod pb;
mod restore;

pub(super) use copy::FoldedCopy;
pub(crate) use copy::StoreCopy;
pub(crate) use restore::RestoreCount;

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
    /// The job ledger (`views::jobs::JobLedger`) as JSON; empty when no job is known.
    #[prost(string, tag = "9")]
    pub(crate) jobs_json: String,
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
