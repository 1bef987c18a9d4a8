//! A call's subjects as the store keys them: borrowed while it is decided ([`Keys`]), owned by
//! its permit afterwards ([`SubjectKeys`]). Both keep the usual few short keys inline, so that
//! deciding and admitting allocate nothing.

use super::limit_set::LimitSet;
use crate::model::subject::Subject;

/// The key bytes of a call's subjects, one per limit: on the stack for up to four limits (most
/// functions have one or two). One key is its own case: built on every call, it writes only that
/// key (the empty slots of four cost eight stores more, on a path that stores little else).
pub(crate) enum Keys<'s> {
    One([&'s [u8]; 1]),
    /// The first `.1` of the four.
    Few([&'s [u8]; 4], usize),
    Many(Vec<&'s [u8]>),
}

impl<'s> Keys<'s> {
    /// The keys of `set`'s subjects, or the index of the first limit whose subject is missing.
    #[inline(always)]
    pub(crate) fn of(set: &LimitSet, subjects: &'s [Subject<'_>]) -> Result<Keys<'s>, usize> {
        let key = |i: usize| subjects.get(set.subject_of(i)).and_then(Subject::key_bytes).ok_or(i);
        let len = set.limits.len();
        if len == 1 {
            // Most calls: one key, no loop.
            return Ok(Keys::One([key(0)?]));
        }
        if len <= 4 {
            let mut keys = [&[][..]; 4];
            for (i, slot) in keys.iter_mut().enumerate().take(len) {
                *slot = key(i)?;
            }
            return Ok(Keys::Few(keys, len));
        }
        (0..len).map(key).collect::<Result<Vec<_>, usize>>().map(Keys::Many)
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[&'s [u8]] {
        match self {
            Keys::One(key) => key,
            Keys::Few(keys, len) => keys.get(..*len).unwrap_or_default(),
            Keys::Many(keys) => keys,
        }
    }
}

/// A call's subject keys, owned: inline for the usual few short ones (an IP, a user id), so
/// that a permit costs no allocation.
#[derive(Clone)]
pub(crate) enum SubjectKeys {
    /// `count` keys back to back in `bytes`, key `i` ending at `ends[i]`.
    Inline {
        count: u8,
        ends: [u8; INLINE_KEYS],
        bytes: Words,
    },
    Heap(Vec<Vec<u8>>),
}

/// Keys kept inline: up to this many, of this many bytes together (an IPv4 address, an IPv6
/// prefix, a short user id).
const INLINE_KEYS: usize = 4;
const INLINE_BYTES: usize = 24;

/// The inline keys' bytes, 8-aligned: after the tag, count and ends (one word), so that short
/// keys are copied in as whole words.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Words([u8; INLINE_BYTES]);

impl Default for SubjectKeys {
    fn default() -> SubjectKeys {
        SubjectKeys::EMPTY
    }
}

/// Inline keys own nothing: a permit drops them with one test (see `Rare`).
impl super::rare::Empty for SubjectKeys {
    #[inline(always)]
    fn holds_nothing(&self) -> bool {
        matches!(self, SubjectKeys::Inline { .. })
    }
}

impl SubjectKeys {
    pub(crate) const EMPTY: SubjectKeys =
        SubjectKeys::Inline { count: 0, ends: [0; INLINE_KEYS], bytes: Words([0; INLINE_BYTES]) };

    /// The keys of `set`'s subjects, as `Keys::of` finds them (none if one is missing).
    /// Inlined into both permits' constructors (left to the compiler, it was a call in each).
    #[inline(always)]
    pub(crate) fn of(set: &LimitSet, subjects: &[Subject<'_>]) -> SubjectKeys {
        let n = set.limits.len();
        let key = |i: usize| subjects.get(set.subject_of(i)).and_then(Subject::key_bytes);
        if n == 1 {
            return subjects.get(set.subject_of(0)).map_or(SubjectKeys::EMPTY, SubjectKeys::one);
        }
        if n <= INLINE_KEYS {
            let (mut ends, mut bytes) = ([0u8; INLINE_KEYS], [0u8; INLINE_BYTES]);
            let mut at = 0;
            let mut fits = true;
            for (i, end) in ends.iter_mut().enumerate().take(n) {
                let Some(k) = key(i) else { return SubjectKeys::EMPTY };
                match bytes.get_mut(at..at + k.len()) {
                    Some(slot) if fits => {
                        crate::model::key::copy_key(slot, k);
                        at += k.len();
                        *end = at as u8;
                    }
                    _ => fits = false,
                }
            }
            if fits {
                return SubjectKeys::Inline { count: n as u8, ends, bytes: Words(bytes) };
            }
        }
        let keys: Option<Vec<Vec<u8>>> = (0..n).map(|i| key(i).map(<[u8]>::to_vec)).collect();
        keys.map_or(SubjectKeys::EMPTY, SubjectKeys::Heap)
    }

    /// The key of one limit's `subject` (none if it is missing).
    #[inline(always)]
    pub(crate) fn one(subject: &Subject<'_>) -> SubjectKeys {
        // A client IP (most permits): its key and what follows it, as they lie (whole words,
        // as the subject was written; the bytes past `ends[0]` are never read).
        if let Some((ip, len)) = subject.ip_key() {
            return SubjectKeys::Inline { count: 1, ends: [len as u8, 0, 0, 0], bytes: Words(*ip) };
        }
        match subject.key_bytes() {
            Some(key) if key.len() <= INLINE_BYTES => {
                let mut bytes = [0u8; INLINE_BYTES];
                crate::model::key::copy_key(&mut bytes[..key.len()], key);
                SubjectKeys::Inline { count: 1, ends: [key.len() as u8, 0, 0, 0], bytes: Words(bytes) }
            }
            Some(key) => SubjectKeys::Heap(vec![key.to_vec()]),
            None => SubjectKeys::EMPTY,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            SubjectKeys::Inline { count, .. } => usize::from(*count),
            SubjectKeys::Heap(keys) => keys.len(),
        }
    }

    pub(crate) fn slices(&self) -> Vec<&[u8]> {
        match self {
            SubjectKeys::Inline { count, ends, bytes } => {
                let mut start = 0;
                ends[..usize::from(*count)]
                    .iter()
                    .map(|&end| {
                        let (from, to) = (start, usize::from(end));
                        start = to;
                        bytes.0.get(from..to).unwrap_or_default()
                    })
                    .collect()
            }
            SubjectKeys::Heap(keys) => keys.iter().map(Vec::as_slice).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SubjectKeys;
    use crate::model::subject::Subject;

    /// A permit keeps the key the store was given, whatever the subject: an IP, a short value,
    /// one too long for the inline bytes, the global subject; a missing one keeps none.
    #[test]
    fn one_subject_keeps_its_store_key() {
        let long = [b'u'; 30];
        let subjects = [
            Subject::ip("203.0.113.7".parse().unwrap()),
            Subject::ip("2001:db8::1".parse().unwrap()),
            Subject::bytes(&b"alice"[..]),
            Subject::bytes(&long[..]),
            Subject::global(),
        ];
        for subject in &subjects {
            let keys = SubjectKeys::one(subject);
            assert_eq!(keys.slices(), [subject.key_bytes().unwrap()], "{subject:?}");
        }
        assert_eq!(SubjectKeys::one(&Subject::missing()).len(), 0);
    }
}
