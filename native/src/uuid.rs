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
    let mut bad = 0u8;
    for (byte, &at) in out.iter_mut().zip(&HEX_AT) {
        let (hi, lo) = (nibble(b[at]), nibble(b[at + 1]));
        bad |= hi | lo;
        *byte = hi << 4 | lo;
    }
    // A character that is not lowercase hex maps to 0xff, whose high bits nothing else sets.
    (bad & 0xf0 == 0).then_some(out)
}

/// Where the two hex digits of each of the 16 bytes start in the canonical text.
const HEX_AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/// The value of a lowercase hex digit, 0xff for any other byte.
const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => 0xff,
    }
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
        assert!(parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a:b").is_none());
        assert!(parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5\u{e9}").is_none());
        assert!(parse("0190a1b2-c3d4-7e5f-8a9b_0c1d2e3f4a5b").is_none());
        let all = parse("01234567-89ab-cdef-0123-456789abcdef").expect("uuid");
        assert_eq!(
            all,
            [
                0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                0xcd, 0xef
            ]
        );
    }
}
