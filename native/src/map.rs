//! The memory map's paths (docs/FORMAT.md §6.12), as `ledger/map_tree.py`: a key's walk down
//! checked stored nodes (`map_descend`), a path's check (`map_path_root`) and the re-hash of
//! stored node rows (`map_rows_into`).
//!
//! Both trees of the map are binary sparse Merkle trees over 256-bit keys, most significant
//! bit first, with the leaf shortcut: `EMPTY`, `leaf(key, value)`, `node(left, right)`, each
//! SHA-256 under its own ASCII tag and a 0x00 separator. Nothing here decides an error: where
//! the reference raises, these `Reject` and the reference runs again to raise its own.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyTuple};

use crate::hash::{domain_hash, Hash};
use crate::reject;

const EMPTY_TAG: &[u8] = b"memroot/map/empty/v1";
const LEAF_TAG: &[u8] = b"memroot/map/leaf/v1";
const NODE_TAG: &[u8] = b"memroot/map/node/v1";

/// Keys are 256 bits, so a path has at most 256 siblings.
pub const KEY_BITS: usize = 256;

/// `SHA-256("memroot/map/empty/v1" || 0x00)`: the hash of a subtree holding no key.
#[must_use]
pub fn empty() -> &'static Hash {
    static EMPTY: OnceLock<Hash> = OnceLock::new();
    EMPTY.get_or_init(|| domain_hash(EMPTY_TAG, b""))
}

/// `SHA-256("memroot/map/leaf/v1" || 0x00 || key || value)`.
#[must_use]
pub fn leaf(key: &[u8; 32], value: &[u8; 32]) -> Hash {
    let mut pair = [0u8; 64];
    pair[..32].copy_from_slice(key);
    pair[32..].copy_from_slice(value);
    domain_hash(LEAF_TAG, &pair)
}

/// `SHA-256("memroot/map/node/v1" || 0x00 || left || right)`.
#[must_use]
pub fn node(left: &[u8; 32], right: &[u8; 32]) -> Hash {
    let mut pair = [0u8; 64];
    pair[..32].copy_from_slice(left);
    pair[32..].copy_from_slice(right);
    domain_hash(NODE_TAG, &pair)
}

/// Bit `depth` of `key`, most significant bit of byte 0 first.
#[must_use]
pub fn bit(key: &[u8; 32], depth: usize) -> bool {
    (key[depth >> 3] >> (7 - (depth & 7))) & 1 == 1
}

/// The root a path gives for `key`: `siblings` from the root down, ending at the leaf
/// `end` or at an empty subtree. `Err` if there are more than 256 siblings or `end` is
/// another key that does not share the path's prefix with `key` (it could not sit there).
pub fn path_root(
    key: &[u8; 32],
    siblings: &[Hash],
    end: Option<(&[u8; 32], &[u8; 32])>,
) -> Result<Hash, &'static str> {
    let depth = siblings.len();
    if depth > KEY_BITS {
        return Err("a map path has at most 256 siblings");
    }
    let mut h = match end {
        None => *empty(),
        Some((other, value)) => {
            if other != key && (0..depth).any(|d| bit(other, d) != bit(key, d)) {
                return Err("the end leaf cannot sit on the key's path");
            }
            leaf(other, value)
        }
    };
    for d in (0..depth).rev() {
        h = if bit(key, d) {
            node(&siblings[d], &h)
        } else {
            node(&h, &siblings[d])
        };
    }
    Ok(h)
}

/// Whether a stored row (`hash`, `leaf`, `a`, `b`, all fields 32 bytes) hashes to `hash`.
#[must_use]
pub fn row_ok(h: &[u8], is_leaf: bool, a: &[u8], b: &[u8]) -> bool {
    let (Ok(a), Ok(b)) = (<&[u8; 32]>::try_from(a), <&[u8; 32]>::try_from(b)) else {
        return false;
    };
    let got = if is_leaf { leaf(a, b) } else { node(a, b) };
    h == got.as_slice()
}

fn key32(b: &[u8]) -> PyResult<[u8; 32]> {
    b.try_into()
        .or_else(|_| reject("a map key is not 32 bytes"))
}

fn bytes_at<'py>(t: &Bound<'py, PyTuple>, i: usize) -> PyResult<Bound<'py, PyBytes>> {
    match t.get_item(i)?.downcast_into::<PyBytes>() {
        Ok(b) => Ok(b),
        Err(_) => reject("a map node field is not bytes"),
    }
}

/// The 32-byte hashes of a tuple or list of exactly `bytes` objects (`Reject` otherwise).
fn hashes_of(seq: &Bound<'_, PyAny>) -> PyResult<Vec<Hash>> {
    let mut out = Vec::new();
    let mut take = |s: Bound<'_, PyAny>| -> PyResult<()> {
        let s = s
            .downcast_into_exact::<PyBytes>()
            .or_else(|_| reject("a sibling is not bytes"))?;
        out.push(key32(s.as_bytes())?);
        Ok(())
    };
    if let Ok(t) = seq.downcast_exact::<PyTuple>() {
        for s in t.iter() {
            take(s)?;
        }
    } else if let Ok(l) = seq.downcast_exact::<PyList>() {
        for s in l.iter() {
            take(s)?;
        }
    } else {
        return reject("siblings are not a tuple or a list");
    }
    Ok(out)
}

/// `MapProof`'s construction check: whether `siblings` (a tuple) holds at most 256 items,
/// each exactly `bytes` of 32. False sends the caller to the reference, which says which.
#[pyfunction]
pub fn map_hashes_ok(siblings: &Bound<'_, PyTuple>) -> bool {
    siblings.len() <= KEY_BITS
        && siblings.iter().all(|s| {
            s.downcast_exact::<PyBytes>()
                .is_ok_and(|b| b.as_bytes().len() == 32)
        })
}

/// `map_tree.path_root`: the root the path (`siblings`, a tuple or list of 32-byte bytes;
/// `leaf` = `(key, value)` or None) gives for `key`. `Reject` where the reference raises (a
/// leaf off the path, a size) or for a sibling that is not exactly `bytes` of 32.
#[pyfunction]
pub fn map_path_root<'py>(
    py: Python<'py>,
    key: &[u8],
    siblings: &Bound<'py, PyAny>,
    leaf: Option<&Bound<'py, PyTuple>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let key = key32(key)?;
    let sib = hashes_of(siblings)?;
    let end = match leaf {
        None => None,
        Some(t) => {
            if t.len() != 2 {
                return reject("a path's leaf is not a (key, value) pair");
            }
            Some((
                key32(bytes_at(t, 0)?.as_bytes())?,
                key32(bytes_at(t, 1)?.as_bytes())?,
            ))
        }
    };
    match path_root(&key, &sib, end.as_ref().map(|(k, v)| (k, v))) {
        Ok(h) => Ok(PyBytes::new(py, &h)),
        Err(e) => reject(e),
    }
}

type Descent<'py> = (
    bool,
    Bound<'py, PyBytes>,
    Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>,
);

/// `map_tree.descend`: walk `key`'s path from node `h` at depth `len(siblings)` through the
/// checked rows `known` (`hash -> (is_leaf, a, b)`), appending each sibling passed (the row's
/// own bytes objects). `(True, end, leaf)` when the path ends at an empty subtree (`leaf`
/// None) or a leaf (`leaf` its `(key, value)`), `(False, h, None)` at a node `known` lacks.
/// `Reject` for a key that is not 32 bytes, a malformed row or a path past 256 levels.
#[pyfunction]
pub fn map_descend<'py>(
    py: Python<'py>,
    key: &[u8],
    h: Bound<'py, PyBytes>,
    siblings: &Bound<'py, PyList>,
    known: &Bound<'py, PyDict>,
) -> PyResult<Descent<'py>> {
    let key = key32(key)?;
    let mut passed = Vec::new();
    let out = walk(py, &key, h, siblings.len(), known, &mut passed)?;
    for s in passed {
        siblings.append(s)?;
    }
    Ok(out)
}

/// The walk of `map_descend` for one key from depth `depth`, the siblings passed pushed
/// on `passed` (nothing of the caller's is changed, so a `Reject` leaves the walk as it was).
fn walk<'py>(
    py: Python<'py>,
    key: &[u8; 32],
    h: Bound<'py, PyBytes>,
    depth: usize,
    known: &Bound<'py, PyDict>,
    passed: &mut Vec<Bound<'py, PyBytes>>,
) -> PyResult<Descent<'py>> {
    let empty = empty();
    let mut h = h;
    loop {
        if h.as_bytes() == empty.as_slice() {
            return Ok((true, PyBytes::new(py, empty), None));
        }
        let Some(row) = known.get_item(&h)? else {
            return Ok((false, h, None));
        };
        let row = row
            .downcast_into::<PyTuple>()
            .or_else(|_| reject("a map node row is not a tuple"))?;
        if row.len() != 3 {
            return reject("a map node row is not (is_leaf, a, b)");
        }
        let is_leaf = row
            .get_item(0)?
            .downcast_into::<PyBool>()
            .or_else(|_| reject("a map node row's flag is not a bool"))?
            .is_true();
        let (a, b) = (bytes_at(&row, 1)?, bytes_at(&row, 2)?);
        if is_leaf {
            return Ok((true, h, Some((a, b))));
        }
        let d = depth + passed.len();
        if d >= KEY_BITS {
            return reject("a map path is at most 256 levels deep");
        }
        if bit(key, d) {
            passed.push(a);
            h = b;
        } else {
            passed.push(b);
            h = a;
        }
    }
}

/// `map_tree.descend_all`: `map_descend` for each walk `i` of `active` (its key `keys[i]`,
/// from `heads[i]`, appending to `siblings[i]`). A walk that ends gets `ends[i]` = its end
/// leaf `(key, value)` or None; one that stops at a node `known` lacks gets `heads[i]` = that
/// node's hash. Returns those walks, in order, and the distinct hashes they wait for, sorted
/// (the next read's keys, in the table's order). `Reject` as `map_descend`, with every walk
/// left as it was given (the caller runs the reference over them).
#[pyfunction]
pub fn map_descend_all<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyList>,
    heads: &Bound<'py, PyList>,
    siblings: &Bound<'py, PyList>,
    ends: &Bound<'py, PyList>,
    active: Vec<usize>,
    known: &Bound<'py, PyDict>,
) -> PyResult<(Vec<usize>, Vec<Bound<'py, PyBytes>>)> {
    // Every walk is computed before anything is changed: a `Reject` leaves them all as given.
    let mut results = Vec::with_capacity(active.len());
    for i in active {
        let key = keys.get_item(i)?;
        let key = key
            .downcast::<PyBytes>()
            .or_else(|_| reject("a map key is not bytes"))?;
        let key = key32(key.as_bytes())?;
        let h = heads
            .get_item(i)?
            .downcast_into::<PyBytes>()
            .or_else(|_| reject("a walk's head is not bytes"))?;
        let sib = siblings
            .get_item(i)?
            .downcast_into::<PyList>()
            .or_else(|_| reject("a walk's siblings are not a list"))?;
        let mut passed = Vec::new();
        let out = walk(py, &key, h, sib.len(), known, &mut passed)?;
        results.push((i, sib, passed, out));
    }
    let mut waiting = Vec::new();
    let mut missing = Vec::new();
    for (i, sib, passed, (done, end, leaf)) in results {
        for s in passed {
            sib.append(s)?;
        }
        if done {
            match leaf {
                None => ends.set_item(i, py.None())?,
                Some((a, b)) => ends.set_item(i, PyTuple::new(py, [a, b])?)?,
            }
        } else {
            heads.set_item(i, &end)?;
            waiting.push(i);
            missing.push(end);
        }
    }
    missing.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    missing.dedup_by(|a, b| a.as_bytes() == b.as_bytes());
    Ok((waiting, missing))
}

/// `map_tree.check_rows_into`: check every stored row `(hash, leaf, a, b)` as read from the
/// table (`leaf` 0 or 1) and, only when all are well formed and hash to their hash, add each
/// to `known` as `hash -> (is_leaf, a, b)` (the row's own bytes objects). False, with
/// nothing added, sends the caller to the reference, which names the bad row.
#[pyfunction]
pub fn map_rows_into<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyList>,
    known: &Bound<'py, PyDict>,
) -> PyResult<bool> {
    let mut parts = Vec::with_capacity(rows.len());
    for row in rows.iter() {
        let Ok(t) = row.downcast_into::<PyTuple>() else {
            return Ok(false);
        };
        if t.len() != 4 {
            return Ok(false);
        }
        let flag: Option<i64> = t.get_item(1)?.extract().ok();
        let is_leaf = match flag {
            Some(0) => false,
            Some(1) => true,
            _ => return Ok(false),
        };
        let (Ok(h), Ok(a), Ok(b)) = (bytes_at(&t, 0), bytes_at(&t, 2), bytes_at(&t, 3)) else {
            return Ok(false);
        };
        if !row_ok(h.as_bytes(), is_leaf, a.as_bytes(), b.as_bytes()) {
            return Ok(false);
        }
        parts.push((h, is_leaf, a, b));
    }
    for (h, is_leaf, a, b) in parts {
        let value = PyTuple::new(
            py,
            [
                PyBool::new(py, is_leaf).to_owned().into_any(),
                a.into_any(),
                b.into_any(),
            ],
        )?;
        known.set_item(h, value)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256;

    #[test]
    fn empty_is_the_tagged_hash() {
        assert_eq!(*empty(), sha256(b"memroot/map/empty/v1\x00"));
    }

    #[test]
    fn a_two_leaf_path_checks_and_a_moved_leaf_does_not() {
        let (k0, k1) = ([0u8; 32], [0x80u8; 32]);
        let (v0, v1) = ([1u8; 32], [2u8; 32]);
        let (l0, l1) = (leaf(&k0, &v0), leaf(&k1, &v1));
        let root = node(&l0, &l1);
        assert_eq!(path_root(&k0, &[l1], Some((&k0, &v0))), Ok(root));
        assert_eq!(path_root(&k1, &[l0], Some((&k1, &v1))), Ok(root));
        // k1's leaf cannot end k0's one-level path: they differ in bit 0.
        assert!(path_root(&k0, &[l0], Some((&k1, &v1))).is_err());
        assert!(row_ok(&root, false, &l0, &l1));
        assert!(!row_ok(&root, true, &l0, &l1));
        assert!(!row_ok(&root, false, &l0[..31], &l1));
    }

    #[test]
    fn an_absent_key_ends_at_empty() {
        let k = [0x40u8; 32];
        let e = *empty();
        assert_eq!(path_root(&k, &[], None), Ok(e));
        assert!(path_root(&k, &vec![e; 257], None).is_err());
    }
}
