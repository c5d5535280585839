//! A minimal MessagePack reader for request bodies, and writer for replies.
//!
//! Requests are tiny maps of strings and integers, read on every request, and
//! every way they can be wrong needs its own sentence (CONTRACT §1: errors say
//! what is wrong). Reading them by hand gives that, borrows strings from the
//! body, and sees trailing bytes, which `rmp_serde::from_slice` silently
//! ignores. Maps and arrays are read as headers only; their contents are read
//! by the caller, item by item. Nothing here is needed to skip unknown
//! values: an unexpected value is always an error.
//!
//! Replies are written by hand too: a decision is built for every request,
//! and going through serde (`rmp_serde::to_vec_named`) cost several times
//! more than pushing its ~70 bytes. The writer picks the same (smallest)
//! encodings as rmp-serde, so the bytes are identical (a property test in
//! `wire` checks it).

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

    fn take(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        if n > self.rest.len() {
            return Err(ReadError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ReadError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, ReadError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, ReadError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, ReadError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ReadError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn str(&mut self, len: u32) -> Result<Value<'a>, ReadError> {
        let bytes = self.take(len as usize)?;
        std::str::from_utf8(bytes)
            .map(Value::Str)
            .map_err(|_| ReadError::InvalidUtf8)
    }

    fn skip(&mut self, len: u32, v: Value<'a>) -> Result<Value<'a>, ReadError> {
        self.take(len as usize)?;
        Ok(v)
    }

    fn int(i: i64) -> Value<'a> {
        match u64::try_from(i) {
            Ok(u) => Value::Uint(u),
            Err(_) => Value::Int(i),
        }
    }

    /// Reads one value (for maps and arrays: only the header).
    pub(crate) fn next(&mut self) -> Result<Value<'a>, ReadError> {
        let m = self.u8()?;
        Ok(match m {
            0x00..=0x7f => Value::Uint(u64::from(m)),
            0x80..=0x8f => Value::Map(u32::from(m & 0x0f)),
            0x90..=0x9f => Value::Array(u32::from(m & 0x0f)),
            0xa0..=0xbf => self.str(u32::from(m & 0x1f))?,
            0xc0 => Value::Nil,
            0xc1 => return Err(ReadError::Reserved),
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4 => {
                let n = self.u8()?;
                self.skip(u32::from(n), Value::Bin)?
            }
            0xc5 => {
                let n = self.u16()?;
                self.skip(u32::from(n), Value::Bin)?
            }
            0xc6 => {
                let n = self.u32()?;
                self.skip(n, Value::Bin)?
            }
            0xc7 => {
                let n = self.u8()?;
                self.skip(u32::from(n) + 1, Value::Ext)?
            }
            0xc8 => {
                let n = self.u16()?;
                self.skip(u32::from(n) + 1, Value::Ext)?
            }
            0xc9 => {
                let n = self.u32()?;
                self.skip(n.saturating_add(1), Value::Ext)?
            }
            0xca => Value::Float(f64::from(f32::from_be_bytes(self.array()?))),
            0xcb => Value::Float(f64::from_be_bytes(self.array()?)),
            0xcc => Value::Uint(u64::from(self.u8()?)),
            0xcd => Value::Uint(u64::from(self.u16()?)),
            0xce => Value::Uint(u64::from(self.u32()?)),
            0xcf => Value::Uint(self.u64()?),
            0xd0 => Self::int(i64::from(i8::from_be_bytes(self.array()?))),
            0xd1 => Self::int(i64::from(i16::from_be_bytes(self.array()?))),
            0xd2 => Self::int(i64::from(i32::from_be_bytes(self.array()?))),
            0xd3 => Self::int(i64::from_be_bytes(self.array()?)),
            0xd4 => self.skip(2, Value::Ext)?,
            0xd5 => self.skip(3, Value::Ext)?,
            0xd6 => self.skip(5, Value::Ext)?,
            0xd7 => self.skip(9, Value::Ext)?,
            0xd8 => self.skip(17, Value::Ext)?,
            0xd9 => {
                let n = self.u8()?;
                self.str(u32::from(n))?
            }
            0xda => {
                let n = self.u16()?;
                self.str(u32::from(n))?
            }
            0xdb => {
                let n = self.u32()?;
                self.str(n)?
            }
            0xdc => Value::Array(u32::from(self.u16()?)),
            0xdd => Value::Array(self.u32()?),
            0xde => Value::Map(u32::from(self.u16()?)),
            0xdf => Value::Map(self.u32()?),
            0xe0..=0xff => Value::Int(i64::from(m as i8)),
        })
    }
}

/// Appends MessagePack values to a buffer, each in its smallest encoding
/// (as rmp-serde does). Containers are written as headers; the caller writes
/// their contents after them.
pub(crate) struct Writer<'b> {
    buf: &'b mut Vec<u8>,
}

impl<'b> Writer<'b> {
    pub(crate) fn new(buf: &'b mut Vec<u8>) -> Writer<'b> {
        Writer { buf }
    }

    pub(crate) fn map(&mut self, len: u32) {
        self.container(len, 0x80, 0xde);
    }

    pub(crate) fn array(&mut self, len: u32) {
        self.container(len, 0x90, 0xdc);
    }

    /// `fix` holds up to 15 entries in its low bits, `marker16` is followed
    /// by a u16 length and `marker16 + 1` by a u32 one.
    fn container(&mut self, len: u32, fix: u8, marker16: u8) {
        if len < 16 {
            self.buf.push(fix | len as u8);
        } else if let Ok(len) = u16::try_from(len) {
            self.buf.push(marker16);
            self.buf.extend_from_slice(&len.to_be_bytes());
        } else {
            self.buf.push(marker16 + 1);
            self.buf.extend_from_slice(&len.to_be_bytes());
        }
    }

    pub(crate) fn bool(&mut self, v: bool) {
        self.buf.push(if v { 0xc3 } else { 0xc2 });
    }

    pub(crate) fn uint(&mut self, v: u64) {
        if v < 0x80 {
            self.buf.push(v as u8);
        } else if let Ok(v) = u8::try_from(v) {
            self.buf.extend_from_slice(&[0xcc, v]);
        } else if let Ok(v) = u16::try_from(v) {
            self.buf.push(0xcd);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = u32::try_from(v) {
            self.buf.push(0xce);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else {
            self.buf.push(0xcf);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    /// Strings longer than `u32::MAX` bytes cannot be MessagePack; nothing
    /// sluice writes comes near (error sentences are a few hundred bytes).
    pub(crate) fn str(&mut self, s: &str) {
        let len = s.len();
        if len < 32 {
            self.buf.push(0xa0 | len as u8);
        } else if let Ok(len) = u8::try_from(len) {
            self.buf.extend_from_slice(&[0xd9, len]);
        } else if let Ok(len) = u16::try_from(len) {
            self.buf.push(0xda);
            self.buf.extend_from_slice(&len.to_be_bytes());
        } else {
            let len = u32::try_from(len).expect("a string under 4 GiB");
            self.buf.push(0xdb);
            self.buf.extend_from_slice(&len.to_be_bytes());
        }
        self.buf.extend_from_slice(s.as_bytes());
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
            let mut buf = Vec::new();
            Writer::new(&mut buf).uint(v);
            assert_eq!(buf.len(), size, "{v}");
            assert_eq!(one(&buf), Ok(Value::Uint(v)));
        }
        for len in [0, 31, 32, 255, 256, 65535, 65536] {
            let s = "x".repeat(len);
            let mut buf = Vec::new();
            Writer::new(&mut buf).str(&s);
            assert_eq!(one(&buf), Ok(Value::Str(s.as_str())));
        }
        for len in [0, 15, 16, 65535, 65536] {
            let (mut map, mut array) = (Vec::new(), Vec::new());
            Writer::new(&mut map).map(len);
            Writer::new(&mut array).array(len);
            assert_eq!(one(&map), Ok(Value::Map(len)));
            assert_eq!(one(&array), Ok(Value::Array(len)));
        }
        let mut buf = Vec::new();
        Writer::new(&mut buf).bool(true);
        Writer::new(&mut buf).bool(false);
        assert_eq!(buf, [0xc3, 0xc2]);
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
