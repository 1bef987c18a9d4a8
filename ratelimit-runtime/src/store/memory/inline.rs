//! The in-memory map's keys and O(1) values, stored inline in the map's buckets when small: a
//! lookup then compares the key, and a decision reads its values, without following a pointer
//! to another allocation (each such hop was a cache miss over 1000 subjects).

use std::ops::{Deref, DerefMut};

/// Key bytes (hash, limit id, subject) kept inline: subjects up to 30 bytes (any IPv4 address,
/// most IPv6 prefixes and user ids).
const KEY_BYTES: usize = 46;

/// A key of the map (its bytes), compared with a lookup's `&[u8]` by `is`.
pub(super) enum Key {
    Inline(u8, [u8; KEY_BYTES]),
    Heap(Box<[u8]>),
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Key {
        if bytes.len() <= KEY_BYTES {
            let mut inline = [0; KEY_BYTES];
            inline[..bytes.len()].copy_from_slice(bytes);
            Key::Inline(bytes.len() as u8, inline)
        } else {
            Key::Heap(bytes.into())
        }
    }
}

impl Key {
    fn bytes(&self) -> &[u8] {
        match self {
            Key::Inline(len, bytes) => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }

    /// The seeded hash the key starts with.
    pub(super) fn hash(&self) -> u64 {
        super::hash_of(self.bytes())
    }

    /// Whether this is `key`: compared 8 bytes at a time, inline (no `memcmp` call for keys of a
    /// few words).
    #[inline]
    pub(super) fn is(&self, key: &[u8]) -> bool {
        let own = self.bytes();
        if own.len() != key.len() {
            return false;
        }
        let len = own.len();
        if len < 8 {
            return own == key;
        }
        // The last 8 bytes (overlapping the words before them) cover any tail.
        own.chunks_exact(8).zip(key.chunks_exact(8)).all(|(x, y)| word(x) == word(y))
            && word(&own[len - 8..]) == word(&key[len - 8..])
    }
}

fn word(bytes: &[u8]) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(bytes);
    u64::from_ne_bytes(w)
}

/// The stored values of an O(1) limit (`cells()` per rule, `None` where never written): inline
/// for up to three (one rule of any algorithm), else on the heap.
#[derive(Clone)]
pub(super) enum Values {
    Inline(u8, [Option<u64>; 3]),
    Heap(Vec<Option<u64>>),
}

impl Values {
    /// `n` values, none written.
    pub(super) fn new(n: usize) -> Values {
        if n <= 3 {
            Values::Inline(n as u8, [None; 3])
        } else {
            Values::Heap(vec![None; n])
        }
    }
}

impl Deref for Values {
    type Target = [Option<u64>];
    #[inline]
    fn deref(&self) -> &[Option<u64>] {
        match self {
            Values::Inline(n, v) => &v[..usize::from(*n)],
            Values::Heap(v) => v,
        }
    }
}

impl DerefMut for Values {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Option<u64>] {
        match self {
            Values::Inline(n, v) => &mut v[..usize::from(*n)],
            Values::Heap(v) => v,
        }
    }
}
