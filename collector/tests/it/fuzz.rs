//! The collector's fuzzing harness, on stable Rust: structure-aware generators
//! (proptest) build valid inputs from seeds taken from real encodings
//! (`tests/it/fuzz/corpus/`, the shipped `otel-config/` files), then mutate them (bit
//! flips, byte sets, truncations, deletions, insertions, splices from other seeds,
//! huge varints and lengths, format tokens, deep nesting) and feed them to:
//!
//! - `otlp_protobuf`: the OTLP protobuf reader (`Aggregator::ingest_protobuf`, what both
//!   receivers call): an error or a result, never a panic; a refused request leaves the
//!   store as it was; an accepted one aggregates exactly as prost's decoding of the same
//!   bytes, re-encoded, does; a valid generated request's fleet sums equal a reference
//!   computed from the generator's model.
//! - `otlp_json`: the OTLP/JSON reader (serde into the vendored OTLP types, as the HTTP
//!   receiver does): an error or a request, which is well-formed protobuf once
//!   encoded and aggregates as its JSON round trip does.
//! - `remote_write`: the remote write encoder's input (the fleet view's rows, from
//!   requests with hostile names, label values, values and bounds): every request
//!   decodes, every series has valid, sorted, unique label names, and the samples are
//!   a `/metrics` scrape's.
//! - `config`: `Config::from_yaml` and `Config::plan`: a config, or an error that names
//!   a key path (or, for YAML that does not parse, the line and column), never a panic.
//! - `checkpoint`: the state file reader and the restore (a collector started on the
//!   file): a corrupted, truncated or newer-format file is set aside with a clear log
//!   line and the collector starts from a baseline; a valid file restores exactly;
//!   payloads mutated behind a valid header restore or are refused, never a panic.
//!
//! `cargo test -p higgsmeter-collector --test it fuzz` is the short, fixed run CI does (a
//! fixed seed, a fixed number of cases per target). The longer run:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `HIGGSMETER_FUZZ_CASES` | cases per round of each target | each target's CI count |
//! | `HIGGSMETER_FUZZ_SECS` | keep running rounds with new seeds for this long, per target | one round |
//! | `HIGGSMETER_FUZZ_SEED` | the first round's seed (`random` for a fresh one) | fixed |
//!
//! A failure prints the minimal (shrunk) input and the seed and case count that
//! reproduce it.

mod checkpoint;
mod config;
mod harness;
mod mutate;
mod otlp;
mod remote_write;
