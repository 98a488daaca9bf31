//! `memroot._native`: the per-entry work of memroot in Rust, under the Python API.
//!
//! Pure functions over bytes and plain Python values; no SQL, nothing held across calls. The
//! pure-Python modules of `memroot.ledger` are the reference: every function here computes
//! exactly what its Python counterpart computes, and where the Python one raises, this one
//! raises `Reject` and the Python wrapper re-runs the reference, which raises its own error
//! with its own message (`memroot.ledger._backend`). The GIL is released around the work on
//! whole chunks of rows.

pub mod append;
pub mod cbor;
pub mod entry;
pub mod fold;
pub mod hash;
pub mod jsonl;
pub mod map;
pub mod merkle;
pub mod ops;
pub mod py;
pub mod rows;
pub mod sign;
pub mod strict;
pub mod uuid;
pub mod verify;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use hash::Hash;

create_exception!(
    _native,
    Reject,
    PyValueError,
    "The native core refuses the input; the Python reference says why."
);

pub(crate) fn reject<T>(what: &str) -> PyResult<T> {
    Err(Reject::new_err(what.to_owned()))
}

fn hash32(b: &[u8], what: &str) -> PyResult<Hash> {
    b.try_into()
        .or_else(|_| reject(&format!("{what} is not 32 bytes")))
}

fn hashes32(list: &Bound<'_, PyList>, what: &str) -> PyResult<Vec<Hash>> {
    let mut out = Vec::with_capacity(list.len());
    for item in list.iter() {
        let b = item
            .downcast::<PyBytes>()
            .or_else(|_| reject(&format!("{what} is not bytes")))?;
        out.push(hash32(b.as_bytes(), what)?);
    }
    Ok(out)
}

/// Canonical CBOR of a value of the data model (`encoding.encode`).
#[pyfunction]
fn encode<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(256);
    py::encode(value, 0, &mut out).or_else(|_| reject("outside the data model"))?;
    Ok(PyBytes::new(py, &out))
}

/// Canonical CBOR of `value` and the RFC 9162 leaf hash of those bytes (`build_entry`).
#[pyfunction]
fn encode_leaf<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let mut out = Vec::with_capacity(256);
    py::encode(value, 0, &mut out).or_else(|_| reject("outside the data model"))?;
    let leaf = hash::leaf_hash(&out);
    Ok((PyBytes::new(py, &out), PyBytes::new(py, &leaf)))
}

/// Strictly decode canonical CBOR (`encoding.decode`).
#[pyfunction]
fn decode<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match cbor::decode(data) {
        Ok(v) => py::to_py(py, &v),
        Err(e) => reject(e.0),
    }
}

/// Decode entry bytes strictly (`Entry.from_bytes`): the tuple
/// `(v, prev, seq, branch, ts, kind, type, body, hash)`, `kind` as text.
#[pyfunction]
#[pyo3(signature = (raw, entry_hash=None))]
fn decode_entry<'py>(
    py: Python<'py>,
    raw: &[u8],
    entry_hash: Option<&Bound<'py, PyBytes>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let fields = match entry::decode(raw) {
        Ok(f) => f,
        Err(e) => return reject(e.0),
    };
    let h = match entry_hash {
        Some(h) => h.clone(),
        None => PyBytes::new(py, &hash::leaf_hash(raw)),
    };
    entry_tuple(py, &fields, h)
}

fn entry_tuple<'py>(
    py: Python<'py>,
    f: &entry::Fields<'_>,
    h: Bound<'py, PyBytes>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            entry::FORMAT_VERSION.into_pyobject(py)?.into_any(),
            PyBytes::new(py, f.prev).into_any(),
            f.seq.into_pyobject(py)?.into_any(),
            f.branch.into_pyobject(py)?.into_any(),
            f.ts.into_pyobject(py)?.into_any(),
            f.kind.into_pyobject(py)?.into_any(),
            f.type_.into_pyobject(py)?.into_any(),
            py::to_py(py, &f.body)?,
            h.into_any(),
        ],
    )
}

/// `SHA-256(0x00 || data)`.
#[pyfunction]
fn leaf_hash<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &hash::leaf_hash(data))
}

/// `SHA-256(0x01 || left || right)`.
#[pyfunction]
fn node_hash<'py>(py: Python<'py>, left: &[u8], right: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &hash::node_hash(left, right))
}

/// Plain SHA-256.
#[pyfunction]
fn sha256<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &hash::sha256(data))
}

/// `SHA-256(tag || 0x00 || data)`; the caller has checked the tag.
#[pyfunction]
fn domain_hash<'py>(py: Python<'py>, tag: &[u8], data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &hash::domain_hash(tag, data))
}

/// Unkeyed BLAKE3 of content (its address); the GIL is released for large content.
#[pyfunction]
fn content_digest<'py>(py: Python<'py>, content: &[u8]) -> Bound<'py, PyBytes> {
    let d = if content.len() >= 1 << 16 {
        py.allow_threads(|| hash::content_digest(content))
    } else {
        hash::content_digest(content)
    };
    PyBytes::new(py, &d)
}

/// BLAKE3 keyed with the 32-byte salt over the content (the commitment).
#[pyfunction]
fn content_commitment<'py>(
    py: Python<'py>,
    salt: &[u8],
    content: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let key = hash32(salt, "salt")?;
    let c = if content.len() >= 1 << 16 {
        py.allow_threads(|| hash::content_commitment(&key, content))
    } else {
        hash::content_commitment(&key, content)
    };
    Ok(PyBytes::new(py, &c))
}

/// The RFC 9162 root from perfect-subtree hashes, largest first (`root_from_subtrees`).
#[pyfunction]
fn root_from_subtrees<'py>(
    py: Python<'py>,
    hashes: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    let hs = hashes32(hashes, "subtree hash")?;
    Ok(PyBytes::new(py, &merkle::root_from_subtrees(&hs)))
}

/// `strict.leaves_root`'s plan: the complete subtrees `(level, index)` to read for a tree of
/// `size` leaves of which those at `positions` (sorted, distinct) are known, in the order
/// `merkle_leaves_root` takes their hashes.
#[pyfunction]
fn merkle_leaves_plan(size: u64, positions: Vec<u64>) -> PyResult<Vec<merkle::NodeId>> {
    if positions.windows(2).any(|w| w[0] >= w[1]) {
        return reject("leaf positions are not sorted and distinct");
    }
    Ok(merkle::leaves_plan(size, &positions))
}

/// `strict.leaves_root`: the RFC 9162 root of `size` leaves from the known `leaves` at
/// `positions` (sorted, distinct) and the hashes `got` of `merkle_leaves_plan`'s subtrees, in
/// its order. `Reject` for a hash that is not 32 bytes or lists of the wrong lengths.
#[pyfunction]
fn merkle_leaves_root<'py>(
    py: Python<'py>,
    size: u64,
    positions: Vec<u64>,
    leaves: &Bound<'py, PyList>,
    got: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    if positions.windows(2).any(|w| w[0] >= w[1]) {
        return reject("leaf positions are not sorted and distinct");
    }
    let leaves = hashes32(leaves, "a leaf hash")?;
    let got = hashes32(got, "a stored tree node")?;
    match merkle::leaves_root(size, &positions, &leaves, &got) {
        Some(root) => Ok(PyBytes::new(py, &root)),
        None => reject("stored tree nodes of another number than the plan's"),
    }
}

/// Rows read out of Python per native slice of `verify_rows`.
const SLICE: usize = 256;

type NodeList<'py> = Vec<(u32, u64, Bound<'py, PyBytes>)>;

fn node_list<'py>(py: Python<'py>, nodes: &[merkle::NewNode]) -> NodeList<'py> {
    nodes
        .iter()
        .map(|(level, index, h)| (*level, *index, PyBytes::new(py, h)))
        .collect()
}

/// Append leaf hashes to a compact range `(size, hashes)`; return the new hashes and the
/// interior nodes completed, lowest first per leaf (`CompactRange.append_many`).
#[pyfunction]
fn compact_append<'py>(
    py: Python<'py>,
    size: u64,
    hashes: &Bound<'py, PyList>,
    leaves: &Bound<'py, PyList>,
) -> PyResult<(Vec<Bound<'py, PyBytes>>, NodeList<'py>)> {
    let mut cr = merkle::CompactRange {
        size,
        hashes: hashes32(hashes, "subtree hash")?,
    };
    if u64::try_from(cr.hashes.len()).ok() != Some(u64::from(size.count_ones())) {
        return reject("hash count does not match the size");
    }
    let leaves = hashes32(leaves, "leaf hash")?;
    let mut nodes = Vec::with_capacity(leaves.len());
    for leaf in leaves {
        cr.append(leaf, &mut nodes);
    }
    let out = cr.hashes.iter().map(|h| PyBytes::new(py, h)).collect();
    Ok((out, node_list(py, &nodes)))
}

/// The root an inclusion proof gives (`root_from_inclusion_proof`); `Reject` if it fails.
#[pyfunction]
fn root_from_inclusion_proof<'py>(
    py: Python<'py>,
    leaf: &[u8],
    index: u64,
    size: u64,
    proof: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyBytes>> {
    let leaf = hash32(leaf, "leaf hash")?;
    let proof = hashes32(proof, "proof hash")?;
    match merkle::root_from_inclusion_proof(&leaf, index, size, &proof) {
        Ok(r) => Ok(PyBytes::new(py, &r)),
        Err(e) => reject(&format!("{e:?}")),
    }
}

/// The two roots a consistency proof gives for `0 < size1 < size2`; `Reject` if it fails.
#[pyfunction]
fn roots_from_consistency_proof<'py>(
    py: Python<'py>,
    size1: u64,
    size2: u64,
    proof: &Bound<'py, PyList>,
    root1: &[u8],
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let root1 = hash32(root1, "root")?;
    let proof = hashes32(proof, "proof hash")?;
    match merkle::roots_from_consistency_proof(size1, size2, &proof, &root1) {
        Ok((a, b)) => Ok((PyBytes::new(py, &a), PyBytes::new(py, &b))),
        Err(e) => reject(&format!("{e:?}")),
    }
}

/// A row's columns as Python objects, kept alive while their bytes are borrowed.
struct RowObj<'py> {
    seq: u64,
    hash: Option<Bound<'py, PyBytes>>,
    data: Bound<'py, PyBytes>,
    digest: Option<Bound<'py, PyBytes>>,
    salt: Option<Bound<'py, PyBytes>>,
    content: Option<Bound<'py, PyBytes>>,
    erased_by_set: bool,
}

/// An optional bytes column: `Some(None)` for None, `None` for any other type.
fn opt_bytes<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> Option<Option<Bound<'py, PyBytes>>> {
    let v = obj.getattr(name).ok()?;
    if v.is_none() {
        return Some(None);
    }
    Some(Some(v.downcast_into_exact::<PyBytes>().ok()?))
}

/// An optional bytes item of a row tuple: `Some(None)` for None, `None` for any other type.
fn opt_item<'py>(t: &Bound<'py, PyTuple>, i: usize) -> Option<Option<Bound<'py, PyBytes>>> {
    let v = t.get_item(i).ok()?;
    if v.is_none() {
        return Some(None);
    }
    Some(Some(v.downcast_into_exact::<PyBytes>().ok()?))
}

/// A row as the store's query returns it: `(k, hash, data, digest, salt, content,
/// erased_by)` with `seq = k & (2**40 - 1)`.
fn row_tuple<'py>(t: &Bound<'py, PyTuple>) -> Option<RowObj<'py>> {
    if t.len() != 7 {
        return None;
    }
    let k: u64 = t.get_item(0).ok()?.extract().ok()?;
    Some(RowObj {
        seq: k & ((1 << 40) - 1),
        hash: opt_item(t, 1)?,
        data: opt_item(t, 2)??,
        digest: opt_item(t, 3)?,
        salt: opt_item(t, 4)?,
        content: opt_item(t, 5)?,
        erased_by_set: !t.get_item(6).ok()?.is_none(),
    })
}

fn row_obj<'py>(py: Python<'py>, row: &Bound<'py, PyAny>) -> Option<RowObj<'py>> {
    if let Ok(t) = row.downcast_exact::<PyTuple>() {
        return row_tuple(t);
    }
    Some(RowObj {
        seq: row.getattr(intern!(py, "seq")).ok()?.extract().ok()?,
        hash: opt_bytes(row, intern!(py, "hash"))?,
        data: opt_bytes(row, intern!(py, "data"))??,
        digest: opt_bytes(row, intern!(py, "digest"))?,
        salt: opt_bytes(row, intern!(py, "salt"))?,
        content: opt_bytes(row, intern!(py, "content"))?,
        erased_by_set: !row.getattr(intern!(py, "erased_by")).ok()?.is_none(),
    })
}

/// The steps 1-5 of a chunk of rows in one call (`verify._check_row` on each plain row).
///
/// A row is an object with the attributes of `verify.RowLike`, or an exact tuple `(k, hash,
/// data, digest, salt, content, erased_by)` as the store's query gives it (`seq` is then
/// `k & (2**40 - 1)`). Checks `rows[start:]`, at most `max_rows`, while every row is plain (see `verify.rs`) and
/// no limit is reached: the compact range reaching `stop_size`, `node_room` completed nodes
/// (with caches), `event_room` listed events (with caches). Returns `(count, prev,
/// compact_hashes, nodes, events, entries)`: the new chain head and right edge, the completed
/// nodes, the `(event id, seq)` of each event and, when `want_entries`, each row's decoded
/// entry as `decode_entry` gives it. Rows are hashed and decoded with the GIL released.
/// `digests_ok`, one byte a row of `rows` (`content_digests_ok`), saves recomputing the
/// content addresses.
#[pyfunction]
#[pyo3(signature = (rows, start, max_rows, branch, expected_seq, prev, compact_size,
    compact_hashes, caches, no_tombstones, stop_size, node_room, event_room, want_entries,
    digests_ok=None))]
#[allow(clippy::too_many_arguments)]
fn verify_rows<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyList>,
    start: usize,
    max_rows: usize,
    branch: &str,
    expected_seq: u64,
    prev: &[u8],
    compact_size: u64,
    compact_hashes: &Bound<'py, PyList>,
    caches: bool,
    no_tombstones: bool,
    stop_size: Option<u64>,
    node_room: usize,
    event_room: usize,
    want_entries: bool,
    digests_ok: Option<&[u8]>,
) -> PyResult<Bound<'py, PyTuple>> {
    let hashes = hashes32(compact_hashes, "subtree hash")?;
    // One flag a row, computed ahead (`content_digests_ok`); of another length: unused.
    let digests_ok = digests_ok.filter(|d| d.len() == rows.len());
    let mut run = verify::Run {
        branch,
        expected_seq,
        prev: hash32(prev, "prev")?,
        compact: merkle::CompactRange {
            size: compact_size,
            hashes,
        },
        caches,
        no_tombstones,
        stop_size,
        node_room,
        event_room,
        nodes_done: 0,
        events_done: 0,
    };
    if u64::from(compact_size.count_ones()) != run.compact.hashes.len() as u64 {
        return reject("compact range hashes do not match its size");
    }
    let mut nodes: Vec<merkle::NewNode> = Vec::new();
    let events = PyList::empty(py);
    let entries = PyList::empty(py);
    let end = rows.len().min(start.saturating_add(max_rows));
    let mut pos = start;
    // Slices of rows: only rows about to be checked are read out of their Python objects
    // (a call often stops after a few rows, where audit_source has work to do).
    while pos < end {
        let stop = end.min(pos + SLICE);
        let mut objs: Vec<RowObj<'py>> = Vec::with_capacity(stop - pos);
        for i in pos..stop {
            match row_obj(py, &rows.get_item(i)?) {
                Some(o) => objs.push(o),
                None => break, // an odd row: the reference reads it
            }
        }
        let odd = objs.len() < stop - pos;
        let refs: Vec<verify::Row<'_>> = objs
            .iter()
            .enumerate()
            .map(|(i, o)| verify::Row {
                seq: o.seq,
                hash: o.hash.as_ref().map(|b| b.as_bytes()),
                data: o.data.as_bytes(),
                digest: o.digest.as_ref().map(|b| b.as_bytes()),
                salt: o.salt.as_ref().map(|b| b.as_bytes()),
                content: o.content.as_ref().map(|b| b.as_bytes()),
                erased_by_set: o.erased_by_set,
                digest_ok: digests_ok.map(|d| d[pos + i] != 0),
            })
            .collect();
        let (checked, stopped) =
            py.allow_threads(|| verify::check_run(&mut run, &refs, &mut nodes));
        for (c, o) in checked.iter().zip(&objs) {
            if let Some(id) = c.event_id {
                events.append((id, o.seq))?;
            }
            if want_entries {
                entries.append(entry_tuple(py, &c.fields, PyBytes::new(py, &c.leaf))?)?;
            }
        }
        pos += checked.len();
        if stopped || odd {
            break;
        }
    }
    let out_hashes: Vec<Bound<'py, PyBytes>> = run
        .compact
        .hashes
        .iter()
        .map(|h| PyBytes::new(py, h))
        .collect();
    PyTuple::new(
        py,
        [
            (pos - start).into_pyobject(py)?.into_any(),
            PyBytes::new(py, &run.prev).into_any(),
            out_hashes.into_pyobject(py)?.into_any(),
            node_list(py, &nodes).into_pyobject(py)?.into_any(),
            events.into_any(),
            entries.into_any(),
        ],
    )
}

/// The `nodes.k` of each `(level, index, hash)` on branch `branch_no` (`Store.node_key`;
/// `by_end`: layout version 3, `merkle::node_key`).
#[pyfunction]
fn node_keys(
    branch_no: u64,
    nodes: Vec<(u64, u64, Bound<'_, PyAny>)>,
    by_end: bool,
) -> PyResult<Vec<u64>> {
    nodes
        .iter()
        .map(|(level, index, _)| {
            merkle::node_key(branch_no, *level, *index, by_end)
                .map_or_else(|| reject("node key out of range"), Ok)
        })
        .collect()
}

/// `mismatches` of nodes against the nodes read ahead, taking them out of `found`.
///
/// For each `(level, index, hash)` of `nodes` on branch `branch_no`, looks its key
/// (`node_keys`) up in `found` (`{k: h}`) and removes it; returns `(position, stored hash or
/// None)` for each node whose stored hash differs or is missing. `Reject` as `node_keys`.
#[pyfunction]
fn node_mismatches_ahead<'py>(
    branch_no: u64,
    nodes: &Bound<'py, PyList>,
    found: &Bound<'py, PyDict>,
    by_end: bool,
) -> PyResult<Vec<(usize, Option<Bound<'py, PyAny>>)>> {
    let mut wanted = Vec::with_capacity(nodes.len());
    for item in nodes.iter() {
        let (level, index, hash): (u64, u64, Bound<'py, PyAny>) = item.extract()?;
        let Some(k) = merkle::node_key(branch_no, level, index, by_end) else {
            return reject("node key out of range");
        };
        wanted.push((k, hash));
    }
    let mut out = Vec::new();
    let mut present = Vec::with_capacity(wanted.len());
    for (i, (k, hash)) in wanted.iter().enumerate() {
        match found.get_item(k)? {
            Some(v) if v.eq(hash)? => present.push(*k),
            Some(v) => {
                present.push(*k);
                out.push((i, Some(v)));
            }
            None => out.push((i, None)),
        }
    }
    for k in present {
        if let Err(e) = found.del_item(k) {
            // A node listed twice: its key is gone already.
            if !e.is_instance_of::<pyo3::exceptions::PyKeyError>(found.py()) {
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// The 16 bytes of each canonical (lowercase, hyphenated) UUID text, None for any other text.
#[pyfunction]
fn uuid_bytes<'py>(
    py: Python<'py>,
    ids: Vec<Bound<'py, PyAny>>,
) -> Vec<Option<Bound<'py, PyBytes>>> {
    ids.iter()
        .map(|id| {
            let text = id.downcast_exact::<PyString>().ok()?;
            let raw = uuid::parse(text.to_str().ok()?)?;
            Some(PyBytes::new(py, &raw))
        })
        .collect()
}

/// The positions `i` where `found.get(keys[i]) != want[i]` (a stored cache that differs).
#[pyfunction]
fn mismatches(
    keys: &Bound<'_, PyList>,
    want: &Bound<'_, PyList>,
    found: &Bound<'_, PyDict>,
) -> PyResult<Vec<usize>> {
    if keys.len() != want.len() {
        return reject("keys and values differ in length");
    }
    let mut out = Vec::new();
    for (i, (k, w)) in keys.iter().zip(want.iter()).enumerate() {
        match found.get_item(&k)? {
            Some(v) if v.eq(&w)? => {}
            _ => out.push(i),
        }
    }
    Ok(out)
}

/// An exact `str` attribute of an input, borrowed; None for anything else.
fn attr_str<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> Option<Bound<'py, PyString>> {
    obj.getattr(name)
        .ok()?
        .downcast_into_exact::<PyString>()
        .ok()
}

/// An optional map attribute: its canonical encoding and the map itself (None: no map).
type MapAttr<'py> = (Option<Vec<u8>>, Option<Bound<'py, PyDict>>);

/// The canonical encoding of an optional map attribute and the map: `Some((None, None))`
/// when it is None.
fn attr_map<'py>(obj: &Bound<'py, PyAny>, name: &Bound<'py, PyString>) -> Option<MapAttr<'py>> {
    let v = obj.getattr(name).ok()?;
    if v.is_none() {
        return Some((None, None));
    }
    let d = v.downcast_into_exact::<PyDict>().ok()?;
    let mut out = Vec::with_capacity(64);
    py::encode(d.as_any(), 2, &mut out).ok()?;
    Some((Some(out), Some(d)))
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The plain events on top of an append queue, built in one call (`Ledger._append_locked`).
///
/// `queue` is the append queue with its next item last. Builds, from the top down, every
/// item that is an exact `event_type` with no `parent_event_id` and an `id` that is None (a
/// new UUIDv7 is made) or canonical UUID text (the caller checks it is new), whose `ts`
/// (the clock when None) passes the append window against `last_ts` and `now`, and whose
/// entry is at most `max_raw` bytes; stops before the first other item (the reference
/// takes it). `rand` holds `RAND_PER_EVENT` random bytes per item. Returns `(count, rows,
/// events, leaves, appended, last_ts, entries, contents, given)`: the `entries` rows `(k,
/// hash, data, digest, salt, content)`, the event index rows `(id bytes, k)` in id order, the
/// leaf hashes and an `appended_type` tuple `(branch, seq, hash, id, kind, "EVENT")` per
/// event, `kind` being `event_kind`; `given` says whether any event kept its request's id.
///
/// With `entry_type` (`entries.Entry`, for the append hooks) two more: each event's entry
/// `(1, prev, seq, branch, ts, kind, "EVENT", body, raw, hash)`, its body the map
/// `EventInput.body` builds (same keys, same order, the input's own map objects), and each
/// event's content (the input's `str`). Without it, those two are None.
///
/// With `pack` (no hooks: nothing reads the rows before `Store.insert_entry_pack` and
/// `insert_event_pack` write them; `entry_type` must be None) the rows come packed: each
/// `entries` row one byte string (`append::pack_row`) and `events` one pair `(ids, keys)`,
/// the 16-byte ids end to end in id order and their entry keys as native 64-bit integers;
/// and no object is made an event: `leaves` is the leaf hashes end to end and `appended` the
/// events' ids end to end (36 bytes of UUID text each), in seq order (`_state.AppendedRun`
/// makes each `Appended` when it is read).
#[pyfunction]
#[pyo3(signature = (queue, event_type, appended_type, event_kind, branch, branch_no, seq,
    prev, last_ts, now, max_raw, rand, entry_type=None, pack=false))]
#[allow(clippy::too_many_arguments)]
fn build_events<'py>(
    py: Python<'py>,
    queue: &Bound<'py, PyList>,
    event_type: &Bound<'py, PyAny>,
    appended_type: &Bound<'py, PyAny>,
    event_kind: &Bound<'py, PyAny>,
    branch: &Bound<'py, PyString>,
    branch_no: u64,
    seq: u64,
    prev: &[u8],
    last_ts: Option<u64>,
    now: u64,
    max_raw: usize,
    rand: &[u8],
    entry_type: Option<&Bound<'py, PyAny>>,
    pack: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    if pack && entry_type.is_some() {
        return reject("packed rows are for runs without hooks (no entry_type)");
    }
    let prev_obj = PyBytes::new(py, prev);
    let mut prev = hash32(prev, "prev")?;
    let mut prev_obj = prev_obj.into_any();
    let entries = entry_type.map(|_| PyList::empty(py));
    let contents = entry_type.map(|_| PyList::empty(py));
    let one = 1u8.into_pyobject(py)?.into_any();
    if branch_no >= 1 << 23 {
        return reject("branch number out of range");
    }
    let branch_text = branch.to_str()?;
    let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?;
    let rows = PyList::empty(py);
    let mut ids: Vec<([u8; 16], u64)> = Vec::new();
    let leaves = PyList::empty(py);
    let appended = PyList::empty(py);
    let mut packed_leaves: Vec<u8> = Vec::new();
    let mut packed_ids: Vec<u8> = Vec::new();
    let mut given_any = false;
    let event_text = PyString::new(py, "EVENT");
    let ms = now_us() / 1000;
    let mut last_ts = last_ts;
    let mut count = 0usize;
    let chunks = rand.chunks_exact(append::RAND_PER_EVENT);
    for (i, (pos, r)) in (0..queue.len()).rev().zip(chunks).enumerate() {
        let seq = seq + i as u64;
        let item = queue.get_item(pos)?;
        if !item.get_type().is(event_type) {
            break;
        }
        if !item.getattr(intern!(py, "parent_event_id"))?.is_none() {
            break;
        }
        // The request's own id, when it is canonical UUID text (the caller checks that no
        // event has it yet); otherwise a new UUIDv7.
        let given_obj = item.getattr(intern!(py, "id"))?;
        let given_id = if given_obj.is_none() {
            None
        } else {
            let Ok(text) = given_obj.downcast_exact::<PyString>() else {
                break;
            };
            let Some((text, raw)) = text.to_str().ok().and_then(|t| Some((t, uuid::parse(t)?)))
            else {
                break;
            };
            Some((text.to_owned(), raw))
        };
        let ts_obj = item.getattr(intern!(py, "ts"))?;
        let ts = if ts_obj.is_none() {
            now_us()
        } else {
            match ts_obj.extract::<u64>() {
                Ok(t) => t,
                Err(_) => break,
            }
        };
        if !append::ts_ok(ts, last_ts, now) || seq >= 1 << 40 {
            break;
        }
        let (
            Some(stream_obj),
            Some(actor_id_obj),
            Some(actor_type_obj),
            Some(role_obj),
            Some(ns_obj),
            Some(content_obj),
        ) = (
            attr_str(&item, intern!(py, "stream")),
            attr_str(&item, intern!(py, "actor_id")),
            attr_str(&item, intern!(py, "actor_type")),
            attr_str(&item, intern!(py, "role")),
            attr_str(&item, intern!(py, "namespace_id")),
            attr_str(&item, intern!(py, "content")),
        )
        else {
            break;
        };
        let (Some((metadata, metadata_obj)), Some((context, context_obj))) = (
            attr_map(&item, intern!(py, "metadata")),
            attr_map(&item, intern!(py, "context")),
        ) else {
            break;
        };
        let (Ok(stream), Ok(actor_id), Ok(actor_type), Ok(role), Ok(ns), Ok(content)) = (
            stream_obj.to_str(),
            actor_id_obj.to_str(),
            actor_type_obj.to_str(),
            role_obj.to_str(),
            ns_obj.to_str(),
            content_obj.to_str(),
        ) else {
            break;
        };
        let ev = append::Event {
            stream,
            actor_id,
            actor_type,
            role,
            namespace_id: ns,
            content: content.as_bytes(),
            metadata: metadata.as_deref(),
            context: context.as_deref(),
        };
        let r: &[u8; append::RAND_PER_EVENT] = r.try_into().or_else(|_| reject("rand"))?;
        let given = given_id.as_ref().map(|(t, raw)| (t.as_str(), *raw));
        let built = append::build_event(&ev, &prev, seq, branch_text, ts, ms, r, given);
        if built.raw.len() > max_raw {
            break;
        }
        let k = branch_no << 40 | seq;
        given_any |= given.is_some();
        if pack {
            let Some(len) = append::packed_len(&built.raw, ev.content) else {
                break;
            };
            let row = PyBytes::new_with(py, len, |out| {
                append::pack_row_into(
                    out,
                    &built.leaf,
                    &built.digest,
                    &built.salt,
                    &built.raw,
                    ev.content,
                );
                Ok(())
            })?;
            rows.append(row)?;
            // No object an event: the leaves and ids end to end (an id's text is 36 bytes).
            packed_leaves.extend_from_slice(&built.leaf);
            packed_ids.extend_from_slice(built.id.as_bytes());
            ids.push((built.raw_id, k));
            prev = built.leaf;
            last_ts = Some(ts);
            count = i + 1;
            continue;
        }
        let leaf = PyBytes::new(py, &built.leaf);
        let id = PyString::new(py, &built.id);
        rows.append((
            k,
            &leaf,
            PyBytes::new(py, &built.raw),
            PyBytes::new(py, &built.digest),
            PyBytes::new(py, &built.salt),
            PyBytes::new(py, ev.content),
        ))?;
        ids.push((built.raw_id, k));
        leaves.append(&leaf)?;
        let fields = PyTuple::new(
            py,
            [
                branch.as_any(),
                &seq.into_pyobject(py)?.into_any(),
                leaf.as_any(),
                id.as_any(),
                event_kind,
                event_text.as_any(),
            ],
        )?;
        appended.append(tuple_new.call1((appended_type, fields))?)?;
        if let (Some(entry_type), Some(entries), Some(contents)) = (entry_type, &entries, &contents)
        {
            // Keys in `EventInput.body`'s order (canonical: length first, then bytewise).
            let body = PyDict::new(py);
            body.set_item(intern!(py, "id"), &id)?;
            body.set_item(intern!(py, "role"), &role_obj)?;
            body.set_item(intern!(py, "stream"), &stream_obj)?;
            if let Some(c) = &context_obj {
                body.set_item(intern!(py, "context"), c)?;
            }
            body.set_item(intern!(py, "actor_id"), &actor_id_obj)?;
            if let Some(m) = &metadata_obj {
                body.set_item(intern!(py, "metadata"), m)?;
            }
            body.set_item(intern!(py, "actor_type"), &actor_type_obj)?;
            body.set_item(intern!(py, "namespace_id"), &ns_obj)?;
            body.set_item(
                intern!(py, "content_commitment"),
                PyBytes::new(py, &built.commitment),
            )?;
            let fields = PyTuple::new(
                py,
                [
                    one.clone(),
                    prev_obj.clone(),
                    seq.into_pyobject(py)?.into_any(),
                    branch.as_any().clone(),
                    ts.into_pyobject(py)?.into_any(),
                    event_kind.clone(),
                    event_text.as_any().clone(),
                    body.into_any(),
                    PyBytes::new(py, &built.raw).into_any(),
                    leaf.as_any().clone(),
                ],
            )?;
            entries.append(tuple_new.call1((entry_type, fields))?)?;
            contents.append(&content_obj)?;
        }
        prev_obj = leaf.into_any();
        prev = built.leaf;
        last_ts = Some(ts);
        count = i + 1;
    }
    // In id order: the UUIDv7s of one millisecond then append to the index in order (the
    // order of the rows inserted changes nothing stored).
    ids.sort_unstable();
    let events = if pack {
        let mut raws = Vec::with_capacity(16 * ids.len());
        let mut keys = Vec::with_capacity(8 * ids.len());
        for (raw_id, k) in &ids {
            raws.extend_from_slice(raw_id);
            keys.extend_from_slice(&k.to_ne_bytes());
        }
        (PyBytes::new(py, &raws), PyBytes::new(py, &keys))
            .into_pyobject(py)?
            .into_any()
    } else {
        let events = PyList::empty(py);
        for (raw_id, k) in ids {
            events.append((PyBytes::new(py, &raw_id), k))?;
        }
        events.into_any()
    };
    let (leaves, appended) = if pack {
        (
            PyBytes::new(py, &packed_leaves).into_any(),
            PyBytes::new(py, &packed_ids).into_any(),
        )
    } else {
        (leaves.into_any(), appended.into_any())
    };
    PyTuple::new(
        py,
        [
            count.into_pyobject(py)?.into_any(),
            rows.into_any(),
            events,
            leaves,
            appended,
            last_ts.into_pyobject(py)?.into_any(),
            entries.map_or_else(|| py.None().into_bound(py), Bound::into_any),
            contents.map_or_else(|| py.None().into_bound(py), Bound::into_any),
            PyBool::new(py, given_any).to_owned().into_any(),
        ],
    )
}

type NodeRows<'py> = Vec<(u64, Bound<'py, PyBytes>)>;
/// Completed nodes as `(nodes.k, hash)`.
type KeyedNodes = Vec<(u64, Hash)>;
/// `compact_append_pack`'s new hashes, keys and hashes end to end.
type NodePack<'py> = (
    Vec<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);

/// Fold `leaves` into the compact range `(size, hashes)`: the new hashes and the completed
/// nodes of level `min_level` or above as `(nodes.k, hash)`, in key order.
fn compact_append_keyed(
    branch_no: u64,
    size: u64,
    hashes: &Bound<'_, PyList>,
    leaves: &[u8],
    min_level: u32,
    by_end: bool,
) -> PyResult<(Vec<Hash>, KeyedNodes)> {
    if branch_no >= 1 << 15 {
        return reject("branch number out of range");
    }
    let mut cr = merkle::CompactRange {
        size,
        hashes: hashes32(hashes, "subtree hash")?,
    };
    if u64::try_from(cr.hashes.len()).ok() != Some(u64::from(size.count_ones())) {
        return reject("hash count does not match the size");
    }
    if !leaves.len().is_multiple_of(32) {
        return reject("leaf hashes are not 32 bytes each");
    }
    if size
        .checked_add(leaves.len() as u64 / 32)
        .is_none_or(|s| s > 1 << 40)
    {
        return reject("tree too large for node keys");
    }
    let mut nodes = Vec::with_capacity(leaves.len() / 32);
    for leaf in leaves.chunks_exact(32) {
        cr.append(
            leaf.try_into().or_else(|_| reject("leaf hash"))?,
            &mut nodes,
        );
    }
    let mut keyed: Vec<(u64, Hash)> = nodes
        .into_iter()
        .filter(|(level, _, _)| *level >= min_level)
        .map(|(level, index, h)| {
            // In range: the tree holds at most 2**40 leaves (checked above).
            let k = merkle::node_key(branch_no, u64::from(level), index, by_end);
            (k.unwrap_or(u64::MAX), h)
        })
        .collect();
    // In key order, the rows of each level append at the end of that level's key range
    // (the order of the rows inserted changes nothing stored).
    keyed.sort_unstable_by_key(|(k, _)| *k);
    Ok((cr.hashes, keyed))
}

/// Fold leaf hashes (end to end, 32 bytes each) into a compact range and return the new
/// hashes and the `nodes` rows `(nodes.k, hash)`, in key order, of the interior nodes
/// completed on branch `branch_no` at level `min_level` or above (`CompactRange.append_many`, `store.node_key` and
/// `store.NODE_MIN_LEVEL`).
#[pyfunction]
fn compact_append_rows<'py>(
    py: Python<'py>,
    branch_no: u64,
    size: u64,
    hashes: &Bound<'py, PyList>,
    leaves: &[u8],
    min_level: u32,
    by_end: bool,
) -> PyResult<(Vec<Bound<'py, PyBytes>>, NodeRows<'py>)> {
    let (out, keyed) = compact_append_keyed(branch_no, size, hashes, leaves, min_level, by_end)?;
    let out = out.iter().map(|h| PyBytes::new(py, h)).collect();
    let rows = keyed
        .iter()
        .map(|(k, h)| (*k, PyBytes::new(py, h)))
        .collect();
    Ok((out, rows))
}

/// `compact_append_rows` with the `nodes` rows packed for `Store.insert_node_pack`: the new
/// hashes, the rows' keys as native 64-bit integers and their hashes end to end, in key
/// order.
#[pyfunction]
fn compact_append_pack<'py>(
    py: Python<'py>,
    branch_no: u64,
    size: u64,
    hashes: &Bound<'py, PyList>,
    leaves: &[u8],
    min_level: u32,
    by_end: bool,
) -> PyResult<NodePack<'py>> {
    let (out, keyed) = compact_append_keyed(branch_no, size, hashes, leaves, min_level, by_end)?;
    let out = out.iter().map(|h| PyBytes::new(py, h)).collect();
    let mut keys = Vec::with_capacity(8 * keyed.len());
    let mut hashes = Vec::with_capacity(32 * keyed.len());
    for (k, h) in &keyed {
        keys.extend_from_slice(&k.to_ne_bytes());
        hashes.extend_from_slice(h);
    }
    Ok((out, PyBytes::new(py, &keys), PyBytes::new(py, &hashes)))
}

/// The 16-byte ids of `(event id, seq)` pairs, in order; `Reject` if one is not canonical
/// UUID text or an id repeats (the reference then decides).
fn event_raws(events: &Bound<'_, PyList>) -> PyResult<Vec<([u8; 16], u64)>> {
    let mut out = Vec::with_capacity(events.len());
    let mut seen = std::collections::HashSet::with_capacity(events.len());
    for item in events.iter() {
        let (id, seq): (Bound<'_, PyString>, u64) = item.extract()?;
        let Some(raw) = uuid::parse(id.to_str()?) else {
            return reject("not a canonical UUID");
        };
        if !seen.insert(raw) {
            return reject("an event id repeats");
        }
        out.push((raw, seq));
    }
    Ok(out)
}

/// The smallest and largest 16-byte id of `(event id, seq)` pairs (`verify`'s event index
/// span); `Reject` for no pairs, an id that is not canonical UUID text, or a repeated id.
#[pyfunction]
fn event_id_span<'py>(
    py: Python<'py>,
    events: &Bound<'py, PyList>,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let raws = event_raws(events)?;
    let (Some(lo), Some(hi)) = (
        raws.iter().map(|(r, _)| r).min(),
        raws.iter().map(|(r, _)| r).max(),
    ) else {
        return reject("no events");
    };
    Ok((PyBytes::new(py, lo), PyBytes::new(py, hi)))
}

type Misplaced<'py> = Vec<(Bound<'py, PyAny>, u64, Option<i64>)>;

/// Add the `(id bytes, k)` index rows of `found` to `stored` (ids not 16 bytes long are
/// skipped: no event id parses to them); `Reject` for an id that is not bytes.
fn index_rows(
    found: &Bound<'_, PyList>,
    stored: &mut std::collections::HashMap<[u8; 16], i64>,
) -> PyResult<()> {
    for item in found.iter() {
        let (raw, k): (Bound<'_, PyAny>, i64) = item.extract()?;
        let Ok(raw) = raw.downcast_exact::<PyBytes>() else {
            return reject("an indexed id is not bytes");
        };
        if let Ok(r) = <[u8; 16]>::try_from(raw.as_bytes()) {
            stored.insert(r, k);
        }
    }
    Ok(())
}

/// The `(event id, seq, indexed key or None)` of each event not indexed at `base + seq`.
fn misplaced<'py>(
    events: &Bound<'py, PyList>,
    raws: &[([u8; 16], u64)],
    base: u64,
    stored: &std::collections::HashMap<[u8; 16], i64>,
) -> PyResult<Misplaced<'py>> {
    let mut out = Vec::new();
    for (i, (raw, seq)) in raws.iter().enumerate() {
        let got = stored.get(raw).copied();
        let want = base.checked_add(*seq).and_then(|w| i64::try_from(w).ok());
        if got.is_none() || got != want {
            let (id, _): (Bound<'py, PyAny>, u64) = events.get_item(i)?.extract()?;
            out.push((id, *seq, got));
        }
    }
    Ok(out)
}

/// The events the index misplaces or lacks: `(event id, seq, indexed key or None)` for each
/// `(event id, seq)` whose id is not at `base + seq` among the `found` `(id bytes, k)` rows,
/// in the order given (`_StoreSource.event_index_mismatches`); `Reject` as `event_id_span`.
#[pyfunction]
fn event_index_check<'py>(
    events: &Bound<'py, PyList>,
    base: u64,
    found: &Bound<'py, PyList>,
) -> PyResult<Misplaced<'py>> {
    let raws = event_raws(events)?;
    let mut stored = std::collections::HashMap::with_capacity(found.len());
    index_rows(found, &mut stored)?;
    misplaced(events, &raws, base, &stored)
}

/// Every event index row whose id lies in `[lo, hi]`, read ahead by `verify._ChunkReader`
/// (`event_index_span`), sorted by id.
#[pyclass(module = "memroot._native", frozen)]
pub struct IndexSpan {
    lo: [u8; 16],
    hi: [u8; 16],
    rows: Vec<([u8; 16], i64)>,
}

/// The `IndexSpan` of the `(id bytes, k)` rows `found`: all the index rows with ids in
/// `[lo, hi]`. `Reject` for bounds that are not 16 bytes or an id that is not bytes.
#[pyfunction]
fn event_index_span(lo: &[u8], hi: &[u8], found: &Bound<'_, PyList>) -> PyResult<IndexSpan> {
    let (Ok(lo), Ok(hi)) = (<[u8; 16]>::try_from(lo), <[u8; 16]>::try_from(hi)) else {
        return reject("span bounds are not 16 bytes");
    };
    let mut rows: Vec<([u8; 16], i64)> = Vec::with_capacity(found.len());
    for item in found.iter() {
        let (raw, k): (Bound<'_, PyAny>, i64) = item.extract()?;
        let Ok(raw) = raw.downcast_exact::<PyBytes>() else {
            return reject("an indexed id is not bytes");
        };
        if let Ok(r) = <[u8; 16]>::try_from(raw.as_bytes()) {
            rows.push((r, k));
        }
    }
    // The index scan gives them in id order, each id once; a later row of an id wins, as
    // in `index_rows`.
    rows.sort_by_key(|row| row.0);
    let mut out: Vec<([u8; 16], i64)> = Vec::with_capacity(rows.len());
    for row in rows {
        match out.last_mut() {
            Some(last) if last.0 == row.0 => *last = row,
            _ => out.push(row),
        }
    }
    Ok(IndexSpan { lo, hi, rows: out })
}

/// `event_index_check` against index rows read ahead (`verify._ChunkReader`). None (the
/// caller then reads the index itself) when an event's id lies in no span of `ahead`, is not
/// canonical UUID text, or repeats.
#[pyfunction]
fn event_index_check_ahead<'py>(
    events: &Bound<'py, PyList>,
    base: u64,
    ahead: Vec<Bound<'py, IndexSpan>>,
) -> PyResult<Option<Misplaced<'py>>> {
    let mut raws = Vec::with_capacity(events.len());
    for item in events.iter() {
        let (id, seq): (Bound<'_, PyString>, u64) = item.extract()?;
        let Some(raw) = uuid::parse(id.to_str()?) else {
            return Ok(None);
        };
        raws.push((raw, seq));
    }
    let spans: Vec<&IndexSpan> = ahead.iter().map(Bound::get).collect();
    // A repeated id: seen at the same row of a span, or among the ids no span holds.
    let mut seen: Vec<Vec<bool>> = spans.iter().map(|s| vec![false; s.rows.len()]).collect();
    let mut absent = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, (raw, seq)) in raws.iter().enumerate() {
        let Some(at) = spans.iter().position(|s| s.lo <= *raw && *raw <= s.hi) else {
            return Ok(None);
        };
        let got = match spans[at].rows.binary_search_by(|(id, _)| id.cmp(raw)) {
            Ok(row) => {
                if std::mem::replace(&mut seen[at][row], true) {
                    return Ok(None);
                }
                Some(spans[at].rows[row].1)
            }
            Err(_) => {
                if !absent.insert(*raw) {
                    return Ok(None);
                }
                None
            }
        };
        let want = base.checked_add(*seq).and_then(|w| i64::try_from(w).ok());
        if got.is_none() || got != want {
            let (id, _): (Bound<'py, PyAny>, u64) = events.get_item(i)?.extract()?;
            out.push((id, *seq, got));
        }
    }
    Ok(Some(out))
}

/// One byte a store row tuple `(k, hash, data, digest, salt, content, erased_by)`: 1 when
/// its `digest` is the BLAKE3 content address of its `content`, else 0 (both must be bytes;
/// any other item gives 0). Computed with the GIL released, for `verify_rows`.
#[pyfunction]
fn content_digests_ok<'py>(py: Python<'py>, rows: &Bound<'py, PyList>) -> Bound<'py, PyBytes> {
    let mut cols: Vec<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> =
        Vec::with_capacity(rows.len());
    for row in rows.iter() {
        let pair = row.downcast_exact::<PyTuple>().ok().and_then(|t| {
            if t.len() != 7 {
                return None;
            }
            let digest = t.get_item(3).ok()?.downcast_into_exact::<PyBytes>().ok()?;
            let content = t.get_item(5).ok()?.downcast_into_exact::<PyBytes>().ok()?;
            Some((digest, content))
        });
        cols.push(pair);
    }
    let pairs: Vec<Option<(&[u8], &[u8])>> = cols
        .iter()
        .map(|c| c.as_ref().map(|(d, c)| (d.as_bytes(), c.as_bytes())))
        .collect();
    let flags: Vec<u8> = py.allow_threads(|| {
        pairs
            .iter()
            .map(|p| u8::from(p.is_some_and(|(d, c)| verify::digest_matches(Some(d), c))))
            .collect()
    });
    PyBytes::new(py, &flags)
}

/// `(count, smallest id, largest id)` of events (`row_event_ids`).
type IdSpan<'py> = (usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// The span of the event ids among store row tuples `(k, hash, data, ...)`: `(count,
/// smallest, largest)` of the 16-byte ids of the rows whose entry reads as an event with a
/// canonical UUID id (`verify::event_id_hint`, the GIL released), None when there is none.
/// Other rows (and items that are not such tuples) are skipped.
#[pyfunction]
fn row_event_ids<'py>(py: Python<'py>, rows: &Bound<'py, PyList>) -> PyResult<Option<IdSpan<'py>>> {
    let mut datas: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(rows.len());
    for row in rows.iter() {
        let Ok(t) = row.downcast_exact::<PyTuple>() else {
            continue;
        };
        if t.len() != 7 {
            continue;
        }
        if let Ok(d) = t.get_item(2)?.downcast_into_exact::<PyBytes>() {
            datas.push(d);
        }
    }
    let slices: Vec<&[u8]> = datas.iter().map(|d| d.as_bytes()).collect();
    let span = py.allow_threads(|| {
        let mut span: Option<(usize, [u8; 16], [u8; 16])> = None;
        for raw in slices.iter().filter_map(|data| verify::event_id_hint(data)) {
            span = Some(match span {
                None => (1, raw, raw),
                Some((n, lo, hi)) => (n + 1, lo.min(raw), hi.max(raw)),
            });
        }
        span
    });
    Ok(span.map(|(n, lo, hi)| (n, PyBytes::new(py, &lo), PyBytes::new(py, &hi))))
}

/// The `entries.k` (level 0) or `nodes.k` of a complete subtree on branch `branch_no`
/// (`by_end`: `merkle::node_key`'s layout version 3); `checked_plan` bounds the arguments.
fn tree_key(branch_no: u64, (level, index): merkle::NodeId, by_end: bool) -> u64 {
    if level == 0 {
        branch_no << 40 | index
    } else {
        merkle::node_key(branch_no, u64::from(level), index, by_end).unwrap_or(u64::MAX)
    }
}

fn checked_plan(branch_no: u64, index: u64, size: u64) -> PyResult<Vec<merkle::NodeId>> {
    if index >= size || size > 1 << 40 || branch_no >= 1 << 15 {
        return reject("no such leaf, or a tree too large for the store's keys");
    }
    let (siblings, left, right) = merkle::path_plan(index, size);
    Ok([siblings, left, right].concat())
}

/// The store keys of the audit path of leaf `index` in a tree of `size` leaves that the node
/// cache `cache` (`{nodes.k: hash}`) lacks: `(entries keys, nodes keys)` to read. A node
/// below `merkle::NODE_MIN_LEVEL` is not stored: the keys of its leaves are listed.
#[pyfunction]
fn inclusion_keys(
    branch_no: u64,
    index: u64,
    size: u64,
    cache: &Bound<'_, PyDict>,
    by_end: bool,
) -> PyResult<(Vec<u64>, Vec<u64>)> {
    let (mut leaves, mut inner) = (Vec::new(), Vec::new());
    for id in checked_plan(branch_no, index, size)? {
        let k = tree_key(branch_no, id, by_end);
        if id.0 == 0 {
            leaves.push(k);
        } else if id.0 < merkle::NODE_MIN_LEVEL {
            // Not stored: its leaves are read and folded (`inclusion_from_rows`).
            let first = branch_no << 40 | id.1 << id.0;
            leaves.extend(first..first + (1 << id.0));
        } else if cache.get_item(k)?.is_none() {
            inner.push(k);
        }
    }
    Ok((leaves, inner))
}

/// The RFC 9162 inclusion proof of leaf `index` in a tree of `size` leaves from the node
/// cache and the `(table, k, hash)` rows read (`table` 0 for `entries`, 1 for `nodes`), as
/// `merkle.inclusion_proof` assembles it. Nodes read at level `cache_min_level` or above go
/// into the cache (cleared first when it holds `cache_max`), as `Store.read_nodes` does.
/// `Reject` when a node is missing or not 32 bytes (the reference then says which).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn inclusion_from_rows<'py>(
    py: Python<'py>,
    branch_no: u64,
    index: u64,
    size: u64,
    cache: &Bound<'py, PyDict>,
    rows: &Bound<'py, PyList>,
    cache_min_level: u32,
    cache_max: usize,
    by_end: bool,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let (siblings, left, right) = {
        checked_plan(branch_no, index, size)?;
        merkle::path_plan(index, size)
    };
    let mut read: std::collections::HashMap<(u8, u64), Bound<'py, PyBytes>> =
        std::collections::HashMap::with_capacity(rows.len());
    for row in rows.iter() {
        let (table, k, h): (u8, u64, Bound<'py, PyAny>) = row.extract()?;
        let Ok(h) = h.downcast_into_exact::<PyBytes>() else {
            return reject("a stored hash is not bytes");
        };
        read.insert((table, k), h);
    }
    // Every hash is resolved before the cache changes (a full cache is cleared).
    let mut resolved = Vec::with_capacity(siblings.len() + left.len() + right.len());
    let mut fresh = Vec::new();
    for &id in siblings.iter().chain(&left).chain(&right) {
        let k = tree_key(branch_no, id, by_end);
        let h = if id.0 == 0 {
            read.get(&(0, k)).cloned()
        } else if id.0 < merkle::NODE_MIN_LEVEL {
            let first = branch_no << 40 | id.1 << id.0;
            let mut hs = Vec::with_capacity(1 << id.0);
            for leaf in first..first + (1 << id.0) {
                match read.get(&(0, leaf)) {
                    Some(h) => hs.push(hash32(h.as_bytes(), "leaf")?),
                    None => return reject("a tree node is missing or not 32 bytes"),
                }
            }
            Some(PyBytes::new(py, &merkle::fold_perfect(&hs)))
        } else if let Some(h) = read.get(&(1, k)) {
            if id.0 >= cache_min_level {
                fresh.push((k, h.clone()));
            }
            Some(h.clone())
        } else {
            cache
                .get_item(k)?
                .and_then(|h| h.downcast_into_exact::<PyBytes>().ok())
        };
        match h {
            Some(h) if h.as_bytes().len() == 32 => resolved.push(h),
            _ => return reject("a tree node is missing or not 32 bytes"),
        }
    }
    for (k, h) in fresh {
        if cache.len() >= cache_max {
            cache.clear();
        }
        cache.set_item(k, h)?;
    }
    let (n_sib, n_left) = (siblings.len(), left.len());
    let mut proof: Vec<Bound<'py, PyBytes>> = resolved[..n_sib].to_vec();
    if !right.is_empty() {
        let mut hs = Vec::with_capacity(right.len());
        for h in &resolved[n_sib + n_left..] {
            hs.push(hash32(h.as_bytes(), "node")?);
        }
        proof.push(PyBytes::new(py, &merkle::root_from_subtrees(&hs)));
    }
    proof.extend_from_slice(&resolved[n_sib..n_sib + n_left]);
    Ok(proof)
}

/// The native core of memroot (see the module docs in Rust and `memroot/_native.pyi`).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Reject", m.py().get_type::<Reject>())?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(encode_leaf, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(decode_entry, m)?)?;
    m.add_function(wrap_pyfunction!(leaf_hash, m)?)?;
    m.add_function(wrap_pyfunction!(node_hash, m)?)?;
    m.add_function(wrap_pyfunction!(sha256, m)?)?;
    m.add_function(wrap_pyfunction!(domain_hash, m)?)?;
    m.add_function(wrap_pyfunction!(content_digest, m)?)?;
    m.add_function(wrap_pyfunction!(content_commitment, m)?)?;
    m.add_function(wrap_pyfunction!(root_from_subtrees, m)?)?;
    m.add_function(wrap_pyfunction!(compact_append, m)?)?;
    m.add_function(wrap_pyfunction!(root_from_inclusion_proof, m)?)?;
    m.add_function(wrap_pyfunction!(roots_from_consistency_proof, m)?)?;
    m.add_function(wrap_pyfunction!(verify_rows, m)?)?;
    m.add_function(wrap_pyfunction!(node_keys, m)?)?;
    m.add_function(wrap_pyfunction!(uuid_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(mismatches, m)?)?;
    m.add_function(wrap_pyfunction!(node_mismatches_ahead, m)?)?;
    m.add_function(wrap_pyfunction!(build_events, m)?)?;
    m.add_function(wrap_pyfunction!(inclusion_keys, m)?)?;
    m.add_function(wrap_pyfunction!(inclusion_from_rows, m)?)?;
    m.add_function(wrap_pyfunction!(event_id_span, m)?)?;
    m.add_function(wrap_pyfunction!(event_index_check, m)?)?;
    m.add_function(wrap_pyfunction!(event_index_check_ahead, m)?)?;
    m.add_function(wrap_pyfunction!(row_event_ids, m)?)?;
    m.add_function(wrap_pyfunction!(content_digests_ok, m)?)?;
    m.add_function(wrap_pyfunction!(event_index_span, m)?)?;
    m.add_class::<IndexSpan>()?;
    m.add_function(wrap_pyfunction!(compact_append_rows, m)?)?;
    m.add_function(wrap_pyfunction!(compact_append_pack, m)?)?;
    m.add_class::<sign::Ed25519Key>()?;
    m.add_class::<sign::Ed25519Verifier>()?;
    m.add_function(wrap_pyfunction!(rows::encode_rows, m)?)?;
    m.add_function(wrap_pyfunction!(jsonl::event_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(strict::decode_chunk, m)?)?;
    // The memory map's paths (map.rs, issue 26).
    m.add_function(wrap_pyfunction!(map::map_path_root, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_descend, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_descend_all, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_rows_into, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_hashes_ok, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_update, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_put_rows, m)?)?;
    m.add_function(wrap_pyfunction!(merkle_leaves_plan, m)?)?;
    m.add_function(wrap_pyfunction!(merkle_leaves_root, m)?)?;
    m.add_function(wrap_pyfunction!(fold::event_rows, m)?)?;
    // Operation payloads and derived ids (ops.rs, issue 27).
    m.add_class::<ops::PayloadPlan>()?;
    m.add_function(wrap_pyfunction!(ops::derived_id, m)?)?;
    Ok(())
}
