//! Every hash of the format, as `ledger/hashing.py`: RFC 9162 leaf and node hashes (SHA-256,
//! with the CPU's SHA extensions when it has them), domain-tagged roots and the BLAKE3 content
//! address and keyed content commitment.

use sha2::{Digest, Sha256};

/// A SHA-256 or BLAKE3 digest.
pub type Hash = [u8; 32];

/// `SHA-256(0x00 || entry)`: an entry's identity and Merkle leaf.
#[must_use]
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(entry);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`: an interior node.
#[must_use]
pub fn node_hash(left: &[u8], right: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// `SHA-256(data)`.
#[must_use]
pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

/// `SHA-256(tag || 0x00 || data)`; the caller has checked that `tag` holds no NUL.
#[must_use]
pub fn domain_hash(tag: &[u8], data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update(tag);
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// Unkeyed BLAKE3 of content: its storage address.
#[must_use]
pub fn content_digest(content: &[u8]) -> Hash {
    *blake3::hash(content).as_bytes()
}

/// BLAKE3 keyed with the 32-byte salt over the content: what an event entry commits to.
#[must_use]
pub fn content_commitment(salt: &Hash, content: &[u8]) -> Hash {
    *blake3::keyed_hash(salt, content).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(h: &[u8]) -> String {
        h.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn empty_sha256() {
        assert_eq!(
            hex(&sha256(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn leaf_and_node_are_prefixed() {
        assert_eq!(leaf_hash(b"abc"), sha256(b"\x00abc"));
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let mut pre = vec![1u8];
        pre.extend_from_slice(&a);
        pre.extend_from_slice(&b);
        assert_eq!(node_hash(&a, &b), sha256(&pre));
        assert_eq!(domain_hash(b"t", b"x"), sha256(b"t\x00x"));
    }

    #[test]
    fn blake3_empty() {
        assert_eq!(
            hex(&content_digest(b"")),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        assert_ne!(content_commitment(&[0u8; 32], b""), content_digest(b""));
    }
}
