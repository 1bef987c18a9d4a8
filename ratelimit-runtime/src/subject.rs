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
    pub fn ip(addr: IpAddr) -> Subject<'static> {
        Subject::ip_with_prefix(addr, DEFAULT_IPV6_PREFIX)
    }

    /// A client IP, IPv6 grouped by its first `v6_prefix` bits (clamped to 0..=128). An
    /// IPv4-mapped IPv6 address counts as the IPv4 address it carries.
    pub fn ip_with_prefix(addr: IpAddr, v6_prefix: u8) -> Subject<'static> {
        Subject::bytes(ip_key(addr, v6_prefix).into_bytes())
    }

    /// The bytes that identify the subject, or `None` for a global or missing one.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Inner::Value(v) => Some(v),
            Inner::Global | Inner::Missing => None,
        }
    }

    /// Whether the identity was missing.
    pub fn is_missing(&self) -> bool {
        matches!(self.0, Inner::Missing)
    }

    /// The bytes used in the key: empty for the global subject.
    pub(crate) fn key_bytes(&self) -> Option<&[u8]> {
        match &self.0 {
            Inner::Global => Some(&[]),
            Inner::Value(v) => Some(v),
            Inner::Missing => None,
        }
    }

    /// A subject that owns its bytes.
    pub fn into_owned(self) -> Subject<'static> {
        Subject(match self.0 {
            Inner::Global => Inner::Global,
            Inner::Missing => Inner::Missing,
            Inner::Value(v) => Inner::Value(Cow::Owned(v.into_owned())),
        })
    }
}

impl fmt::Debug for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Inner::Global => f.write_str("Subject::Global"),
            Inner::Missing => f.write_str("Subject::Missing"),
            Inner::Value(v) => write!(f, "Subject({:?})", String::from_utf8_lossy(v)),
        }
    }
}

/// The canonical text of a client IP as a subject: `203.0.113.7`, `2001:db8:1:2::/64`.
pub fn ip_key(addr: IpAddr, v6_prefix: u8) -> String {
    match addr {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let prefix = v6_prefix.min(128);
                let bits = u128::from(v6);
                let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix)) };
                format!("{}/{prefix}", Ipv6Addr::from(bits & mask))
            }
        },
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
/// Addresses are normalised (IPv6 to its /64); text that parses as an IP or socket address is
/// normalised the same way, other text is counted as given.
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
        let text = self.trim();
        if let Ok(ip) = text.parse::<IpAddr>() {
            Subject::ip(ip)
        } else if let Ok(sock) = text.parse::<SocketAddr>() {
            Subject::ip(sock.ip())
        } else if text.is_empty() {
            Subject::missing()
        } else {
            Subject::bytes(self.as_bytes())
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

    #[test]
    fn ipv6_grouped_by_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Subject::ip(a), Subject::ip(b));
        assert_ne!(Subject::ip(a), Subject::ip(c));
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
        assert_eq!("203.0.113.7:443".to_ip_subject(), Subject::ip(v4));
        assert!("".to_ip_subject().is_missing());
        assert!(None::<IpAddr>.to_ip_subject().is_missing());
    }
}
