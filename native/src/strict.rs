//! A chunk of one branch's stored entries decoded and checked in one call, as
//! `StrictReader.rows` in `ledger/strict.py` checks each of them (auditor's steps 1-3).
//!
//! The reference decodes each row with `Entry.from_bytes`, checks the seq and branch it
//! records against its position (step 2), that only entry 0 is a genesis and the canonical
//! genesis links to zeros, and that every `prev` is the leaf hash of the entry before
//! (step 3). This does the same for a whole chunk and builds the `Entry` tuples directly.
//! It decides nothing on bad input: any row the reference would refuse makes the whole
//! chunk `Reject`, and the caller re-runs the reference over it, which raises its own
//! `IntegrityError` at the right row, after yielding the rows before it.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use crate::{entry, hash, py, reject};

/// `(entries, leaves)` of a chunk of stored rows of one branch, checked as the reference
/// checks them: `rows` are the store's `EntryRow` tuples (seq first, the entry bytes third),
/// expected at seqs `start, start + 1, ...` of `branch`; `prev` is the leaf hash of the entry
/// before the first (None when there is none to check against). `entry_type` is
/// `entries.Entry` and `kinds` maps each kind's text to its `Kind`; each `Entry` holds the
/// row's own bytes object as `raw`, and its leaf hash (the same object as in `leaves`).
///
/// `Reject` for a row that is not bytes, not at its position, does not decode strictly, or
/// breaks a link: the reference then says which and why.
#[pyfunction]
#[pyo3(signature = (rows, branch, start, prev, canonical, entry_type, kinds))]
#[allow(clippy::too_many_arguments)]
pub fn decode_chunk<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyList>,
    branch: &Bound<'py, PyString>,
    start: u64,
    prev: Option<&[u8]>,
    canonical: &str,
    entry_type: &Bound<'py, PyType>,
    kinds: &Bound<'py, PyDict>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let branch_name = branch.to_str()?;
    let kind_of = |k: &str| -> PyResult<Bound<'py, PyAny>> {
        match kinds.get_item(k)? {
            Some(v) => Ok(v),
            None => reject("an entry kind the caller does not know"),
        }
    };
    let (genesis, event, op) = (kind_of("genesis")?, kind_of("event")?, kind_of("op")?);
    let version = entry::FORMAT_VERSION.into_pyobject(py)?.into_any();
    let tuple_new = py.get_type::<PyTuple>().getattr("__new__")?;
    let mut texts = py::StrCache::new();
    let entries = PyList::empty(py);
    let leaves = PyList::empty(py);
    let mut last: Option<hash::Hash> = match prev {
        Some(p) => Some(p.try_into().or_else(|_| reject("prev is not 32 bytes"))?),
        None => None,
    };
    for (i, row) in rows.iter().enumerate() {
        let seq = start + i as u64;
        let row = row
            .downcast::<PyTuple>()
            .or_else(|_| reject("a row is not a tuple"))?;
        let stored_seq: u64 = row.get_item(0)?.extract().or_else(|_| reject("row seq"))?;
        if stored_seq != seq {
            return reject("a row out of place");
        }
        let data = row.get_item(2)?;
        let raw = data
            .downcast_exact::<PyBytes>()
            .or_else(|_| reject("entry data is not bytes"))?;
        let bytes = raw.as_bytes();
        let Ok(f) = entry::decode(bytes) else {
            return reject("an entry does not decode strictly");
        };
        // (2) the position it records, (3) genesis only at 0, the canonical one on zeros.
        if f.seq != seq || f.branch != branch_name {
            return reject("an entry records another position");
        }
        if (seq == 0) != (f.kind == "genesis") {
            return reject("a genesis entry not at 0");
        }
        if seq == 0 && branch_name == canonical && f.prev.iter().any(|&b| b != 0) {
            return reject("the canonical genesis does not link to zeros");
        }
        // (3) the link to the entry before.
        if let Some(p) = &last {
            if f.prev != p.as_slice() {
                return reject("prev does not match the entry before");
            }
        }
        let leaf = hash::leaf_hash(bytes);
        last = Some(leaf);
        let leaf_obj = PyBytes::new(py, &leaf);
        let kind = match f.kind {
            "genesis" => &genesis,
            "event" => &event,
            _ => &op,
        };
        let fields = PyTuple::new(
            py,
            [
                version.clone(),
                PyBytes::new(py, f.prev).into_any(),
                f.seq.into_pyobject(py)?.into_any(),
                branch.clone().into_any(),
                f.ts.into_pyobject(py)?.into_any(),
                kind.clone(),
                texts.text(py, f.type_).into_any(),
                py::to_py_cached(py, &f.body, &mut texts)?,
                raw.clone().into_any(),
                leaf_obj.clone().into_any(),
            ],
        )?;
        entries.append(tuple_new.call1((entry_type, fields))?)?;
        leaves.append(leaf_obj)?;
    }
    Ok((entries, leaves))
}
