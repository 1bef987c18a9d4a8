//! The HTTP layer in process: client-IP resolution (trusted proxies, `X-Forwarded-For`,
//! `Forwarded`, `X-Real-IP`), CIDR parsing, IPv6 grouping, the request context, and the
//! `RateLimit` / `RateLimit-Policy` / `Retry-After` fields of allowed and refused responses.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::{HeaderMap, HeaderName, Request, StatusCode};
use ratelimit::error::CidrError;
use ratelimit::http::{ClientIp, ClientIpResolver, ForwardedHeader, RequestContextLayer};
use ratelimit::subject::Cidr;
use ratelimit::{
    context, store::MemoryStore, store::RedisStore, Cause, FailurePolicy, Limit, LimitType, Limiter, RateLimited, Rule,
    Subject,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
    }
    map
}

fn resolver() -> ClientIpResolver {
    ClientIpResolver::new().trust(cidr("10.0.0.0/8")).trust(cidr("::1"))
}

/// The client for a request from `peer` with these headers.
fn client(r: &ClientIpResolver, peer: &str, pairs: &[(&str, &str)]) -> Option<IpAddr> {
    r.resolve(Some(ip(peer)), &headers(pairs))
}

// ---- client IP ---------------------------------------------------------------------------

#[test]
fn untrusted_peer_is_the_client_whatever_the_headers_say() {
    let r = resolver();
    let spoof = [("x-forwarded-for", "1.2.3.4"), ("forwarded", "for=1.2.3.4"), ("x-real-ip", "1.2.3.4")];
    assert_eq!(client(&r, "203.0.113.5", &spoof), Some(ip("203.0.113.5")));
    assert_eq!(
        client(&ClientIpResolver::new(), "10.0.0.1", &spoof),
        Some(ip("10.0.0.1")),
        "nothing trusted by default"
    );
    // IPv6 peer, untrusted.
    assert_eq!(client(&r, "2001:db8::7", &spoof), Some(ip("2001:db8::7")));
}

#[test]
fn no_peer_means_no_client_even_with_headers() {
    let r = resolver();
    assert_eq!(r.resolve(None, &headers(&[("x-forwarded-for", "1.2.3.4")])), None);
}

#[test]
fn trusted_peer_without_headers_is_the_client() {
    assert_eq!(client(&resolver(), "10.0.0.1", &[]), Some(ip("10.0.0.1")));
}

#[test]
fn xff_is_walked_from_the_right_skipping_trusted_hops() {
    let r = resolver();
    // The client wrote "198.51.100.1" itself (spoof); the first proxy appended the real peer.
    let xff = [("x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.0.0.2, 10.0.0.3")];
    assert_eq!(client(&r, "10.0.0.1", &xff), Some(ip("203.0.113.9")));
    // One hop.
    assert_eq!(client(&r, "10.0.0.1", &[("x-forwarded-for", "203.0.113.9")]), Some(ip("203.0.113.9")));
    // Several header lines are one list, in order.
    let lines = [("x-forwarded-for", "198.51.100.1"), ("x-forwarded-for", "203.0.113.9, 10.0.0.2")];
    assert_eq!(client(&r, "10.0.0.1", &lines), Some(ip("203.0.113.9")));
    // Ports and brackets as some proxies write them; empty elements ignored.
    assert_eq!(client(&r, "10.0.0.1", &[("x-forwarded-for", "203.0.113.9:5555 , ,10.0.0.2")]), Some(ip("203.0.113.9")));
    let v6 = [("x-forwarded-for", "[2001:db8::1]:443, ::1")];
    assert_eq!(client(&r, "::1", &v6), Some(ip("2001:db8::1")));
    assert_eq!(client(&r, "::1", &[("x-forwarded-for", "2001:db8::2")]), Some(ip("2001:db8::2")));
}

#[test]
fn xff_of_only_trusted_hops_gives_the_leftmost() {
    let r = resolver();
    assert_eq!(client(&r, "10.0.0.1", &[("x-forwarded-for", "10.1.1.1, 10.2.2.2")]), Some(ip("10.1.1.1")));
}

#[test]
fn garbage_is_ignored() {
    let r = resolver();
    for bad in ["not-an-ip", "", "unknown", "1.2.3.4.5", "1.2.3.4, 10.0.0.2, garbage", "[::1", "[2001:db8::1]x"] {
        assert_eq!(client(&r, "10.0.0.1", &[("x-forwarded-for", bad)]), Some(ip("10.0.0.1")), "XFF {bad:?}");
    }
    // Garbage left of the client is never reached.
    assert_eq!(client(&r, "10.0.0.1", &[("x-forwarded-for", "garbage, 203.0.113.9")]), Some(ip("203.0.113.9")));
    // A broken XFF does not hide a good Forwarded.
    let both = [("x-forwarded-for", "garbage"), ("forwarded", "for=203.0.113.9")];
    assert_eq!(client(&r, "10.0.0.1", &both), Some(ip("203.0.113.9")));
    // Non-UTF-8 bytes.
    let mut map = HeaderMap::new();
    map.insert("x-forwarded-for", http::HeaderValue::from_bytes(b"\xff\xfe").unwrap());
    assert_eq!(r.resolve(Some(ip("10.0.0.1")), &map), Some(ip("10.0.0.1")));
}

#[test]
fn forwarded_header_rfc7239() {
    let r = resolver();
    let f = |value: &str| client(&r, "10.0.0.1", &[("forwarded", value)]);
    assert_eq!(f("for=192.0.2.60;proto=http;by=203.0.113.43"), Some(ip("192.0.2.60")));
    assert_eq!(f(r#"for="[2001:db8:cafe::17]:4711""#), Some(ip("2001:db8:cafe::17")));
    assert_eq!(f(r#"for="[2001:db8:cafe::17]""#), Some(ip("2001:db8:cafe::17")));
    assert_eq!(f(r#"for="[2001:db8:cafe::17]:_obf1""#), Some(ip("2001:db8:cafe::17")), "obfuscated port");
    assert_eq!(f(r#"For="192.0.2.43:47011""#), Some(ip("192.0.2.43")), "names are case-insensitive, ports dropped");
    assert_eq!(f("for=192.0.2.43, for=198.51.100.17"), Some(ip("198.51.100.17")), "rightmost untrusted");
    assert_eq!(f("for=192.0.2.43, for=10.0.0.9"), Some(ip("192.0.2.43")), "trusted hops skipped");
    // A comma inside a quoted value does not split the element.
    assert_eq!(f(r#"for=192.0.2.43;ext="a, for=6.6.6.6""#), Some(ip("192.0.2.43")));
    assert_eq!(f(r#"proto=https;for="198.51.100.3""#), Some(ip("198.51.100.3")));
    // Unquoted IPv6 is not RFC 7239 but some proxies write it; it is unambiguous.
    assert_eq!(f("for=[2001:db8::1]:80"), Some(ip("2001:db8::1")));
    // Not an address, or malformed: ignored (the peer is the client).
    for bad in [
        "for=unknown",
        "for=_hidden",
        r#"for="192.0.2.1"#,
        "proto=https",
        "for",
        "for=1.2.3.4;for=5.6.7.8",
        "for=\"[2001:db8::1]:99999\"",
        "for=\"[2001:db8::1]:\"",
    ] {
        assert_eq!(f(bad), Some(ip("10.0.0.1")), "Forwarded {bad:?}");
    }
    // `for=unknown` at the right end stops the walk: what is left of it is not believed.
    assert_eq!(f("for=198.51.100.1, for=unknown"), Some(ip("10.0.0.1")));
}

#[test]
fn x_real_ip_only_from_trusted_peers() {
    let r = resolver();
    assert_eq!(client(&r, "10.0.0.1", &[("x-real-ip", "198.51.100.4")]), Some(ip("198.51.100.4")));
    assert_eq!(client(&r, "203.0.113.1", &[("x-real-ip", "198.51.100.4")]), Some(ip("203.0.113.1")));
    assert_eq!(client(&r, "10.0.0.1", &[("x-real-ip", "junk")]), Some(ip("10.0.0.1")));
    let twice = [("x-real-ip", "198.51.100.4"), ("x-real-ip", "198.51.100.5")];
    assert_eq!(client(&r, "10.0.0.1", &twice), Some(ip("10.0.0.1")), "two values: ignored");
}

#[test]
fn header_order_and_restriction() {
    let all = [("x-forwarded-for", "198.51.100.1"), ("forwarded", "for=198.51.100.2"), ("x-real-ip", "198.51.100.3")];
    assert_eq!(client(&resolver(), "10.0.0.1", &all), Some(ip("198.51.100.1")), "XFF first by default");
    let only_real_ip = resolver().headers([ForwardedHeader::XRealIp]);
    assert_eq!(client(&only_real_ip, "10.0.0.1", &all), Some(ip("198.51.100.3")));
    let forwarded_first = resolver().headers([ForwardedHeader::Forwarded, ForwardedHeader::XForwardedFor]);
    assert_eq!(client(&forwarded_first, "10.0.0.1", &all), Some(ip("198.51.100.2")));
    let none = resolver().headers([]);
    assert_eq!(client(&none, "10.0.0.1", &all), Some(ip("10.0.0.1")));
}

#[test]
fn ipv4_mapped_peers_match_ipv4_networks() {
    let r = resolver();
    assert_eq!(client(&r, "::ffff:10.0.0.1", &[("x-forwarded-for", "198.51.100.1")]), Some(ip("198.51.100.1")));
    assert_eq!(client(&r, "::ffff:203.0.113.1", &[("x-forwarded-for", "198.51.100.1")]), Some(ip("203.0.113.1")));
    assert_eq!(client(&r, "10.0.0.1", &[("x-forwarded-for", "::ffff:198.51.100.1")]), Some(ip("198.51.100.1")));
}

#[test]
fn trusted_proxies_and_forwarded_addresses_in_every_form() {
    // Networks written in mapped or bracketed form; peers and entries in any form.
    let r = ClientIpResolver::new().trust(cidr("::ffff:10.0.0.0/104")).trust(cidr("[2001:db8:ff::]/48"));
    assert_eq!(r.trusted(), [cidr("10.0.0.0/8"), cidr("2001:db8:ff::/48")]);
    let xff = [("x-forwarded-for", "198.51.100.9, [2001:db8::1]:443, ::ffff:10.0.0.2, [2001:db8:ff::3]")];
    for peer in ["10.0.0.1", "::ffff:10.0.0.1", "2001:db8:ff::1"] {
        assert_eq!(client(&r, peer, &xff), Some(ip("2001:db8::1")), "from {peer}");
    }
    assert_eq!(client(&r, "::ffff:11.0.0.1", &xff), Some(ip("11.0.0.1")), "untrusted: the peer, as IPv4");
    let one = |name: &str, value: &str| client(&r, "10.0.0.1", &[(name, value)]);
    assert_eq!(one("x-forwarded-for", "198.51.100.1:8080"), Some(ip("198.51.100.1")));
    assert_eq!(one("x-forwarded-for", "[::ffff:198.51.100.1]"), Some(ip("198.51.100.1")));
    assert_eq!(one("x-forwarded-for", "fe80::1%eth0"), Some(ip("fe80::1")));
    assert_eq!(one("forwarded", r#"for="[::ffff:198.51.100.1]:80""#), Some(ip("198.51.100.1")));
    assert_eq!(one("forwarded", r#"for="[fe80::1%25eth0]""#), Some(ip("fe80::1")));
    assert_eq!(one("x-real-ip", "[2001:db8::5]:443"), Some(ip("2001:db8::5")));
    assert_eq!(one("x-real-ip", "::ffff:198.51.100.4"), Some(ip("198.51.100.4")));
}

// ---- CIDR --------------------------------------------------------------------------------

#[test]
fn cidr_parsing() {
    assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
    assert_eq!(cidr(" 192.0.2.1 ").to_string(), "192.0.2.1/32");
    assert_eq!(cidr("::1").to_string(), "::1/128");
    assert_eq!(cidr("::1/128").prefix(), 128);
    assert_eq!(cidr("2001:db8::/32").addr(), ip("2001:db8::"));
    assert_eq!(cidr("0.0.0.0/0").prefix(), 0);
    assert!(cidr("0.0.0.0/0").contains(ip("255.255.255.255")));
    assert!(!cidr("0.0.0.0/0").contains(ip("2001:db8::1")), "families do not mix");
    assert!(cidr("::/0").contains(ip("2001:db8::1")));
    assert!(cidr("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
    assert!(!cidr("2001:db8::/32").contains(ip("2001:db9::1")));
    assert!(cidr("192.168.1.128/25").contains(ip("192.168.1.200")));
    assert!(!cidr("192.168.1.128/25").contains(ip("192.168.1.127")));
    assert!(cidr("::ffff:0:0/96").contains(ip("::ffff:10.0.0.1")));
    assert_eq!(Cidr::new(ip("10.1.2.3"), 8), Some(cidr("10.0.0.0/8")));
    assert_eq!(Cidr::new(ip("10.1.2.3"), 33), None);
    assert_eq!(Cidr::host(ip("2001:db8::1")), cidr("2001:db8::1/128"));
}

#[test]
fn cidr_errors_say_what_to_write() {
    let err = |s: &str| s.parse::<Cidr>().unwrap_err();
    assert!(matches!(err(""), CidrError::Empty { .. }));
    assert!(matches!(err("  "), CidrError::Empty { .. }));
    assert!(matches!(err("10.0.0/8"), CidrError::Address { .. }));
    assert!(matches!(err("example.com/8"), CidrError::Address { .. }));
    assert!(matches!(err("10.0.0.0/"), CidrError::Prefix { .. }));
    assert!(matches!(err("10.0.0.0/x"), CidrError::Prefix { .. }));
    assert!(matches!(err("10.0.0.0/-1"), CidrError::Prefix { .. }));
    assert!(matches!(err("10.0.0.0/ 8"), CidrError::Prefix { .. }));
    assert!(matches!(err("10.0.0.0/33"), CidrError::PrefixTooLong { max: 32, .. }));
    assert!(matches!(err("10.0.0.0/300"), CidrError::PrefixTooLong { max: 32, .. }));
    assert!(matches!(err("::/129"), CidrError::PrefixTooLong { max: 128, .. }));
    let CidrError::HostBits { addr, prefix, .. } = err("10.0.0.1/8") else { panic!("host bits") };
    assert_eq!(Cidr::new(addr, prefix), Some(cidr("10.0.0.0/8")));
    assert_eq!(
        err("10.0.0.1/8").to_string(),
        r#"invalid CIDR "10.0.0.1/8": bits set after the /8 prefix (did you mean 10.0.0.0/8?)"#
    );
    assert_eq!(
        err("10.0.0.0/33").to_string(),
        r#"invalid CIDR "10.0.0.0/33": the prefix length must be at most 32 for this address family"#
    );
    assert!(err("nope").to_string().contains("expected e.g. 10.0.0.0/8"));
    assert_eq!(
        err("2001:db8::1/64").to_string(),
        r#"invalid CIDR "2001:db8::1/64": bits set after the /64 prefix (did you mean 2001:db8::/64?)"#
    );
}

// ---- header fields -----------------------------------------------------------------------

fn memory_limiter(name: &str, limit_type: LimitType, rules: &[(u64, u64)]) -> Limiter {
    let rules: Vec<Rule> = rules.iter().map(|&(ms, n)| Rule::from_millis(ms, n).unwrap()).collect();
    Limiter::builder(name).limit(Limit::new(limit_type, rules)).store(Arc::new(MemoryStore::new())).build().unwrap()
}

fn refuse(limiter: &Limiter, subject: Subject<'_>) -> RateLimited {
    for _ in 0..1000 {
        if let Err(e) = limiter.check(std::slice::from_ref(&subject)).blocking() {
            return e;
        }
    }
    panic!("never refused");
}

#[test]
fn refusal_fields() {
    let limiter = memory_limiter("t::refusal", LimitType::Ip, &[(50_000, 100), (20_000, 10)]);
    let e = refuse(&limiter, Subject::ip(ip("203.0.113.7")));
    assert_eq!(e.cause(), Cause::Exceeded);
    assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = e.headers();
    assert_eq!(h["ratelimit-policy"], r#""ip-20s";q=10;w=20, "ip-50s";q=100;w=50"#);
    let secs = e.retry_after().as_secs_f64().ceil() as u64;
    assert_eq!(h["retry-after"], secs.to_string().as_str());
    assert_eq!(h["ratelimit"], format!(r#""ip-20s";r=0;t={secs}"#).as_str());
    assert_eq!(e.retry_after_secs(), secs);
    let ms = e.retry_after().as_micros().div_ceil(1000);
    assert_eq!(e.json_body(), format!(r#"{{"error":"rate_limited","retry_after_ms":{ms}}}"#));
}

#[test]
fn sub_second_windows_round_up() {
    let limiter = memory_limiter("t::ms", LimitType::Global, &[(500, 1)]);
    let e = refuse(&limiter, Subject::global());
    let h = e.headers();
    assert_eq!(h["ratelimit-policy"], r#""global-500ms";q=1;w=1"#);
    assert_eq!(h["retry-after"], "1", "0 < retry-after <= 500ms rounds up to 1s");
    assert_eq!(h["ratelimit"], r#""global-500ms";r=0;t=1"#);
}

#[test]
fn stacked_limits_list_every_policy() {
    let limiter = Limiter::builder("t::stacked")
        .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(10), 2).unwrap()]))
        .limit(Limit::new(
            LimitType::Ip,
            [Rule::new(Duration::from_secs(10), 15).unwrap(), Rule::new(Duration::from_secs(60), 50).unwrap()],
        ))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let subjects = [Subject::bytes(&b"alice"[..]), Subject::ip(ip("192.0.2.1"))];
    let permit = limiter.check(&subjects).blocking().unwrap();
    let quota = permit.quota().unwrap();
    let h = quota.headers();
    assert_eq!(h["ratelimit-policy"], r#""user-10s";q=2;w=10, "ip-10s";q=15;w=10, "ip-1m";q=50;w=60"#);
    assert_eq!(h["ratelimit"], r#""user-10s";r=1;t=10"#, "the tightest rule");
    limiter.check(&subjects).blocking().unwrap();
    let e = limiter.check(&subjects).blocking().unwrap_err();
    assert!(e.headers()["ratelimit"].to_str().unwrap().starts_with(r#""user-10s";r=0;t="#));
}

#[test]
fn store_unavailable_is_503() {
    // Nothing listens on port 1: the store fails, and this limiter fails closed.
    let store = RedisStore::open("redis://127.0.0.1:1/", Duration::from_millis(200)).unwrap();
    let limiter = Limiter::builder("t::down")
        .limit(Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(10), 5).unwrap()]))
        .store(Arc::new(store))
        .on_error(FailurePolicy::Deny)
        .build()
        .unwrap();
    let e = limiter.check(&[Subject::global()]).blocking().unwrap_err();
    assert_eq!(e.cause(), Cause::StoreUnavailable);
    assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
    let h = e.headers();
    assert_eq!(h["retry-after"], e.retry_after_secs().to_string().as_str());
    assert!(h.get("ratelimit").is_none(), "no rule refused");
    assert_eq!(h["ratelimit-policy"], r#""global-10s";q=5;w=10"#);
}

// ---- the layer ---------------------------------------------------------------------------

fn request(path: &str, peer: Option<&str>, pairs: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder().uri(path).body(Body::empty()).unwrap();
    *req.headers_mut() = headers(pairs);
    if let Some(peer) = peer {
        let addr = SocketAddr::new(ip(peer), 40000);
        req.extensions_mut().insert(ConnectInfo(addr));
    }
    req
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn send(app: &Router, req: Request<Body>) -> Reply {
    let mut svc = app.clone();
    let res = tower_service::Service::call(&mut svc, req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    Reply { status, headers, body: String::from_utf8(bytes.to_vec()).unwrap() }
}

/// What the handler sees: IP, IP subject, user, `ClientIp` extension.
async fn whoami(ext: Option<axum::Extension<ClientIp>>) -> String {
    let ctx = context::current().expect("the layer installs a context");
    let subject = context::ip_subject();
    format!(
        "ip={} subject={} user={} ext={}",
        ctx.ip().map_or("-".to_owned(), |i| i.to_string()),
        subject.as_bytes().map_or_else(|| "-".to_owned(), |b| String::from_utf8_lossy(&b).into_owned()),
        ctx.user().unwrap_or_else(|| "-".to_owned()),
        ext.map_or("-".to_owned(), |e| e.0 .0.to_string()),
    )
}

/// A router whose `/limited` is limited by hand, per IP.
fn limited_app(layer: RequestContextLayer, limiter: Limiter) -> Router {
    let limiter = Arc::new(limiter);
    Router::new()
        .route("/whoami", get(whoami))
        .route(
            "/limited",
            get(move || {
                let limiter = limiter.clone();
                async move {
                    limiter.check(&[context::ip_subject()]).await?;
                    Ok::<_, RateLimited>("ok")
                }
            }),
        )
        .route(
            "/own-headers",
            get(|| async {
                let limiter = memory_limiter("t::own", LimitType::Global, &[(10_000, 5)]);
                limiter.check(&[Subject::global()]).await?;
                Ok::<_, RateLimited>(([("ratelimit", "custom")], "ok"))
            }),
        )
        .layer(layer)
}

#[tokio::test]
async fn layer_installs_the_context() {
    let app = limited_app(
        RequestContextLayer::new().trust_proxy(cidr("10.0.0.0/8")).user_header(HeaderName::from_static("x-user-id")),
        memory_limiter("t::ctx", LimitType::Ip, &[(10_000, 5)]),
    );
    let r = send(&app, request("/whoami", Some("203.0.113.5"), &[("x-forwarded-for", "1.1.1.1")])).await;
    assert_eq!(r.body, "ip=203.0.113.5 subject=203.0.113.5 user=- ext=203.0.113.5");
    let r = send(&app, request("/whoami", Some("10.0.0.1"), &[("x-forwarded-for", "1.1.1.1"), ("x-user-id", "alice")]))
        .await;
    assert_eq!(r.body, "ip=1.1.1.1 subject=1.1.1.1 user=alice ext=1.1.1.1");
    let r = send(&app, request("/whoami", Some("2001:db8:1:2::5"), &[])).await;
    assert_eq!(r.body, "ip=2001:db8:1:2::5 subject=2001:db8:1:2::/64 user=- ext=2001:db8:1:2::5");
    let r = send(&app, request("/whoami", None, &[("x-forwarded-for", "1.1.1.1"), ("x-user-id", "  ")])).await;
    assert_eq!(r.body, "ip=- subject=- user=- ext=-", "no ConnectInfo: no IP; blank user: none");
}

#[tokio::test]
async fn ipv6_clients_share_their_64_unless_configured() {
    let limiter = memory_limiter("t::v6", LimitType::Ip, &[(10_000, 1)]);
    let app = limited_app(RequestContextLayer::new(), limiter);
    assert_eq!(send(&app, request("/limited", Some("2001:db8:1:2::a"), &[])).await.status, StatusCode::OK);
    assert_eq!(
        send(&app, request("/limited", Some("2001:db8:1:2::b"), &[])).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(send(&app, request("/limited", Some("2001:db8:1:3::a"), &[])).await.status, StatusCode::OK);

    let limiter = memory_limiter("t::v6-128", LimitType::Ip, &[(10_000, 1)]);
    let app = limited_app(RequestContextLayer::new().ipv6_prefix(128), limiter);
    assert_eq!(send(&app, request("/limited", Some("2001:db8:1:2::a"), &[])).await.status, StatusCode::OK);
    assert_eq!(send(&app, request("/limited", Some("2001:db8:1:2::b"), &[])).await.status, StatusCode::OK);
    assert_eq!(
        send(&app, request("/limited", Some("2001:db8:1:2::b"), &[])).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let r = send(&app, request("/whoami", Some("2001:db8:1:2::b"), &[])).await;
    assert!(r.body.contains("subject=2001:db8:1:2::b/128"), "{}", r.body);
}

/// A dual-stack listener reports an IPv4 client as `::ffff:a.b.c.d`: that is the IPv4 client,
/// sharing its limit with the same client seen over IPv4, and not its IPv6 neighbours'.
#[tokio::test]
async fn dual_stack_peers_are_their_ipv4_address() {
    let limiter = memory_limiter("t::dual", LimitType::Ip, &[(10_000, 1)]);
    let app = limited_app(RequestContextLayer::new(), limiter);
    let r = send(&app, request("/whoami", Some("::ffff:127.0.0.10"), &[])).await;
    assert_eq!(r.body, "ip=127.0.0.10 subject=127.0.0.10 user=- ext=127.0.0.10");
    assert_eq!(send(&app, request("/limited", Some("::ffff:127.0.0.10"), &[])).await.status, StatusCode::OK);
    assert_eq!(send(&app, request("/limited", Some("127.0.0.10"), &[])).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(send(&app, request("/limited", Some("::ffff:127.0.0.11"), &[])).await.status, StatusCode::OK);
    assert_eq!(send(&app, request("/limited", Some("127.0.0.11"), &[])).await.status, StatusCode::TOO_MANY_REQUESTS);
}

/// The same over real sockets: a server listening on `[::]` (dual-stack) sees clients from
/// 127.0.0.10 and 127.0.0.11 as mapped addresses, and limits each as its IPv4 address.
#[tokio::test]
async fn a_dual_stack_listener_limits_ipv4_clients_by_address() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limiter = memory_limiter("t::dual-socket", LimitType::Ip, &[(10_000, 1)]);
    let app = limited_app(RequestContextLayer::new(), limiter);
    let listener = tokio::net::TcpListener::bind("[::]:0").await.expect("a dual-stack listener on [::]");
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    let get = |from: &'static str, path: &'static str| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(ip(from), 0)).unwrap();
        let mut stream = socket.connect(SocketAddr::new(ip("127.0.0.1"), port)).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.unwrap();
        reply
    };
    let whoami = get("127.0.0.10", "/whoami").await;
    assert!(whoami.ends_with("ip=127.0.0.10 subject=127.0.0.10 user=- ext=127.0.0.10"), "{whoami}");
    assert!(get("127.0.0.10", "/limited").await.starts_with("HTTP/1.1 200"));
    assert!(get("127.0.0.10", "/limited").await.starts_with("HTTP/1.1 429"));
    assert!(get("127.0.0.11", "/limited").await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn allowed_and_refused_responses_carry_the_fields() {
    let limiter = memory_limiter("t::fields", LimitType::Ip, &[(20_000, 2), (60_000, 10)]);
    let app = limited_app(RequestContextLayer::new(), limiter);
    let r = send(&app, request("/limited", Some("192.0.2.1"), &[])).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["ratelimit-policy"], r#""ip-20s";q=2;w=20, "ip-1m";q=10;w=60"#);
    assert_eq!(r.headers["ratelimit"], r#""ip-20s";r=1;t=20"#);
    assert!(r.headers.get("retry-after").is_none());
    let r = send(&app, request("/limited", Some("192.0.2.1"), &[])).await;
    assert_eq!(r.headers["ratelimit"], r#""ip-20s";r=0;t=20"#);
    let r = send(&app, request("/limited", Some("192.0.2.1"), &[])).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(r.headers["retry-after"], "20");
    assert_eq!(r.headers["ratelimit"], r#""ip-20s";r=0;t=20"#);
    assert_eq!(r.headers["ratelimit-policy"], r#""ip-20s";q=2;w=20, "ip-1m";q=10;w=60"#);
    assert_eq!(r.headers.get_all("ratelimit").iter().count(), 1, "the layer does not add a second one");
    assert!(r.body.starts_with(r#"{"error":"rate_limited","retry_after_ms":"#), "{}", r.body);
    let ms: u64 = r
        .body
        .trim_start_matches(r#"{"error":"rate_limited","retry_after_ms":"#)
        .trim_end_matches('}')
        .parse()
        .unwrap();
    assert!((19_000..=20_000).contains(&ms), "{ms}");
    // No limiter ran: no fields.
    let r = send(&app, request("/whoami", Some("192.0.2.1"), &[])).await;
    assert!(r.headers.get("ratelimit").is_none() && r.headers.get("ratelimit-policy").is_none());
    // The handler's own field wins.
    let r = send(&app, request("/own-headers", Some("192.0.2.1"), &[])).await;
    assert_eq!(r.headers["ratelimit"], "custom");
    assert!(r.headers.get("ratelimit-policy").is_none());
    // Quota fields can be turned off.
    let limiter = memory_limiter("t::off", LimitType::Ip, &[(20_000, 2)]);
    let app = limited_app(RequestContextLayer::new().quota_headers(false), limiter);
    let r = send(&app, request("/limited", Some("192.0.2.1"), &[])).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers.get("ratelimit").is_none());
}

#[tokio::test]
async fn without_a_peer_the_ip_limit_refuses() {
    let limiter = memory_limiter("t::nopeer", LimitType::Ip, &[(10_000, 5)]);
    let app = limited_app(RequestContextLayer::new(), limiter);
    let r = send(&app, request("/limited", None, &[])).await;
    // No identity is a misconfigured server, not a client over its limit: 500, no Retry-After.
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.headers.get("ratelimit").is_none());
    assert!(r.headers.get("retry-after").is_none());
    assert_eq!(r.body, r#"{"error":"rate_limit_subject_missing"}"#);
}

/// `user_header` takes the header's bytes: a non-ASCII id (UTF-8 or not) is a user with its own
/// budget, not a missing one.
#[tokio::test]
async fn user_header_takes_non_ascii_ids() {
    let limiter = Arc::new(memory_limiter("t::user_bytes", LimitType::User, &[(10_000, 1)]));
    let app = Router::new()
        .route(
            "/user",
            get(move || {
                let limiter = limiter.clone();
                async move {
                    let ctx = context::current().expect("context");
                    let user = ctx.user_bytes().unwrap_or_default();
                    limiter.check(&[context::user_subject()]).await?;
                    Ok::<_, RateLimited>(format!("{user:?}"))
                }
            }),
        )
        .layer(RequestContextLayer::new().user_header(HeaderName::from_static("x-user-id")));
    let with_user = |value: &[u8]| {
        let mut req = request("/user", Some("203.0.113.5"), &[]);
        req.headers_mut().insert("x-user-id", http::HeaderValue::from_bytes(value).unwrap());
        req
    };
    let utf8 = "ü名字".as_bytes();
    let r = send(&app, with_user(utf8)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body, format!("{:?}", utf8.to_vec()), "the id is the header's bytes");
    assert_eq!(send(&app, with_user(utf8)).await.status, StatusCode::TOO_MANY_REQUESTS, "the same user");
    // 0xFC alone (Latin-1 `ü`) is not UTF-8: still a user, and another one. Blanks around are trimmed.
    assert_eq!(send(&app, with_user(b" \xfc ")).await.status, StatusCode::OK);
    assert_eq!(send(&app, with_user(b"\xfc")).await.status, StatusCode::TOO_MANY_REQUESTS);
    // A blank header is no user: the User limit refuses for want of a subject.
    let r = send(&app, with_user(b"  ")).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.body);
}
