//! Runtime overrides: one subject's rules changed while the limiters run, seen by every limiter
//! on the store from its next call. In memory on a manual clock (TTLs to the millisecond), and
//! on real Redis and a real local Redis Cluster, two stores standing for two processes.

mod support;

use ratelimit::clock::ManualClock;
use ratelimit::error::{BuildError, OverrideError};
use ratelimit::store::{MemoryStore, RedisStore, StoreHandle};
use ratelimit::{Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::RedisServer;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn user(s: &str) -> Subject<'static> {
    Subject::bytes(s.as_bytes().to_vec())
}

/// A limiter of `name`, 2 per minute per user, honouring overrides, on `store`.
fn limiter(name: &str, store: StoreHandle) -> Limiter {
    Limiter::builder(name)
        .limit(Limit::new(LimitType::User, [rule(60_000, 2)]))
        .runtime_overrides(true)
        .store(store)
        .build()
        .unwrap()
}

/// How many of `n` calls of `subject` pass.
fn admitted(limiter: &Limiter, subject: &Subject<'_>, n: usize) -> usize {
    (0..n).filter(|_| limiter.check(std::slice::from_ref(subject)).blocking().is_ok()).count()
}

#[test]
fn memory_overrides_bind_at_once_and_end_on_time() {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    let (a, b) = (limiter("ro::memory", store.clone()), limiter("ro::memory", store.clone()));
    let (alice, bob) = (user("alice"), user("bob"));
    assert_eq!(admitted(&b, &alice, 3), 2, "the code's rule");
    // Raised through one limiter: the other admits at once, counts carried over (2 of 5 used).
    a.set_override(&alice, [rule(60_000, 5)]).ttl(Duration::from_secs(30)).blocking().unwrap();
    assert_eq!(admitted(&b, &alice, 5), 3);
    assert_eq!(admitted(&b, &bob, 3), 2, "other users keep the code's rule");
    let listed = a.overrides().blocking().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].limit_type, &listed[0].subject[..]), (LimitType::User, &b"alice"[..]));
    assert_eq!(listed[0].rules, [rule(60_000, 5)]);
    // The TTL ends it to the millisecond: the code's 2 per minute is back (5 used: refused).
    clock.advance(Duration::from_millis(29_999));
    let refused = b.check(std::slice::from_ref(&alice)).blocking().unwrap_err();
    assert_eq!(refused.policy().map(|p| p.rule.count()), Some(5), "still under the override");
    clock.advance(Duration::from_millis(1));
    let refused = b.check(std::slice::from_ref(&alice)).blocking().unwrap_err();
    assert_eq!(refused.policy().map(|p| p.rule.count()), Some(2), "the override ended");
    assert!(a.overrides().blocking().unwrap().is_empty());
    // Lowered: a subject already over it is refused at once.
    let carol = user("carol");
    assert_eq!(admitted(&a, &carol, 1), 1);
    b.set_override(&carol, [rule(60_000, 1)]).blocking().unwrap();
    assert_eq!(admitted(&a, &carol, 1), 0);
    b.clear_override(&carol).blocking().unwrap();
    assert_eq!(admitted(&a, &carol, 2), 1, "cleared: the code's 2");
}

#[test]
fn an_override_with_a_longer_window_sees_what_the_code_kept() {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    let l = Limiter::builder("ro::longer")
        .limit(Limit::new(LimitType::User, [rule(10_000, 3)]))
        .runtime_overrides(true)
        .store(store)
        .build()
        .unwrap();
    let dave = user("dave");
    assert_eq!(admitted(&l, &dave, 3), 3);
    clock.advance(Duration::from_secs(5));
    // 4 per minute: the 3 calls of 5 s ago count (the log kept them), one more passes.
    l.set_override(&dave, [rule(60_000, 4)]).blocking().unwrap();
    assert_eq!(admitted(&l, &dave, 2), 1);
    // Past the code's window, the override's minute still holds them.
    clock.advance(Duration::from_secs(20));
    assert_eq!(admitted(&l, &dave, 1), 0);
}

#[test]
fn invalid_overrides_change_nothing() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let l = limiter("ro::invalid", store);
    let erin = user("erin");
    let invalid = |r: Result<(), OverrideError>| match r {
        Err(OverrideError::Invalid(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(invalid(l.set_override(&erin, []).blocking()), BuildError::NoRules);
    let twice = l.set_override(&erin, [rule(1000, 1), rule(1000, 2)]).blocking();
    assert!(matches!(invalid(twice), BuildError::DuplicateWindow(_)));
    let ttl = l.set_override(&erin, [rule(1000, 1)]).ttl(Duration::ZERO).blocking();
    assert!(matches!(invalid(ttl), BuildError::InvalidOverrideTtl(_)));
    let no_ip = l.set_override(&erin, [rule(1000, 1)]).limit_type(LimitType::Ip).blocking();
    assert_eq!(invalid(no_ip), BuildError::NoLimitToOverride("ip"));
    assert!(l.overrides().blocking().unwrap().is_empty());
    assert_eq!(admitted(&l, &erin, 3), 2);
}

/// A limiter that does not honour overrides decides with its own rules.
#[test]
fn overrides_bind_only_limiters_that_honour_them() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let honours = limiter("ro::optin", store.clone());
    let ignores = Limiter::builder("ro::optin")
        .limit(Limit::new(LimitType::User, [rule(60_000, 2)]))
        .store(store)
        .build()
        .unwrap();
    let frank = user("frank");
    honours.set_override(&frank, [rule(60_000, 4)]).blocking().unwrap();
    assert_eq!(admitted(&ignores, &frank, 3), 2);
    assert_eq!(admitted(&honours, &frank, 3), 2, "the same counts, under 4");
}

fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap())
}

/// Two stores on one Redis stand for two processes: each learns the other's overrides from its
/// next call, the TTL ends one on time, and a refused subject (the refusal cache on, as it is
/// by default for Redis) is admitted as soon as it is raised.
#[test]
fn redis_overrides_bind_in_every_process() {
    let server = RedisServer::start();
    let (a, b) = (limiter("ro::redis", redis_store(&server)), limiter("ro::redis", redis_store(&server)));
    let (alice, bob) = (user("alice"), user("bob"));
    assert_eq!(admitted(&b, &alice, 3), 2);
    a.set_override(&alice, [rule(60_000, 5)]).ttl(Duration::from_millis(1500)).blocking().unwrap();
    let set_at = Instant::now();
    assert_eq!(admitted(&b, &alice, 5), 3, "raised: admitted at once in the other process");
    assert_eq!(admitted(&b, &bob, 3), 2, "other users keep the code's rule");
    assert_eq!(a.overrides().blocking().unwrap().len(), 1);
    let refused = b.check(std::slice::from_ref(&alice)).blocking().unwrap_err();
    assert_eq!(refused.policy().map(|p| p.rule.count()), Some(5));
    // The TTL ends it: Redis drops the key, both processes learn it on their next call.
    while set_at.elapsed() < Duration::from_millis(1600) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for l in [&a, &b] {
        let refused = l.check(std::slice::from_ref(&alice)).blocking().unwrap_err();
        assert_eq!(refused.policy().map(|p| p.rule.count()), Some(2), "the override ended");
    }
    assert!(a.overrides().blocking().unwrap().is_empty(), "the index drops ended entries");
    // Lowered in one process: refused at once in the other.
    let carol = user("carol");
    assert_eq!(admitted(&a, &carol, 1), 1);
    b.set_override(&carol, [rule(60_000, 1)]).blocking().unwrap();
    assert_eq!(admitted(&a, &carol, 1), 0);
    // Cleared in the other one: the code's 2 again (1 used).
    a.clear_override(&carol).blocking().unwrap();
    assert_eq!(admitted(&b, &carol, 2), 1);
    // No extra round trip per decision: one script run each, and one more only when this
    // process meets an override that changed since it last saw the subject.
    let erin = user("erin");
    server.reset_stats();
    assert_eq!(admitted(&b, &erin, 1), 1);
    assert_eq!(server.evalsha_runs(), 1);
    a.set_override(&erin, [rule(60_000, 9)]).blocking().unwrap();
    server.reset_stats();
    assert_eq!(admitted(&b, &erin, 2), 2);
    assert_eq!(server.evalsha_runs(), 3, "one more for the change, then one each");
    assert_eq!(admitted(&a, &erin, 1), 1);
    assert_eq!(server.evalsha_runs(), 4, "the process that set it knew it");
    // What Redis holds: the override key in the subject's hash tag, with its TTL.
    let dave = user("dave");
    a.set_override(&dave, [rule(10_000, 7)]).ttl(Duration::from_secs(30)).blocking().unwrap();
    let mut con = server.client();
    let key = "rate_limit:{ro::redis|user|dave}:ov";
    let value: String = redis::cmd("GET").arg(key).query(&mut con).unwrap();
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
    assert_eq!(value, "10000:7");
    assert!((29_000..=30_000).contains(&ttl), "{ttl}");
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_overrides_bind_in_every_process() {
    use ratelimit::store::ClusterStore;
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let store = || -> StoreHandle { Arc::new(ClusterStore::open(&cluster.urls(), Duration::from_secs(2)).unwrap()) };
    // A user limit stacked with a global one: two slots per call.
    let build = |store| {
        Limiter::builder("ro::cluster")
            .limit(Limit::new(LimitType::User, [rule(60_000, 2)]))
            .limit(Limit::new(LimitType::Global, [rule(60_000, 1000)]))
            .runtime_overrides(true)
            .store(store)
            .build()
            .unwrap()
    };
    let (a, b) = (build(store()), build(store()));
    let calls = |l: &Limiter, who: &str, n: usize| {
        (0..n).filter(|_| l.check(&[user(who), Subject::global()]).blocking().is_ok()).count()
    };
    // Each user in turn, so that the override keys fall on different slots.
    for who in ["alice", "bob", "carol", "dave"] {
        assert_eq!(calls(&b, who, 3), 2, "{who}");
        a.set_override(&user(who), [rule(60_000, 4)]).blocking().unwrap();
        assert_eq!(calls(&b, who, 3), 2, "{who}: raised to 4 in the other process");
        a.set_override(&user(who), [rule(60_000, 1)]).blocking().unwrap();
        assert_eq!(calls(&b, who, 1), 0, "{who}: lowered");
        b.clear_override(&user(who)).blocking().unwrap();
    }
    assert!(a.overrides().blocking().unwrap().is_empty());
    // A call refused for a changed override records nothing on the other slot: the global
    // limit counted only the admitted calls (4 users x 2, then 2 more each).
    let global = b.peek(&[user("erin"), Subject::global()]).blocking().unwrap();
    assert_eq!(global.iter().find(|s| s.limit == 1).map(|s| s.remaining), Some(1000 - 16));
}

/// Sentinel decides through the same Redis path: two stores on the primary it names.
#[test]
fn sentinel_overrides_bind_in_every_process() {
    use ratelimit::store::{SentinelSpec, SentinelStore};
    use support::sentinel::{SentinelSet, MASTER};
    let set = SentinelSet::start();
    let store = || -> StoreHandle {
        Arc::new(SentinelStore::open(&SentinelSpec::new([set.sentinel_url()], MASTER), Duration::from_secs(2)).unwrap())
    };
    let (a, b) = (limiter("ro::sentinel", store()), limiter("ro::sentinel", store()));
    let alice = user("alice");
    // The first calls may meet the store still asking the sentinel for its primary.
    support::poll_until(Duration::from_secs(20), Duration::from_millis(100), "the primary", || {
        b.peek(std::slice::from_ref(&alice)).blocking().ok()
    });
    assert_eq!(admitted(&b, &alice, 3), 2);
    a.set_override(&alice, [rule(60_000, 4)]).ttl(Duration::from_secs(30)).blocking().unwrap();
    assert_eq!(admitted(&b, &alice, 3), 2, "raised to 4 in the other process");
    b.clear_override(&alice).blocking().unwrap();
    assert_eq!(admitted(&a, &alice, 1), 0, "cleared: the code's 2, 4 used");
    assert!(a.overrides().blocking().unwrap().is_empty());
}

/// Precedence: the subject's override, then its tier, then the code. The override replaces the
/// tier's rules for that subject, on the tier's counts.
#[test]
fn an_override_comes_before_the_tier() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let l = Limiter::builder("ro::tiers")
        .limit(Limit::new(LimitType::User, [rule(60_000, 2)]).tier("pro", [rule(60_000, 4)]))
        .runtime_overrides(true)
        .store(store)
        .build()
        .unwrap();
    let (gina, hal) = (user("gina"), user("hal"));
    let pro = |who: &Subject<'_>, n: usize| {
        (0..n).filter(|_| l.check(std::slice::from_ref(who)).tier("pro").blocking().is_ok()).count()
    };
    assert_eq!(pro(&gina, 3), 3, "the tier's 4");
    l.set_override(&gina, [rule(60_000, 5)]).blocking().unwrap();
    assert_eq!(pro(&gina, 3), 2, "the override's 5, on the tier's counts");
    assert_eq!(admitted(&l, &gina, 6), 5, "without a tier too: the override's 5 on the code's counts");
    assert_eq!(pro(&hal, 5), 4, "another pro user keeps the tier's rules");
}

/// The window counters carry their counts over an override with the same window, on Redis and
/// in memory. Buckets and GCRA keep their level: what was spent stays spent, a raised capacity
/// refills at the override's rate (see docs/overrides.md).
#[test]
fn o1_algorithms_carry_counts_over() {
    use ratelimit::Algorithm;
    let server = RedisServer::start();
    for store in [Arc::new(MemoryStore::new()) as StoreHandle, redis_store(&server)] {
        let all = [Algorithm::FixedWindow, Algorithm::SlidingWindowCounter, Algorithm::TokenBucket, Algorithm::Gcra];
        for algorithm in all {
            let name = format!("ro::o1::{algorithm:?}::{}", store.describe());
            let l = Limiter::builder(name.as_str())
                .limit(Limit::new(LimitType::User, [rule(3_600_000, 2)]).algorithm(algorithm))
                .runtime_overrides(true)
                .store(store.clone())
                .build()
                .unwrap();
            let ivy = user("ivy");
            assert_eq!(admitted(&l, &ivy, 3), 2, "{name}");
            l.set_override(&ivy, [rule(3_600_000, 4)]).blocking().unwrap();
            // Counts carry over; so do the buckets' levels (tests/override_levels.rs).
            assert_eq!(admitted(&l, &ivy, 3), 2, "{name}: raised to 4, 2 used");
            l.set_override(&ivy, [rule(3_600_000, 1)]).blocking().unwrap();
            assert_eq!(admitted(&l, &ivy, 1), 0, "{name}: lowered");
        }
    }
}
