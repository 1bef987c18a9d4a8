//! Addresses as people and proxies write them, and IP networks (trusted proxies, exempt
//! clients). Every place that reads an address from text (the socket peer's forwarded headers,
//! `ip = "…"`, the overrides file, `--trust-proxy`) reads it here, so they all agree on what
//! `[2001:db8::1]:443` or `::ffff:192.0.2.1` means.

use crate::error::CidrError;
use ipnet::IpNet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The client address in `text`, or `None` if it names none.
///
/// Reads what sockets, proxies and configuration files write: `192.0.2.1`, `192.0.2.1:8080`,
/// `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:8080`, a zone id (`fe80::1%eth0`, dropped:
/// it names an interface, not a host) and the double quotes of `Forwarded: for="[…]"`.
/// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, what a dual-stack listener reports for an
/// IPv4 client) is the IPv4 address it carries, so a client is one subject whichever socket
/// it came through.
///
/// ```
/// use ratelimit_runtime::subject::parse_ip;
/// use std::net::IpAddr;
/// let ip = |s: &str| s.parse::<IpAddr>().ok();
/// assert_eq!(parse_ip("[2001:db8::1]:443"), ip("2001:db8::1"));
/// assert_eq!(parse_ip("::ffff:127.0.0.10"), ip("127.0.0.10"));
/// assert_eq!(parse_ip("unknown"), None);
/// ```
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let text = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text);
    let ip = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        IpAddr::V6(ipv6(inside)?)
    } else if let Ok(v4) = text.parse::<Ipv4Addr>() {
        IpAddr::V4(v4)
    } else if let Some((host, port)) = text.split_once(':').filter(|(_, port)| !port.contains(':')) {
        // One colon: an IPv4 address and its port (an IPv6 address has at least two).
        if !is_port(port) {
            return None;
        }
        IpAddr::V4(host.parse().ok()?)
    } else {
        IpAddr::V6(ipv6(text)?)
    };
    Some(ip.to_canonical())
}

/// An IPv6 address without brackets, its zone id (`%eth0`, `%25eth0` in URIs) dropped.
fn ipv6(text: &str) -> Option<Ipv6Addr> {
    let addr = match text.split_once('%') {
        Some((addr, zone)) => {
            let zone_ok = !zone.is_empty() && zone.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b));
            if !zone_ok {
                return None;
            }
            addr
        }
        None => text,
    };
    addr.parse().ok()
}

/// An address alone, without a port: `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`,
/// `fe80::1%eth0`. Not canonicalised: a network keeps the family it was written in until its
/// prefix says whether it only covers mapped IPv4 addresses.
fn bare_ip(text: &str) -> Option<IpAddr> {
    let text = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    match text.parse::<Ipv4Addr>() {
        Ok(v4) => Some(IpAddr::V4(v4)),
        Err(_) => ipv6(text).map(IpAddr::V6),
    }
}

/// A port, or an RFC 7239 obfuscated port (`_abc`).
fn is_port(s: &str) -> bool {
    match s.strip_prefix('_') {
        Some(obf) => !obf.is_empty() && obf.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
        None => !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u16>().is_ok(),
    }
}

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
/// peer) is matched as the IPv4 address it carries, so `10.0.0.0/8` covers it; a network
/// written in mapped form (`::ffff:10.0.0.0/104`) is that IPv4 network (`10.0.0.0/8`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr(IpNet);

/// The width of `addr`'s family in bits.
fn width(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `net`, written as an IPv4 network when it only covers IPv4-mapped addresses.
fn unmapped(net: IpNet) -> IpNet {
    match (net.addr(), net.prefix_len().checked_sub(96)) {
        (IpAddr::V6(v6), Some(v4_prefix)) => match v6.to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), v4_prefix).unwrap_or(net),
            None => net,
        },
        _ => net,
    }
}

impl Cidr {
    /// The network of `addr` with `prefix` bits, or `None` if `prefix` is too long for the
    /// address family. Bits after the prefix are cleared.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        IpNet::new(addr, prefix).ok().map(|net| Cidr(unmapped(net).trunc()))
    }

    /// The single-host network of `addr` (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr(unmapped(IpNet::from(addr)))
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.0.network()
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.0.prefix_len()
    }

    /// Whether `ip` is in this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.contains(&ip) || matches!(ip, IpAddr::V4(v4) if self.0.contains(&IpAddr::V6(v4.to_ipv6_mapped())))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cidr({})", self.0)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let input = || s.to_owned();
        let text = s.trim();
        if text.is_empty() {
            return Err(CidrError::Empty { input: input() });
        }
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr = bare_ip(addr).ok_or_else(|| CidrError::Address { input: input() })?;
        let max = width(addr);
        let prefix = match prefix {
            None => max,
            Some(p) if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(CidrError::Prefix { input: input() });
            }
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| CidrError::PrefixTooLong { input: input(), max })?,
        };
        let written = IpNet::new(addr, prefix).map_err(|_| CidrError::PrefixTooLong { input: input(), max })?;
        let network = Cidr(unmapped(written.trunc()));
        if written.trunc() != written {
            return Err(CidrError::HostBits { input: input(), addr: network.addr(), prefix: network.prefix() });
        }
        Ok(network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_parser_reads_every_form() {
        let v4 = |s: &str| Some(IpAddr::V4(s.parse().unwrap()));
        let v6 = |s: &str| Some(IpAddr::V6(s.parse().unwrap()));
        let table: &[(&str, Option<IpAddr>)] = &[
            // IPv4, with and without a port.
            ("192.0.2.1", v4("192.0.2.1")),
            (" 192.0.2.1 ", v4("192.0.2.1")),
            ("192.0.2.1:8080", v4("192.0.2.1")),
            ("192.0.2.1:_hidden", v4("192.0.2.1")),
            ("192.0.2.1:", None),
            ("192.0.2.1:65536", None),
            ("192.0.2.1:80:80", None),
            ("192.0.2", None),
            ("192.0.2.256", None),
            ("010.0.0.1", None),
            // IPv6, bracketed with and without a port.
            ("2001:db8::1", v6("2001:db8::1")),
            ("[2001:db8::1]", v6("2001:db8::1")),
            ("[2001:db8::1]:443", v6("2001:db8::1")),
            ("[2001:db8::1]:_obf", v6("2001:db8::1")),
            ("[2001:db8::1]:", None),
            ("[2001:db8::1]x", None),
            ("[2001:db8::1", None),
            ("2001:db8::1]", None),
            ("[192.0.2.1]", None),
            ("[192.0.2.1]:80", None),
            // IPv4-mapped IPv6: the IPv4 address, in every form.
            ("::ffff:127.0.0.10", v4("127.0.0.10")),
            ("::ffff:7f00:a", v4("127.0.0.10")),
            ("[::ffff:127.0.0.10]", v4("127.0.0.10")),
            ("[::ffff:127.0.0.10]:8080", v4("127.0.0.10")),
            // Zone ids are dropped.
            ("fe80::1%eth0", v6("fe80::1")),
            ("[fe80::1%eth0]:443", v6("fe80::1")),
            ("[fe80::1%25en0]", v6("fe80::1")),
            ("fe80::1%", None),
            ("fe80::1%eth 0", None),
            ("192.0.2.1%eth0", None),
            // The quotes of `Forwarded: for="…"`.
            ("\"[2001:db8:cafe::17]:4711\"", v6("2001:db8:cafe::17")),
            ("\"192.0.2.60\"", v4("192.0.2.60")),
            ("\"192.0.2.60", None),
            // Garbage.
            ("", None),
            ("   ", None),
            ("unknown", None),
            ("_hidden", None),
            ("example.com", None),
            ("example.com:80", None),
            ("::ffff:127.0.0.10:80", None),
            ("1.2.3.4/32", None),
            ("[]", None),
            ("[]:80", None),
            ("\"\"", None),
            ("\u{1F600}", None),
            (":", None),
            ("[[::1]]", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_ip(text), *want, "parse_ip({text:?})");
        }
        // Anything else: no panic.
        let long = "1".repeat(10_000);
        for text in [long.as_str(), "[", "]", "%", "::%", "[::1%]:1", "\u{0}", "\"", "[::1]:\u{e9}"] {
            let _ = parse_ip(text);
        }
    }

    #[test]
    fn every_written_form_reads_back() {
        for i in 0..2_000u64 {
            let v4 = Ipv4Addr::from((i.wrapping_mul(2_654_435_761) >> 3) as u32);
            let v6 = Ipv6Addr::from(u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) | 1 << 127);
            let port = (i * 37) % 65_536;
            let (a4, a6) = (Some(IpAddr::V4(v4)), Some(IpAddr::V6(v6)));
            for (text, want) in [
                (format!("{v4}"), a4),
                (format!("{v4}:{port}"), a4),
                (format!("::ffff:{v4}"), a4),
                (format!("[::ffff:{v4}]:{port}"), a4),
                (format!("{v6}"), a6),
                (format!("[{v6}]"), a6),
                (format!("[{v6}]:{port}"), a6),
                (format!("{v6}%eth{i}"), a6),
                (format!("\"[{v6}]:{port}\""), a6),
            ] {
                assert_eq!(parse_ip(&text), want, "{text:?}");
                // Every cut of it is read or refused, never a panic.
                for end in (0..text.len()).filter(|&end| text.is_char_boundary(end)) {
                    let _ = parse_ip(&text[..end]);
                }
            }
        }
    }

    #[test]
    fn networks() {
        let net = |s: &str| s.parse::<Cidr>().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(net("::ffff:10.0.0.0/104"), net("10.0.0.0/8"));
        assert_eq!(net("::ffff:127.0.0.10"), net("127.0.0.10/32"));
        assert_eq!(net("[2001:db8::]/32"), net("2001:db8::/32"));
        assert_eq!(net("fe80::1%eth0"), net("fe80::1/128"));
        assert!(net("10.0.0.0/8").contains(ip("::ffff:10.9.9.9")));
        assert!(net("::ffff:10.0.0.0/104").contains(ip("10.9.9.9")));
        assert!(net("::/0").contains(ip("10.9.9.9")));
        assert!(!net("2001:db8::/32").contains(ip("10.9.9.9")));
        assert_eq!(Cidr::host(ip("::ffff:192.0.2.7")), net("192.0.2.7/32"));
        assert_eq!(Cidr::new(ip("::ffff:192.0.2.7"), 120), Some(net("192.0.2.0/24")));
        let err = |s: &str| s.parse::<Cidr>().unwrap_err();
        assert!(matches!(err("[2001:db8::1]:443"), CidrError::Address { .. }));
        let CidrError::HostBits { addr, prefix, .. } = err("::ffff:10.0.0.1/104") else { panic!("host bits") };
        assert_eq!(Cidr::new(addr, prefix), Some(net("10.0.0.0/8")));
        assert!(matches!(err("::ffff:10.0.0.0/129"), CidrError::PrefixTooLong { max: 128, .. }));
    }
}
