//! The SHA-256 hash tree a saved vector index is verified with: the file's bytes in `TREE_CHUNK`
//! leaves, each hashed on rayon's threads, and a root over the file length, the leaf size and every
//! leaf's digest in order.
//!
//! A plain SHA-256 of a million-node graph (hundreds of MB) takes a core a quarter of a second; the
//! leaves spread that over every core, and the root is as hard to forge as SHA-256 itself (the
//! length and leaf size are bound into it, so no other split of other bytes reproduces it).

use rayon::prelude::*;
use sha2::{Digest, Sha256};

/// Bytes per leaf.
pub const TREE_CHUNK: usize = 1 << 22;

/// Prefix of the root's input: a root never equals the digest of a leaf or of a plain file.
const TAG: &[u8] = b"hippograph sha256 tree 1\0";

/// The root of `bytes`' hash tree.
pub fn tree_sha256(bytes: &[u8]) -> [u8; 32] {
    let leaves: Vec<[u8; 32]> = bytes.par_chunks(TREE_CHUNK).map(|leaf| Sha256::digest(leaf).into()).collect();
    let mut root = Sha256::new();
    root.update(TAG);
    root.update((bytes.len() as u64).to_le_bytes());
    root.update((TREE_CHUNK as u64).to_le_bytes());
    for leaf in &leaves {
        root.update(leaf);
    }
    root.finalize().into()
}

/// `digest` as lower-case hex.
pub fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree computed leaf by leaf without rayon, as the Python side (`hippograph.engine.files`) does.
    fn sequential(bytes: &[u8]) -> [u8; 32] {
        let mut root = Sha256::new();
        root.update(TAG);
        root.update((bytes.len() as u64).to_le_bytes());
        root.update((TREE_CHUNK as u64).to_le_bytes());
        for leaf in bytes.chunks(TREE_CHUNK) {
            root.update(Sha256::digest(leaf));
        }
        root.finalize().into()
    }

    #[test]
    fn the_root_binds_every_leaf_and_the_length() {
        let bytes: Vec<u8> = (0..2 * TREE_CHUNK + 77).map(|i| (i * 31 % 251) as u8).collect();
        let root = tree_sha256(&bytes);
        assert_eq!(root, sequential(&bytes));
        let mut changed = bytes.clone();
        changed[TREE_CHUNK + 5] ^= 1;
        assert_ne!(tree_sha256(&changed), root);
        assert_ne!(tree_sha256(&bytes[..bytes.len() - 1]), root);
        assert_ne!(tree_sha256(&[]), <[u8; 32]>::from(Sha256::digest([])));
        assert_eq!(hex(&[0, 255, 16]), "00ff10");
    }
}
