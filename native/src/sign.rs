//! Ed25519 (RFC 8032) for the seal every commit signs: a signing key held natively and the
//! signer's own check of each signature before it is stored.
//!
//! `ledger/signing.py` stays the reference (OpenSSL through `cryptography`). RFC 8032
//! signatures are deterministic, so this key signs byte for byte what the reference signs.
//! Opening notes (anyone's signatures, where the accept/reject rules must match the
//! reference exactly) stays with the reference; the check here is of our own fresh
//! signature and uses the strict rules, which reject a superset of what the reference does.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// An Ed25519 signing key from its 32-byte seed; the seed never leaves it (zeroized on drop).
#[pyclass(module = "memroot._native", frozen)]
pub struct Ed25519Key {
    key: SigningKey,
}

#[pymethods]
impl Ed25519Key {
    #[new]
    fn new(seed: &[u8]) -> PyResult<Self> {
        let seed: [u8; 32] = seed
            .try_into()
            .or_else(|_| crate::reject("an Ed25519 seed is 32 bytes"))?;
        Ok(Self {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The raw 32-byte public key.
    fn public_key<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.key.verifying_key().as_bytes())
    }

    /// The 64-byte RFC 8032 signature of `message`.
    fn sign<'py>(&self, py: Python<'py>, message: &[u8]) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.key.sign(message).to_bytes())
    }

    fn __repr__(&self) -> &'static str {
        "Ed25519Key(...)"
    }
}

/// Whether `signature` is a valid Ed25519 signature of `message` under `public_key`, by the
/// strict rules (canonical encodings, no small-order key or R); false for wrong sizes.
#[must_use]
pub fn verify_strict(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let (Ok(pk), Ok(sig)) = (
        <[u8; 32]>::try_from(public_key),
        <[u8; 64]>::try_from(signature),
    ) else {
        return false;
    };
    let Ok(key) = VerifyingKey::from_bytes(&pk) else {
        return false;
    };
    key.verify_strict(message, &Signature::from_bytes(&sig))
        .is_ok()
}

/// An Ed25519 public key decoded once (a signer checks every seal against the same key).
#[pyclass(module = "memroot._native", frozen)]
pub struct Ed25519Verifier {
    key: VerifyingKey,
}

#[pymethods]
impl Ed25519Verifier {
    #[new]
    fn new(public_key: &[u8]) -> PyResult<Self> {
        let Ok(pk) = <[u8; 32]>::try_from(public_key) else {
            return crate::reject("an Ed25519 public key is 32 bytes");
        };
        match VerifyingKey::from_bytes(&pk) {
            Ok(key) => Ok(Self { key }),
            Err(_) => crate::reject("not an Ed25519 public key"),
        }
    }

    /// `verify_strict` of `signature` over `message` under this key.
    fn verify_strict(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(sig) = <[u8; 64]>::try_from(signature) else {
            return false;
        };
        self.key
            .verify_strict(message, &Signature::from_bytes(&sig))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc8032_test_1() {
        // RFC 8032 section 7.1, TEST 1 (the empty message).
        let seed = unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        let key = SigningKey::from_bytes(&seed.clone().try_into().unwrap());
        assert_eq!(
            key.verifying_key().as_bytes().to_vec(),
            unhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        let sig = key.sign(b"").to_bytes();
        assert_eq!(
            sig.to_vec(),
            unhex(concat!(
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155",
                "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
            ))
        );
        let pk = key.verifying_key().to_bytes();
        assert!(verify_strict(&pk, b"", &sig));
        let mut bad = sig;
        bad[0] ^= 1;
        assert!(!verify_strict(&pk, b"", &bad));
        assert!(!verify_strict(&pk, b"x", &sig));
        assert!(!verify_strict(&pk[..31], b"", &sig));
    }
}
