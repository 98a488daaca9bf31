//! Python objects to canonical CBOR and decoded CBOR to Python objects.
//!
//! The encoder accepts exactly the Python types `encoding._scan` accepts (exact `None`, `bool`,
//! `int`, `float`, `str`, `bytes`, `list`, `dict` with `str` keys; no subclasses), so the
//! reference and the native path refuse the same values; on a refusal Python re-runs the
//! reference encoder, which raises its own `TypeError` or `ValueError`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::cbor::{self, key_before, Value, MAX_DEPTH};

/// A value the encoder refuses (outside the data model); Python reports why.
#[derive(Debug)]
pub struct Refused;

/// Append the canonical encoding of `obj` to `out`.
///
/// # Errors
/// `Refused` for anything outside the data model.
pub fn encode(obj: &Bound<'_, PyAny>, depth: usize, out: &mut Vec<u8>) -> Result<(), Refused> {
    if obj.is_none() {
        out.push(0xf6);
    } else if let Ok(s) = obj.downcast_exact::<PyString>() {
        cbor::write_text(out, s.to_str().map_err(|_| Refused)?);
    } else if let Ok(b) = obj.downcast_exact::<PyBytes>() {
        cbor::write_bytes(out, b.as_bytes());
    } else if let Ok(b) = obj.downcast_exact::<PyBool>() {
        out.push(if b.is_true() { 0xf5 } else { 0xf4 });
    } else if obj.is_exact_instance_of::<PyInt>() {
        let n: i128 = obj.extract().map_err(|_| Refused)?;
        if n >= 0 {
            cbor::write_head(out, 0, u64::try_from(n).map_err(|_| Refused)?);
        } else {
            cbor::write_head(out, 1, u64::try_from(-1 - n).map_err(|_| Refused)?);
        }
    } else if let Ok(f) = obj.downcast_exact::<PyFloat>() {
        let x = f.value();
        if !x.is_finite() {
            return Err(Refused);
        }
        cbor::write_float(out, x);
    } else if let Ok(list) = obj.downcast_exact::<PyList>() {
        if depth >= MAX_DEPTH {
            return Err(Refused);
        }
        cbor::write_head(out, 4, list.len() as u64);
        for item in list.iter() {
            encode(&item, depth + 1, out)?;
        }
    } else if let Ok(dict) = obj.downcast_exact::<PyDict>() {
        if depth >= MAX_DEPTH {
            return Err(Refused);
        }
        encode_map(dict, depth, out)?;
    } else {
        return Err(Refused);
    }
    Ok(())
}

fn encode_map(dict: &Bound<'_, PyDict>, depth: usize, out: &mut Vec<u8>) -> Result<(), Refused> {
    let mut keys: Vec<Bound<'_, PyString>> = Vec::with_capacity(dict.len());
    let mut values: Vec<Bound<'_, PyAny>> = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        keys.push(k.downcast_exact::<PyString>().map_err(|_| Refused)?.clone());
        values.push(v);
    }
    let mut texts: Vec<&str> = Vec::with_capacity(keys.len());
    for k in &keys {
        texts.push(k.to_str().map_err(|_| Refused)?);
    }
    cbor::write_head(out, 5, texts.len() as u64);
    if texts.windows(2).all(|w| key_before(w[0], w[1])) {
        for (k, v) in texts.iter().zip(&values) {
            cbor::write_text(out, k);
            encode(v, depth + 1, out)?;
        }
    } else {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            (texts[a].len(), texts[a].as_bytes()).cmp(&(texts[b].len(), texts[b].as_bytes()))
        });
        for i in order {
            cbor::write_text(out, texts[i]);
            encode(&values[i], depth + 1, out)?;
        }
    }
    Ok(())
}

/// Build the Python value of a decoded CBOR value.
///
/// # Errors
/// Only a Python allocation failure.
pub fn to_py<'py>(py: Python<'py>, v: &Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Uint(n) => n.into_pyobject(py)?.into_any(),
        Value::Nint(n) => (-1i128 - i128::from(*n)).into_pyobject(py)?.into_any(),
        Value::Float(x) => PyFloat::new(py, *x).into_any(),
        Value::Text(s) => PyString::new(py, s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Map(items) => {
            let dict = PyDict::new(py);
            for (k, item) in items {
                dict.set_item(PyString::new(py, k), to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// Short text values seen while building many decoded values (a chunk of entries): map keys
/// and short strings repeat from entry to entry (`actor_id`, `EVENT`, a namespace), so each
/// is built once and shared, with its hash computed once. Python strings are immutable, so
/// sharing one is invisible to the caller (only `is` could tell).
pub struct StrCache<'py> {
    map: std::collections::HashMap<String, Bound<'py, PyString>>,
}

/// Texts longer than this are built every time (ids and values rarely repeat).
const CACHE_TEXT_MAX: usize = 24;
/// At most this many texts are kept (a chunk of unusual entries cannot grow it unbounded).
const CACHE_SIZE_MAX: usize = 512;

impl<'py> StrCache<'py> {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        Self {
            map: std::collections::HashMap::with_capacity(64),
        }
    }

    /// The Python text of `s`, shared when short.
    pub fn text(&mut self, py: Python<'py>, s: &str) -> Bound<'py, PyString> {
        if s.len() > CACHE_TEXT_MAX {
            return PyString::new(py, s);
        }
        if let Some(t) = self.map.get(s) {
            return t.clone();
        }
        let t = PyString::new(py, s);
        if self.map.len() < CACHE_SIZE_MAX {
            self.map.insert(s.to_owned(), t.clone());
        }
        t
    }
}

impl Default for StrCache<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// `to_py`, sharing short texts through `cache` (the same Python value).
///
/// # Errors
/// Only a Python allocation failure.
pub fn to_py_cached<'py>(
    py: Python<'py>,
    v: &Value<'_>,
    cache: &mut StrCache<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Text(s) => cache.text(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py_cached(py, item, cache)?)?;
            }
            list.into_any()
        }
        Value::Map(items) => {
            let dict = PyDict::new(py);
            for (k, item) in items {
                dict.set_item(cache.text(py, k), to_py_cached(py, item, cache)?)?;
            }
            dict.into_any()
        }
        other => to_py(py, other)?,
    })
}
