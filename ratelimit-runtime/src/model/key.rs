//! The Redis key layout:
//! `<prefix>{<limiter>|<type>|<subject>}:<algorithm>:<rules>`.
//!
//! * Injective: the limiter name and the subject are escaped so that neither can contain the
//!   separators `|`, `{`, `}` (nor `%`, `#`, spaces or control bytes); long ones are replaced
//!   by `#` and the SHA-256 of their bytes, and an escaped value never starts with `#`. The type
//!   is a fixed word, so a user id equal to an IP string still lands in a different key.
//! * Bounded: prefix ≤ 64 bytes, each escaped part ≤ 96 bytes (else hashed), rules ≤ 48 bytes
//!   (else hashed): every key stays under 300 bytes.
//! * Cluster-ready: everything that identifies (limiter, type, subject) sits inside one hash tag,
//!   and the prefix may not contain `{` or `}`, so all keys of a subject share a slot.

use crate::algorithm::Algorithm;
use crate::error::PrefixError;
use crate::model::limit_type::LimitType;
use crate::model::rule::Rule;
use crate::model::subject::with_key_text;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// The default key prefix: short, and says what the keys are for.
pub const DEFAULT_PREFIX: &str = "rate_limit:";
/// The longest prefix accepted.
pub const MAX_PREFIX_LEN: usize = 64;
/// Escaped names and subjects longer than this are hashed.
const MAX_PART_LEN: usize = 96;
/// A rule list longer than this in the key is hashed.
const MAX_RULES_LEN: usize = 48;

/// Checks a key prefix.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.len() > MAX_PREFIX_LEN {
        Err(PrefixError::TooLong)
    } else if prefix.contains(['{', '}']) {
        Err(PrefixError::Brace)
    } else {
        Ok(())
    }
}

/// The parts of one limit's keys that are fixed for its limiter: built once, then each call only
/// appends its encoded subject between them.
#[derive(Clone, Debug)]
pub(crate) struct KeyTemplate {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl KeyTemplate {
    pub(crate) fn new(
        prefix: &str,
        limiter: &str,
        limit_type: LimitType,
        algorithm: Algorithm,
        burst: Option<u64>,
        rules: &[Rule],
    ) -> KeyTemplate {
        let mut head = Vec::with_capacity(prefix.len() + 64);
        head.extend_from_slice(prefix.as_bytes());
        head.push(b'{');
        encode_part(limiter.as_bytes(), &mut head);
        head.push(b'|');
        head.extend_from_slice(limit_type.as_str().as_bytes());
        head.push(b'|');

        let mut rule_list = burst.map_or(String::new(), |b| format!("b{b}-"));
        for (i, rule) in rules.iter().enumerate() {
            if i > 0 {
                rule_list.push('-');
            }
            let _ = write!(rule_list, "{}x{}", rule.window_label(), rule.count());
        }
        if rule_list.len() > MAX_RULES_LEN {
            rule_list = format!("#{}", hex(&Sha256::digest(rule_list.as_bytes())[..12]));
        }
        let tail = format!("}}:{}:{}", algorithm.code(), rule_list).into_bytes();
        KeyTemplate { head, tail }
    }

    /// The keys of a concurrency limit: `<prefix>{<limiter>|<type>|<subject>}:cc:<n>x<lease>`
    /// (a sorted set of the slots held, each scored by the end of its lease).
    pub(crate) fn concurrency(
        prefix: &str,
        limiter: &str,
        limit_type: LimitType,
        n: u64,
        lease: std::time::Duration,
    ) -> KeyTemplate {
        let mut template = KeyTemplate::new(prefix, limiter, limit_type, Algorithm::SlidingWindow, None, &[]);
        let lease = Rule::new(lease, 1).map_or_else(|_| lease.as_millis().to_string(), |r| r.window_label());
        template.tail = format!("}}:cc:{n}x{lease}").into_bytes();
        template
    }

    /// Everything but the subject: what identifies the limit.
    pub(crate) fn identity(&self) -> Vec<u8> {
        [&self.head[..], &[0], &self.tail[..]].concat()
    }

    /// The length of the parts around the subject.
    pub(crate) fn fixed_len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Writes the key for one subject's key (see `Subject::key_bytes`: written here as its
    /// text) to `out` (a command's argument buffer: no key `Vec` of its own); the same bytes as
    /// [`key`](Self::key).
    pub(crate) fn write_key(&self, subject: &[u8], out: &mut impl std::io::Write) -> std::io::Result<()> {
        with_key_text(subject, |subject| self.write_text_key(subject, out))
    }

    fn write_text_key(&self, subject: &[u8], out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(&self.head)?;
        if subject.iter().all(|&b| is_plain(b)) && subject.len() <= MAX_PART_LEN {
            out.write_all(subject)?;
        } else {
            let mut part = Vec::with_capacity(MAX_PART_LEN + 1);
            encode_part(subject, &mut part);
            out.write_all(&part)?;
        }
        out.write_all(&self.tail)
    }

    /// The key of a subject's runtime override, `<prefix>{<limiter>|<type>|<subject>}:ov`: in
    /// the subject's hash tag (the slot of its counts), whatever the limit's rules.
    pub(crate) fn override_key(&self, subject: &[u8]) -> Vec<u8> {
        with_key_text(subject, |subject| self.text_override_key(subject))
    }

    fn text_override_key(&self, subject: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.head.len() + subject.len().min(MAX_PART_LEN) + 8);
        key.extend_from_slice(&self.head);
        encode_part(subject, &mut key);
        key.extend_from_slice(b"}:ov");
        key
    }

    /// The key for one subject's key (its text, as in [`write_key`](Self::write_key)).
    pub(crate) fn key(&self, subject: &[u8]) -> Vec<u8> {
        with_key_text(subject, |subject| self.text_key(subject))
    }

    fn text_key(&self, subject: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.head.len() + self.tail.len() + subject.len().min(MAX_PART_LEN) + 8);
        key.extend_from_slice(&self.head);
        encode_part(subject, &mut key);
        key.extend_from_slice(&self.tail);
        key
    }
}

/// The index of a limiter's runtime overrides, `<prefix>{<limiter>}:overrides`: its tag holds no
/// `|`, so it never meets a subject's key.
pub(crate) fn override_index_key(prefix: &str, limiter: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + limiter.len() + 16);
    key.extend_from_slice(prefix.as_bytes());
    key.push(b'{');
    encode_part(limiter.as_bytes(), &mut key);
    key.extend_from_slice(b"}:overrides");
    key
}

/// Bytes that stand for themselves in a key; every other byte is written `%XX`.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(b, b'.' | b'-' | b'_' | b':' | b'/' | b'@' | b'+' | b'=' | b'!' | b'~' | b'*' | b',' | b';')
}

/// Appends the injective encoding of `part` to `out`: percent-escaping when that stays short,
/// else `#` and the hex SHA-256 of the bytes (an escaped part never starts with `#`).
pub(crate) fn encode_part(part: &[u8], out: &mut Vec<u8>) {
    let escaped_len: usize = part.iter().map(|&b| if is_plain(b) { 1 } else { 3 }).sum();
    if escaped_len == part.len() && escaped_len <= MAX_PART_LEN {
        // Nothing to escape (an IP, most ids): the bytes as they are.
        out.extend_from_slice(part);
    } else if escaped_len <= MAX_PART_LEN {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        for &b in part {
            if is_plain(b) {
                out.push(b);
            } else {
                out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
        }
    } else {
        out.push(b'#');
        out.extend_from_slice(hex(&Sha256::digest(part)).as_bytes());
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, modulo 16384.
#[cfg(feature = "cluster")]
pub(crate) fn cluster_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| key[open + 1..].iter().position(|&b| b == b'}').map(|len| &key[open + 1..open + 1 + len]))
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16384
}

#[cfg(all(test, feature = "cluster"))]
mod slot_tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(cluster_slot(b"123456789"), 0x31C3);
        assert_eq!(cluster_slot(b"foo"), 12182);
        assert_eq!(cluster_slot(b"{user1000}.following"), cluster_slot(b"user1000"));
        assert_eq!(cluster_slot(b"foo{}{bar}"), cluster_slot(b"foo{}{bar}"));
        assert_eq!(cluster_slot(b"foo{{bar}}zap"), cluster_slot(b"{bar"));
    }
}

/// Copies `src` into `dst` (of the same length): inline for the short keys of the hot path (a
/// few overlapping word moves, as `memcpy` would make, without calling it), else `memcpy`.
#[inline(always)]
pub(crate) fn copy_key(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    // Every caller sizes `dst` from `src`; a mismatch is a bug here, caught in debug builds
    // (in release the copy is skipped rather than panicking on the hot path).
    debug_assert_eq!(n, dst.len(), "copy_key: lengths differ");
    if n != dst.len() {
        return;
    }
    match n {
        16..=32 => {
            copy_chunk::<16>(dst, src, 0);
            copy_chunk::<16>(dst, src, n - 16);
        }
        8..=15 => {
            copy_chunk::<8>(dst, src, 0);
            copy_chunk::<8>(dst, src, n - 8);
        }
        4..=7 => {
            copy_chunk::<4>(dst, src, 0);
            copy_chunk::<4>(dst, src, n - 4);
        }
        // The global subject's empty key, and the shortest: a `memcpy` call costs 20
        // instructions for what is at most three moves.
        0 => {}
        1..=3 => {
            for i in [0, n / 2, n - 1] {
                dst[i] = src[i];
            }
        }
        _ => dst.copy_from_slice(src),
    }
}

/// `N` bytes of `src` at `at` into `dst` at `at` (both long enough: the caller checked).
#[inline(always)]
fn copy_chunk<const N: usize>(dst: &mut [u8], src: &[u8], at: usize) {
    if let (Some(d), Some(s)) = (dst.get_mut(at..at + N), src.get(at..at + N)) {
        d.copy_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every length, each of its own branch: the copy is the source, byte for byte, and
    /// nothing around it is touched.
    #[test]
    fn copy_key_copies_every_length_exactly() {
        for n in 0..=80 {
            let src: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(37).wrapping_add(1)).collect();
            let mut buf = vec![0xAA; n + 2];
            copy_key(&mut buf[1..=n], &src);
            assert_eq!(&buf[1..=n], &src[..], "length {n}");
            assert_eq!((buf[0], buf[n + 1]), (0xAA, 0xAA), "length {n}: outside the key");
        }
    }

    fn template(t: LimitType) -> KeyTemplate {
        KeyTemplate::new(
            DEFAULT_PREFIX,
            "app::update",
            t,
            Algorithm::SlidingWindow,
            None,
            &[Rule::from_millis(20_000, 10).unwrap()],
        )
    }

    #[test]
    fn written_keys_are_the_keys() {
        let t = template(LimitType::User);
        let long = vec![b'a'; MAX_PART_LEN + 1];
        for subject in [&b""[..], b"10.0.0.1", b"2001:db8::1", b"a b|c{d}%", &long, &[0xff; 40]] {
            let mut written = Vec::new();
            t.write_key(subject, &mut written).unwrap();
            assert_eq!(written, t.key(subject), "{subject:?}");
        }
    }

    #[test]
    fn layout() {
        let key = template(LimitType::Ip).key(b"203.0.113.7");
        assert_eq!(String::from_utf8(key).unwrap(), "rate_limit:{app::update|ip|203.0.113.7}:sw:20sx10");
    }

    #[test]
    fn hostile_subjects_are_injective_and_bounded() {
        let long = vec![b'a'; 10_000];
        let subjects: Vec<&[u8]> = vec![
            b"",
            b"{",
            b"}",
            b":",
            b"|",
            b"\n",
            b"%7B",
            b"#",
            b"a|ip|b",
            b"}:sw:x",
            &long,
            &long[1..],
            b"\xff\xfe",
            b"\xef\xbf\xbd",
            b"1.2.3.4",
        ];
        let mut seen = HashSet::new();
        for t in [LimitType::Ip, LimitType::User] {
            for s in &subjects {
                let key = template(t).key(s);
                assert!(key.len() < 300, "{} bytes", key.len());
                // Exactly one hash tag: the first `{` and the first `}` after it.
                let open = key.iter().position(|&b| b == b'{').unwrap();
                let close = key.iter().position(|&b| b == b'}').unwrap();
                assert!(open < close && key[close + 1..].iter().all(|&b| b != b'{' && b != b'}'));
                assert!(seen.insert(key), "collision for {s:?}");
            }
        }
    }

    #[test]
    fn prefix_rules() {
        assert_eq!(check_prefix("a{b"), Err(PrefixError::Brace));
        assert_eq!(check_prefix(&"x".repeat(65)), Err(PrefixError::TooLong));
        assert!(check_prefix("rate_limit:").is_ok());
    }
}
