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
    /// Whether this is the key `words` holds: its length, then its words, inline keys being
    /// zero after their bytes as `words` are. A key kept on the heap is longer than any such key.
    #[inline(always)]
    pub(super) fn is_words(&self, key: &KeyWords) -> bool {
        let Key::Inline(n, bytes) = self else { return false };
        let diff = |i: usize| word(bytes, WORD_AT[i]) ^ key.words[i];
        usize::from(*n) == key.len
            && diff(0) | diff(1) | diff(2) == 0
            && (key.len <= 24 || diff(3) | diff(4) | diff(5) == 0)
    }
}

/// Where an inline key's words start: the last overlaps the one before it. A key of up to 24
/// bytes (a limit's hash and id, and a subject of up to 8 bytes: an IPv4 address, a short user
/// id) is compared in its first three alone.
const WORD_AT: [usize; 6] = [0, 8, 16, 24, 32, KEY_BYTES - 8];

/// A key that fits inline (its hash, its limit's id and a subject of up to `KEY_BYTES - 16`
/// bytes) as the words [`Key::is_words`] compares, zero past its end: computed in registers
/// from the subject, which the caller wrote long before, so that a lookup reads no key bytes
/// written just before it.
pub(super) struct KeyWords {
    words: [u64; 6],
    len: usize,
}

impl KeyWords {
    /// The key of `subject` under the limit of id `id`, whose seeded hash is `hash`; `None` when
    /// it is too long to keep inline.
    #[inline(always)]
    pub(super) fn of(hash: u64, id: u64, subject: &[u8]) -> Option<KeyWords> {
        let len = 16 + subject.len();
        if len > KEY_BYTES {
            return None;
        }
        let at = |i: usize| subject_word(subject, WORD_AT[i] - 16);
        Some(KeyWords { words: [hash, id, at(2), at(3), at(4), at(5)], len })
    }

    /// The seeded hash the key starts with.
    #[inline(always)]
    pub(super) fn hash(&self) -> u64 {
        self.words[0]
    }
}

/// The 8 bytes of `s` at `at`, zero past its end, little-endian, read without a copy: whole
/// words where they lie inside, else the word that ends where `s` does, shifted down, and for a
/// subject shorter than a word two (or three) overlapping reads.
#[inline(always)]
fn subject_word(s: &[u8], at: usize) -> u64 {
    let n = s.len();
    if at + 8 <= n {
        return word(s, at);
    }
    if at >= n {
        return 0;
    }
    if n >= 8 {
        return word(s, n - 8) >> (8 * (at + 8 - n));
    }
    // A subject shorter than a word (`at` is 0).
    let byte = |i: usize| s.get(i).map_or(0, |&b| u64::from(b));
    let half = |i: usize| s.get(i..i + 4).map_or(0, |b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    match n {
        4.. => half(0) | half(n - 4) << (8 * (n - 4)),
        _ => byte(0) | byte(n / 2) << (8 * (n / 2)) | byte(n - 1) << (8 * (n - 1)),
    }
}

/// The 8 bytes of `bytes` at `at` (zero past its end: never read, the callers stay inside).
#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    if let Some(b) = bytes.get(at..at + 8) {
        w.copy_from_slice(b);
    }
    u64::from_le_bytes(w)
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

    use super::KeyWords;

    /// Every subject length that fits inline: a key is the one its words describe, and any one
    /// byte changed (in every word, the overlapping last one too) or another length makes it
    /// another. Past the inline bytes, no words.
    #[test]
    fn keys_equal_their_words_byte_for_byte() {
        let (hash, id) = (0x0123_4567_89ab_cdef_u64, 0xfedc_ba98_7654_3210_u64);
        let key_of = |subject: &[u8]| [&hash.to_le_bytes()[..], &id.to_le_bytes(), subject].concat();
        for n in 0..=KEY_BYTES - 16 {
            let subject: Vec<u8> = (0..n).map(|i| i as u8 + 1).collect();
            let words = KeyWords::of(hash, id, &subject).expect("fits inline");
            let key = key_of(&subject);
            assert!(Key::from(&key[..]).is_words(&words), "length {n}");
            for at in 0..key.len() {
                let mut other = key.clone();
                other[at] ^= 0x80;
                assert!(!Key::from(&other[..]).is_words(&words), "length {n}, byte {at}");
            }
            if n > 0 {
                assert!(!Key::from(&key[..key.len() - 1]).is_words(&words), "length {n}, shorter");
                assert!(!Key::from(&[&key[..], &[0]].concat()[..]).is_words(&words), "length {n}, longer");
            }
        }
        assert!(KeyWords::of(hash, id, &[1; KEY_BYTES - 15]).is_none());
    }
}
