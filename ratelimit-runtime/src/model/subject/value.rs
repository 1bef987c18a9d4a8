//! The values the attribute accepts as subjects: `user = …`, `key = …` and `ip = …`.

use super::Subject;
use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

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
