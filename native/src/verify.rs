//! The auditor's steps 1-5 for a run of ordinary rows, as `verify._check_row` checks them.
//!
//! `check_run` walks rows in order and stops at the first row that is not *plain*: a plain
//! row is one for which the reference `_check_row` adds no finding and only advances the
//! branch's running state (next seq, prev hash, compact range, event list). Everything else
//! (a genesis, a branch, key or erasure operation, an erased event, any violation) is left to
//! the reference, which then reports it with its own message. So the native path never
//! decides a finding; it only skips rows that have none.

use crate::cbor::Value;
use crate::entry;
use crate::hash::{content_commitment, content_digest, leaf_hash, Hash};
use crate::merkle::{CompactRange, NewNode};

/// One stored row, borrowed from the Python row object.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub seq: u64,
    pub hash: Option<&'a [u8]>,
    pub data: &'a [u8],
    pub digest: Option<&'a [u8]>,
    /// Whether `digest` is the content address of `content`, when the reader thread has
    /// already computed it (`content_digests_ok`); None: compute it here.
    pub digest_ok: Option<bool>,
    pub salt: Option<&'a [u8]>,
    pub content: Option<&'a [u8]>,
    pub erased_by_set: bool,
}

/// The branch's running state and the limits of one call.
#[derive(Debug)]
pub struct Run<'a> {
    pub branch: &'a str,
    pub expected_seq: u64,
    pub prev: Hash,
    pub compact: CompactRange,
    /// The source keeps leaf hash and content address caches (and tree nodes) to check.
    pub caches: bool,
    /// No TOMBSTONE has named a target not yet seen (the reference's `run.tombstones`).
    pub no_tombstones: bool,
    /// Stop once the compact range reaches this size (a checkpoint size), if any.
    pub stop_size: Option<u64>,
    /// Stop after the row that brings the completed nodes to this many.
    pub node_room: usize,
    /// Stop after the row that brings the listed events to this many.
    pub event_room: usize,
    /// Nodes completed and events listed (with caches) so far, against the two rooms.
    pub nodes_done: usize,
    pub events_done: usize,
}

/// What one plain row gave.
#[derive(Debug)]
pub struct Checked<'a> {
    pub leaf: Hash,
    pub fields: entry::Fields<'a>,
    /// The event id, for an event (the event index check, step 5).
    pub event_id: Option<&'a str>,
}

/// Check rows in order while they are plain and no limit is reached; return what each gave
/// and whether the run must stop here (a row that is not plain, or a limit). The run state is
/// advanced past the rows checked, and the interior nodes they completed are pushed on `nodes`
/// (only with caches: without them nobody checks stored nodes).
#[must_use]
pub fn check_run<'a>(
    run: &mut Run<'_>,
    rows: &[Row<'a>],
    nodes: &mut Vec<NewNode>,
) -> (Vec<Checked<'a>>, bool) {
    let mut out: Vec<Checked<'a>> = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(checked) = plain_row(run, row) else {
            return (out, true);
        };
        let before = nodes.len();
        run.compact.append(checked.leaf, nodes);
        if run.caches {
            run.nodes_done += nodes.len() - before;
            if checked.event_id.is_some() {
                run.events_done += 1;
            }
        } else {
            nodes.truncate(before);
        }
        run.prev = checked.leaf;
        run.expected_seq = row.seq + 1;
        out.push(checked);
        if (run.caches && run.nodes_done >= run.node_room)
            || run.events_done >= run.event_room
            || run.stop_size == Some(run.compact.size)
        {
            return (out, true);
        }
    }
    (out, false)
}

/// The row's checks when it is plain, else None (the reference takes it from there).
fn plain_row<'a>(run: &Run<'_>, row: &Row<'a>) -> Option<Checked<'a>> {
    if row.seq != run.expected_seq || row.seq == 0 {
        return None;
    }
    let leaf = leaf_hash(row.data);
    if row.hash.is_some_and(|h| h != leaf) {
        return None;
    }
    let fields = entry::decode(row.data).ok()?;
    if fields.seq != row.seq || fields.branch != run.branch || fields.prev != run.prev {
        return None;
    }
    match fields.kind {
        // An event of another type (a forged BRANCH_CREATE, say) takes the reference path,
        // which registers what such types register.
        "event" if fields.type_ == "EVENT" => {
            let event_id = plain_event(run, row, &fields)?;
            Some(Checked {
                leaf,
                fields,
                event_id: Some(event_id),
            })
        }
        "op" => {
            // The key entries (docs/FORMAT.md 7.3, 7.5) feed step 6 on the reference path.
            let special = matches!(
                fields.type_,
                "BRANCH_CREATE" | "KEY_ROTATE" | "KEY_ADD" | "KEY_REVOKE" | "TOMBSTONE"
            );
            let stored = row.content.is_some()
                || row.salt.is_some()
                || row.digest.is_some()
                || row.erased_by_set;
            if special || stored {
                return None;
            }
            Some(Checked {
                leaf,
                fields,
                event_id: None,
            })
        }
        _ => None, // a genesis entry, or one past seq 0
    }
}

/// Step 4 for an event whose content is stored and matches; returns its id.
fn plain_event<'a>(run: &Run<'_>, row: &Row<'a>, fields: &entry::Fields<'a>) -> Option<&'a str> {
    let Some(Value::Text(id)) = fields.body.get("id") else {
        return None;
    };
    let Some(Value::Bytes(commitment)) = fields.body.get("content_commitment") else {
        return None;
    };
    if row.erased_by_set || !run.no_tombstones {
        return None;
    }
    let content = row.content?;
    let salt: &Hash = row.salt?.try_into().ok()?;
    if content_commitment(salt, content) != **commitment {
        return None;
    }
    if run.caches
        && !row
            .digest_ok
            .unwrap_or_else(|| digest_matches(row.digest, content))
    {
        return None;
    }
    Some(id)
}

/// Whether a stored content address is the BLAKE3 of the content (step 4, with caches).
#[must_use]
pub fn digest_matches(digest: Option<&[u8]>, content: &[u8]) -> bool {
    digest == Some(&content_digest(content)[..])
}

/// A forward reader of CBOR heads that checks bounds only (`event_id_hint`).
struct Scan<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Scan<'a> {
    fn head(&mut self) -> Option<(u8, u64)> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        let (major, info) = (b >> 5, b & 0x1f);
        let arg = match info {
            0..=23 => u64::from(info),
            24..=27 => {
                let raw = self.take(1 << (info - 24))?;
                raw.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b))
            }
            _ => return None,
        };
        Some((major, arg))
    }

    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(usize::try_from(n).ok()?)?;
        let out = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    fn text(&mut self) -> Option<&'a [u8]> {
        match self.head()? {
            (3, n) => self.take(n),
            _ => None,
        }
    }

    /// Step over one value (each item takes at least a byte, so a claimed count cannot
    /// loop past the end of the input).
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > crate::cbor::MAX_DEPTH {
            return None;
        }
        match self.head()? {
            (0 | 1 | 7, _) => Some(()),
            (2 | 3, n) => self.take(n).map(|_| ()),
            (4, n) => (0..n).try_for_each(|_| self.skip(depth + 1)),
            (5, n) => (0..n).try_for_each(|_| {
                self.skip(depth + 1)?;
                self.skip(depth + 1)
            }),
            _ => None,
        }
    }
}

/// The 16 bytes of the `id` of an event entry, found by stepping over the entry's CBOR
/// without decoding or checking it; None for anything else. Only a hint, for choosing which
/// event index rows to read ahead: the index check itself compares the ids of the strictly
/// decoded events.
#[must_use]
pub fn event_id_hint(raw: &[u8]) -> Option<[u8; 16]> {
    let mut s = Scan { data: raw, pos: 0 };
    if s.head()? != (4, 8) {
        return None;
    }
    for _ in 0..5 {
        s.skip(1)?; // v, prev, seq, branch, ts
    }
    if s.text()? != b"event" {
        return None;
    }
    s.skip(1)?; // type
    let (5, n) = s.head()? else {
        return None;
    };
    for _ in 0..n {
        if s.text()? == b"id" {
            return crate::uuid::parse(std::str::from_utf8(s.text()?).ok()?);
        }
        s.skip(2)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cbor;

    fn event(prev: &Hash, seq: u64, id: &str, commitment: &Hash) -> Vec<u8> {
        let mut out = vec![0x88, 0x01];
        cbor::write_bytes(&mut out, prev);
        cbor::write_head(&mut out, 0, seq);
        cbor::write_text(&mut out, "main");
        cbor::write_head(&mut out, 0, 1000);
        cbor::write_text(&mut out, "event");
        cbor::write_text(&mut out, "EVENT");
        cbor::write_head(&mut out, 5, 2);
        cbor::write_text(&mut out, "id");
        cbor::write_text(&mut out, id);
        cbor::write_text(&mut out, "content_commitment");
        cbor::write_bytes(&mut out, commitment);
        out
    }

    fn run(prev: Hash) -> Run<'static> {
        Run {
            branch: "main",
            expected_seq: 1,
            prev,
            compact: CompactRange::default(),
            caches: true,
            no_tombstones: true,
            stop_size: None,
            node_room: 4096,
            event_room: 4096,
            nodes_done: 0,
            events_done: 0,
        }
    }

    #[test]
    fn the_event_id_hint_is_the_decoded_id() {
        let id = "0190a8f2-7b3c-7def-8123-456789abcdef";
        let e = event(&[3u8; 32], 5, id, &[4u8; 32]);
        let want = crate::uuid::parse(id);
        assert!(want.is_some());
        assert_eq!(event_id_hint(&e), want);
        // The same entry with kind "genesis" (the kind is the sixth item): no event id.
        let at = e.windows(6).position(|w| w == b"\x65event").unwrap_or(0);
        let mut genesis = e[..at].to_vec();
        cbor::write_text(&mut genesis, "genesis");
        genesis.extend_from_slice(&e[at + 6..]);
        assert_eq!(event_id_hint(&genesis), None);
        // Cut anywhere before the id's end: nothing (the bytes after it are not looked at).
        let id_end = e.windows(36).position(|w| w == id.as_bytes()).unwrap_or(0) + 36;
        for cut in 0..id_end {
            assert_eq!(event_id_hint(&e[..cut]), None, "truncated at {cut}");
        }
        assert_eq!(event_id_hint(&e[..id_end]), want);
        assert_eq!(event_id_hint(b""), None);
        assert_eq!(
            event_id_hint(&[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            None
        );
    }

    #[test]
    fn plain_events_pass_and_a_tampered_one_stops_the_run() {
        let salt = [7u8; 32];
        let content = b"hello".to_vec();
        let commitment = content_commitment(&salt, &content);
        let digest = content_digest(&content);
        let genesis = [9u8; 32];
        let e1 = event(&genesis, 1, "a", &commitment);
        let h1 = leaf_hash(&e1);
        let e2 = event(&h1, 2, "b", &commitment);
        let edited = b"hellO".to_vec();
        let rows = [
            Row {
                seq: 1,
                hash: Some(&h1),
                data: &e1,
                digest: Some(&digest),
                salt: Some(&salt),
                content: Some(&content),
                erased_by_set: false,
                digest_ok: None,
            },
            Row {
                seq: 2,
                hash: None,
                data: &e2,
                digest: Some(&digest),
                salt: Some(&salt),
                content: Some(&edited),
                erased_by_set: false,
                digest_ok: None,
            },
        ];
        let mut r = run(genesis);
        let (done, stopped) = check_run(&mut r, &rows, &mut Vec::new());
        assert!(stopped);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].event_id, Some("a"));
        assert_eq!((r.expected_seq, r.prev), (2, h1));
        let mut r = run([0u8; 32]);
        let (done, _) = check_run(&mut r, &rows, &mut Vec::new());
        assert!(
            done.is_empty(),
            "a broken prev link is left to the reference"
        );
    }
}
