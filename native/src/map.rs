//! The memory map's paths (docs/FORMAT.md §6.12), as `ledger/map_tree.py`: a key's walk down
//! checked stored nodes (`map_descend`), a path's check (`map_path_root`) and the re-hash of
//! stored node rows (`map_rows_into`); and the map's update, as `state_map.update_map`
//! (`map_update`: every changed path walked level by level, one batched read per level).
//!
//! Both trees of the map are binary sparse Merkle trees over 256-bit keys, most significant
//! bit first, with the leaf shortcut: `EMPTY`, `leaf(key, value)`, `node(left, right)`, each
//! SHA-256 under its own ASCII tag and a 0x00 separator. Nothing here decides an error: where
//! the reference raises, these `Reject` and the reference runs again to raise its own.

use std::collections::HashMap;
use std::sync::OnceLock;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

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

// -- the update of the map (state_map.update_map) ---------------------------------------------

/// A map node as the update reads and writes it: a leaf's key and value, or an interior
/// node's children.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    /// A leaf: its key and value.
    Leaf(Hash, Hash),
    /// An interior node: its left and right children's hashes.
    Inner(Hash, Hash),
}

/// One change of a tree: a key and its new value (None removes the key).
pub type Change = (Hash, Option<Hash>);

/// Why an update stopped: its reader failed (`Read`), or the reference must decide (`Reject`:
/// a node not at hand, a path past 256 levels, two leaves with one key).
#[derive(Debug)]
pub enum UpdateError<E> {
    /// The reader's own error.
    Read(E),
    /// Where the reference raises: the caller runs it.
    Reject(&'static str),
}

/// The first index of `keys[lo..hi]` whose bit `depth` is 1, by the bisection of the
/// reference (`map_tree._split`, and `bisect_left` over the bits in `state_map._update`), so
/// that both split any list alike.
fn split(keys: &[(Hash, Option<Hash>)], lo: usize, hi: usize, depth: usize) -> usize {
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = (lo + hi) >> 1;
        if bit(&keys[mid].0, depth) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// One subtree the update visits: node `h` at `depth`, the changes `lo..hi` under it, its
/// result `out` (`h` until computed) and, for an interior node, its two children's tasks.
#[derive(Clone, Copy)]
struct Task {
    h: Hash,
    depth: usize,
    lo: usize,
    hi: usize,
    out: Hash,
    kids: Option<(usize, usize)>,
}

/// The hasher of the update's node table: its keys are SHA-256 outputs already, so their
/// first 8 bytes are as good a hash as SipHash of all 32, for a fraction of the time.
#[derive(Default)]
struct PrefixHasher(u64);

impl std::hash::Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut w = [0u8; 8];
        let n = bytes.len().min(8);
        w[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(w);
    }

    fn write_usize(&mut self, _: usize) {}
}

type Table<V> = HashMap<Hash, V, std::hash::BuildHasherDefault<PrefixHasher>>;

/// The level-synchronous update of memory-map trees over a batched reader.
///
/// `read` is given distinct hashes (sorted) of nodes neither read nor made yet and returns
/// their nodes, in order, or an error (a node it cannot give is its error, or a `Reject`).
/// Every node an update needs at one level of every tree is read in one call.
pub struct Updater<E, F> {
    nodes: Table<Row>,
    /// The nodes the updates made, in the order made (a node made twice is listed twice).
    pub created: Vec<(Hash, Row)>,
    read: F,
    _error: std::marker::PhantomData<E>,
}

impl<E, F> Updater<E, F>
where
    F: FnMut(&[Hash]) -> Result<Vec<Row>, E>,
{
    /// An updater reading nodes through `read`.
    pub fn new(read: F) -> Self {
        Self {
            nodes: Table::default(),
            created: Vec::new(),
            read,
            _error: std::marker::PhantomData,
        }
    }

    /// Read, in one call of `read`, the nodes of `hashes` not at hand (`EMPTY` is no node).
    fn ensure(&mut self, hashes: impl IntoIterator<Item = Hash>) -> Result<(), UpdateError<E>> {
        let e = *empty();
        let mut want: Vec<Hash> = hashes
            .into_iter()
            .filter(|h| *h != e && !self.nodes.contains_key(h))
            .collect();
        if want.is_empty() {
            return Ok(());
        }
        want.sort_unstable();
        want.dedup();
        let got = (self.read)(&want).map_err(UpdateError::Read)?;
        if got.len() != want.len() {
            return Err(UpdateError::Reject("a read gave another number of nodes"));
        }
        self.nodes.extend(want.into_iter().zip(got));
        Ok(())
    }

    fn row(&self, h: &Hash) -> Result<Row, UpdateError<E>> {
        self.nodes
            .get(h)
            .copied()
            .ok_or(UpdateError::Reject("a map node is not at hand"))
    }

    fn is_leaf(&self, h: &Hash) -> Result<bool, UpdateError<E>> {
        Ok(matches!(self.row(h)?, Row::Leaf(..)))
    }

    fn record(&mut self, h: Hash, row: Row) {
        self.nodes.insert(h, row);
        self.created.push((h, row));
    }

    /// The value each of `keys` holds in the tree at `root` (`state_map.lookup`), the paths
    /// walked together: one read per level of nodes not at hand.
    ///
    /// # Errors
    /// `Read` as the reader; `Reject` for a path past 256 levels.
    pub fn lookup_all(
        &mut self,
        root: Hash,
        keys: &[Hash],
    ) -> Result<Vec<Option<Hash>>, UpdateError<E>> {
        let e = *empty();
        let mut heads = vec![(root, 0usize); keys.len()];
        let mut out = vec![None; keys.len()];
        let mut active: Vec<usize> = (0..keys.len()).collect();
        while !active.is_empty() {
            self.ensure(active.iter().map(|&i| heads[i].0))?;
            let mut next = Vec::new();
            for i in active {
                let (mut h, mut d) = heads[i];
                while h != e {
                    match self.nodes.get(&h) {
                        None => {
                            heads[i] = (h, d);
                            next.push(i);
                            break;
                        }
                        Some(Row::Leaf(k, v)) => {
                            if *k == keys[i] {
                                out[i] = Some(*v);
                            }
                            break;
                        }
                        Some(Row::Inner(l, r)) => {
                            if d >= KEY_BITS {
                                return Err(UpdateError::Reject("a map path passes 256 levels"));
                            }
                            h = if bit(&keys[i], d) { *r } else { *l };
                            d += 1;
                        }
                    }
                }
            }
            active = next;
        }
        Ok(out)
    }

    /// `map_tree.build` of the sorted leaves `kv` at `depth`, each node made recorded.
    fn build(&mut self, kv: &[(Hash, Option<Hash>)], depth: usize) -> Result<Hash, UpdateError<E>> {
        match kv {
            [] => Ok(*empty()),
            [(k, v)] => {
                let v = v.ok_or(UpdateError::Reject("a removed key among the leaves"))?;
                let h = leaf(k, &v);
                self.record(h, Row::Leaf(*k, v));
                Ok(h)
            }
            _ => {
                if depth >= KEY_BITS {
                    return Err(UpdateError::Reject("two leaves with one key"));
                }
                let mid = split(kv, 0, kv.len(), depth);
                let l = self.build(&kv[..mid], depth + 1)?;
                let r = self.build(&kv[mid..], depth + 1)?;
                let h = node(&l, &r);
                self.record(h, Row::Inner(l, r));
                Ok(h)
            }
        }
    }

    /// The subtree of an empty subtree or one leaf (`end`) with `changes` (sorted, each key
    /// once) applied: `build` of the keys left, as the reference's merge.
    fn rebuild(
        &mut self,
        end: Option<(Hash, Hash)>,
        changes: &[Change],
        depth: usize,
    ) -> Result<Hash, UpdateError<E>> {
        let mut kv: Vec<(Hash, Option<Hash>)> = changes
            .iter()
            .filter(|(_, v)| v.is_some())
            .copied()
            .collect();
        if let Some((k, v)) = end {
            if !changes.iter().any(|(c, _)| *c == k) {
                let at = kv.partition_point(|(x, _)| *x < k);
                kv.insert(at, (k, Some(v)));
            }
        }
        self.build(&kv, depth)
    }

    /// Apply each tree's changes (sorted by key, each key once) to its root
    /// (`state_map.update`, every tree at once): down level by level, one read per level of
    /// the nodes on the changed paths, then up level by level, the new nodes hashed and one
    /// read per level of the children the leaf shortcut must look at. Returns the new roots.
    ///
    /// # Errors
    /// `Read` as the reader; `Reject` for a path past 256 levels.
    pub fn update_trees(
        &mut self,
        trees: &[(Hash, Vec<Change>)],
    ) -> Result<Vec<Hash>, UpdateError<E>> {
        let e = *empty();
        let mut changes: Vec<Change> = Vec::new();
        let mut tasks: Vec<Task> = Vec::new();
        let mut roots = Vec::with_capacity(trees.len());
        let mut frontier = Vec::new();
        for (root, ch) in trees {
            let lo = changes.len();
            changes.extend_from_slice(ch);
            let hi = changes.len();
            roots.push(tasks.len());
            if lo < hi {
                frontier.push(tasks.len());
            }
            tasks.push(Task {
                h: *root,
                depth: 0,
                lo,
                hi,
                out: *root,
                kids: None,
            });
        }
        let mut levels: Vec<Vec<usize>> = Vec::new();
        while !frontier.is_empty() {
            self.ensure(frontier.iter().map(|&t| tasks[t].h))?;
            let mut next = Vec::new();
            for &t in &frontier {
                let Task {
                    h, depth, lo, hi, ..
                } = tasks[t];
                let row = if h == e { None } else { Some(self.row(&h)?) };
                if let Some(Row::Inner(l, r)) = row {
                    if depth >= KEY_BITS {
                        return Err(UpdateError::Reject("a map path passes 256 levels"));
                    }
                    let mid = split(&changes, lo, hi, depth);
                    let lt = tasks.len();
                    let kid = |h: Hash, lo: usize, hi: usize| Task {
                        h,
                        depth: depth + 1,
                        lo,
                        hi,
                        out: h,
                        kids: None,
                    };
                    tasks.push(kid(l, lo, mid));
                    tasks.push(kid(r, mid, hi));
                    if lo < mid {
                        next.push(lt);
                    }
                    if mid < hi {
                        next.push(lt + 1);
                    }
                    tasks[t].kids = Some((lt, lt + 1));
                } else {
                    let end = match row {
                        Some(Row::Leaf(k, v)) => Some((k, v)),
                        _ => None,
                    };
                    tasks[t].out = self.rebuild(end, &changes[lo..hi], depth)?;
                }
            }
            levels.push(frontier);
            frontier = next;
        }
        for level in levels.iter().rev() {
            let pairs: Vec<(usize, Hash, Hash)> = level
                .iter()
                .filter_map(|&t| {
                    let (lt, rt) = tasks[t].kids?;
                    Some((t, tasks[lt].out, tasks[rt].out))
                })
                .collect();
            // The reference looks at the left child when the right one is empty, else at the
            // right one when the left is empty: exactly those nodes are read.
            self.ensure(pairs.iter().filter_map(|&(_, l, r)| {
                if r == e {
                    (l != e).then_some(l)
                } else {
                    (l == e).then_some(r)
                }
            }))?;
            for (t, l, r) in pairs {
                let out = if r == e && (l == e || self.is_leaf(&l)?) {
                    l
                } else if l == e && self.is_leaf(&r)? {
                    r
                } else {
                    let n = node(&l, &r);
                    if n != tasks[t].h {
                        self.record(n, Row::Inner(l, r));
                    }
                    n
                };
                tasks[t].out = out;
            }
        }
        Ok(roots.iter().map(|&t| tasks[t].out).collect())
    }

    /// `state_map.update_map`: apply `groups` (each a namespace key and its item changes,
    /// sorted by key, each key once) to the map at `root`. Looks up every namespace's item
    /// root, updates every item tree, then the namespace tree with the new item roots (an
    /// emptied namespace leaves it). Returns the new map root.
    ///
    /// # Errors
    /// As `update_trees`.
    pub fn update_map(
        &mut self,
        root: Hash,
        groups: &[(Hash, Vec<Change>)],
    ) -> Result<Hash, UpdateError<E>> {
        let e = *empty();
        let nks: Vec<Hash> = groups.iter().map(|(nk, _)| *nk).collect();
        let before = self.lookup_all(root, &nks)?;
        let trees: Vec<(Hash, Vec<Change>)> = groups
            .iter()
            .zip(&before)
            .map(|((_, ch), b)| (b.unwrap_or(e), ch.clone()))
            .collect();
        let after = self.update_trees(&trees)?;
        let mut top: Vec<Change> = nks
            .iter()
            .zip(after)
            .map(|(nk, h)| (*nk, (h != e).then_some(h)))
            .collect();
        top.sort_unstable_by_key(|a| a.0);
        if top.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(UpdateError::Reject("a namespace key twice"));
        }
        Ok(self.update_trees(&[(root, top)])?[0])
    }
}

/// One `bytes` object per hash: those the walk was given (node fields, keys, values) and
/// those it made, so that a node made shares its children's hashes with the nodes that hold
/// them (as the reference's nodes do), and a hash looked up twice is hashed by Python once.
struct Pool<'py> {
    py: Python<'py>,
    objects: Table<Bound<'py, PyBytes>>,
}

impl<'py> Pool<'py> {
    /// The hash `b` holds (`Reject` unless 32 bytes), `b` kept as its object.
    fn keep(&mut self, b: Bound<'py, PyBytes>) -> PyResult<Hash> {
        let h = key32(b.as_bytes())?;
        self.objects.entry(h).or_insert(b);
        Ok(h)
    }

    /// The object of hash `h` (made once).
    fn get(&mut self, h: &Hash) -> Bound<'py, PyBytes> {
        let py = self.py;
        self.objects
            .entry(*h)
            .or_insert_with(|| PyBytes::new(py, h))
            .clone()
    }
}

/// A node as a `NodeSource` holds it (`leaf_cls(key, value)`, `inner_cls(left, right)`) or as
/// a batched walk reads it (`(is_leaf, a, b)`); `Reject` for anything else.
fn row_from<'py>(
    obj: &Bound<'py, PyAny>,
    leaf_cls: &Bound<'py, PyType>,
    inner_cls: &Bound<'py, PyType>,
    pool: &mut Pool<'py>,
) -> PyResult<Row> {
    let py = obj.py();
    let mut field = |name: &Bound<'py, PyString>| -> PyResult<Hash> {
        let v = obj.getattr(name)?;
        let b = v
            .downcast_into_exact::<PyBytes>()
            .or_else(|_| reject("a map node field is not bytes"))?;
        pool.keep(b)
    };
    let ty = obj.get_type();
    if ty.is(leaf_cls) {
        return Ok(Row::Leaf(
            field(intern!(py, "key"))?,
            field(intern!(py, "value"))?,
        ));
    }
    if ty.is(inner_cls) {
        return Ok(Row::Inner(
            field(intern!(py, "left"))?,
            field(intern!(py, "right"))?,
        ));
    }
    let t = obj
        .downcast_exact::<PyTuple>()
        .or_else(|_| reject("a map node is not a node"))?;
    if t.len() != 3 {
        return reject("a map node row is not (is_leaf, a, b)");
    }
    let is_leaf = t
        .get_item(0)?
        .downcast_into_exact::<PyBool>()
        .or_else(|_| reject("a map node row's flag is not a bool"))?
        .is_true();
    let a = pool.keep(bytes_at(t, 1)?)?;
    let b = pool.keep(bytes_at(t, 2)?)?;
    Ok(if is_leaf {
        Row::Leaf(a, b)
    } else {
        Row::Inner(a, b)
    })
}

/// The changes of one tree, `{key: value or None}` (exactly a dict of exactly `bytes` of 32),
/// sorted by key.
fn changes_of<'py>(items: &Bound<'py, PyAny>, pool: &mut Pool<'py>) -> PyResult<Vec<Change>> {
    let d = items
        .downcast_exact::<PyDict>()
        .or_else(|_| reject("a tree's changes are not a dict"))?;
    let mut out = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let k = k
            .downcast_into_exact::<PyBytes>()
            .or_else(|_| reject("a map key is not bytes"))?;
        let v = if v.is_none() {
            None
        } else {
            let v = v
                .downcast_into_exact::<PyBytes>()
                .or_else(|_| reject("a map value is not bytes"))?;
            Some(pool.keep(v)?)
        };
        out.push((pool.keep(k)?, v));
    }
    out.sort_unstable_by_key(|a| a.0);
    Ok(out)
}

/// `state_map.update_map`, level by level: apply `groups` (a list of `(namespace key,
/// {item key: value or None})`) to the map at `root`. Nodes are looked up in `known` first
/// (hash -> node or `(is_leaf, a, b)` row), then the missing ones of each level asked of
/// `read` together (a list of hashes -> a list of nodes, rows or None). Returns the new root
/// and the nodes made (hash -> `leaf_cls(key, value)` or `inner_cls(left, right)`).
/// `Reject` where the reference decides: a node none of them gives, a value that is not 32
/// bytes, a path past 256 levels; an exception `read` raises is raised as is.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn map_update<'py>(
    py: Python<'py>,
    root: &Bound<'py, PyAny>,
    groups: &Bound<'py, PyList>,
    known: &Bound<'py, PyDict>,
    read: &Bound<'py, PyAny>,
    leaf_cls: &Bound<'py, PyType>,
    inner_cls: &Bound<'py, PyType>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyDict>)> {
    let pool = std::cell::RefCell::new(Pool {
        py,
        objects: Table::default(),
    });
    let root = root
        .downcast_exact::<PyBytes>()
        .or_else(|_| reject("a map root is not bytes"))?;
    let root = pool.borrow_mut().keep(root.clone())?;
    let mut parsed = Vec::with_capacity(groups.len());
    for g in groups.iter() {
        let t = g
            .downcast_into_exact::<PyTuple>()
            .or_else(|_| reject("a group is not a (namespace key, changes) pair"))?;
        if t.len() != 2 {
            return reject("a group is not a (namespace key, changes) pair");
        }
        let mut p = pool.borrow_mut();
        let nk = p.keep(bytes_at(&t, 0)?)?;
        parsed.push((nk, changes_of(&t.get_item(1)?, &mut p)?));
    }
    let reader = |want: &[Hash]| -> PyResult<Vec<Row>> {
        let mut p = pool.borrow_mut();
        let mut out: Vec<Option<Row>> = Vec::with_capacity(want.len());
        let mut missing = Vec::new();
        for h in want {
            let key = p.get(h);
            match known.get_item(&key)? {
                Some(obj) => out.push(Some(row_from(&obj, leaf_cls, inner_cls, &mut p)?)),
                None => {
                    out.push(None);
                    missing.push(key);
                }
            }
        }
        if !missing.is_empty() {
            let ask = PyList::new(py, &missing)?;
            let got = read.call1((ask,))?;
            let got = got
                .downcast_into_exact::<PyList>()
                .or_else(|_| reject("a read did not give a list"))?;
            if got.len() != missing.len() {
                return reject("a read gave another number of nodes");
            }
            let mut got = got.iter();
            for slot in out.iter_mut().filter(|r| r.is_none()) {
                let obj = got
                    .next()
                    .map_or_else(|| reject("a read gave too few nodes"), Ok)?;
                if obj.is_none() {
                    return reject("a map node is not stored");
                }
                *slot = Some(row_from(&obj, leaf_cls, inner_cls, &mut p)?);
            }
        }
        out.into_iter()
            .map(|r| r.map_or_else(|| reject("a map node is not stored"), Ok))
            .collect()
    };
    let mut up = Updater::new(reader);
    let new_root = match up.update_map(root, &parsed) {
        Ok(h) => h,
        Err(UpdateError::Read(err)) => return Err(err),
        Err(UpdateError::Reject(why)) => return reject(why),
    };
    let made = PyDict::new(py);
    let leaf_make = Maker::new(leaf_cls, intern!(py, "key"), intern!(py, "value"))?;
    let inner_make = Maker::new(inner_cls, intern!(py, "left"), intern!(py, "right"))?;
    let mut p = pool.borrow_mut();
    for (h, row) in &up.created {
        let n = match row {
            Row::Leaf(k, v) => leaf_make.make(p.get(k), p.get(v))?,
            Row::Inner(l, r) => inner_make.make(p.get(l), p.get(r))?,
        };
        made.set_item(p.get(h), n)?;
    }
    Ok((p.get(&new_root), made))
}

/// A node of `map_put_rows`' input: its hash object, whether a leaf, its two fields' objects
/// and their hashes.
struct PutNode<'py> {
    h: Bound<'py, PyBytes>,
    is_leaf: bool,
    a: Bound<'py, PyBytes>,
    b: Bound<'py, PyBytes>,
    fresh: bool,
}

/// `StoredNodes._put`'s rows (`memory_root/map_nodes.py`, its reference), without Python a
/// node: number the nodes of `nodes` (hash -> `leaf_cls(key, value)` or `inner_cls(left,
/// right)`, in order) that `at` (hash -> row number) does not hold, from `base` on, adding
/// them to `at`; call `places(children)` with the children of the new interior nodes that
/// `at` lacks (not `EMPTY`) and then `starts(values)` with the values of the new leaves it
/// lacks, each only when its list is not empty (each adds the rows it finds to `at`); return
/// each new node's row `(at, leaf, a, b, at_a, at_b)`, in order, the item-tree starts
/// `{value: row}` of the new leaves whose value has a row, the nodes of `nodes` no other of
/// them names (the roots they make, `_tops`), and the hash of the last new node (None when
/// none is new). `Reject` for a node that is not one of the two classes of `bytes` fields
/// of 32 (the reference then runs); an exception of `places` or `starts` is raised as is.
#[pyfunction]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub fn map_put_rows<'py>(
    py: Python<'py>,
    nodes: &Bound<'py, PyDict>,
    at: &Bound<'py, PyDict>,
    base: i64,
    places: &Bound<'py, PyAny>,
    starts: &Bound<'py, PyAny>,
    leaf_cls: &Bound<'py, PyType>,
    inner_cls: &Bound<'py, PyType>,
) -> PyResult<(
    Bound<'py, PyList>,
    Bound<'py, PyDict>,
    Bound<'py, PyList>,
    Option<Bound<'py, PyBytes>>,
)> {
    let e = *empty();
    let field =
        |obj: &Bound<'py, PyAny>, name: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyBytes>> {
            let b = obj
                .getattr(name)?
                .downcast_into_exact::<PyBytes>()
                .or_else(|_| reject("a map node field is not bytes"))?;
            key32(b.as_bytes())?;
            Ok(b)
        };
    let mut all = Vec::with_capacity(nodes.len());
    let mut named: Table<()> = Table::default();
    for (h, n) in nodes.iter() {
        let h = h
            .downcast_into_exact::<PyBytes>()
            .or_else(|_| reject("a map node's hash is not bytes"))?;
        key32(h.as_bytes())?;
        let ty = n.get_type();
        let (is_leaf, a, b) = if ty.is(leaf_cls) {
            (
                true,
                field(&n, intern!(py, "key"))?,
                field(&n, intern!(py, "value"))?,
            )
        } else if ty.is(inner_cls) {
            (
                false,
                field(&n, intern!(py, "left"))?,
                field(&n, intern!(py, "right"))?,
            )
        } else {
            return reject("a map node is not a node");
        };
        if !is_leaf {
            named.insert(key32(a.as_bytes())?, ());
        }
        named.insert(key32(b.as_bytes())?, ());
        let fresh = !at.contains(&h)?;
        all.push(PutNode {
            h,
            is_leaf,
            a,
            b,
            fresh,
        });
    }
    let fresh: Vec<(i64, &PutNode<'py>)> = (base..).zip(all.iter().filter(|n| n.fresh)).collect();
    for (row, n) in &fresh {
        at.set_item(&n.h, row)?;
    }
    // Each field's row looked up once (a dict of up to 2^20 entries: a cache miss a lookup),
    // again only for those `places` or `starts` may have found.
    let lookup = |c: &Bound<'py, PyBytes>| -> PyResult<Option<Bound<'py, PyAny>>> {
        if c.as_bytes() == e.as_slice() {
            return Ok(None);
        }
        at.get_item(c)
    };
    let mut found: Vec<[Option<Bound<'py, PyAny>>; 2]> = Vec::with_capacity(fresh.len());
    // A child neither new nor met is looked for (a child found nowhere gets no row number).
    let mut seen: Table<()> = Table::default();
    let mut missing = Vec::new();
    for (_, n) in &fresh {
        if n.is_leaf {
            found.push([None, None]);
            continue;
        }
        let pair = [lookup(&n.a)?, lookup(&n.b)?];
        for (c, got) in [&n.a, &n.b].into_iter().zip(&pair) {
            if got.is_none()
                && c.as_bytes() != e.as_slice()
                && seen.insert(key32(c.as_bytes())?, ()).is_none()
            {
                missing.push(c.clone());
            }
        }
        found.push(pair);
    }
    if !missing.is_empty() {
        places.call1((PyList::new(py, &missing)?,))?;
        for ((_, n), pair) in fresh.iter().zip(found.iter_mut()) {
            if !n.is_leaf {
                for (c, got) in [&n.a, &n.b].into_iter().zip(pair.iter_mut()) {
                    if got.is_none() {
                        *got = lookup(c)?;
                    }
                }
            }
        }
    }
    // Item-tree roots a new leaf names: only the stored starts are asked (no walk for them).
    let mut values = Vec::new();
    for ((_, n), pair) in fresh.iter().zip(found.iter_mut()) {
        if n.is_leaf {
            pair[1] = at.get_item(&n.b)?;
            if pair[1].is_none() {
                values.push(n.b.clone());
            }
        }
    }
    if !values.is_empty() {
        starts.call1((PyList::new(py, &values)?,))?;
        for ((_, n), pair) in fresh.iter().zip(found.iter_mut()) {
            if n.is_leaf && pair[1].is_none() {
                pair[1] = at.get_item(&n.b)?;
            }
        }
    }
    let rows = PyList::empty(py);
    let items = PyDict::new(py);
    let none = || py.None().into_bound(py);
    for ((row, n), [at_a, at_b]) in fresh.iter().zip(found) {
        if n.is_leaf {
            if let Some(item) = &at_b {
                items.set_item(&n.b, item)?;
            }
        }
        let flag = i64::from(n.is_leaf);
        rows.append(PyTuple::new(
            py,
            [
                row.into_pyobject(py)?.into_any(),
                flag.into_pyobject(py)?.into_any(),
                n.a.clone().into_any(),
                n.b.clone().into_any(),
                at_a.unwrap_or_else(none),
                at_b.unwrap_or_else(none),
            ],
        )?)?;
    }
    let last = fresh.last().map(|(_, n)| n.h.clone());
    let tops = PyList::empty(py);
    for n in &all {
        if !named.contains_key(&key32(n.h.as_bytes())?) {
            tops.append(&n.h)?;
        }
    }
    Ok((rows, items, tops, last))
}

/// Makes the nodes `map_update` returns: an instance of a class of two slots (the frozen
/// `Leaf` and `Inner`, whose `__init__` only sets them), made by `object.__new__` and the
/// slots' own descriptors, as `object.__setattr__` would: a third of the time of the
/// dataclass's `__init__`, for the same object. A class without those slots is called.
struct Maker<'py> {
    cls: Bound<'py, PyType>,
    fast: Option<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)>,
}

impl<'py> Maker<'py> {
    fn new(
        cls: &Bound<'py, PyType>,
        first: &Bound<'py, PyString>,
        second: &Bound<'py, PyString>,
    ) -> PyResult<Self> {
        let py = cls.py();
        let slot = |name: &Bound<'py, PyString>| -> Option<Bound<'py, PyAny>> {
            let d = cls.getattr(name).ok()?;
            let member = d.get_type().name().ok()?;
            (member.to_str().ok()? == "member_descriptor")
                .then(|| d.getattr(intern!(py, "__set__")).ok())
                .flatten()
        };
        let post_init = cls.hasattr(intern!(py, "__post_init__"))?;
        let new = py
            .get_type::<pyo3::types::PyAny>()
            .getattr(intern!(py, "__new__"))
            .ok();
        let fast = match (post_init, new, slot(first), slot(second)) {
            (false, Some(n), Some(a), Some(b)) => Some((n, a, b)),
            _ => None,
        };
        Ok(Self {
            cls: cls.clone(),
            fast,
        })
    }

    fn make(&self, a: Bound<'py, PyBytes>, b: Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        match &self.fast {
            Some((new, set_a, set_b)) => {
                let obj = new.call1((&self.cls,))?;
                set_a.call1((&obj, a))?;
                set_b.call1((&obj, b))?;
                Ok(obj)
            }
            None => self.cls.call1((a, b)),
        }
    }
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

    fn sorted_keys(n: u8) -> Vec<Hash> {
        let mut keys: Vec<Hash> = (0..n).map(|i| sha256(&[i])).collect();
        keys.sort_unstable();
        keys
    }

    /// The siblings of `key`'s path from `root` through `nodes`, and its end leaf.
    fn path(nodes: &HashMap<Hash, Row>, root: Hash, key: &Hash) -> (Vec<Hash>, Option<Row>) {
        let (mut h, mut sib) = (root, Vec::new());
        while h != *empty() {
            match nodes[&h] {
                Row::Inner(l, r) => {
                    let right = bit(key, sib.len());
                    sib.push(if right { l } else { r });
                    h = if right { r } else { l };
                }
                leaf => return (sib, Some(leaf)),
            }
        }
        (sib, None)
    }

    #[test]
    fn an_update_builds_checkable_paths_and_removals_collapse_to_the_shortcut() {
        let keys = sorted_keys(40);
        let v = [7u8; 32];
        let mut up = Updater::new(|_: &[Hash]| -> Result<Vec<Row>, ()> { Err(()) });
        let all: Vec<Change> = keys.iter().map(|k| (*k, Some(v))).collect();
        let root = up.update_trees(&[(*empty(), all)]).unwrap()[0];
        let nodes: HashMap<Hash, Row> = up.created.iter().copied().collect();
        for k in &keys {
            let (sib, end) = path(&nodes, root, k);
            assert_eq!(end, Some(Row::Leaf(*k, v)));
            assert_eq!(path_root(k, &sib, Some((k, &v))), Ok(root));
        }
        // Removing every key but one (and a key never there) leaves that key's leaf.
        let mut gone: Vec<Change> = keys[1..].iter().map(|k| (*k, None)).collect();
        gone.push((sha256(b"absent"), None));
        gone.sort_unstable_by_key(|c| c.0);
        let mut up = Updater::new(|want: &[Hash]| -> Result<Vec<Row>, ()> {
            Ok(want.iter().map(|h| nodes[h]).collect())
        });
        let one = up.update_trees(&[(root, gone)]).unwrap()[0];
        assert_eq!(one, leaf(&keys[0], &v));
        assert!(up.created.is_empty());
    }

    #[test]
    fn a_node_the_reader_lacks_is_its_error() {
        let keys = sorted_keys(4);
        let mut up = Updater::new(|_: &[Hash]| -> Result<Vec<Row>, ()> { Err(()) });
        let all: Vec<Change> = keys.iter().map(|k| (*k, Some([1u8; 32]))).collect();
        let root = up.update_trees(&[(*empty(), all)]).unwrap()[0];
        let mut up = Updater::new(|_: &[Hash]| -> Result<Vec<Row>, &str> { Err("missing") });
        let got = up.update_trees(&[(root, vec![(keys[0], None)])]);
        assert!(matches!(got, Err(UpdateError::Read("missing"))));
    }

    #[test]
    fn an_absent_key_ends_at_empty() {
        let k = [0x40u8; 32];
        let e = *empty();
        assert_eq!(path_root(&k, &[], None), Ok(e));
        assert!(path_root(&k, &vec![e; 257], None).is_err());
    }
}
