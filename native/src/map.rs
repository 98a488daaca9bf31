//! The memory map's paths (docs/FORMAT.md §6.12), as `ledger/map_tree.py`: a key's walk down
//! checked stored nodes (`map_descend`), a path's check (`map_path_root`) and the re-hash of
//! stored node rows (`map_rows_ok`).
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

/// `map_tree.path_root`: the root the path (`siblings`, `leaf` = `(key, value)` or None)
/// gives for `key`. `Reject` where the reference raises (a leaf off the path, a size).
#[pyfunction]
pub fn map_path_root<'py>(
    py: Python<'py>,
    key: &[u8],
    siblings: &Bound<'py, PyList>,
    leaf: Option<&Bound<'py, PyTuple>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let key = key32(key)?;
    let mut sib = Vec::with_capacity(siblings.len());
    for s in siblings.iter() {
        let s = s
            .downcast::<PyBytes>()
            .or_else(|_| reject("a sibling is not bytes"))?;
        sib.push(key32(s.as_bytes())?);
    }
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
        let depth = siblings.len();
        if depth >= KEY_BITS {
            return reject("a map path is at most 256 levels deep");
        }
        if bit(&key, depth) {
            siblings.append(&a)?;
            h = b;
        } else {
            siblings.append(&b)?;
            h = a;
        }
    }
}

/// A stored row copied out of Python: `(hash, leaf, a, b)`.
type OwnedRow = (Vec<u8>, bool, Vec<u8>, Vec<u8>);

/// `map_tree.check_rows`: whether every stored row `(hash, leaf, a, b)` is well formed and
/// hashes to its hash. False sends the caller to the reference, which names the bad row.
#[pyfunction]
pub fn map_rows_ok(py: Python<'_>, rows: &Bound<'_, PyList>) -> bool {
    let mut owned: Vec<OwnedRow> = Vec::with_capacity(rows.len());
    for row in rows.iter() {
        let Ok(t) = row.downcast::<PyTuple>() else {
            return false;
        };
        if t.len() != 4 {
            return false;
        }
        let field = |i: usize| -> Option<Vec<u8>> {
            let item = t.get_item(i).ok()?;
            let b = item.downcast::<PyBytes>().ok()?;
            Some(b.as_bytes().to_vec())
        };
        let flag = t
            .get_item(1)
            .ok()
            .and_then(|f| f.downcast::<PyBool>().ok().map(|b| b.is_true()));
        match (field(0), flag, field(2), field(3)) {
            (Some(h), Some(l), Some(a), Some(b)) => owned.push((h, l, a, b)),
            _ => return false,
        }
    }
    py.allow_threads(|| owned.iter().all(|(h, l, a, b)| row_ok(h, *l, a, b)))
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
