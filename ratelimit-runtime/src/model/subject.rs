//! Who a call is counted for: the per-call part of a key.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

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
    Value(Cow<'a, [u8]>),
    /// A client IP's canonical text, kept inline: building it allocates nothing.
    Ip(InlineText),
    /// The identity could be found nowhere; the call fails rather than share a key.
    Missing,
}

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
        Subject(Inner::Value(value.into()))
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
        let mut text = InlineText::default();
        if let IpAddr::V4(v4) = addr {
            text.push_ipv4(v4);
            return Subject(Inner::Ip(text));
        }
        Subject::ip_v6(addr, v6_prefix)
    }

    /// [`ip_with_prefix`](Self::ip_with_prefix) of an IPv6 address (out of line: the IPv4 path
    /// is the one inlined into callers).
    #[inline(never)]
    fn ip_v6(addr: IpAddr, v6_prefix: u8) -> Subject<'static> {
        let mut text = InlineText::default();
        // Cannot fail: the longest IP text ("ffff:…:ffff/128", 43 bytes) fits.
        let _ = write_ip_key(addr, v6_prefix, &mut text);
        Subject(Inner::Ip(text))
    }

    /// The bytes that identify the subject, or `None` for a global or missing one.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Inner::Value(v) => Some(v),
            Inner::Ip(t) => Some(t.as_bytes()),
            Inner::Global | Inner::Missing => None,
        }
    }

    /// An IP subject's text, as the whole 32-byte start of its buffer (zero past the text) and
    /// the text's length: copied as two whole words, where copying the text's own bytes writes
    /// pieces that a copy right after must wait for. `None` for other subjects and longer text.
    #[inline]
    pub(crate) fn ip_words(&self) -> Option<(&[u8; 32], usize)> {
        match &self.0 {
            Inner::Ip(t) if t.len() <= 32 => Some((t.head()?, t.len())),
            _ => None,
        }
    }

    /// Whether the identity was missing.
    pub fn is_missing(&self) -> bool {
        matches!(self.0, Inner::Missing)
    }

    /// The bytes used in the key: empty for the global subject.
    #[inline]
    pub(crate) fn key_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Inner::Global => Some(&[]),
            Inner::Value(v) => Some(v),
            Inner::Ip(t) => Some(t.as_bytes()),
            Inner::Missing => None,
        }
    }

    /// A subject that owns its bytes.
    pub fn into_owned(self) -> Subject<'static> {
        Subject(match self.0 {
            Inner::Global => Inner::Global,
            Inner::Missing => Inner::Missing,
            Inner::Value(v) => Inner::Value(Cow::Owned(v.into_owned())),
            Inner::Ip(t) => Inner::Ip(t),
        })
    }
}

impl fmt::Debug for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Inner::Global => f.write_str("Subject::Global"),
            Inner::Missing => f.write_str("Subject::Missing"),
            Inner::Value(v) => write!(f, "Subject({:?})", String::from_utf8_lossy(v)),
            Inner::Ip(t) => write!(f, "Subject::Ip({:?})", String::from_utf8_lossy(t.as_bytes())),
        }
    }
}

/// The clients an IP subject stands for (its key, `203.0.113.7` or `2001:db8:1:2::/64`, read
/// back): one IPv4 address (`/32`), or an IPv6 group. `None` for text that is not an IP
/// subject.
pub(crate) fn ip_group_of_key(key: &[u8]) -> Option<crate::model::addr::Cidr> {
    std::str::from_utf8(key).ok()?.parse().ok()
}

fn write_ip_key(addr: IpAddr, v6_prefix: u8, out: &mut impl fmt::Write) -> fmt::Result {
    match addr {
        IpAddr::V4(v4) => write_ipv4(v4, out),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => write_ipv4(v4, out),
            None => {
                let prefix = v6_prefix.min(128);
                let bits = u128::from(v6);
                let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
                write!(out, "{}/{prefix}", Ipv6Addr::from(bits & mask))
            }
        },
    }
}

/// Dotted decimal without the formatting machinery: the in-memory store's hot path.
fn write_ipv4(v4: Ipv4Addr, out: &mut impl fmt::Write) -> fmt::Result {
    let mut text = InlineText::default();
    text.push_ipv4(v4);
    // Only ASCII digits and dots were written.
    out.write_str(std::str::from_utf8(text.as_bytes()).map_err(|_| fmt::Error)?)
}

/// Up to 47 bytes of text on the stack, and their length in the last byte (only the first
/// `len` bytes mean anything). Aligned, so that moving a subject copies whole 16-byte words. The
/// length shares the last word with the text's end: an IPv4 subject is then written as three
/// whole words (text, zeros, length), each of which a copy right after reads back at once (a
/// separate length byte made the zeros before it a 15-byte store overlapping its neighbour, and
/// the copy's read of that word waited for both to land).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct InlineText([u8; INLINE_TEXT + 1]);

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
    fn len(&self) -> usize {
        usize::from(self.0[INLINE_TEXT])
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        self.0.get(..self.len()).unwrap_or_default()
    }

    /// The first 32 bytes: the text and the zeros after it, when it is no longer.
    #[inline]
    fn head(&self) -> Option<&[u8; 32]> {
        self.0.first_chunk::<32>()
    }

    /// Writes an IPv4 address in dotted decimal (at most 15 bytes) into the empty buffer. The
    /// text is put together in one 128-bit register and stored at once: a copy of the subject
    /// right after then reads back whole stores (pieced-together bytes stall such a read).
    #[inline]
    fn push_ipv4(&mut self, v4: Ipv4Addr) {
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

/// A value that can identify a subject: what `user = …` and `key = …` accept.
///
/// Implemented for strings, byte strings, integers, IP addresses, `Option`s (where `None` is a
/// missing identity) and references to those. Values of other types that implement `Display`
/// are accepted by the attribute through their text.
pub trait SubjectValue {
    /// The subject this value names.
    fn to_subject(&self) -> Subject<'_>;
}

impl SubjectValue for str {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self.as_bytes())
    }
}
impl SubjectValue for String {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self.as_bytes())
    }
}
impl SubjectValue for [u8] {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self)
    }
}
impl SubjectValue for Vec<u8> {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self.as_slice())
    }
}
impl SubjectValue for Cow<'_, str> {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self.as_bytes())
    }
}
impl SubjectValue for std::sync::Arc<str> {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self.as_bytes())
    }
}
impl SubjectValue for Box<str> {
    fn to_subject(&self) -> Subject<'_> {
        Subject::bytes(self.as_bytes())
    }
}
impl<T: SubjectValue + ?Sized> SubjectValue for &T {
    fn to_subject(&self) -> Subject<'_> {
        (**self).to_subject()
    }
}
impl<T: SubjectValue> SubjectValue for Option<T> {
    fn to_subject(&self) -> Subject<'_> {
        match self {
            Some(v) => v.to_subject(),
            None => Subject::missing(),
        }
    }
}
impl SubjectValue for Subject<'_> {
    fn to_subject(&self) -> Subject<'_> {
        self.clone()
    }
}

macro_rules! display_subject {
    ($($t:ty),*) => {$(
        impl SubjectValue for $t {
            fn to_subject(&self) -> Subject<'_> {
                Subject::bytes(self.to_string().into_bytes())
            }
        }
    )*};
}
display_subject!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, char);

impl SubjectValue for IpAddr {
    fn to_subject(&self) -> Subject<'_> {
        Subject::ip(*self)
    }
}
impl SubjectValue for Ipv4Addr {
    fn to_subject(&self) -> Subject<'_> {
        Subject::ip(IpAddr::V4(*self))
    }
}
impl SubjectValue for Ipv6Addr {
    fn to_subject(&self) -> Subject<'_> {
        Subject::ip(IpAddr::V6(*self))
    }
}
impl SubjectValue for SocketAddr {
    fn to_subject(&self) -> Subject<'_> {
        Subject::ip(self.ip())
    }
}

/// A value that names a client IP: what `ip = …` accepts.
///
/// Addresses are normalised (IPv6 to its /64, IPv4-mapped IPv6 to IPv4); text is read as
/// [`parse_ip`](crate::subject::parse_ip) reads it (`[2001:db8::1]:443`, `192.0.2.1:80`, zone ids) and
/// normalised the same way; other text is counted as given.
#[diagnostic::on_unimplemented(
    message = "`ip = …` takes a client address (`IpAddr`, `SocketAddr`, or its text), not `{Self}`",
    label = "expected an `IpAddr`, `SocketAddr`, `&str` or `Option` of one"
)]
pub trait IpValue {
    /// The subject for this client IP.
    fn to_ip_subject(&self) -> Subject<'_>;
}

impl IpValue for IpAddr {
    fn to_ip_subject(&self) -> Subject<'_> {
        Subject::ip(*self)
    }
}
impl IpValue for Ipv4Addr {
    fn to_ip_subject(&self) -> Subject<'_> {
        Subject::ip(IpAddr::V4(*self))
    }
}
impl IpValue for Ipv6Addr {
    fn to_ip_subject(&self) -> Subject<'_> {
        Subject::ip(IpAddr::V6(*self))
    }
}
impl IpValue for SocketAddr {
    fn to_ip_subject(&self) -> Subject<'_> {
        Subject::ip(self.ip())
    }
}
impl IpValue for str {
    fn to_ip_subject(&self) -> Subject<'_> {
        match crate::model::addr::parse_ip(self) {
            Some(ip) => Subject::ip(ip),
            None if self.trim().is_empty() => Subject::missing(),
            None => Subject::bytes(self.as_bytes()),
        }
    }
}
impl IpValue for String {
    fn to_ip_subject(&self) -> Subject<'_> {
        self.as_str().to_ip_subject()
    }
}
impl<T: IpValue + ?Sized> IpValue for &T {
    fn to_ip_subject(&self) -> Subject<'_> {
        (**self).to_ip_subject()
    }
}
impl<T: IpValue> IpValue for Option<T> {
    fn to_ip_subject(&self) -> Subject<'_> {
        match self {
            Some(v) => v.to_ip_subject(),
            None => Subject::missing(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of a client IP as a subject.
    fn ip_key(addr: IpAddr, v6_prefix: u8) -> String {
        String::from_utf8(Subject::ip_with_prefix(addr, v6_prefix).as_bytes().unwrap().to_vec()).unwrap()
    }

    #[test]
    fn ipv6_grouped_by_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Subject::ip(a), Subject::ip(b));
        assert_ne!(Subject::ip(a), Subject::ip(c));
        assert_eq!(Subject::ip(a).as_bytes(), Some(&b"2001:db8:1:2::/64"[..]));
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
            assert_eq!(ip_group_of_key(subject.as_bytes().unwrap()), Some(back.parse().unwrap()), "{ip}");
        }
        assert_eq!(ip_group_of_key(b"not an ip"), None);
        assert_eq!(ip_group_of_key(b"\xff\xfe"), None);
    }
}
