//! The writer's per-event work, as `Ledger._append_locked` does it for an `EventInput`:
//! the UUIDv7 id, the salted commitment, the content address, the canonical entry bytes
//! and its leaf hash. Pure Rust over borrowed fields; `lib.rs` reads them out of Python.

use crate::cbor;
use crate::hash::{content_commitment, content_digest, leaf_hash, Hash};

/// Bytes of randomness one event takes: its 32-byte salt, then 10 bytes for its UUIDv7.
pub const RAND_PER_EVENT: usize = 42;

/// `ts` may be at most this far ahead of the clock (`entries.TS_MAX_AHEAD_US`).
pub const TS_MAX_AHEAD_US: u64 = 3_600 * 1_000_000;
/// `ts` may be at most this far before the previous entry's (`entries.TS_MAX_BEHIND_US`).
pub const TS_MAX_BEHIND_US: u64 = 86_400 * 1_000_000;

/// The fields of one event request, borrowed from the validated `EventInput`.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub stream: &'a str,
    pub actor_id: &'a str,
    pub actor_type: &'a str,
    pub role: &'a str,
    pub namespace_id: &'a str,
    pub content: &'a [u8],
    /// The canonical encoding of the `metadata` map, when there is one.
    pub metadata: Option<&'a [u8]>,
    /// The canonical encoding of the `context` map, when there is one.
    pub context: Option<&'a [u8]>,
}

/// What the writer stores and returns for one event.
#[derive(Debug)]
pub struct Built {
    pub id: String,
    pub raw_id: [u8; 16],
    pub raw: Vec<u8>,
    pub leaf: Hash,
    pub digest: Hash,
    pub salt: Hash,
    /// The salted content commitment the body holds (`content_commitment`).
    pub commitment: Hash,
}

/// Whether `ts` passes the append window (`entries.check_ts`) given the clock and the
/// previous entry's ts.
#[must_use]
pub fn ts_ok(ts: u64, previous: Option<u64>, now: u64) -> bool {
    if ts > now.saturating_add(TS_MAX_AHEAD_US) {
        return false;
    }
    previous.is_none_or(|p| ts >= p.saturating_sub(TS_MAX_BEHIND_US) || p < TS_MAX_BEHIND_US)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The UUIDv7 text of `entries.new_uuids` from a millisecond clock reading and 10 random
/// bytes: 48-bit ms, version 7 and 12 random bits, variant `0b10` and 62 random bits.
#[must_use]
pub fn uuid7(ms: u64, rand: &[u8; 10]) -> (String, [u8; 16]) {
    let mut r = [0u8; 20];
    for (i, b) in rand.iter().enumerate() {
        r[2 * i] = HEX[usize::from(b >> 4)];
        r[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    let variant = b"89ab"[usize::from(nibble(r[3]) & 3)];
    let mut t = Vec::with_capacity(36);
    for shift in (0..12).rev() {
        t.push(HEX[usize::try_from((ms >> (4 * shift)) & 15).unwrap_or(0)]);
        if shift == 4 {
            t.push(b'-');
        }
    }
    t.extend_from_slice(b"-7");
    t.extend_from_slice(&r[..3]);
    t.push(b'-');
    t.push(variant);
    t.extend_from_slice(&r[4..7]);
    t.push(b'-');
    t.extend_from_slice(&r[7..19]);
    let text = String::from_utf8(t).unwrap_or_default();
    let raw = crate::uuid::parse(&text).unwrap_or([0u8; 16]);
    (text, raw)
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        _ => c - b'a' + 10,
    }
}

/// Build one event entry: `[1, prev, seq, branch, ts, "event", "EVENT", body]` with the body
/// keys in the canonical order `EventInput.body` writes them (length first, then bytewise).
/// `given` is the request's own id (its text and 16 bytes); without it a UUIDv7 is made from
/// `ms` and the last 10 bytes of `rand`.
#[must_use]
#[allow(clippy::too_many_arguments)]
pub fn build_event(
    ev: &Event<'_>,
    prev: &Hash,
    seq: u64,
    branch: &str,
    ts: u64,
    ms: u64,
    rand: &[u8; RAND_PER_EVENT],
    given: Option<(&str, [u8; 16])>,
) -> Built {
    let mut salt = [0u8; 32];
    salt.copy_from_slice(&rand[..32]);
    let (id, raw_id) = if let Some((text, raw)) = given {
        (text.to_owned(), raw)
    } else {
        let mut id_rand = [0u8; 10];
        id_rand.copy_from_slice(&rand[32..]);
        uuid7(ms, &id_rand)
    };
    let commitment = content_commitment(&salt, ev.content);
    let digest = content_digest(ev.content);
    let mut out = Vec::with_capacity(
        160 + ev.stream.len()
            + ev.actor_id.len()
            + ev.namespace_id.len()
            + ev.metadata.map_or(0, <[u8]>::len)
            + ev.context.map_or(0, <[u8]>::len),
    );
    out.extend_from_slice(&[0x88, 0x01]);
    cbor::write_bytes(&mut out, prev);
    cbor::write_head(&mut out, 0, seq);
    cbor::write_text(&mut out, branch);
    cbor::write_head(&mut out, 0, ts);
    cbor::write_text(&mut out, "event");
    cbor::write_text(&mut out, "EVENT");
    let count = 7 + u64::from(ev.metadata.is_some()) + u64::from(ev.context.is_some());
    cbor::write_head(&mut out, 5, count);
    cbor::write_text(&mut out, "id");
    cbor::write_text(&mut out, &id);
    cbor::write_text(&mut out, "role");
    cbor::write_text(&mut out, ev.role);
    cbor::write_text(&mut out, "stream");
    cbor::write_text(&mut out, ev.stream);
    if let Some(c) = ev.context {
        cbor::write_text(&mut out, "context");
        out.extend_from_slice(c);
    }
    cbor::write_text(&mut out, "actor_id");
    cbor::write_text(&mut out, ev.actor_id);
    if let Some(m) = ev.metadata {
        cbor::write_text(&mut out, "metadata");
        out.extend_from_slice(m);
    }
    cbor::write_text(&mut out, "actor_type");
    cbor::write_text(&mut out, ev.actor_type);
    cbor::write_text(&mut out, "namespace_id");
    cbor::write_text(&mut out, ev.namespace_id);
    cbor::write_text(&mut out, "content_commitment");
    cbor::write_bytes(&mut out, &commitment);
    let leaf = leaf_hash(&out);
    Built {
        id,
        raw_id,
        raw: out,
        leaf,
        digest,
        salt,
        commitment,
    }
}

/// Bytes before an `entries` row's entry bytes in its packed form (`pack_row`): the leaf
/// hash, content digest and salt (32 bytes each) and the entry's length in 8 ASCII digits.
pub const PACK_HEAD: usize = 104;

/// The length of an event's packed `entries` row (`pack_row`), None when the entry is too
/// long for its eight digits.
#[must_use]
pub fn packed_len(data: &[u8], content: &[u8]) -> Option<usize> {
    (data.len() <= 99_999_999).then(|| PACK_HEAD + data.len() + content.len())
}

/// Write an event's `entries` row packed, as `store.pack_entry_row` packs it, into `out`
/// (exactly `packed_len` bytes): `hash || digest || salt || len(data) as 8 decimal digits
/// || data || content`. SQLite takes a batch of these apart in one statement
/// (`Store.insert_entry_pack`).
pub fn pack_row_into(
    out: &mut [u8],
    leaf: &Hash,
    digest: &Hash,
    salt: &Hash,
    data: &[u8],
    content: &[u8],
) {
    out[..32].copy_from_slice(leaf);
    out[32..64].copy_from_slice(digest);
    out[64..96].copy_from_slice(salt);
    let mut n = data.len();
    for d in out[96..PACK_HEAD].iter_mut().rev() {
        *d = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
    }
    let (data_out, content_out) = out[PACK_HEAD..].split_at_mut(data.len());
    data_out.copy_from_slice(data);
    content_out.copy_from_slice(content);
}

/// `pack_row_into` a new vector; None when the entry is too long to pack.
#[must_use]
pub fn pack_row(
    leaf: &Hash,
    digest: &Hash,
    salt: &Hash,
    data: &[u8],
    content: &[u8],
) -> Option<Vec<u8>> {
    let mut out = vec![0u8; packed_len(data, content)?];
    pack_row_into(&mut out, leaf, digest, salt, data, content);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid7_has_the_version_variant_and_clock() {
        let (text, raw) = uuid7(0x0190_a1b2_c3d4, &[0xff; 10]);
        assert_eq!(text, "0190a1b2-c3d4-7fff-bfff-ffffffffffff");
        assert_eq!(raw[0], 0x01);
        let (text, _) = uuid7(1, &[0; 10]);
        assert_eq!(text, "00000000-0001-7000-8000-000000000000");
    }

    #[test]
    fn ts_window() {
        assert!(ts_ok(5, None, 5));
        assert!(!ts_ok(5 + TS_MAX_AHEAD_US + 1, None, 5));
        assert!(ts_ok(0, Some(TS_MAX_BEHIND_US), 10));
        assert!(!ts_ok(0, Some(TS_MAX_BEHIND_US + 1), 10));
        assert!(ts_ok(0, Some(3), 10));
    }

    #[test]
    fn the_entry_decodes_with_its_fields() {
        let ev = Event {
            stream: "s",
            actor_id: "a",
            actor_type: "AI_AGENT",
            role: "user",
            namespace_id: "n",
            content: b"hello",
            metadata: None,
            context: None,
        };
        let b = build_event(
            &ev,
            &[0u8; 32],
            3,
            "main",
            7,
            1,
            &[0u8; RAND_PER_EVENT],
            None,
        );
        let f = crate::entry::decode(&b.raw).expect("entry");
        assert_eq!((f.seq, f.ts, f.kind, f.type_), (3, 7, "event", "EVENT"));
        assert_eq!(b.leaf, leaf_hash(&b.raw));
        assert_eq!(f.body.get("id"), Some(&cbor::Value::Text(&b.id)));
        let id = "0190a1b2-c3d4-7fff-bfff-ffffffffffff";
        let raw = crate::uuid::parse(id).expect("uuid");
        let given = build_event(
            &ev,
            &[0u8; 32],
            3,
            "main",
            7,
            1,
            &[0u8; RAND_PER_EVENT],
            Some((id, raw)),
        );
        assert_eq!((given.id.as_str(), given.raw_id), (id, raw));
        assert_ne!(given.raw, b.raw);
    }

    #[test]
    fn a_packed_row_holds_its_columns_in_order() {
        let row = pack_row(&[1u8; 32], &[2u8; 32], &[3u8; 32], b"entry", b"text").expect("row");
        assert_eq!(row.len(), PACK_HEAD + 9);
        assert_eq!((row[0], row[32], row[64]), (1, 2, 3));
        assert_eq!(&row[96..PACK_HEAD], b"00000005");
        assert_eq!(&row[PACK_HEAD..], b"entrytext");
        let long = vec![0u8; 12_345];
        let row = pack_row(&[0; 32], &[0; 32], &[0; 32], &long, b"").expect("row");
        assert_eq!(&row[96..PACK_HEAD], b"00012345");
    }
}
