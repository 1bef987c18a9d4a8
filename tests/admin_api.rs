//! The example server's admin API (`RATELIMIT_ADMIN_TOKEN`): runtime overrides set through one
//! server bind another on the same Redis from its next call; the TTL ends them on time; 401,
//! 404 and 400 as documented. Each server is a process of its own (tests/support/server_process.rs).

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::server_process::{loopback, parse_response, request, Reply, Server};
use support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// Not a test of its own: the body of the server processes that the tests start.
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

const TOKEN: &str = "b7Jx0c4Q-test-admin-token-9f2Lw8vKz";

/// One request with a body (JSON), over a fresh connection from 127.0.0.2.
async fn send(server: SocketAddr, method: &str, path: &str, auth: Option<&str>, body: &str) -> Reply {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(loopback(2), 0)).expect("bind");
    let mut stream = socket.connect(server).await.expect("connect");
    let auth = auth.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         {auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.expect("write request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await.expect("in time").expect("read");
    parse_response(&raw)
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

async fn admin(server: &Server, method: &str, path: &str, body: &str) -> Reply {
    send(server.addr, method, path, Some(&bearer()), body).await
}

async fn search(server: &Server, user: &str) -> Reply {
    request(server.addr, loopback(3), "GET", "/api/search", &[("X-User-Id", user)]).await
}

async fn export(server: &Server, user: &str) -> Reply {
    request(server.addr, loopback(3), "GET", "/api/export", &[("X-User-Id", user)]).await
}

/// How many of `n` searches of `user` pass.
async fn searches(server: &Server, user: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(search(server, user).await.status == 200);
    }
    ok
}

#[tokio::test]
async fn an_override_set_on_one_server_binds_the_other_and_ends_on_time() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = Server::start(&[], &[("REDIS_URL", url.as_str()), ("RATELIMIT_ADMIN_TOKEN", TOKEN)]);
    let b = Server::start(&[], &[("REDIS_URL", url.as_str()), ("RATELIMIT_RUNTIME_OVERRIDES", "on")]);
    assert!(
        a.startup_line.contains("runtime overrides: on; trusted proxies: none; admin API: on"),
        "{}",
        a.startup_line
    );
    assert!(
        b.startup_line.contains("runtime overrides: on") && !b.startup_line.contains("admin"),
        "{}",
        b.startup_line
    );
    // The admin API knows every declared limiter; a search binds /api/search's to this process.
    assert_eq!(search(&a, "warm-up").await.status, 200);
    let listed = admin(&a, "GET", "/admin/limiters", "").await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let name = "admin_api::server::search";
    assert!(
        listed.body.contains(&format!(r#"{{"name":"{name}","limits":[{{"type":"user","rules":[["10s",5]]}}]}}"#)),
        "{}",
        listed.body
    );

    // Alice used her 5 per 10 s on B; raised to 8 through A for 3 s, B admits 3 more at once.
    assert_eq!(searches(&b, "alice", 6).await, 5);
    let body = format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",8]],"ttl":"3s"}}"#);
    let set = admin(&a, "PUT", "/admin/overrides", &body).await;
    let set_at = Instant::now();
    assert_eq!(set.status, 200, "{set:?}");
    assert!(a.wait_for("admin: override set by 127.0.0.2", Duration::from_secs(5)).contains(name));
    assert!(!a.output().contains(TOKEN), "the token is never logged");
    assert_eq!(searches(&b, "alice", 4).await, 3, "raised on the other server from its next call");
    let refused = search(&b, "alice").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("ratelimit-policy"), Some(r#""user-10s";q=8;w=10"#), "{refused:?}");
    // Bob keeps the code's rule.
    assert_eq!(searches(&b, "bob", 6).await, 5, "other users keep the code's rule");
    // Carol lowered to 1 for 3 s: refused at her second call; the refusal ends with the override.
    let body = format!(r#"{{"limiter":"{name}","subject":"carol","rules":[["10s",1]],"ttl":"3s"}}"#);
    assert_eq!(admin(&a, "PUT", "/admin/overrides", &body).await.status, 200);
    assert_eq!(searches(&b, "carol", 2).await, 1, "lowered at once");
    let listed = admin(&a, "GET", &format!("/admin/overrides?limiter={name}"), "").await;
    assert_eq!(listed.status, 200);
    assert!(
        listed.body.contains(r#""type":"user","subject":"alice","rules":[["10s",8]],"ttl_ms":"#),
        "{}",
        listed.body
    );
    assert!(listed.body.contains(r#""subject":"carol""#), "{}", listed.body);

    // The TTL ends both on time: before it, still in force; after it, the code's 5 per 10 s.
    assert!(set_at.elapsed() < Duration::from_millis(2500), "the steps above took too long to time the TTL");
    assert_eq!(search(&b, "carol").await.status, 429, "before the TTL");
    while set_at.elapsed() < Duration::from_millis(3300) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(search(&b, "carol").await.status, 200, "carol's override ended: 2 of the code's 5");
    let refused = search(&b, "alice").await;
    assert_eq!(refused.header("ratelimit-policy"), Some(r#""user-10s";q=5;w=10"#), "alice's ended: {refused:?}");
    let listed = admin(&a, "GET", &format!("/admin/overrides?limiter={name}"), "").await;
    assert_eq!(listed.body, "[]");

    // Cleared by DELETE.
    let body = format!(r#"{{"limiter":"{name}","subject":"dave","rules":[["10s",1]]}}"#);
    assert_eq!(admin(&a, "PUT", "/admin/overrides", &body).await.status, 200);
    assert_eq!(searches(&b, "dave", 2).await, 1);
    let cleared = admin(&a, "DELETE", "/admin/overrides", &format!(r#"{{"limiter":"{name}","subject":"dave"}}"#)).await;
    assert_eq!(cleared.status, 204, "{cleared:?}");
    assert!(a.wait_for("admin: override cleared by", Duration::from_secs(5)).contains("dave"));
    assert_eq!(searches(&b, "dave", 1).await, 1, "cleared: the code's 5");
    // B counted its decisions under an override: alice 5, carol 3, dave 2 (no subject label).
    let metrics = request(b.addr, loopback(4), "GET", "/metrics", &[]).await.body;
    let line = format!(r#"ratelimit_override_decisions_total{{limiter="{name}"}} 10"#);
    assert!(metrics.lines().any(|l| l == line), "{line:?} not in\n{metrics}");
}

#[tokio::test]
async fn a_fresh_server_knows_its_declared_limiters_and_overrides_one_never_called() {
    let redis = RedisServer::start();
    let url = redis.url();
    let a = Server::start(&[], &[("REDIS_URL", url.as_str()), ("RATELIMIT_ADMIN_TOKEN", TOKEN)]);
    // No route was called: every declared limiter is listed all the same, sorted by name.
    let listed = admin(&a, "GET", "/admin/limiters", "").await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let functions = ["complete", "export", "global", "hello", "login", "orders", "report", "search"];
    let mut at = 0;
    for f in functions {
        let entry = format!(r#"{{"name":"admin_api::server::{f}","#);
        let found = listed.body[at..].find(&entry).map(|i| at + i);
        at = found.unwrap_or_else(|| panic!("{entry} missing or out of order in {}", listed.body));
    }
    assert!(
        listed.body.contains(r#"{"name":"admin_api::server::search","limits":[{"type":"user","rules":[["10s",5]]}]}"#),
        "{}",
        listed.body
    );
    assert!(
        listed.body.contains(r#"{"name":"admin_api::server::export","limits":[{"type":"user","rules":[["1mo",3]]}]}"#),
        "a calendar month is listed as one: {}",
        listed.body
    );
    // An override of /api/export, never called yet, is accepted and binds on its first call.
    let name = "admin_api::server::export";
    let body = format!(r#"{{"limiter":"{name}","subject":"erin","rules":[["10s",1]]}}"#);
    let set = admin(&a, "PUT", "/admin/overrides", &body).await;
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(export(&a, "erin").await.status, 200);
    let refused = export(&a, "erin").await;
    assert_eq!(refused.status, 429, "the override's 1 per 10 s, not the code's 3 a month: {refused:?}");
    assert_eq!(refused.header("ratelimit-policy"), Some(r#""user-10s";q=1;w=10"#), "{refused:?}");
    assert_eq!(export(&a, "frank").await.status, 200);
    assert_eq!(export(&a, "frank").await.status, 200, "other users keep the code's 3 a month");
}

#[tokio::test]
async fn the_admin_api_refuses_what_it_should() {
    let a = Server::start(&[], &[("RATELIMIT_ADMIN_TOKEN", TOKEN)]);
    let without = Server::start(&[], &[]);
    // Without the variable: 404, whatever the token.
    for (method, path) in
        [("GET", "/admin/limiters"), ("GET", "/admin/overrides?limiter=x"), ("PUT", "/admin/overrides")]
    {
        let r = send(without.addr, method, path, Some(&bearer()), "{}").await;
        assert_eq!(r.status, 404, "{method} {path}: {r:?}");
    }
    // 401 without the exact token.
    let wrong = [
        None,
        Some("Bearer".to_owned()),
        Some("Bearer ".to_owned()),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer  {TOKEN}")),
    ];
    for auth in &wrong {
        for (method, path) in [
            ("GET", "/admin/limiters"),
            ("GET", "/admin/overrides?limiter=x"),
            ("PUT", "/admin/overrides"),
            ("DELETE", "/admin/overrides"),
            ("GET", "/admin/nothing"),
        ] {
            let r = send(a.addr, method, path, auth.as_deref(), "{}").await;
            assert_eq!(r.status, 401, "{method} {path} with {auth:?}: {r:?}");
        }
    }
    assert_eq!(admin(&a, "GET", "/admin/nothing", "").await.status, 404);
    let lower = send(a.addr, "GET", "/admin/limiters", Some(&format!("bearer {TOKEN}")), "").await;
    assert_eq!(lower.status, 200, "the scheme is case-insensitive");
    // Unknown limiter: 404.
    let unknown = r#"{"limiter":"nobody","subject":"alice","rules":[["10s",2]]}"#;
    assert_eq!(admin(&a, "PUT", "/admin/overrides", unknown).await.status, 404);
    assert_eq!(admin(&a, "GET", "/admin/overrides?limiter=nobody", "").await.status, 404);
    // Invalid bodies: 400 with a message, and nothing changes.
    assert_eq!(search(&a, "warm-up").await.status, 200);
    let name = "admin_api::server::search";
    let cases = [
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10x",2]]}}"#), "unknown unit"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",0]]}}"#), "at least 1"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[]}}"#), "at least one rule"),
        (format!(r#"{{"limiter":"{name}","subject":"alice"}}"#), "no rules"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",2]],"ttl":"soon"}}"#), "ttl"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",2]],"ttl":"0s"}}"#), "ttl"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",2],["10s",3]]}}"#), "same window"),
        (format!(r#"{{"limiter":"{name}","subject":"","rules":[["10s",2]]}}"#), "empty"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",2]],"type":"ip"}}"#), "not an IP"),
        (
            format!(r#"{{"limiter":"{name}","subject":"1.2.3.4","rules":[["10s",2]],"type":"ip"}}"#),
            "no rate limit of type ip",
        ),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",-1]]}}"#), "rules"),
        (format!(r#"{{"limiter":"{name}","subject":"alice","rules":[["10s",2]],"extra":1}}"#), "extra"),
        ("not json".to_owned(), "expected"),
    ];
    for (body, message) in &cases {
        let r = admin(&a, "PUT", "/admin/overrides", body).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(r.body.contains(message), "{body}: {message:?} not in {}", r.body);
    }
    let r = admin(&a, "DELETE", "/admin/overrides", &format!(r#"{{"limiter":"{name}","subject":"alice","rules":[]}}"#))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(admin(&a, "GET", "/admin/overrides", "").await.status, 400, "no limiter named");
    let listed = admin(&a, "GET", &format!("/admin/overrides?limiter={name}"), "").await;
    assert_eq!((listed.status, listed.body.as_str()), (200, "[]"), "nothing changed");
    assert_eq!(searches(&a, "alice", 6).await, 5, "the code's rule");
    assert_eq!(a.logged("admin: override"), 0, "no change logged");
}
