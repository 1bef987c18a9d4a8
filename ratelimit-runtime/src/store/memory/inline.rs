//! The in-memory map's keys and O(1) values, stored inline in the map's buckets when small: a
//! lookup then compares the key, and a decision reads its values, without following a pointer
//! to another allocation (each such hop was a cache miss over 1000 subjects).

use std::ops::{Deref, DerefMut};

/// Key bytes (hash, limit id, subject) kept inline: subjects up to 30 bytes (any IPv4 address,
/// most IPv6 prefixes and user ids).
pub(super) const KEY_BYTES: usize = 46;

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
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Key::Inline(len, bytes) => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }

    /// The seeded hash the key starts with.
    pub(super) fn hash(&self) -> u64 {
        super::shard::hash_of(self.bytes())
    }

    /// Whether this is `key`: compared 8 bytes at a time, inline (no `memcmp` call for keys of a
    /// few words). Every key starts with its 8-byte hash, so a key of another subject usually
    /// differs in the first word.
    #[inline]
    pub(super) fn is(&self, key: &[u8]) -> bool {
        let own = match self {
            Key::Inline(len, bytes) => {
                if usize::from(*len) != key.len() {
                    return false;
                }
                &bytes[..]
            }
            Key::Heap(bytes) => {
                if bytes.len() != key.len() {
                    return false;
                }
                &bytes[..]
            }
        };
        let len = key.len();
        if len < 8 {
            return own.get(..len) == Some(key);
        }
        // The last 8 bytes (overlapping the words before them) cover any tail.
        let mut at = 0;
        while at + 8 <= len {
            if word(own, at) != word(key, at) {
                return false;
            }
            at += 8;
        }
        word(own, len - 8) == word(key, len - 8)
    }
}

impl Key {
    /// Whether this is the key of `len` (at most `KEY_BYTES`) bytes at the start of `padded`,
    /// zero after them: one comparison of fixed size (a few vector loads), as inline keys are
    /// zero after their bytes too. A key kept on the heap is longer than any such key.
    #[inline(always)]
    pub(super) fn is_padded(&self, padded: &[u8; KEY_BYTES], len: usize) -> bool {
        match self {
            Key::Inline(n, bytes) => usize::from(*n) == len && same(bytes, padded, len),
            Key::Heap(_) => false,
        }
    }
}

/// Whether two padded keys of `len` bytes are equal: word by word, inline (comparing the arrays
/// calls `memcmp`), the last word overlapping the one before it. Past `len` both are zero, so
/// a key of up to 24 bytes (a limit's id, its hash and an IPv4 subject's 5 bytes: most keys)
/// is compared in its first three words alone.
#[inline(always)]
fn same(a: &[u8; KEY_BYTES], b: &[u8; KEY_BYTES], len: usize) -> bool {
    let diff = |words: [usize; 3]| words.iter().fold(0, |d, &at| d | (word(a, at) ^ word(b, at)));
    diff([0, 8, 16]) == 0 && (len <= 24 || diff([24, 32, KEY_BYTES - 8]) == 0)
}

/// The 8 bytes of `bytes` at `at` (zero past its end: never read, the callers stay inside).
#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    if let Some(b) = bytes.get(at..at + 8) {
        w.copy_from_slice(b);
    }
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

    /// Writes each rule's new values, `k` a rule: the first `k` of each step's state, rule by
    /// rule (a rule beyond `steps` keeps what it holds).
    #[inline(always)]
    pub(super) fn set_steps(&mut self, k: usize, steps: &[[u64; 3]]) {
        for (slots, new) in self.chunks_exact_mut(k).zip(steps) {
            for (slot, v) in slots.iter_mut().zip(new) {
                *slot = Some(*v);
            }
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

#[cfg(test)]
mod tests {
    use super::{Key, KEY_BYTES};

    /// A key padded with zeros, as the one-limit path builds it.
    fn padded(bytes: &[u8]) -> [u8; KEY_BYTES] {
        let mut p = [0; KEY_BYTES];
        p[..bytes.len()].copy_from_slice(bytes);
        p
    }

    /// Every inline length: a key is its own, and any one byte changed (past the first three
    /// words too) or another length makes it another.
    #[test]
    fn padded_keys_are_equal_only_byte_for_byte() {
        for len in 0..=KEY_BYTES {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
            let key = Key::from(&bytes[..]);
            assert!(key.is_padded(&padded(&bytes), len), "length {len}");
            for at in 0..len {
                let mut other = bytes.clone();
                other[at] ^= 0x80;
                assert!(!key.is_padded(&padded(&other), len), "length {len}, byte {at}");
            }
            if len > 0 {
                assert!(!key.is_padded(&padded(&bytes[..len - 1]), len - 1), "length {len}, shorter");
            }
        }
    }
}
