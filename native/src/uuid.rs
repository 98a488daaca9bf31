//! UUID text to its 16 bytes, for the event index (`ledger._uuid_bytes`, `verify`).

/// The 16 bytes of a UUID in canonical text form (lowercase hex, hyphens at 8, 13, 18, 23),
/// or None for any other text (the caller's own parser decides about those).
#[must_use]
pub fn parse(text: &str) -> Option<[u8; 16]> {
    let b = text.as_bytes();
    if b.len() != 36 || b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    let mut out = [0u8; 16];
    let mut nibbles = b
        .iter()
        .enumerate()
        .filter(|(i, _)| !matches!(i, 8 | 13 | 18 | 23))
        .map(|(_, c)| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        });
    for byte in &mut out {
        let hi = nibbles.next()??;
        let lo = nibbles.next()??;
        *byte = hi << 4 | lo;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn canonical_text_only() {
        let raw = parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").expect("uuid");
        assert_eq!(raw[0], 0x01);
        assert_eq!(raw[15], 0x5b);
        assert!(parse("0190A1B2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").is_none());
        assert!(parse("0190a1b2c3d47e5f8a9b0c1d2e3f4a5b").is_none());
        assert!(parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5").is_none());
        assert!(parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5g").is_none());
    }
}
