//! Shadow limits decided in the enforced limits' store call: one store call (one `EVALSHA`)
//! per decision, what the shadow limits count, and their refusals counted as `shadow_denied`
//! (read back through a real Prometheus recorder), in memory and on a real Redis.
//!
//! A binary of its own: the metrics tests compare store-wide figures (every Redis call timed)
//! that these calls would add to.

#[path = "support/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;
mod support;

use prometheus::{recorder, scrape, Scrape};
use ratelimit::{store::MemoryStore, store::RedisStore, store::StoreHandle, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

fn decisions(s: &Scrape, limiter: &str, outcome: &str) -> f64 {
    s.count("ratelimit_decisions_total", &[("limiter", limiter), ("outcome", outcome)])
}

/// An enforced limit (5 per minute per key) and a shadow one (4 per minute, global), decided by
/// `store`: the calls of costs 1, 1, 3, 1 pass, pass, pass with a shadow refusal (the shadow
/// limit would hold 5 of 4: it records nothing), and are refused by the enforced limit (the
/// shadow limit is not decided). `store_calls`, if given, counts the store's decisions so far:
/// one per call. What the shadow limit counted is read by a limiter of the same identity that enforces
/// it: 2 of 4.
fn shadow_in_one_store_call(name: &str, store: StoreHandle, store_calls: Option<&dyn Fn() -> u64>) {
    recorder();
    let rule = |count| Rule::new(Duration::from_secs(60), count).expect("rule");
    let limiter = Limiter::builder(name)
        .limit(Limit::new(LimitType::Key, [rule(5)]))
        .limit(Limit::new(LimitType::Global, [rule(4)]).mode(ratelimit::Mode::Shadow))
        .store(store.clone())
        .build()
        .expect("limiter");
    let subjects = [Subject::bytes(&b"alice"[..]), Subject::global()];
    // Connected, the scripts loaded: the count starts with the decisions.
    let warm = Limiter::builder(format!("{name}::warm")).limit(Limit::new(LimitType::Global, [rule(4)]));
    warm.store(store.clone()).build().expect("limiter").check(&[Subject::global()]).blocking().expect("room");
    let before = scrape();
    let calls = store_calls.map(|count| count());
    let mut outcomes = Vec::new();
    for (n, cost) in [1, 1, 3, 1].into_iter().enumerate() {
        outcomes.push(limiter.check(&subjects).cost(cost).blocking().is_ok());
        if let (Some(count), Some(calls)) = (store_calls, calls) {
            assert_eq!(count() - calls, n as u64 + 1, "{name}: one store call per decision");
        }
    }
    assert_eq!(outcomes, [true, true, true, false], "{name}");
    let s = scrape();
    let delta = |outcome| decisions(&s, name, outcome) - decisions(&before, name, outcome);
    assert_eq!(delta("allowed"), 3.0, "{name}");
    assert_eq!(delta("shadow_denied"), 1.0, "{name}: the shadow refusal is counted");
    assert_eq!(delta("denied"), 1.0, "{name}");
    let twin =
        Limiter::builder(name).limit(Limit::new(LimitType::Global, [rule(4)])).store(store).build().expect("twin");
    let status = twin.peek(&[Subject::global()]).blocking().expect("peek");
    let remaining: Vec<u64> = status.iter().map(|s| s.remaining).collect();
    assert_eq!(remaining, [2], "{name}: the shadow limit counted the two calls it admitted, alone");
}

/// A shadow limit with a penalty, beside an enforced limit: its refusal starts its block, as
/// it did in a call of its own. At t0 the shadow limit (2 per minute, blocking 10 minutes)
/// admits two calls and would refuse the third; a minute later its window has room, but the
/// block would still refuse: two shadow refusals, every call let through.
fn shadow_block(name: &str, store: StoreHandle) {
    recorder();
    let rule = |count| Rule::new(Duration::from_secs(60), count).expect("rule");
    let limiter = Limiter::builder(name)
        .limit(Limit::new(LimitType::Key, [rule(100)]))
        .limit(Limit::new(LimitType::Global, [rule(2)]).block(Duration::from_secs(600)).mode(ratelimit::Mode::Shadow))
        .store(store)
        .build()
        .expect("limiter");
    let subjects = [Subject::bytes(&b"alice"[..]), Subject::global()];
    let t0 = std::time::SystemTime::now();
    let before = scrape();
    for at in [t0, t0, t0, t0 + Duration::from_secs(61)] {
        limiter.check(&subjects).at(at).blocking().expect("shadow never refuses");
    }
    let s = scrape();
    let shadow_denied = decisions(&s, name, "shadow_denied") - decisions(&before, name, "shadow_denied");
    assert_eq!(shadow_denied, 2.0, "{name}: refused by the rule, then by the block it started");
}

/// Shadow limits are decided in the enforced limits' store call, in memory. (The in-memory
/// store keeps no count of its calls: the crate's unit test counts them.)
#[test]
fn shadow_limits_share_the_store_call_in_memory() {
    shadow_in_one_store_call("metrics_test::shadow_memory", Arc::new(MemoryStore::new()), None);
    shadow_block("metrics_test::shadow_block_memory", Arc::new(MemoryStore::new()));
}

/// Shadow limits are decided in the enforced limits' `EVALSHA`, on a real Redis.
#[test]
fn shadow_limits_share_the_evalsha_on_redis() {
    let redis = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&redis.url(), Duration::from_secs(2)).expect("store"));
    shadow_in_one_store_call("metrics_test::shadow_redis", store.clone(), Some(&|| redis.calls("evalsha")));
    shadow_block("metrics_test::shadow_block_redis", store);
}
