//! SHA-256 and HMAC-SHA256 for request signing (SigV4), from the `sha2`
//! the crate already uses: `object_store` leaves the choice of crypto
//! library to its user, and its own choices (ring, aws-lc) would rebuild
//! the whole Lance stack with another set of features.

use object_store::client::SigningAlgorithm;
use object_store::client::{CryptoProvider, DigestAlgorithm, DigestContext, HmacContext, Signer};
use sha2::{Digest, Sha256};

/// The SHA-256 block size, which HMAC pads its key to.
const BLOCK: usize = 64;

#[derive(Debug, Default)]
pub struct Sha2Crypto;

impl CryptoProvider for Sha2Crypto {
    fn digest(&self, algorithm: DigestAlgorithm) -> object_store::Result<Box<dyn DigestContext>> {
        match algorithm {
            DigestAlgorithm::Sha256 => Ok(Box::new(Sha256Context {
                hasher: Sha256::new(),
                out: Vec::new(),
            })),
            other => Err(unsupported(format!("digest {other:?}"))),
        }
    }

    fn hmac(
        &self,
        algorithm: DigestAlgorithm,
        secret: &[u8],
    ) -> object_store::Result<Box<dyn HmacContext>> {
        match algorithm {
            DigestAlgorithm::Sha256 => Ok(Box::new(Hmac::new(secret))),
            other => Err(unsupported(format!("HMAC over {other:?}"))),
        }
    }

    fn sign(
        &self,
        algorithm: SigningAlgorithm,
        _pem: &[u8],
    ) -> object_store::Result<Box<dyn Signer>> {
        Err(unsupported(format!(
            "signing with {algorithm:?} (only S3 is read)"
        )))
    }
}

fn unsupported(what: String) -> object_store::Error {
    object_store::Error::NotSupported {
        source: what.into(),
    }
}

struct Sha256Context {
    hasher: Sha256,
    out: Vec<u8>,
}

impl DigestContext for Sha256Context {
    fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    fn finish(&mut self) -> object_store::Result<&[u8]> {
        self.out = std::mem::take(&mut self.hasher).finalize().to_vec();
        Ok(&self.out)
    }
}

/// HMAC-SHA256 (RFC 2104).
struct Hmac {
    inner: Sha256,
    outer_key: [u8; BLOCK],
    out: Vec<u8>,
}

impl Hmac {
    fn new(secret: &[u8]) -> Hmac {
        let mut key = [0u8; BLOCK];
        if secret.len() > BLOCK {
            key[..32].copy_from_slice(&Sha256::digest(secret));
        } else {
            key[..secret.len()].copy_from_slice(secret);
        }
        let mut inner = Sha256::new();
        inner.update(key.map(|b| b ^ 0x36));
        Hmac {
            inner,
            outer_key: key.map(|b| b ^ 0x5c),
            out: Vec::new(),
        }
    }
}

impl HmacContext for Hmac {
    fn update(&mut self, data: &[u8]) {
        self.inner.update(data);
    }

    fn finish(&mut self) -> object_store::Result<&[u8]> {
        let inner = std::mem::take(&mut self.inner).finalize();
        let mut outer = Sha256::new();
        outer.update(self.outer_key);
        outer.update(inner);
        self.out = outer.finalize().to_vec();
        Ok(&self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 1 and 6 of RFC 4231 (a short key, a key longer than
        // a block).
        let mut h = Sha2Crypto
            .hmac(DigestAlgorithm::Sha256, &[0x0b; 20])
            .unwrap();
        h.update(b"Hi There");
        assert_eq!(
            hex(h.finish().unwrap()),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        let mut h = Sha2Crypto
            .hmac(DigestAlgorithm::Sha256, &[0xaa; 131])
            .unwrap();
        h.update(b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(
            hex(h.finish().unwrap()),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        let mut d = Sha2Crypto.digest(DigestAlgorithm::Sha256).unwrap();
        d.update(b"abc");
        assert_eq!(
            hex(d.finish().unwrap()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
