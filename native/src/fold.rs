//! The rows a run of events folds into, for every layer of the memory model at once.
//!
//! A replay (`rebuild`, verify steps 8-9, catch-up) folds runs of consecutive events of one
//! branch, and three layers each walk the run in Python to build their rows: the memory
//! model's `mem_events` rows (`Engine.fold_events`), the gated bookkeeping's `mem_conv`
//! rows (`gated.on_events`) and the conversation tree's `conv_parents` rows
//! (`ConversationTree.rows`), each reading the same few fields of every event's body. This
//! reads them once and builds all three lists, plus what the Python side still decides: the
//! distinct (actor, namespace) pairs whose write permission it checks, and which events carry
//! a git context (the registry's and git index's hooks record those).
//!
//! It decides nothing: an entry of another branch, a body that is not a dict, an `id`,
//! `actor_id` or `namespace_id` that is not text, or a `parent_event_id` that is neither
//! text nor null makes the run `Reject`, and the caller builds the rows with the reference
//! loop, which raises (or keeps) what it always did.

use std::collections::HashSet;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::reject;

/// The positions of `entries.Entry`'s fields this reads (a `NamedTuple`).
const SEQ: usize = 2;
const BRANCH: usize = 3;
const TS: usize = 4;
const KIND: usize = 5;
const BODY: usize = 7;

/// The five lists `event_rows` returns.
type EventRows<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
);

fn text_field<'py>(
    body: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyString>> {
    match body.get_item(key)? {
        Some(v) => match v.downcast_exact::<PyString>() {
            Ok(s) => Ok(s.clone()),
            Err(_) => reject("an event field that is not text"),
        },
        None => reject("an event without a required field"),
    }
}

/// `(events, conv, parents, keys, contexts)` of a run of events of one branch.
///
/// For each event: `events` gets its `mem_events` row `(id, branch, seq, ts, namespace_id,
/// actor_id, None)`, `conv` its `mem_conv` row `(id, parent, branch, seq)` and `parents` its
/// `conv_parents` row `(id, parent)` (`parent`: `parent_event_id`, or None). `keys` lists
/// the distinct `(actor_id, namespace_id)` pairs in the order they first appear; `contexts`
/// the positions of the events whose body has a `context`.
///
/// `event` is `Kind.EVENT`; `Reject` for an entry of another kind or of another branch than
/// the first, a body that is not a dict, an
/// `id`, `actor_id` or `namespace_id` missing or not text, or a `parent_event_id` neither
/// text nor null.
#[pyfunction]
pub fn event_rows<'py>(
    py: Python<'py>,
    entries: &Bound<'py, PyList>,
    event: &Bound<'py, PyAny>,
) -> PyResult<EventRows<'py>> {
    let events = PyList::empty(py);
    let conv = PyList::empty(py);
    let parents = PyList::empty(py);
    let keys = PyList::empty(py);
    let contexts = PyList::empty(py);
    let none = py.None().into_bound(py);
    let mut branch: Option<Bound<'py, PyString>> = None;
    // Pairs already listed; the last one first (a run is mostly one or two actors).
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut last: Option<(String, String)> = None;
    for (i, entry) in entries.iter().enumerate() {
        let entry = entry
            .downcast::<PyTuple>()
            .or_else(|_| reject("an entry is not a tuple"))?;
        if !entry.get_item(KIND)?.is(event) {
            return reject("an entry that is not an event");
        }
        let b = entry.get_item(BRANCH)?;
        let b = b
            .downcast_exact::<PyString>()
            .or_else(|_| reject("a branch that is not text"))?;
        match &branch {
            None => branch = Some(b.clone()),
            // The same object (the strict read shares it) or equal text.
            Some(first) => {
                if !first.is(b) && first.to_str()? != b.to_str()? {
                    return reject("a run of events of more than one branch");
                }
            }
        }
        let body = entry.get_item(BODY)?;
        let body = body
            .downcast_exact::<PyDict>()
            .or_else(|_| reject("an event body that is not a dict"))?;
        let id = text_field(body, intern!(py, "id"))?;
        let actor = text_field(body, intern!(py, "actor_id"))?;
        let namespace = text_field(body, intern!(py, "namespace_id"))?;
        let parent = match body.get_item(intern!(py, "parent_event_id"))? {
            None => none.clone(),
            Some(p) if p.is_none() => none.clone(),
            Some(p) => {
                if p.downcast_exact::<PyString>().is_err() {
                    return reject("a parent_event_id that is neither text nor null");
                }
                p
            }
        };
        let seq = entry.get_item(SEQ)?;
        let ts = entry.get_item(TS)?;
        events.append(PyTuple::new(
            py,
            [
                id.clone().into_any(),
                b.clone().into_any(),
                seq.clone(),
                ts,
                namespace.clone().into_any(),
                actor.clone().into_any(),
                none.clone(),
            ],
        )?)?;
        conv.append(PyTuple::new(
            py,
            [
                id.clone().into_any(),
                parent.clone(),
                b.clone().into_any(),
                seq,
            ],
        )?)?;
        parents.append(PyTuple::new(py, [id.into_any(), parent])?)?;
        let (a, n) = (actor.to_str()?, namespace.to_str()?);
        let same = matches!(&last, Some((la, ln)) if la == a && ln == n);
        if !same {
            let key = (a.to_owned(), n.to_owned());
            if seen.insert(key.clone()) {
                keys.append(PyTuple::new(py, [actor.clone(), namespace.clone()])?)?;
            }
            last = Some(key);
        }
        if body.contains(intern!(py, "context"))? {
            contexts.append(i)?;
        }
    }
    Ok((events, conv, parents, keys, contexts))
}
