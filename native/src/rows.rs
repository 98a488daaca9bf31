//! Rows of the derived memory tables as canonical CBOR, for the state digests of verify
//! step 9 and `rebuild` (`memroot.projections.digest.encode_rows`).
//!
//! The reference turns each row (a tuple from SQLite) into a list, replacing a float by the
//! 8 bytes of its IEEE 754 binary64 big-endian form where asked, and encodes the list of rows
//! with `encoding.encode`. This computes the same bytes without building those lists.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyList, PyTuple};

use crate::{cbor, py, Reject};

fn encode_item(item: &Bound<'_, PyAny>, floats_as_bytes: bool, out: &mut Vec<u8>) -> PyResult<()> {
    if floats_as_bytes {
        if let Ok(f) = item.downcast_exact::<PyFloat>() {
            cbor::write_bytes(out, &f.value().to_be_bytes());
            return Ok(());
        }
    }
    py::encode(item, 2, out).map_err(|_| Reject::new_err("a row value outside the data model"))
}

/// The canonical CBOR of the array of `rows` (each a tuple or list, encoded as an array).
///
/// With `floats_as_bytes`, every float value of a row is encoded as the byte string of its
/// binary64 big-endian form. `Reject` for a row that is neither a tuple nor a list, or a
/// value the encoder refuses (the reference then raises its own error).
#[pyfunction]
pub fn encode_rows<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyList>,
    floats_as_bytes: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(16 + rows.len() * 96);
    cbor::write_head(&mut out, 4, rows.len() as u64);
    for row in rows.iter() {
        if let Ok(t) = row.downcast_exact::<PyTuple>() {
            cbor::write_head(&mut out, 4, t.len() as u64);
            for item in t.iter() {
                encode_item(&item, floats_as_bytes, &mut out)?;
            }
        } else if let Ok(l) = row.downcast_exact::<PyList>() {
            cbor::write_head(&mut out, 4, l.len() as u64);
            for item in l.iter() {
                encode_item(&item, floats_as_bytes, &mut out)?;
            }
        } else {
            return Err(Reject::new_err("a row is neither a tuple nor a list"));
        }
    }
    Ok(PyBytes::new(py, &out))
}
