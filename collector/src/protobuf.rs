//! The one protobuf wire-format reader of the collector: a cursor over a message's
//! bytes (varints, keys, fixed-width and length-delimited fields, skipping), borrowed
//! and allocation-free. The OTLP metrics walk (`aggregate::wire`) and the traces
//! pipeline's span count (`forward`) both read with it.

use std::fmt;

/// Why bytes are not a well-formed OTLP message (an `ExportMetricsServiceRequest`, or a
/// trace request the traces pipeline counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub(crate) &'static str);

impl std::error::Error for DecodeError {}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// What a read gives.
pub(crate) type Result<T> = std::result::Result<T, DecodeError>;

/// A wire type.
pub(crate) const VARINT: u8 = 0;
/// A wire type.
pub(crate) const FIXED64: u8 = 1;
/// A wire type.
pub(crate) const LEN: u8 = 2;
/// A wire type.
pub(crate) const FIXED32: u8 = 5;

/// A cursor over one message's bytes.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(DecodeError("truncated varint"));
            };
            self.pos += 1;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(DecodeError("varint longer than 10 bytes"))
    }

    /// The next field's number and wire type, or `None` at the end.
    pub(crate) fn key(&mut self) -> Result<Option<(u32, u8)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field =
            u32::try_from(key >> 3).map_err(|_| DecodeError("field number out of range"))?;
        if field == 0 {
            return Err(DecodeError("field number 0"));
        }
        Ok(Some((field, (key & 7) as u8)))
    }

    pub(crate) fn fixed64(&mut self) -> Result<u64> {
        let end = self
            .pos
            .checked_add(8)
            .ok_or(DecodeError("truncated fixed64"))?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or(DecodeError("truncated fixed64"))?;
        self.pos = end;
        let mut arr = [0u8; 8];
        arr.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(arr))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8]> {
        let len =
            usize::try_from(self.varint()?).map_err(|_| DecodeError("length out of range"))?;
        let end = self
            .pos
            .checked_add(len)
            .ok_or(DecodeError("length out of range"))?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or(DecodeError("truncated length-delimited field"))?;
        self.pos = end;
        Ok(bytes)
    }

    pub(crate) fn str(&mut self) -> Result<&'a str> {
        std::str::from_utf8(self.bytes()?)
            .map_err(|_| DecodeError("string field is not valid UTF-8"))
    }

    pub(crate) fn skip(&mut self, wire: u8) -> Result<()> {
        match wire {
            VARINT => self.varint().map(|_| ()),
            FIXED64 => self.fixed64().map(|_| ()),
            LEN => self.bytes().map(|_| ()),
            FIXED32 => {
                let end = self
                    .pos
                    .checked_add(4)
                    .ok_or(DecodeError("truncated fixed32"))?;
                if end > self.buf.len() {
                    return Err(DecodeError("truncated fixed32"));
                }
                self.pos = end;
                Ok(())
            }
            _ => Err(DecodeError("invalid or group wire type")),
        }
    }
}
