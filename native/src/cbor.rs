//! Canonical CBOR (RFC 8949 section 4.2.1) over memroot's data model, as `ledger/encoding.py`.
//!
//! The decoder is strict: it accepts exactly the bytes that are the canonical encoding of one
//! value of the model (null, booleans, integers in [-2^64, 2^64 - 1], finite floats in their
//! shortest width, UTF-8 text, byte strings, arrays, maps with text keys sorted by their
//! encoded bytes), nested at most `MAX_DEPTH` containers deep, with nothing trailing. Every
//! other input is a `Reject`; Python turns it into the reference decoder's `DecodeError`.
//!
//! The encoder half is the head writer and the float narrowing, shared by the Python-object
//! encoder in `py.rs`.

/// Containers may nest this deep (the root container is at depth 0), as `encoding._MAX_DEPTH`.
pub const MAX_DEPTH: usize = 32;

/// One decoded CBOR value, borrowing its strings from the input.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// Major type 0: the integer itself.
    Uint(u64),
    /// Major type 1: the integer is `-1 - n`.
    Nint(u64),
    Float(f64),
    Text(&'a str),
    Bytes(&'a [u8]),
    Array(Vec<Value<'a>>),
    /// Keys in input order, which the decoder has checked is canonical.
    Map(Vec<(&'a str, Value<'a>)>),
}

impl<'a> Value<'a> {
    /// Return the value under text key `key` of a map, if this is a map that has it.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Map(items) => items.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Why bytes are not canonical CBOR of the data model (the message is for Rust tests only;
/// Python reports the reference decoder's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject(pub &'static str);

type Result<T> = std::result::Result<T, Reject>;

/// Decode `data` strictly: exactly one canonical value and nothing after it.
///
/// # Errors
/// `Reject` naming the first violation found.
pub fn decode(data: &[u8]) -> Result<Value<'_>> {
    let mut d = Decoder { data, pos: 0 };
    let value = d.value(0)?;
    if d.pos != data.len() {
        return Err(Reject("trailing bytes"));
    }
    Ok(value)
}

struct Decoder<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Reject("length overflow"))?;
        let out = self.data.get(self.pos..end).ok_or(Reject("truncated"))?;
        self.pos = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// Read the argument of a head whose additional information is `info`, shortest only.
    fn argument(&mut self, info: u8) -> Result<u64> {
        let (n, min) = match info {
            0..=23 => return Ok(u64::from(info)),
            24 => (1, 24),
            25 => (2, 1 << 8),
            26 => (4, 1 << 16),
            27 => (8, 1 << 32),
            31 => return Err(Reject("indefinite length")),
            _ => return Err(Reject("reserved additional information")),
        };
        let raw = self.take(n)?;
        let value = raw.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b));
        if value < min {
            return Err(Reject("non-shortest head"));
        }
        Ok(value)
    }

    fn length(&mut self, info: u8) -> Result<usize> {
        let n = self.argument(info)?;
        usize::try_from(n).map_err(|_| Reject("length overflow"))
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>> {
        let head = self.byte()?;
        let (major, info) = (head >> 5, head & 0x1f);
        match major {
            0 => Ok(Value::Uint(self.argument(info)?)),
            1 => Ok(Value::Nint(self.argument(info)?)),
            2 => {
                let n = self.length(info)?;
                Ok(Value::Bytes(self.take(n)?))
            }
            3 => Ok(Value::Text(self.text(info)?)),
            4 => {
                check_depth(depth)?;
                let n = self.length(info)?;
                // Never trust a claimed length for an allocation: each item takes a byte.
                let mut items = Vec::with_capacity(n.min(self.data.len() - self.pos));
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Ok(Value::Array(items))
            }
            5 => {
                check_depth(depth)?;
                let n = self.length(info)?;
                let mut items: Vec<(&'a str, Value<'a>)> =
                    Vec::with_capacity(n.min((self.data.len() - self.pos) / 2));
                for _ in 0..n {
                    let key_head = self.byte()?;
                    if key_head >> 5 != 3 {
                        return Err(Reject("map key is not a text string"));
                    }
                    let key = self.text(key_head & 0x1f)?;
                    if let Some((prev, _)) = items.last() {
                        if !key_before(prev, key) {
                            return Err(Reject("map keys unsorted or duplicate"));
                        }
                    }
                    let value = self.value(depth + 1)?;
                    items.push((key, value));
                }
                Ok(Value::Map(items))
            }
            6 => Err(Reject("tags are refused")),
            _ => self.simple(info),
        }
    }

    fn text(&mut self, info: u8) -> Result<&'a str> {
        let n = self.length(info)?;
        std::str::from_utf8(self.take(n)?).map_err(|_| Reject("invalid UTF-8"))
    }

    fn simple(&mut self, info: u8) -> Result<Value<'a>> {
        match info {
            20 => Ok(Value::Bool(false)),
            21 => Ok(Value::Bool(true)),
            22 => Ok(Value::Null),
            25 => {
                let raw = self.take(2)?;
                let x = f16_to_f64(u16::from_be_bytes([raw[0], raw[1]]));
                finite(x)
            }
            26 => {
                let raw = self.take(4)?;
                let x = f64::from(f32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]));
                let x = finite(x)?;
                if let Value::Float(v) = x {
                    if fits_f16(v) {
                        return Err(Reject("non-shortest float"));
                    }
                }
                Ok(x)
            }
            27 => {
                let raw = self.take(8)?;
                let mut b = [0u8; 8];
                b.copy_from_slice(raw);
                let x = finite(f64::from_be_bytes(b))?;
                if let Value::Float(v) = x {
                    if fits_f32(v) {
                        return Err(Reject("non-shortest float"));
                    }
                }
                Ok(x)
            }
            31 => Err(Reject("unexpected break")),
            _ => Err(Reject("undefined and simple values are refused")),
        }
    }
}

fn check_depth(depth: usize) -> Result<()> {
    if depth >= MAX_DEPTH {
        Err(Reject("nesting too deep"))
    } else {
        Ok(())
    }
}

fn finite(x: f64) -> Result<Value<'static>> {
    if x.is_finite() {
        Ok(Value::Float(x))
    } else {
        Err(Reject("NaN and Infinity are refused"))
    }
}

/// True when text key `a` sorts strictly before `b` in canonical order (encoded bytes: for
/// text keys, shorter first, then bytewise).
#[must_use]
pub fn key_before(a: &str, b: &str) -> bool {
    (a.len(), a.as_bytes()) < (b.len(), b.as_bytes())
}

/// Convert an IEEE 754 half-precision value to f64 (exactly).
#[must_use]
pub fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    let magnitude = match exp {
        0 => frac * 2f64.powi(-24),
        31 => {
            if frac == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => (1024.0 + frac) * 2f64.powi(exp - 25),
    };
    sign * magnitude
}

/// True when finite `x` is exactly representable in single precision.
#[must_use]
pub fn fits_f32(x: f64) -> bool {
    #[allow(clippy::cast_possible_truncation)]
    let narrowed = x as f32;
    f64::from(narrowed) == x
}

/// True when finite `x` is exactly representable in half precision.
#[must_use]
pub fn fits_f16(x: f64) -> bool {
    let a = x.abs();
    if a == 0.0 {
        return true;
    }
    if a > 65504.0 {
        return false;
    }
    let bits = a.to_bits();
    let exp = i64::try_from((bits >> 52) & 0x7ff).unwrap_or(0);
    if exp == 0 {
        return false; // an f64 subnormal is far below the smallest half
    }
    let mant = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    let tz = mant.trailing_zeros();
    let odd = mant >> tz;
    let low = exp - 1075 + i64::from(tz);
    odd < (1 << 11) && low >= -24
}

/// The half-precision bits of `x`, which must satisfy `fits_f16`.
#[must_use]
fn f64_to_f16_bits(x: f64) -> u16 {
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a == 0.0 {
        return sign;
    }
    // a = odd * 2^low with odd < 2^11 and low >= -24 (fits_f16).
    let bits = a.to_bits();
    let exp = i64::try_from((bits >> 52) & 0x7ff).unwrap_or(0) - 1023; // a = 1.f * 2^exp
    if exp < -14 {
        // subnormal half: a = k * 2^-24
        let k = a * 2f64.powi(24);
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let k = k as u16;
        return sign | k;
    }
    let frac = (bits >> 42) & 0x3ff; // top 10 fraction bits (the rest are zero)
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let e = (exp + 15) as u16;
    #[allow(clippy::cast_possible_truncation)]
    let frac = frac as u16;
    sign | e << 10 | frac
}

/// Append the head of major type `major` with argument `n`, in its shortest form.
pub fn write_head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if n < 24 {
        #[allow(clippy::cast_possible_truncation)]
        out.push(m | n as u8);
    } else if n < 1 << 8 {
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&[m | 24, n as u8]);
    } else if n < 1 << 16 {
        out.push(m | 25);
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n < 1 << 32 {
        out.push(m | 26);
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Append finite `x` in the shortest of half, single and double precision that keeps it.
pub fn write_float(out: &mut Vec<u8>, x: f64) {
    if fits_f16(x) {
        out.push(0xf9);
        out.extend_from_slice(&f64_to_f16_bits(x).to_be_bytes());
    } else if fits_f32(x) {
        out.push(0xfa);
        #[allow(clippy::cast_possible_truncation)]
        out.extend_from_slice(&(x as f32).to_be_bytes());
    } else {
        out.push(0xfb);
        out.extend_from_slice(&x.to_be_bytes());
    }
}

/// Append a text string.
pub fn write_text(out: &mut Vec<u8>, s: &str) {
    write_head(out, 3, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Append a byte string.
pub fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_head(out, 2, b.len() as u64);
    out.extend_from_slice(b);
}

/// Append the canonical encoding of a decoded value (its maps are already in order).
pub fn write_value(out: &mut Vec<u8>, v: &Value<'_>) {
    match v {
        Value::Null => out.push(0xf6),
        Value::Bool(b) => out.push(if *b { 0xf5 } else { 0xf4 }),
        Value::Uint(n) => write_head(out, 0, *n),
        Value::Nint(n) => write_head(out, 1, *n),
        Value::Float(x) => write_float(out, *x),
        Value::Text(s) => write_text(out, s),
        Value::Bytes(b) => write_bytes(out, b),
        Value::Array(items) => {
            write_head(out, 4, items.len() as u64);
            for item in items {
                write_value(out, item);
            }
        }
        Value::Map(items) => {
            write_head(out, 5, items.len() as u64);
            for (k, item) in items {
                write_text(out, k);
                write_value(out, item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
            .collect()
    }

    fn round_trip(s: &str) {
        let raw = hex(s);
        let v = decode(&raw).expect(s);
        let mut out = Vec::new();
        write_value(&mut out, &v);
        assert_eq!(out, raw, "{s}");
    }

    #[test]
    fn rfc8949_examples_round_trip() {
        for s in [
            "00",
            "17",
            "1818",
            "1903e8",
            "1bffffffffffffffff",
            "3bffffffffffffffff",
            "20",
            "f90000",
            "f98000",
            "f93c00",
            "fb3ff199999999999a",
            "f97bff",
            "fa47c35000",
            "fa7f7fffff",
            "f90001",
            "f90400",
            "f4",
            "f5",
            "f6",
            "40",
            "4401020304",
            "60",
            "64f0908591",
            "80",
            "8301820203820405",
            "a0",
            "a26161016162820203",
        ] {
            round_trip(s);
        }
    }

    #[test]
    fn refusals() {
        for s in [
            "1801",
            "190001",
            "3800",
            "780161",
            "5801ff",
            "b801616101",
            "fa3f800000",
            "fb3ff0000000000000",
            "fb40f86a0000000000",
            "5f4101ff",
            "9f01ff",
            "a2616201616101",
            "a262616101616202",
            "a2616101616102",
            "a10102",
            "c06130",
            "f7",
            "e0",
            "f820",
            "f97e00",
            "f97c00",
            "fa7fc00000",
            "61ff",
            "63eda080",
            "0000",
            "",
            "19",
            "6261",
            "a16161",
            "1c",
            "1f",
            "ff",
        ] {
            assert!(decode(&hex(s)).is_err(), "{s}");
        }
    }

    #[test]
    fn nesting_limit() {
        let mut ok = vec![0x81u8; 31];
        ok.push(0x80);
        assert!(decode(&ok).is_ok());
        let mut deep = vec![0x81u8; 32];
        deep.push(0x80);
        assert!(decode(&deep).is_err());
    }

    #[test]
    fn half_floats() {
        for bits in 0u16..=0xffff {
            let x = f16_to_f64(bits);
            if x.is_finite() {
                assert!(fits_f16(x), "{bits:#x}");
                assert_eq!(f64_to_f16_bits(x), bits, "{bits:#x}");
            }
        }
        assert!(!fits_f16(1.1));
        assert!(!fits_f16(65505.0));
        assert!(fits_f32(100_000.0));
    }

    #[test]
    fn huge_claimed_lengths_do_not_allocate() {
        assert!(decode(&hex("9bffffffffffffffff")).is_err());
        assert!(decode(&hex("bbffffffffffffffff")).is_err());
        assert!(decode(&hex("5bffffffffffffffff")).is_err());
    }
}
