//! A client IP's text written on the stack (a Redis key, a log), so writing one allocates
//! nothing.

use std::fmt;
use std::net::Ipv4Addr;

/// Up to 47 bytes of text on the stack, and their length in the last byte (only the first
/// `len` bytes mean anything). Aligned, so that moving a subject copies whole 16-byte words. The
/// length shares the last word with the text's end: an IPv4 subject is then written as three
/// whole words (text, zeros, length), each of which a copy right after reads back at once (a
/// separate length byte made the zeros before it a 15-byte store overlapping its neighbour, and
/// the copy's read of that word waited for both to land).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub(super) struct InlineText([u8; INLINE_TEXT + 1]);

/// The most bytes of text a subject keeps inline.
const INLINE_TEXT: usize = 47;

impl PartialEq for InlineText {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for InlineText {}

impl std::hash::Hash for InlineText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl Default for InlineText {
    fn default() -> Self {
        InlineText([0; INLINE_TEXT + 1])
    }
}

impl InlineText {
    #[inline]
    pub(super) fn len(&self) -> usize {
        usize::from(self.0[INLINE_TEXT])
    }

    #[inline]
    pub(super) fn as_bytes(&self) -> &[u8] {
        self.0.get(..self.len()).unwrap_or_default()
    }

    /// Writes an IPv4 address in dotted decimal (at most 15 bytes) into the empty buffer. The
    /// text is put together in one 128-bit register and stored at once: a copy of the subject
    /// right after then reads back whole stores (pieced-together bytes stall such a read).
    #[inline]
    pub(super) fn push_ipv4(&mut self, v4: Ipv4Addr) {
        let mut text = 0u128;
        let mut len = 0u32;
        for (i, octet) in v4.octets().into_iter().enumerate() {
            let (digits, n) = OCTETS[usize::from(octet)];
            text |= u128::from(u32::from_le_bytes(digits)) << (8 * len);
            len += u32::from(n) + u32::from(i < 3);
        }
        // The last octet's dot fell past the end (len ≤ 15): cleared, as the rest of the buffer.
        text &= (1u128 << (8 * len)) - 1;
        if let Some(first) = self.0.first_chunk_mut::<16>() {
            *first = text.to_le_bytes();
        }
        // The last word whole: zeros, then the length.
        if let Some(last) = self.0.last_chunk_mut::<16>() {
            *last = (u128::from(len) << 120).to_le_bytes();
        }
    }
}

/// The decimal digits of every octet followed by a dot (padded to 4 bytes), and how many
/// digits there are: a lookup instead of divisions on the hot path.
static OCTETS: [([u8; 4], u8); 256] = {
    let mut table = [([0u8; 4], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = if b >= 100 {
            ([b'0' + b / 100, b'0' + b / 10 % 10, b'0' + b % 10, b'.'], 3)
        } else if b >= 10 {
            ([b'0' + b / 10, b'0' + b % 10, b'.', 0], 2)
        } else {
            ([b'0' + b, b'.', 0, 0], 1)
        };
        i += 1;
    }
    table
};

impl fmt::Write for InlineText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let at = self.len();
        let end = at + s.len();
        if end > INLINE_TEXT {
            return Err(fmt::Error);
        }
        self.0[at..end].copy_from_slice(s.as_bytes());
        self.0[INLINE_TEXT] = end as u8;
        Ok(())
    }
}
