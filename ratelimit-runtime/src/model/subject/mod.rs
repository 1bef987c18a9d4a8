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
