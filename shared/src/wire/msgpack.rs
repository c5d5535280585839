//! MessagePack values read from request bodies and written into replies: a
//! thin layer over `rmp`'s low-level reader and writer (from the rmp-serde
//! authors), which do the byte work.
//!
//! Requests are tiny maps of strings and integers, read on every request, and
//! every way they can be wrong needs its own sentence (SPEC §1: errors say
//! what is wrong). Reading them value by value ([`Reader::next`]) rather than
//! through `rmp_serde::from_slice` gives that, borrows strings from the body,
//! and sees trailing bytes, which `rmp_serde::from_slice` silently ignores.
//! Maps and arrays are read as headers only; their contents are read by the
//! caller, item by item. Nothing here is needed to skip unknown values: an
//! unexpected value is always an error.
//!
//! Replies are written value by value too ([`Writer`]): a decision is built
//! for every request, and going through serde (`rmp_serde::to_vec_named`)
//! cost several times more than pushing its ~70 bytes. `rmp::encode` picks
//! the smallest encodings, as rmp-serde (which calls the same functions)
//! does, so the bytes are identical (a property test in
//! `shared/tests/wire/replies.rs` checks it).

use rmp::decode::bytes::BytesReadError;
use rmp::decode::{self, Bytes, DecodeStringError, NumValueReadError, ValueReadError};
use rmp::encode::{self, ByteBuf, ValueWriteError};
use rmp::Marker;
use std::convert::Infallible;

/// One MessagePack value. Containers carry their length; their contents
/// follow in the stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value<'a> {
    Nil,
    Bool(bool),
    /// Any integer ≥ 0, whatever its encoding (fixint, uint*, or int*).
    Uint(u64),
    /// A negative integer.
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bin,
    Ext,
    Array(u32),
    Map(u32),
}

impl Value<'_> {
    /// "a string", "a map", ... for error messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "nil",
            Value::Bool(_) => "a boolean",
            Value::Uint(_) => "an unsigned integer",
            Value::Int(_) => "a negative integer",
            Value::Float(_) => "a floating-point number",
            Value::Str(_) => "a string",
            Value::Bin => "binary data",
            Value::Ext => "an extension value",
            Value::Array(_) => "an array",
            Value::Map(_) => "a map",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The body ends inside a value.
    Truncated,
    /// A string is not UTF-8.
    InvalidUtf8,
    /// The marker 0xc1, which MessagePack never uses.
    Reserved,
}

impl ReadError {
    pub(crate) fn sentence(self) -> &'static str {
        match self {
            ReadError::Truncated => "the body ends in the middle of a MessagePack value",
            ReadError::InvalidUtf8 => "a MessagePack string in the body is not valid UTF-8",
            ReadError::Reserved => "the body contains the byte 0xc1, which is not MessagePack",
        }
    }
}

/// A cursor over a body: each [`Reader::next`] reads one value and moves on.
#[derive(Clone)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a [u8]) -> Reader<'a> {
        Reader { rest: body }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Reads one value (for maps and arrays: only the header).
    pub(crate) fn next(&mut self) -> Result<Value<'a>, ReadError> {
        let (&first, after_marker) = self.rest.split_first().ok_or(ReadError::Truncated)?;
        let marker = Marker::from_u8(first);
        let (value, rest) = match marker {
            // Values the marker byte holds whole: most of a request's.
            Marker::FixPos(n) => (Value::Uint(u64::from(n)), after_marker),
            Marker::FixNeg(n) => (Value::Int(i64::from(n)), after_marker),
            Marker::FixMap(n) => (Value::Map(u32::from(n)), after_marker),
            Marker::FixArray(n) => (Value::Array(u32::from(n)), after_marker),
            Marker::Null => (Value::Nil, after_marker),
            Marker::True => (Value::Bool(true), after_marker),
            Marker::False => (Value::Bool(false), after_marker),
            Marker::Reserved => return Err(ReadError::Reserved),
            // Borrowed from the body, so read from the slice itself.
            Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                let (s, rest) = decode::read_str_from_slice(self.rest)?;
                (Value::Str(s), rest)
            }
            _ => Self::with_payload(self.rest, marker)?,
        };
        self.rest = rest;
        Ok(value)
    }

    /// A value whose marker is followed by a length or a number (not a
    /// string): each `rmp::decode` function reads the marker again and what
    /// follows it. `skip` is the payload of values nobody reads.
    fn with_payload(body: &'a [u8], marker: Marker) -> Result<(Value<'a>, &'a [u8]), ReadError> {
        let mut rd = Bytes::new(body);
        let (value, skip) = match marker {
            Marker::U8 | Marker::U16 | Marker::U32 | Marker::U64 => {
                (Value::Uint(decode::read_int(&mut rd)?), 0)
            }
            Marker::I8 | Marker::I16 | Marker::I32 | Marker::I64 => {
                let i: i64 = decode::read_int(&mut rd)?;
                let value = match u64::try_from(i) {
                    Ok(u) => Value::Uint(u),
                    Err(_) => Value::Int(i),
                };
                (value, 0)
            }
            Marker::F32 => (Value::Float(f64::from(decode::read_f32(&mut rd)?)), 0),
            Marker::F64 => (Value::Float(decode::read_f64(&mut rd)?), 0),
            Marker::Map16 | Marker::Map32 => (Value::Map(decode::read_map_len(&mut rd)?), 0),
            Marker::Array16 | Marker::Array32 => {
                (Value::Array(decode::read_array_len(&mut rd)?), 0)
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                (Value::Bin, decode::read_bin_len(&mut rd)?)
            }
            Marker::FixExt1
            | Marker::FixExt2
            | Marker::FixExt4
            | Marker::FixExt8
            | Marker::FixExt16
            | Marker::Ext8
            | Marker::Ext16
            | Marker::Ext32 => (Value::Ext, decode::read_ext_meta(&mut rd)?.size),
            Marker::FixPos(_)
            | Marker::FixNeg(_)
            | Marker::FixMap(_)
            | Marker::FixArray(_)
            | Marker::Null
            | Marker::True
            | Marker::False
            | Marker::Reserved
            | Marker::FixStr(_)
            | Marker::Str8
            | Marker::Str16
            | Marker::Str32 => unreachable!("{marker:?} is read by Reader::next"),
        };
        let rest = rd.remaining_slice().get(skip as usize..);
        Ok((value, rest.ok_or(ReadError::Truncated)?))
    }
}

// rmp's errors, as the sentences above. Reading from a slice fails only by
// running out of bytes; a type mismatch cannot happen, because each
// `rmp::decode` function is called for the marker it reads.

impl From<ValueReadError<BytesReadError>> for ReadError {
    fn from(e: ValueReadError<BytesReadError>) -> ReadError {
        match e {
            ValueReadError::InvalidMarkerRead(_) | ValueReadError::InvalidDataRead(_) => {
                ReadError::Truncated
            }
            ValueReadError::TypeMismatch(m) => unreachable!("read as its own marker: {m:?}"),
        }
    }
}

impl From<NumValueReadError<BytesReadError>> for ReadError {
    fn from(e: NumValueReadError<BytesReadError>) -> ReadError {
        match e {
            NumValueReadError::InvalidMarkerRead(_) | NumValueReadError::InvalidDataRead(_) => {
                ReadError::Truncated
            }
            // u64 holds every unsigned marker's value, i64 every signed one's.
            NumValueReadError::TypeMismatch(_) | NumValueReadError::OutOfRange => {
                unreachable!("read as its own marker: {e:?}")
            }
        }
    }
}

impl From<DecodeStringError<'_, BytesReadError>> for ReadError {
    fn from(e: DecodeStringError<'_, BytesReadError>) -> ReadError {
        match e {
            DecodeStringError::InvalidMarkerRead(_)
            | DecodeStringError::InvalidDataRead(_)
            | DecodeStringError::BufferSizeTooSmall(_) => ReadError::Truncated,
            DecodeStringError::InvalidUtf8(..) => ReadError::InvalidUtf8,
            DecodeStringError::TypeMismatch(m) => unreachable!("read as its own marker: {m:?}"),
        }
    }
}

/// Appends MessagePack values to a buffer, each in its smallest encoding
/// (`rmp::encode`, as rmp-serde). Containers are written as headers; the
/// caller writes their contents after them.
pub(crate) struct Writer {
    buf: ByteBuf,
}

impl Writer {
    /// `capacity`: at least the bytes to be written, so the buffer is
    /// allocated once.
    pub(crate) fn with_capacity(capacity: usize) -> Writer {
        Writer {
            buf: ByteBuf::with_capacity(capacity),
        }
    }

    pub(crate) fn into_vec(self) -> Vec<u8> {
        self.buf.into_vec()
    }

    pub(crate) fn map(&mut self, len: u32) {
        written(encode::write_map_len(&mut self.buf, len));
    }

    pub(crate) fn array(&mut self, len: u32) {
        written(encode::write_array_len(&mut self.buf, len));
    }

    pub(crate) fn bool(&mut self, v: bool) {
        let Ok(()) = encode::write_bool(&mut self.buf, v);
    }

    pub(crate) fn uint(&mut self, v: u64) {
        written(encode::write_uint(&mut self.buf, v));
    }

    /// Strings longer than `u32::MAX` bytes cannot be MessagePack; nothing
    /// sluice writes comes near (error sentences are a few hundred bytes).
    pub(crate) fn str(&mut self, s: &str) {
        assert!(u32::try_from(s.len()).is_ok(), "a string under 4 GiB");
        written(encode::write_str(&mut self.buf, s));
    }
}

/// A `ByteBuf` grows as needed, so writing to it cannot fail.
fn written<T>(result: Result<T, ValueWriteError<Infallible>>) {
    match result {
        Ok(_) => {}
        Err(ValueWriteError::InvalidMarkerWrite(e) | ValueWriteError::InvalidDataWrite(e)) => {
            match e {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Result<Value<'_>, ReadError> {
        let mut r = Reader::new(bytes);
        let v = r.next();
        if v.is_ok() {
            assert_eq!(r.remaining(), 0, "{bytes:02x?} left bytes");
        }
        v
    }

    #[test]
    fn reads_every_integer_encoding() {
        assert_eq!(one(&[0x05]), Ok(Value::Uint(5)));
        assert_eq!(one(&[0xcc, 0xff]), Ok(Value::Uint(255)));
        assert_eq!(one(&[0xcd, 0x01, 0x00]), Ok(Value::Uint(256)));
        assert_eq!(one(&[0xce, 0, 1, 0, 0]), Ok(Value::Uint(65536)));
        assert_eq!(
            one(&[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Ok(Value::Uint(u64::MAX))
        );
        assert_eq!(one(&[0xd0, 0x05]), Ok(Value::Uint(5)));
        assert_eq!(one(&[0xd0, 0xff]), Ok(Value::Int(-1)));
        assert_eq!(one(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 7]), Ok(Value::Uint(7)));
        assert_eq!(one(&[0xff]), Ok(Value::Int(-1)));
        assert_eq!(one(&[0xe0]), Ok(Value::Int(-32)));
    }

    #[test]
    fn reads_strings_and_headers() {
        assert_eq!(one(b"\xa3abc"), Ok(Value::Str("abc")));
        assert_eq!(one(b"\xd9\x03abc"), Ok(Value::Str("abc")));
        assert_eq!(one(b"\xda\x00\x03abc"), Ok(Value::Str("abc")));
        assert_eq!(one(&[0x82]), Ok(Value::Map(2)));
        assert_eq!(one(&[0xde, 0, 17]), Ok(Value::Map(17)));
        assert_eq!(one(&[0x91]), Ok(Value::Array(1)));
        assert_eq!(one(&[0xc4, 2, 0, 0]), Ok(Value::Bin));
        assert_eq!(one(&[0xd4, 1, 0]), Ok(Value::Ext));
        assert_eq!(
            one(&[0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]),
            Ok(Value::Float(1.5))
        );
    }

    #[test]
    fn the_writer_uses_the_smallest_encoding_and_the_reader_reads_it_back() {
        let uints = [
            0,
            127,
            128,
            255,
            256,
            65535,
            65536,
            u64::from(u32::MAX),
            1 << 32,
            u64::MAX,
        ];
        let sizes = [1, 1, 2, 2, 3, 3, 5, 5, 9, 9];
        for (v, size) in uints.into_iter().zip(sizes) {
            let mut w = Writer::with_capacity(0);
            w.uint(v);
            let buf = w.into_vec();
            assert_eq!(buf.len(), size, "{v}");
            assert_eq!(one(&buf), Ok(Value::Uint(v)));
        }
        for len in [0, 31, 32, 255, 256, 65535, 65536] {
            let s = "x".repeat(len);
            let mut w = Writer::with_capacity(0);
            w.str(&s);
            let buf = w.into_vec();
            assert_eq!(one(&buf), Ok(Value::Str(s.as_str())));
        }
        for len in [0, 15, 16, 65535, 65536] {
            let (mut map, mut array) = (Writer::with_capacity(0), Writer::with_capacity(0));
            map.map(len);
            array.array(len);
            let (map, array) = (map.into_vec(), array.into_vec());
            assert_eq!(one(&map), Ok(Value::Map(len)));
            assert_eq!(one(&array), Ok(Value::Array(len)));
        }
        let mut w = Writer::with_capacity(0);
        w.bool(true);
        w.bool(false);
        assert_eq!(w.into_vec(), [0xc3, 0xc2]);
    }

    #[test]
    fn refuses_truncated_values_bad_utf8_and_0xc1() {
        assert_eq!(one(&[]), Err(ReadError::Truncated));
        assert_eq!(one(b"\xa5abc"), Err(ReadError::Truncated));
        assert_eq!(one(&[0xcd, 0x01]), Err(ReadError::Truncated));
        assert_eq!(
            one(&[0xc9, 0xff, 0xff, 0xff, 0xff]),
            Err(ReadError::Truncated)
        );
        assert_eq!(one(b"\xa2\xff\xfe"), Err(ReadError::InvalidUtf8));
        assert_eq!(one(&[0xc1]), Err(ReadError::Reserved));
    }
}
