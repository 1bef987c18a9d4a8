//! Two clients whose processes disagree on wall time by an hour still share one exact window:
//! decisions take time from the Redis server, never from the client. The skewed client is this
//! test binary re-run under libfaketime (`faketime -f -1h`).

mod support;

use ratelimit::{store::RedisStore, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::RedisServer;

const URL_VAR: &str = "RATELIMIT_SKEW_CHILD_REDIS_URL";

fn limiter(url: &str) -> Limiter {
    Limiter::builder("skew::shared")
        .limit(Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(60), 10).unwrap()]))
        .store(Arc::new(RedisStore::open(url, Duration::from_secs(2)).unwrap()))
        .build()
        .unwrap()
}

fn unix_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Run by the parent test under faketime (see tests/support/child.rs); does nothing when run by
/// hand.
#[test]
#[ignore = "run by redis_clients_with_skewed_clocks_share_one_window"]
fn skew_child() {
    let Some(url) = support::child::given(URL_VAR) else { return };
    let limiter = limiter(&url);
    let admitted = (0..6).filter(|_| limiter.check(&[Subject::global()]).blocking().is_ok()).count();
    println!("CHILD now={} admitted={admitted}", unix_secs());
}

#[test]
fn redis_clients_with_skewed_clocks_share_one_window() {
    let server = RedisServer::start();
    let limiter = limiter(&server.url());
    let here = (0..6).filter(|_| limiter.check(&[Subject::global()]).blocking().is_ok()).count();
    assert_eq!(here, 6);

    let out = support::child::command_under(&["faketime", "-f", "-1h"], "skew_child")
        .env(URL_VAR, server.url())
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("faketime is not installed (apt-get install -y faketime); this test never skips");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find_map(|l| l.split_once("CHILD ").map(|(_, rest)| rest)).expect("child output");
    let field = |name: &str| -> u64 {
        line.split_whitespace().find_map(|kv| kv.strip_prefix(name)).and_then(|v| v.parse().ok()).expect(name)
    };
    let skew = unix_secs().abs_diff(field("now="));
    assert!(skew > 3000, "the child's clock must really be skewed (got {skew}s)");
    assert_eq!(field("admitted="), 4, "the skewed client sees the same window: 10 - 6 = 4 left");
    assert!(limiter.check(&[Subject::global()]).blocking().is_err());
}
