//! Who the client is: the socket peer, or what trusted proxies say it is.

use http::header::HeaderMap;
use ratelimit_runtime::subject::{parse_ip, Cidr};
use std::net::IpAddr;

const X_FORWARDED_FOR: &str = "x-forwarded-for";
const FORWARDED: &str = "forwarded";
const X_REAL_IP: &str = "x-real-ip";

/// Request header fields, as the resolver reads them: `http`'s `HeaderMap` (axum, tonic), or
/// another framework's map (actix-web's).
pub(crate) trait HeaderFields {
    /// The values of every `name` field line (a lowercase name), in order.
    fn values(&self, name: &str) -> Vec<&[u8]>;
}

impl HeaderFields for HeaderMap {
    fn values(&self, name: &str) -> Vec<&[u8]> {
        self.get_all(name).iter().map(|v| v.as_bytes()).collect()
    }
}

/// A field value as text, if it is visible ASCII (as `HeaderValue::to_str` requires).
fn visible_ascii(value: &[u8]) -> Option<&str> {
    let visible = value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
    visible.then(|| std::str::from_utf8(value).ok()).flatten()
}

/// A header through which proxies name the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: <client>, <proxy1>, <proxy2>`: walked from the right.
    XForwardedFor,
    /// `Forwarded: for=<client>, for=<proxy1>` (RFC 7239): walked from the right.
    Forwarded,
    /// `X-Real-IP: <client>`: one address, set by the last proxy.
    XRealIp,
}

/// Resolves a request's client IP from its socket peer and, only when the peer is a trusted
/// proxy, from forwarded headers.
///
/// - Without trusted proxies (the default), the client is the socket peer; every forwarded header
///   is ignored, since any client can send one.
/// - When the peer is inside a trusted network, the first of the configured headers that yields
///   an address decides (default order: `X-Forwarded-For`, `Forwarded`, `X-Real-IP`). A list
///   header is walked from the right (the entry the nearest proxy appended) skipping addresses
///   that are themselves trusted; the first untrusted address is the client. If every entry is
///   trusted, the leftmost is. An entry that is not an address (`unknown`, an obfuscated
///   identifier, garbage) ends the walk and the header is ignored, as is an absent one; if no
///   header yields an address, the client is the peer.
/// - Addresses are read as [`parse_ip`](ratelimit_runtime::subject::parse_ip) reads them (ports,
///   brackets, zone ids; `::ffff:192.0.2.1` is `192.0.2.1`), the peer's included.
///
/// Forwarded headers are only as good as the proxy that writes them: restrict
/// [`headers`](Self::headers) to the one your proxy sets (and overwrites or appends to),
/// otherwise a client can send another one through it.
///
/// ```
/// use ratelimit::http::ClientIpResolver;
/// use http::HeaderMap;
///
/// let resolver = ClientIpResolver::new().trust("10.0.0.0/8".parse().unwrap());
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.0.0.2".parse().unwrap());
/// // From a trusted proxy: the rightmost untrusted entry.
/// assert_eq!(resolver.resolve(Some("10.0.0.1".parse().unwrap()), &headers), Some("203.0.113.9".parse().unwrap()));
/// // From anyone else: the peer, whatever the headers say.
/// assert_eq!(resolver.resolve(Some("192.0.2.7".parse().unwrap()), &headers), Some("192.0.2.7".parse().unwrap()));
/// ```
#[derive(Clone, Debug)]
pub struct ClientIpResolver {
    trusted: Vec<Cidr>,
    headers: Vec<ForwardedHeader>,
}

impl Default for ClientIpResolver {
    fn default() -> Self {
        ClientIpResolver::new()
    }
}

/// What one header says about the client.
enum Found {
    /// The header is absent.
    Absent,
    /// The header is present but names no usable client (garbage, `unknown`, a broken chain).
    Unusable,
    /// The client.
    Client(IpAddr),
}

impl ClientIpResolver {
    /// No trusted proxies: the client is always the socket peer.
    pub fn new() -> ClientIpResolver {
        ClientIpResolver {
            trusted: Vec::new(),
            headers: vec![ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded, ForwardedHeader::XRealIp],
        }
    }

    /// Trusts the proxies in `network`: their forwarded headers are believed.
    pub fn trust(mut self, network: Cidr) -> ClientIpResolver {
        self.trusted.push(network);
        self
    }

    /// The headers consulted from trusted proxies, in order (default `X-Forwarded-For`,
    /// `Forwarded`, `X-Real-IP`). Name only the one your proxy sets.
    pub fn headers(mut self, headers: impl IntoIterator<Item = ForwardedHeader>) -> ClientIpResolver {
        self.headers = headers.into_iter().collect();
        self
    }

    /// The trusted networks.
    pub fn trusted(&self) -> &[Cidr] {
        &self.trusted
    }

    /// Whether `ip` is inside a trusted network.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(ip))
    }

    /// The client IP of a request from `peer` (the socket's remote address; `None` if unknown,
    /// in which case no header is believed either) carrying `headers`.
    pub fn resolve(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        self.resolve_fields(peer, headers)
    }

    /// [`resolve`](Self::resolve) on any framework's header fields.
    pub(crate) fn resolve_fields(&self, peer: Option<IpAddr>, headers: &impl HeaderFields) -> Option<IpAddr> {
        let peer = peer?.to_canonical();
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        for header in &self.headers {
            let found = match header {
                ForwardedHeader::XForwardedFor => self.walk(list_entries(headers, X_FORWARDED_FOR, xff_entries)),
                ForwardedHeader::Forwarded => self.walk(list_entries(headers, FORWARDED, forwarded_entries)),
                ForwardedHeader::XRealIp => real_ip(headers),
            };
            if let Found::Client(ip) = found {
                return Some(ip);
            }
        }
        Some(peer)
    }

    /// Walks proxy-appended entries from the right: the first untrusted address is the client;
    /// if all are trusted, the leftmost.
    fn walk(&self, entries: Option<Vec<Option<IpAddr>>>) -> Found {
        let Some(entries) = entries else { return Found::Absent };
        let mut leftmost_trusted = None;
        for entry in entries.iter().rev() {
            match entry {
                None => return Found::Unusable,
                Some(ip) if self.is_trusted(*ip) => leftmost_trusted = Some(*ip),
                Some(ip) => return Found::Client(*ip),
            }
        }
        leftmost_trusted.map_or(Found::Unusable, Found::Client)
    }
}

/// The entries of every `name` header line, in order (`None` if the header is absent; an entry
/// is `None` if it is not an address).
fn list_entries(
    headers: &impl HeaderFields,
    name: &'static str,
    parse: fn(&str, &mut Vec<Option<IpAddr>>),
) -> Option<Vec<Option<IpAddr>>> {
    let values = headers.values(name);
    if values.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for value in values {
        match visible_ascii(value) {
            Some(text) => parse(text, &mut entries),
            None => entries.push(None),
        }
    }
    Some(entries)
}

fn xff_entries(text: &str, out: &mut Vec<Option<IpAddr>>) {
    // Empty list elements (`a, , b`) are allowed and ignored (RFC 9110 §5.6.1).
    out.extend(text.split(',').filter(|e| !e.trim().is_empty()).map(parse_ip));
}

fn real_ip(headers: &impl HeaderFields) -> Found {
    let values = headers.values(X_REAL_IP);
    match (values.first(), values.get(1)) {
        (None, _) => Found::Absent,
        (Some(v), None) => match visible_ascii(v).and_then(parse_ip) {
            Some(ip) => Found::Client(ip),
            None => Found::Unusable,
        },
        // Two values: someone besides the last proxy set one.
        (Some(_), Some(_)) => Found::Unusable,
    }
}

/// RFC 7239: `Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`.
/// One entry per element: its `for=` node, `None` when the element has none or it is not an
/// address (`unknown`, `_hidden`) or the element is malformed.
fn forwarded_entries(text: &str, out: &mut Vec<Option<IpAddr>>) {
    let mut element_for: Option<Option<IpAddr>> = None;
    let mut malformed = false;
    let mut pair = String::new();
    let mut quoted = false;
    let mut escaped = false;
    let mut empty = true;
    for c in text.chars() {
        if quoted {
            pair.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            }
            continue;
        }
        match c {
            '"' => {
                quoted = true;
                empty = false;
                pair.push(c);
            }
            ';' => finish_pair(&mut pair, &mut element_for, &mut malformed),
            ',' => {
                finish_pair(&mut pair, &mut element_for, &mut malformed);
                end_element(out, &mut element_for, &mut malformed, &mut empty);
                empty = true;
            }
            c => {
                empty &= c == ' ' || c == '\t';
                pair.push(c);
            }
        }
    }
    if quoted {
        malformed = true;
    }
    finish_pair(&mut pair, &mut element_for, &mut malformed);
    end_element(out, &mut element_for, &mut malformed, &mut empty);
}

/// Ends one element: its `for=` node; empty elements (`a, , b`) are ignored (RFC 9110 §5.6.1).
fn end_element(
    out: &mut Vec<Option<IpAddr>>,
    element_for: &mut Option<Option<IpAddr>>,
    malformed: &mut bool,
    empty: &mut bool,
) {
    if !*empty || *malformed {
        out.push(if *malformed { None } else { element_for.take().flatten() });
    }
    *element_for = None;
    *malformed = false;
}

/// Ends one `name=value` pair of a `Forwarded` element, noting its `for=` node.
fn finish_pair(pair: &mut String, element_for: &mut Option<Option<IpAddr>>, malformed: &mut bool) {
    let p = pair.trim();
    if !p.is_empty() {
        match p.split_once('=') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("for") => {
                if element_for.is_some() {
                    // `for` twice in one element.
                    *malformed = true;
                }
                *element_for = Some(forwarded_value(value.trim()).and_then(|v| parse_ip(&v)));
            }
            Some(_) => {}
            None => *malformed = true,
        }
    }
    pair.clear();
}

/// A `token` or `quoted-string` value, unquoted; `None` if malformed.
fn forwarded_value(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return (!value.is_empty() && !value.contains(['"', '\\', ' '])).then(|| value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}
