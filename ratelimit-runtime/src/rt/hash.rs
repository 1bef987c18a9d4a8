//! A hasher for keys that are hashes already: the refusal cache's (a seeded hash of the limiter
//! and the subjects) and the memory store's (which start with their seeded hash). Hashing them
//! again would cost every lookup for nothing; they were seeded against chosen collisions once.

use std::hash::{BuildHasher, Hasher};

/// Builds [`PrehashedHasher`]s.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Prehashed;

/// The hash is the value written: a `u64` as it is; bytes (not written by the keys above) folded
/// into one, so that any key still hashes.
pub(crate) struct PrehashedHasher(u64);

impl BuildHasher for Prehashed {
    type Hasher = PrehashedHasher;
    fn build_hasher(&self) -> PrehashedHasher {
        PrehashedHasher(0)
    }
}

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
