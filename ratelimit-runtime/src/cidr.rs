//! IP networks in CIDR notation: trusted proxies, exempt clients.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP network: `10.0.0.0/8`, `2001:db8::/32`, or a single host (`192.0.2.1` = `/32`,
/// `::1` = `/128`).
///
/// ```
/// use ratelimit_runtime::subject::Cidr;
/// let net: Cidr = "10.0.0.0/8".parse().unwrap();
/// assert!(net.contains("10.1.2.3".parse().unwrap()));
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// let host: Cidr = "::1".parse().unwrap();
/// assert_eq!(host.to_string(), "::1/128");
/// let err = "10.0.0.1/8".parse::<Cidr>().unwrap_err();
/// assert_eq!(err.to_string(), "invalid CIDR \"10.0.0.1/8\": bits set after the /8 prefix (did you mean 10.0.0.0/8?)");
/// ```
///
/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, what a dual-stack socket reports for an IPv4
/// peer) is matched as the IPv4 address it carries, so `10.0.0.0/8` covers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a [`Cidr`] could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CidrError {
    input: String,
    kind: CidrErrorKind,
}

/// What was wrong with a CIDR.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CidrErrorKind {
    /// The text was empty.
    Empty,
    /// The part before `/` is not an IPv4 or IPv6 address.
    Address,
    /// The part after `/` is not a number.
    Prefix,
    /// The prefix is longer than the address (32 bits for IPv4, 128 for IPv6).
    PrefixTooLong {
        /// The longest prefix for this address family.
        max: u8,
    },
    /// The address has bits set after the prefix: `10.0.0.1/8`.
    HostBits {
        /// The network the input probably meant.
        network: Cidr,
    },
}

impl CidrError {
    /// What was wrong.
    pub fn kind(&self) -> &CidrErrorKind {
        &self.kind
    }
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid CIDR {:?}: ", self.input)?;
        match &self.kind {
            CidrErrorKind::Empty => f.write_str("empty (expected e.g. 10.0.0.0/8, 2001:db8::/32 or 192.0.2.1)"),
            CidrErrorKind::Address => {
                f.write_str("not an IP address before the `/` (expected e.g. 10.0.0.0/8 or 2001:db8::/32)")
            }
            CidrErrorKind::Prefix => f.write_str("the prefix length after `/` must be a number (e.g. /8, /64)"),
            CidrErrorKind::PrefixTooLong { max } => {
                write!(f, "the prefix length must be at most {max} for this address family")
            }
            CidrErrorKind::HostBits { network } => {
                write!(f, "bits set after the /{} prefix (did you mean {network}?)", network.prefix)
            }
        }
    }
}

impl std::error::Error for CidrError {}

fn bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn mask(prefix: u8, width: u8) -> u128 {
    let all = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
    // `prefix <= width <= 128`; shifting by 128 clears everything.
    all & !all.checked_shr(u32::from(prefix)).unwrap_or(0)
}

impl Cidr {
    /// The network of `addr` with `prefix` bits, or `None` if `prefix` is too long for the
    /// address family. Bits after the prefix are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let (value, width) = bits(addr);
        if prefix > width {
            return None;
        }
        let net = value & mask(prefix, width);
        let addr = match addr {
            IpAddr::V4(_) => IpAddr::V4((net as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(net.into()),
        };
        Some(Cidr { addr, prefix })
    }

    /// The single-host network of `addr` (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, prefix: bits(addr).1 }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, net_width) = bits(self.addr);
        let matches = |ip: IpAddr| {
            let (value, width) = bits(ip);
            width == net_width && value & mask(self.prefix, width) == net
        };
        matches(ip) || matches(ip.to_canonical())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let err = |kind| CidrError { input: s.to_owned(), kind };
        let text = s.trim();
        if text.is_empty() {
            return Err(err(CidrErrorKind::Empty));
        }
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err(CidrErrorKind::Address))?;
        let width = bits(addr).1;
        let prefix = match prefix {
            None => width,
            Some(p) => {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err(CidrErrorKind::Prefix));
                }
                match p.parse::<u8>() {
                    Ok(n) if n <= width => n,
                    _ => return Err(err(CidrErrorKind::PrefixTooLong { max: width })),
                }
            }
        };
        let network = Cidr::new(addr, prefix).ok_or_else(|| err(CidrErrorKind::PrefixTooLong { max: width }))?;
        if network.addr != addr {
            return Err(err(CidrErrorKind::HostBits { network }));
        }
        Ok(network)
    }
}
