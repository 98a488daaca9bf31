//! The entry array `[v, prev, seq, branch, ts, kind, type, body]`, as `Entry.from_bytes` in
//! `ledger/entries.py` checks it (auditor's step 1).

use crate::cbor::{self, Value};

/// The one format version.
pub const FORMAT_VERSION: u64 = 1;
const MAX_TS: u64 = (1 << 63) - 1;

/// The fields of a well-formed entry, borrowing from the entry bytes.
#[derive(Debug)]
pub struct Fields<'a> {
    pub prev: &'a [u8],
    pub seq: u64,
    pub branch: &'a str,
    pub ts: u64,
    pub kind: &'a str,
    pub type_: &'a str,
    pub body: Value<'a>,
}

/// Decode entry bytes strictly and check the entry's shape.
///
/// # Errors
/// `cbor::Reject` for bytes that are not canonical CBOR or not a well-formed entry.
pub fn decode(raw: &[u8]) -> Result<Fields<'_>, cbor::Reject> {
    let bad = |what| Err(cbor::Reject(what));
    let Value::Array(items) = cbor::decode(raw)? else {
        return bad("not an array");
    };
    let Ok::<[Value<'_>; 8], _>([v, prev, seq, branch, ts, kind, type_, body]) = items.try_into()
    else {
        return bad("not 8 items");
    };
    if v != Value::Uint(FORMAT_VERSION) {
        return bad("version");
    }
    let Value::Bytes(prev) = prev else {
        return bad("prev");
    };
    if prev.len() != 32 {
        return bad("prev");
    }
    let Value::Uint(seq) = seq else {
        return bad("seq");
    };
    let Value::Text(branch) = branch else {
        return bad("branch");
    };
    if !valid_branch(branch) {
        return bad("branch");
    }
    let ts = match ts {
        Value::Uint(ts) if ts <= MAX_TS => ts,
        _ => return bad("ts"),
    };
    let kind = match kind {
        Value::Text(k @ ("genesis" | "event" | "op")) => k,
        _ => return bad("kind"),
    };
    let type_ = match type_ {
        Value::Text(t) if !t.is_empty() => t,
        _ => return bad("type"),
    };
    if !matches!(body, Value::Map(_)) {
        return bad("body");
    }
    Ok(Fields {
        prev,
        seq,
        branch,
        ts,
        kind,
        type_,
        body,
    })
}

/// `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`, as `entries._BRANCH_RE`.
#[must_use]
pub fn valid_branch(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(branch: &str, kind: &str) -> Vec<u8> {
        let mut out = vec![0x88, 0x01];
        cbor::write_bytes(&mut out, &[0u8; 32]);
        out.push(0x05);
        cbor::write_text(&mut out, branch);
        cbor::write_head(&mut out, 0, 1_700_000_000_000_000);
        cbor::write_text(&mut out, kind);
        cbor::write_text(&mut out, "EVENT");
        out.push(0xa0);
        out
    }

    #[test]
    fn well_formed_entry_decodes() {
        let raw = entry("main", "event");
        let f = decode(&raw).expect("entry");
        assert_eq!(
            (f.seq, f.branch, f.kind, f.type_),
            (5, "main", "event", "EVENT")
        );
    }

    #[test]
    fn bad_fields_are_refused() {
        assert!(decode(&entry("-x", "event")).is_err());
        assert!(decode(&entry("main", "other")).is_err());
        assert!(decode(&entry(&"a".repeat(65), "op")).is_err());
        assert!(decode(&[0x80]).is_err());
    }

    #[test]
    fn branch_names() {
        assert!(valid_branch("a"));
        assert!(valid_branch("feature-1.x_y"));
        assert!(!valid_branch(""));
        assert!(!valid_branch("_a"));
        assert!(!valid_branch("a b"));
        assert!(!valid_branch("é"));
    }
}
