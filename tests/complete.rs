//! `GET /api/complete?tokens=N` of the example server: calls charged the tokens they generated
//! (100 taken before the call, settled to N after it), across two server processes sharing one
//! real Redis. Every server runs in its own process, this test binary re-executed (see
//! tests/support/server_process.rs).

#[path = "support/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;
#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use support::server_process::{loopback, request, Reply, Server};
use support::RedisServer;

/// Not a test of its own: the body of the server processes that the tests start.
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

/// A completion of `tokens` for `user`, from the `i`th server.
async fn complete(servers: &[&Server], i: usize, user: &str, tokens: &str) -> Reply {
    let server = servers[i % servers.len()];
    let path = format!("/api/complete?tokens={tokens}");
    request(server.addr, loopback(40), "GET", &path, &[("X-User-Id", user)]).await
}

#[tokio::test]
async fn calls_are_charged_the_tokens_they_generated_across_two_processes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let (a, b) = (Server::start(&[], &env), Server::start(&[], &env));
    assert!(a.startup_line.contains("redis"), "{}", a.startup_line);
    let servers = [&a, &b];

    // 19 calls of 50 tokens: 950 of 1000. The 20th needs its estimate, 100: refused.
    for i in 0..19 {
        let r = complete(&servers, i, "alice", "50").await;
        assert_eq!((r.status, r.body.as_str()), (200, r#"{"tokens":50}"#), "call {i}: {r:?}");
    }
    let refused = complete(&servers, 19, "alice", "50").await;
    assert_eq!(refused.status, 429, "{refused:?}");

    // Calls that generate nothing cost nothing: they never run out. Bad requests neither.
    for i in 0..30 {
        let r = complete(&servers, i, "bob", "0").await;
        assert_eq!(r.status, 200, "call {i}: {r:?}");
        // Settled to 0: the header says nothing is used.
        assert_eq!(r.header("ratelimit"), Some(r#""user-1m";r=1000;t=60"#), "call {i}: {r:?}");
        let bad = complete(&servers, i, "bob", if i % 2 == 0 { "many" } else { "" }).await;
        assert_eq!(bad.status, 400, "{bad:?}");
    }
    let missing = request(a.addr, loopback(40), "GET", "/api/complete?tokens=5", &[]).await;
    assert_eq!(missing.status, 401, "{missing:?}");

    // Four calls of 300 tokens: the fourth is admitted (900 + its estimate of 100 fits) and
    // settled to 300: 1200 of 1000, in debt. The next is refused until the first call's units
    // leave (60 s after it), and its headers never show a negative remainder.
    let first = std::time::Instant::now();
    for i in 0..4 {
        let r = complete(&servers, i, "carol", "300").await;
        assert_eq!(r.status, 200, "call {i}: {r:?}");
    }
    let last = complete(&servers, 1, "carol", "300").await;
    let waited = first.elapsed().as_secs();
    assert_eq!(last.status, 429, "{last:?}");
    let retry: u64 = last.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After");
    assert!((60 - waited - 1..=60).contains(&retry), "the first call's units leave 60 s after it: {retry} ({last:?})");
    let field = last.header("ratelimit").expect("RateLimit");
    assert_eq!(field, format!(r#""user-1m";r=0;t={retry}"#), "{last:?}");
}
