//! A scrape's body: a view's rows encoded in the negotiated format (`views::negotiate`),
//! a chunk at a time, through one gzip stream when the scraper accepts gzip (never
//! flushed before the end: the chunks only bound memory, and a scraper reads the whole
//! body anyway).

use std::io::Write as _;

use bytes::{BufMut as _, Bytes, BytesMut};
use flate2::write::GzEncoder;

use super::exposition::Encoder;
use super::exposition_proto::ProtoEncoder;
use super::negotiate::{Coding, Exposition};
use super::rows::Rows;

/// How much text (or protobuf) one chunk of a scrape's body holds before compression
/// (small enough for the allocator to reuse its buffers).
const CHUNK: usize = 64 * 1024;

/// The gzip level of a compressed scrape, chosen by measurement (`cargo bench -p
/// higgsmeter-collector --bench ingest -- gzip/`, BENCHMARKS.md): the render benchmark's
/// 44.9 MB fleet view became 2.30 MB in 19 ms at level 1 (flate2's Rust backend: its
/// fast path), 1.86 MB in 61 ms at level 2, 1.84 MB in 103 ms at level 3 and 1.94 MB in
/// 258 ms at the default level 6: level 1 costs less than the text's own encoding, and
/// higher levels save at most a fifth of the bytes for 3 to 14 times the CPU.
pub(crate) const GZIP_LEVEL: u32 = 1;

/// How much compressed output a gzip chunk waits for before it is sent.
const GZIP_CHUNK: usize = 32 * 1024;

/// The encoder of one format.
enum Encoding {
    Text(Encoder),
    Protobuf(ProtoEncoder),
}

/// A scrape's body, a chunk at a time: the view encoded, gzip-compressed when
/// negotiated (one gzip stream over the whole body, never flushed before its end).
pub(crate) struct Scrape {
    encoding: Encoding,
    gzip: Option<GzEncoder<bytes::buf::Writer<BytesMut>>>,
    done: bool,
}

impl Scrape {
    /// The body of `rows` in `format`, with content coding `coding`.
    pub(crate) fn new(rows: Rows, format: Exposition, coding: Coding) -> Scrape {
        let encoding = match format {
            Exposition::Text(format) => Encoding::Text(Encoder::new(rows, format)),
            Exposition::Protobuf => Encoding::Protobuf(ProtoEncoder::new(rows)),
        };
        let gzip = (coding == Coding::Gzip).then(|| {
            GzEncoder::new(
                BytesMut::new().writer(),
                flate2::Compression::new(GZIP_LEVEL),
            )
        });
        Scrape {
            encoding,
            gzip,
            done: false,
        }
    }

    fn next_plain(&mut self) -> Option<Bytes> {
        match &mut self.encoding {
            Encoding::Text(e) => e.next_chunk(CHUNK),
            Encoding::Protobuf(e) => e.next_chunk(CHUNK),
        }
    }

    /// The body's next chunk, `None` at its end; an error (never expected: compressing
    /// into memory) aborts the response.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Bytes>, std::io::Error> {
        if self.done {
            return Ok(None);
        }
        if self.gzip.is_none() {
            let chunk = self.next_plain();
            self.done = chunk.is_none();
            return Ok(chunk);
        }
        loop {
            let plain = self.next_plain();
            let Some(gz) = self.gzip.as_mut() else {
                return Ok(None);
            };
            match plain {
                Some(plain) => {
                    gz.write_all(&plain)?;
                    let out = gz.get_mut().get_mut();
                    if out.len() >= GZIP_CHUNK {
                        // The buffer takes the chunks' memory back (on its next reserve)
                        // once they are sent and dropped.
                        return Ok(Some(out.split().freeze()));
                    }
                }
                None => {
                    gz.try_finish()?;
                    self.done = true;
                    let out = gz.get_mut().get_mut();
                    return Ok((!out.is_empty()).then(|| out.split().freeze()));
                }
            }
        }
    }
}
