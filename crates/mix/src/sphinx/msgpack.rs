//! A small msgpack codec that reproduces petlib's `pack.encode` bytes
//! (msgpack-python 0.5.6, `use_bin_type=True`) and decodes its output.
//!
//! Encoding rules (msgpack-python 0.5.6):
//! - integers use the smallest form; non-negative values use the unsigned
//!   family (`cc`/`cd`/`ce`/`cf`), negative ones the signed family;
//! - floats are always float64 (`cb`);
//! - Python `str` is msgpack str (`a0`-`bf`, `d9`, `da`, `db`); `bytes` is bin
//!   (`c4`/`c5`/`c6`); tuples and lists are arrays;
//! - petlib objects are ext types: 0 = Bn (`+`/`-` then big-endian
//!   magnitude), 1 = EcGroup (packed nid), 2 = EcPt (the *inner* packing
//!   `packb((nid, compressed_point))` made without `use_bin_type`, so the
//!   point bytes appear as a str, e.g. `92 cd 02c9 bd <29 bytes>`).
//!
//! Decoding is bounded: nesting depth is limited and every length is checked
//! against the remaining input, so hostile input yields an error.

use thiserror::Error;

/// A msgpack value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    /// Any integer (msgpack's range fits in i128).
    Int(i128),
    F64(f64),
    /// A msgpack str (raw bytes; Python 3 writes UTF-8 here).
    Str(Vec<u8>),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Ext(i8, Vec<u8>),
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MsgpackError {
    #[error("msgpack input truncated")]
    Truncated,
    #[error("msgpack nesting too deep")]
    TooDeep,
    #[error("msgpack reserved byte 0xc1")]
    Reserved,
    #[error("trailing bytes after msgpack value")]
    Trailing,
}

/// Maximum nesting depth accepted by the decoder.
pub const MAX_DEPTH: usize = 16;

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(s.as_bytes().to_vec())
    }
    pub fn bin(b: &[u8]) -> Value {
        Value::Bin(b.to_vec())
    }
    /// Bytes of a str *or* bin: only for fields where the reference itself
    /// accepts both (the message of a forward payload, the point inside a
    /// petlib EcPt, which petlib packs as a raw str).
    pub fn as_str_or_bin(&self) -> Option<&[u8]> {
        match self {
            Value::Str(b) | Value::Bin(b) => Some(b),
            _ => None,
        }
    }

    /// Bytes of a bin only: for fields the reference requires to be
    /// `bytes` (Sphinx beta, gamma and body: Python 3 sphinxmix cannot
    /// process them as str, so a str there is malformed).
    pub fn as_bin(&self) -> Option<&[u8]> {
        match self {
            Value::Bin(b) => Some(b),
            _ => None,
        }
    }

    /// Text of a field that Python 3 writes as a UTF-8 str and Python 2 as
    /// bin (routing flags, hosts, names, control-message words): either
    /// form is accepted, but it must be valid UTF-8.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Str(b) | Value::Bin(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_into(&mut out, true);
        out
    }

    /// `compat_raw = false` reproduces `msgpack.packb(x)` without
    /// `use_bin_type` (bytes become str-family raw, no `d9`).
    pub fn encode_into(&self, out: &mut Vec<u8>, bin_type: bool) {
        match self {
            Value::Nil => out.push(0xc0),
            Value::Bool(false) => out.push(0xc2),
            Value::Bool(true) => out.push(0xc3),
            Value::Int(i) => encode_int(*i, out),
            Value::F64(f) => {
                out.push(0xcb);
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            }
            Value::Str(s) => {
                encode_str_header(s.len(), out, bin_type);
                out.extend_from_slice(s);
            }
            Value::Bin(b) => {
                if bin_type {
                    encode_bin_header(b.len(), out);
                } else {
                    encode_str_header(b.len(), out, false);
                }
                out.extend_from_slice(b);
            }
            Value::Array(a) => {
                let n = a.len();
                if n < 16 {
                    out.push(0x90 | n as u8);
                } else if n <= 0xffff {
                    out.push(0xdc);
                    out.extend_from_slice(&(n as u16).to_be_bytes());
                } else {
                    out.push(0xdd);
                    out.extend_from_slice(&(n as u32).to_be_bytes());
                }
                for v in a {
                    v.encode_into(out, bin_type);
                }
            }
            Value::Map(m) => {
                let n = m.len();
                if n < 16 {
                    out.push(0x80 | n as u8);
                } else if n <= 0xffff {
                    out.push(0xde);
                    out.extend_from_slice(&(n as u16).to_be_bytes());
                } else {
                    out.push(0xdf);
                    out.extend_from_slice(&(n as u32).to_be_bytes());
                }
                for (k, v) in m {
                    k.encode_into(out, bin_type);
                    v.encode_into(out, bin_type);
                }
            }
            Value::Ext(t, d) => {
                let n = d.len();
                match n {
                    1 => out.push(0xd4),
                    2 => out.push(0xd5),
                    4 => out.push(0xd6),
                    8 => out.push(0xd7),
                    16 => out.push(0xd8),
                    _ if n <= 0xff => {
                        out.push(0xc7);
                        out.push(n as u8);
                    }
                    _ if n <= 0xffff => {
                        out.push(0xc8);
                        out.extend_from_slice(&(n as u16).to_be_bytes());
                    }
                    _ => {
                        out.push(0xc9);
                        out.extend_from_slice(&(n as u32).to_be_bytes());
                    }
                }
                out.push(*t as u8);
                out.extend_from_slice(d);
            }
        }
    }

    /// Decodes exactly one value filling the whole input.
    pub fn decode(data: &[u8]) -> Result<Value, MsgpackError> {
        let mut r = Reader { data, pos: 0 };
        let v = r.value(0)?;
        if r.pos != data.len() {
            return Err(MsgpackError::Trailing);
        }
        Ok(v)
    }

    /// Decodes one value from the front of the input; returns it and the
    /// number of bytes used.
    pub fn decode_prefix(data: &[u8]) -> Result<(Value, usize), MsgpackError> {
        let mut r = Reader { data, pos: 0 };
        let v = r.value(0)?;
        Ok((v, r.pos))
    }
}

fn encode_int(i: i128, out: &mut Vec<u8>) {
    if i >= 0 {
        if i < 128 {
            out.push(i as u8);
        } else if i <= 0xff {
            out.push(0xcc);
            out.push(i as u8);
        } else if i <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(i as u16).to_be_bytes());
        } else if i <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(i as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(i as u64).to_be_bytes());
        }
    } else if i >= -32 {
        out.push(i as i8 as u8);
    } else if i >= -128 {
        out.push(0xd0);
        out.push(i as i8 as u8);
    } else if i >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= -(1 << 31) {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&(i as i64).to_be_bytes());
    }
}

fn encode_str_header(n: usize, out: &mut Vec<u8>, bin_type: bool) {
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff && bin_type {
        out.push(0xd9);
        out.push(n as u8);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode_bin_header(n: usize, out: &mut Vec<u8>) {
    if n <= 0xff {
        out.push(0xc4);
        out.push(n as u8);
    } else if n <= 0xffff {
        out.push(0xc5);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MsgpackError> {
        let end = self.pos.checked_add(n).ok_or(MsgpackError::Truncated)?;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or(MsgpackError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, MsgpackError> {
        Ok(self.take(1)?[0])
    }
    fn be(&mut self, n: usize) -> Result<u64, MsgpackError> {
        let s = self.take(n)?;
        Ok(s.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
    }
    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, MsgpackError> {
        Ok(self.take(n)?.to_vec())
    }
    fn items(&mut self, n: usize, depth: usize) -> Result<Vec<Value>, MsgpackError> {
        // Each item takes at least one byte: bound the allocation by input.
        if n > self.data.len() - self.pos {
            return Err(MsgpackError::Truncated);
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.value(depth + 1)?);
        }
        Ok(v)
    }
    fn map(&mut self, n: usize, depth: usize) -> Result<Value, MsgpackError> {
        if n.saturating_mul(2) > self.data.len() - self.pos {
            return Err(MsgpackError::Truncated);
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let x = self.value(depth + 1)?;
            v.push((k, x));
        }
        Ok(Value::Map(v))
    }
    fn ext(&mut self, n: usize) -> Result<Value, MsgpackError> {
        let t = self.u8()? as i8;
        Ok(Value::Ext(t, self.bytes(n)?))
    }

    fn value(&mut self, depth: usize) -> Result<Value, MsgpackError> {
        if depth > MAX_DEPTH {
            return Err(MsgpackError::TooDeep);
        }
        let b = self.u8()?;
        Ok(match b {
            0x00..=0x7f => Value::Int(i128::from(b)),
            0x80..=0x8f => return self.map(usize::from(b & 0x0f), depth),
            0x90..=0x9f => Value::Array(self.items(usize::from(b & 0x0f), depth)?),
            0xa0..=0xbf => Value::Str(self.bytes(usize::from(b & 0x1f))?),
            0xc0 => Value::Nil,
            0xc1 => return Err(MsgpackError::Reserved),
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4 => {
                let n = self.be(1)? as usize;
                Value::Bin(self.bytes(n)?)
            }
            0xc5 => {
                let n = self.be(2)? as usize;
                Value::Bin(self.bytes(n)?)
            }
            0xc6 => {
                let n = self.be(4)? as usize;
                Value::Bin(self.bytes(n)?)
            }
            0xc7 => {
                let n = self.be(1)? as usize;
                return self.ext(n);
            }
            0xc8 => {
                let n = self.be(2)? as usize;
                return self.ext(n);
            }
            0xc9 => {
                let n = self.be(4)? as usize;
                return self.ext(n);
            }
            0xca => Value::F64(f64::from(f32::from_bits(self.be(4)? as u32))),
            0xcb => Value::F64(f64::from_bits(self.be(8)?)),
            0xcc => Value::Int(i128::from(self.be(1)?)),
            0xcd => Value::Int(i128::from(self.be(2)?)),
            0xce => Value::Int(i128::from(self.be(4)?)),
            0xcf => Value::Int(i128::from(self.be(8)?)),
            0xd0 => Value::Int(i128::from(self.be(1)? as u8 as i8)),
            0xd1 => Value::Int(i128::from(self.be(2)? as u16 as i16)),
            0xd2 => Value::Int(i128::from(self.be(4)? as u32 as i32)),
            0xd3 => Value::Int(i128::from(self.be(8)? as i64)),
            0xd4 => return self.ext(1),
            0xd5 => return self.ext(2),
            0xd6 => return self.ext(4),
            0xd7 => return self.ext(8),
            0xd8 => return self.ext(16),
            0xd9 => {
                let n = self.be(1)? as usize;
                Value::Str(self.bytes(n)?)
            }
            0xda => {
                let n = self.be(2)? as usize;
                Value::Str(self.bytes(n)?)
            }
            0xdb => {
                let n = self.be(4)? as usize;
                Value::Str(self.bytes(n)?)
            }
            0xdc => {
                let n = self.be(2)? as usize;
                Value::Array(self.items(n, depth)?)
            }
            0xdd => {
                let n = self.be(4)? as usize;
                Value::Array(self.items(n, depth)?)
            }
            0xde => {
                let n = self.be(2)? as usize;
                return self.map(n, depth);
            }
            0xdf => {
                let n = self.be(4)? as usize;
                return self.map(n, depth);
            }
            0xe0..=0xff => Value::Int(i128::from(b as i8)),
        })
    }
}

/// petlib NID of NIST P-224.
pub const NID_P224: i128 = 713;

/// petlib's encoding of an EcPt on P-224 given its compressed form:
/// `ExtType(2, packb((713, point)))`.
pub fn ecpt_value(compressed: &[u8; 29]) -> Value {
    let mut inner = Vec::with_capacity(34);
    Value::Array(vec![Value::Int(NID_P224), Value::Bin(compressed.to_vec())])
        .encode_into(&mut inner, false);
    Value::Ext(2, inner)
}

/// Extracts the SEC1 point bytes from a petlib EcPt ext value on P-224.
pub fn ecpt_bytes(v: &Value) -> Option<&[u8]> {
    let Value::Ext(2, inner) = v else { return None };
    // The inner value is small; decode it and borrow from `inner`.
    let (val, used) = Value::decode_prefix(inner).ok()?;
    if used != inner.len() {
        return None;
    }
    let arr = val.as_array()?;
    if arr.len() != 2 || arr[0].as_int()? != NID_P224 {
        return None;
    }
    let len = arr[1].as_str_or_bin()?.len();
    // The point bytes are the last `len` bytes of the inner encoding.
    inner.get(inner.len() - len..)
}

/// petlib's encoding of a Bn: `ExtType(0, b"+" + big-endian magnitude)`.
pub fn bn_value(be: &[u8]) -> Value {
    let first = be.iter().position(|b| *b != 0).unwrap_or(be.len());
    let mut d = Vec::with_capacity(1 + be.len() - first);
    d.push(b'+');
    d.extend_from_slice(&be[first..]);
    Value::Ext(0, d)
}

/// Magnitude bytes of a non-negative petlib Bn.
pub fn bn_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::Ext(0, d) if d.first() == Some(&b'+') => Some(&d[1..]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_and_strings_match_msgpack_python() {
        let cases: &[(Value, &str)] = &[
            (Value::Int(0), "00"),
            (Value::Int(127), "7f"),
            (Value::Int(128), "cc80"),
            (Value::Int(713), "cd02c9"),
            (Value::Int(70000), "ce00011170"),
            (Value::Int(-1), "ff"),
            (Value::Int(-33), "d0df"),
            (Value::F64(0.0), "cb0000000000000000"),
            (Value::str("PULL"), "a450554c4c"),
            (Value::Bin(vec![1]), "c40101"),
            (Value::Nil, "c0"),
            (Value::Bool(true), "c3"),
        ];
        for (v, hexs) in cases {
            assert_eq!(hex::encode(v.encode()), *hexs, "{v:?}");
            assert_eq!(&Value::decode(&v.encode()).expect("roundtrip"), v);
        }
        // 40-byte str uses d9 only with use_bin_type
        let s = Value::Str(vec![b'a'; 40]);
        assert_eq!(s.encode()[0], 0xd9);
        let mut raw = Vec::new();
        s.encode_into(&mut raw, false);
        assert_eq!(raw[0], 0xda);
    }

    #[test]
    fn strict_and_lenient_accessors() {
        let s = Value::str("mix0");
        let b = Value::bin(b"mix0");
        // bin-only fields refuse str
        assert_eq!(s.as_bin(), None);
        assert_eq!(b.as_bin(), Some(&b"mix0"[..]));
        // text fields take Python 3's str and Python 2's bin, UTF-8 only
        assert_eq!(s.as_text(), Some("mix0"));
        assert_eq!(b.as_text(), Some("mix0"));
        assert_eq!(Value::Str(vec![0xff, 0xfe]).as_text(), None);
        assert_eq!(Value::Int(1).as_text(), None);
        // lenient fields take both
        assert_eq!(s.as_str_or_bin(), b.as_str_or_bin());
        assert_eq!(Value::Nil.as_str_or_bin(), None);
    }

    #[test]
    fn ecpt_point_as_raw_str_or_bin() {
        // petlib packs the inner point as a raw str (`bd`); the reference
        // also decodes a bin there, so both are read.
        let c = [2u8; 29];
        let v = ecpt_value(&c);
        assert_eq!(ecpt_bytes(&v), Some(&c[..]));
        let inner = Value::Array(vec![Value::Int(NID_P224), Value::Bin(c.to_vec())]).encode();
        assert_eq!(inner[4], 0xc4);
        assert_eq!(ecpt_bytes(&Value::Ext(2, inner)), Some(&c[..]));
        let wrong_nid = Value::Array(vec![Value::Int(714), Value::Bin(c.to_vec())]).encode();
        assert_eq!(ecpt_bytes(&Value::Ext(2, wrong_nid)), None);
    }

    #[test]
    fn hostile_inputs_error() {
        assert_eq!(
            Value::decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]),
            Err(MsgpackError::Truncated)
        );
        assert_eq!(
            Value::decode(&[0xc6, 0xff, 0xff, 0xff, 0xff]),
            Err(MsgpackError::Truncated)
        );
        assert_eq!(Value::decode(&[0x91; 100]), Err(MsgpackError::TooDeep));
        assert_eq!(Value::decode(&[0xc1]), Err(MsgpackError::Reserved));
        assert_eq!(Value::decode(&[0x00, 0x00]), Err(MsgpackError::Trailing));
        assert_eq!(Value::decode(&[]), Err(MsgpackError::Truncated));
    }
}
