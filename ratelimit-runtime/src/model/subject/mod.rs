//! Who a call is counted for: the per-call part of a key.

mod inline_text;
mod value;

use inline_text::InlineText;
use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
pub use value::{IpValue, SubjectValue};

/// The IPv6 prefix length clients are grouped by unless configured otherwise: one host owns a
/// /64, so counting per address would let one client use 2^64 budgets.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Who one limit of a call is counted for.
///
/// Build it with [`Subject::global`], [`Subject::ip`], or from any [`SubjectValue`]
/// (strings, bytes, integers, `Option`s of those).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Subject<'a>(Inner<'a>);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Inner<'a> {
    Global,
    /// Bytes that do not start with a key's marker byte: their key is the bytes themselves.
    Value(Cow<'a, [u8]>),
    /// Bytes that start with a marker byte, kept with [`ESCAPED`] before them (their key).
    Escaped(Vec<u8>),
    /// A client IP, kept as its key: binary, not text (the text is written only where it is
    /// read: Redis keys, logs, [`Subject::as_bytes`]).
    Ip(IpKey),
    /// The identity could be found nowhere; the call fails rather than share a key.
    Missing,
}

/// A subject's key starts with one of these bytes only when it is not the subject's text: they
/// never start UTF-8 text, and bytes that do start with one are escaped by [`ESCAPED`], so keys
/// stay injective. An IPv4 key is `V4` and its four octets; an IPv6 key `V6`, the 16 bytes of the
/// group's first address and the prefix length.
const V4: u8 = 0xFF;
const V6: u8 = 0xFE;
const ESCAPED: u8 = 0xFD;

/// An IP subject's key, inline: its first bytes (5 for IPv4, 18 for IPv6), zeros, and its
/// length in the last byte. Three aligned words, written as a 16-byte store and an 8-byte one:
/// a copy of the subject right after reads them back whole. (Nineteen unaligned bytes, written
/// piece by piece, made that copy's reads span several stores, and each such read waited for
/// them all to land: about a tenth of the time of a call of an IPv4 subject.)
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(8))]
struct IpKey([u8; IP_KEY_BYTES]);

/// An [`IpKey`]'s size; its length is the last byte.
const IP_KEY_BYTES: usize = 24;

impl<'a> Subject<'a> {
    /// The subject of a `Global` limit: everyone shares it.
    pub const fn global() -> Subject<'static> {
        Subject(Inner::Global)
    }

    /// No identity was available. Deciding with a missing subject fails the call with
    /// [`Cause::SubjectMissing`](crate::Cause::SubjectMissing).
    pub const fn missing() -> Subject<'static> {
        Subject(Inner::Missing)
    }

    /// An opaque value: counted per distinct byte string.
    pub fn bytes(value: impl Into<Cow<'a, [u8]>>) -> Subject<'a> {
        let value = value.into();
        match value.first() {
            Some(&first) if first >= ESCAPED => Subject(Inner::Escaped([&[ESCAPED][..], &value].concat())),
            _ => Subject(Inner::Value(value)),
        }
    }

    /// A client IP: IPv4 per address, IPv6 per /64.
    #[inline]
    pub fn ip(addr: IpAddr) -> Subject<'static> {
        Subject::ip_with_prefix(addr, DEFAULT_IPV6_PREFIX)
    }

    /// A client IP, IPv6 grouped by its first `v6_prefix` bits (clamped to 0..=128). An
    /// IPv4-mapped IPv6 address counts as the IPv4 address it carries.
    #[inline]
    pub fn ip_with_prefix(addr: IpAddr, v6_prefix: u8) -> Subject<'static> {
        // The two paths meet as a key, wrapped once: met as two subjects, the one the caller
        // built was copied whole into its place, piece by piece.
        let key = match addr {
            IpAddr::V4(v4) => IpKey::v4(v4),
            IpAddr::V6(v6) => IpKey::v6(v6, v6_prefix),
        };
        Subject(Inner::Ip(key))
    }

    /// The bytes that identify the subject (a client IP's canonical text, `203.0.113.7` or
    /// `2001:db8:1:2::/64`), or `None` for a global or missing one.
    pub fn as_bytes(&self) -> Option<Cow<'_, [u8]>> {
        match &self.0 {
            Inner::Value(v) => Some(Cow::Borrowed(v)),
            Inner::Escaped(v) => Some(Cow::Borrowed(v.get(1..).unwrap_or_default())),
            Inner::Ip(ip) => Some(Cow::Owned(with_key_text(ip.key(), <[u8]>::to_vec))),
            Inner::Global | Inner::Missing => None,
        }
    }

    /// A client IP's key as the whole array it lies in (zero past the key, but for the length
    /// in the last byte) and its length: copied as one fixed-size move, where copying the key's
    /// own bytes branches on its length. `None` for other subjects.
    #[inline]
    pub(crate) fn ip_key(&self) -> Option<(&[u8; IP_KEY_BYTES], usize)> {
        match &self.0 {
            Inner::Ip(ip) => Some((&ip.0, ip.len())),
            _ => None,
        }
    }

    /// Whether the identity was missing.
    pub fn is_missing(&self) -> bool {
        matches!(self.0, Inner::Missing)
    }

    /// The subject's key, as the stores take it: empty for the global subject, binary for a
    /// client IP (written as text only by the stores that need text, see [`with_key_text`]).
    #[inline(always)]
    pub(crate) fn key_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Inner::Global => Some(&[]),
            Inner::Value(v) => Some(v),
            Inner::Escaped(v) => Some(v),
            Inner::Ip(ip) => Some(ip.key()),
            Inner::Missing => None,
        }
    }

    /// A subject that owns its bytes.
    pub fn into_owned(self) -> Subject<'static> {
        Subject(match self.0 {
            Inner::Global => Inner::Global,
            Inner::Missing => Inner::Missing,
            Inner::Value(v) => Inner::Value(Cow::Owned(v.into_owned())),
            Inner::Escaped(v) => Inner::Escaped(v),
            Inner::Ip(ip) => Inner::Ip(ip),
        })
    }
}

impl IpKey {
    /// The key of an IPv4 address: its marker and octets in the first word, its length in the
    /// last, each word built in a register and stored whole.
    #[inline]
    fn v4(v4: Ipv4Addr) -> IpKey {
        let first = u128::from(V4) | u128::from(u32::from_le_bytes(v4.octets())) << 8;
        IpKey::of_words(first, 5)
    }

    /// The key of an IPv6 address (out of line: the IPv4 path is the one inlined into callers).
    #[inline(never)]
    fn v6(v6: Ipv6Addr, v6_prefix: u8) -> IpKey {
        if let Some(v4) = v6.to_ipv4_mapped() {
            return IpKey::v4(v4);
        }
        let prefix = v6_prefix.min(128);
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
        let group = (u128::from(v6) & mask).to_be_bytes();
        // The marker and the group's first 15 bytes, then its last byte and the prefix length.
        let mut first = [0u8; 16];
        first[0] = V6;
        first[1..].copy_from_slice(&group[..15]);
        let mut key = IpKey::of_words(u128::from_le_bytes(first), 18);
        key.0[16] = group[15];
        key.0[17] = prefix;
        key
    }

    /// A key of `len` bytes whose first 16 are `first` (little-endian), zeros after them.
    #[inline(always)]
    fn of_words(first: u128, len: u8) -> IpKey {
        let mut bytes = [0; IP_KEY_BYTES];
        bytes[..16].copy_from_slice(&first.to_le_bytes());
        bytes[16..].copy_from_slice(&(u64::from(len) << 56).to_le_bytes());
        IpKey(bytes)
    }

    #[inline]
    fn len(&self) -> usize {
        usize::from(self.0[IP_KEY_BYTES - 1])
    }

    #[inline]
    fn key(&self) -> &[u8] {
        self.0.get(..self.len()).unwrap_or_default()
    }
}

impl fmt::Debug for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Inner::Global => f.write_str("Subject::Global"),
            Inner::Missing => f.write_str("Subject::Missing"),
            Inner::Value(_) | Inner::Escaped(_) => {
                write!(f, "Subject({:?})", String::from_utf8_lossy(&self.as_bytes().unwrap_or_default()))
            }
            Inner::Ip(ip) => with_key_text(ip.key(), |t| write!(f, "Subject::Ip({:?})", String::from_utf8_lossy(t))),
        }
    }
}

/// Gives `f` the text of a subject's key (see [`Subject::key_bytes`]): what Redis keys, runtime
/// overrides and logs hold. A client IP's key is written as its canonical text on the stack;
/// other keys are their bytes.
#[inline]
pub(crate) fn with_key_text<R>(key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    match key {
        [V4, a, b, c, d] => {
            let mut text = InlineText::default();
            text.push_ipv4(Ipv4Addr::new(*a, *b, *c, *d));
            f(text.as_bytes())
        }
        [V6, rest @ ..] if rest.len() == 17 => {
            let mut text = InlineText::default();
            let mut addr = [0u8; 16];
            addr.copy_from_slice(&rest[..16]);
            // Cannot fail: the longest IPv6 group's text ("ffff:…:ffff/128", 43 bytes) fits.
            let _ = fmt::Write::write_fmt(&mut text, format_args!("{}/{}", Ipv6Addr::from(addr), rest[16]));
            f(text.as_bytes())
        }
        [ESCAPED, rest @ ..] => f(rest),
        _ => f(key),
    }
}

/// The clients an IP subject stands for (its key read back: `203.0.113.7` as `/32`, or an IPv6
/// group): one IPv4 address (`/32`), or an IPv6 group. `None` for a key that is not an IP
/// subject's.
pub(crate) fn ip_group_of_key(key: &[u8]) -> Option<crate::model::addr::Cidr> {
    with_key_text(key, |text| std::str::from_utf8(text).ok()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of a client IP as a subject.
    fn ip_key(addr: IpAddr, v6_prefix: u8) -> String {
        String::from_utf8(Subject::ip_with_prefix(addr, v6_prefix).as_bytes().unwrap().into_owned()).unwrap()
    }

    #[test]
    fn ipv6_grouped_by_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Subject::ip(a), Subject::ip(b));
        assert_ne!(Subject::ip(a), Subject::ip(c));
        assert_eq!(Subject::ip(a).as_bytes().as_deref(), Some(&b"2001:db8:1:2::/64"[..]));
        let widest: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        assert_eq!(Subject::ip_with_prefix(widest, 128).as_bytes().unwrap().len(), 43);
        assert_eq!(ip_key(a, 64), "2001:db8:1:2::/64");
        assert_eq!(ip_key(a, 128), "2001:db8:1:2:aaaa::1/128");
        assert_eq!(ip_key(a, 200), "2001:db8:1:2:aaaa::1/128");
        assert_eq!(ip_key(a, 0), "::/0");
    }

    #[test]
    fn ipv4_and_mapped() {
        let v4: IpAddr = "203.0.113.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert_eq!(Subject::ip(v4), Subject::ip(mapped));
        for text in ["0.0.0.0", "10.0.0.1", "192.168.100.255", "255.255.255.255", "1.20.255.9"] {
            assert_eq!(ip_key(text.parse().unwrap(), 64), text);
        }
        assert_eq!("203.0.113.7:443".to_ip_subject(), Subject::ip(v4));
        assert_eq!("[::ffff:203.0.113.7]:443".to_ip_subject(), Subject::ip(v4));
        assert_eq!("[2001:db8:1:2::9]:443".to_ip_subject(), Subject::ip("2001:db8:1:2::1".parse().unwrap()));
        assert_eq!("fe80::1%eth0".to_ip_subject(), Subject::ip("fe80::1".parse().unwrap()));
        assert_eq!("not an ip".to_ip_subject(), Subject::bytes(&b"not an ip"[..]));
        assert!("".to_ip_subject().is_missing());
        assert!(None::<IpAddr>.to_ip_subject().is_missing());
    }

    #[test]
    fn ip_keys_read_back() {
        for (ip, back) in [
            ("203.0.113.7", "203.0.113.7/32"),
            ("::ffff:203.0.113.7", "203.0.113.7/32"),
            ("2001:db8:1:2::9", "2001:db8:1:2::/64"),
        ] {
            let subject = Subject::ip(ip.parse().unwrap());
            assert_eq!(ip_group_of_key(subject.key_bytes().unwrap()), Some(back.parse().unwrap()), "{ip}");
            assert_eq!(ip_group_of_key(&subject.as_bytes().unwrap()), Some(back.parse().unwrap()), "{ip}");
        }
        assert_eq!(ip_group_of_key(b"not an ip"), None);
        assert_eq!(ip_group_of_key(b"\xff\xfe"), None);
    }

    /// Keys are injective across kinds: bytes that look like an IP's binary key are escaped,
    /// and every key's text is the text the subject stood for before keys were binary.
    #[test]
    fn keys_are_injective_and_read_back_as_text() {
        let ip = Subject::ip("10.1.0.5".parse().unwrap());
        let lookalike = Subject::bytes(&[V4, 10, 1, 0, 5][..]);
        assert_ne!(ip.key_bytes(), lookalike.key_bytes());
        assert_eq!(lookalike.as_bytes().as_deref(), Some(&[V4, 10, 1, 0, 5][..]));
        assert_eq!(with_key_text(lookalike.key_bytes().unwrap(), <[u8]>::to_vec), [V4, 10, 1, 0, 5]);
        assert_eq!(with_key_text(ip.key_bytes().unwrap(), <[u8]>::to_vec), b"10.1.0.5");
        let v6 = Subject::ip("2001:db8:1:2:aaaa::1".parse().unwrap());
        assert_eq!(with_key_text(v6.key_bytes().unwrap(), <[u8]>::to_vec), b"2001:db8:1:2::/64");
        let text = Subject::bytes(&b"10.1.0.5"[..]);
        assert_ne!(text.key_bytes(), ip.key_bytes());
        assert_eq!(with_key_text(text.key_bytes().unwrap(), <[u8]>::to_vec), b"10.1.0.5");
        assert_eq!(format!("{ip:?}"), "Subject::Ip(\"10.1.0.5\")");
    }
}
