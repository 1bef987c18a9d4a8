//! Peek and reset on memory, a real Redis and a real Redis Cluster, and the
//! attribute's limiters found by name: peek does not change counts, reset then admits, exact on
//! every algorithm.

#[path = "support/definition.rs"]
mod definition;
mod support;

use ratelimit::{
    clock::ManualClock, rate_limiter, status::RuleStatus, store::MemoryStore, store::RedisStore, store::StoreHandle,
    Algorithm, Limit, LimitType, Limiter, RateLimited, Rule, Subject,
};
use redis::Commands;
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

const ALGORITHMS: [Algorithm; 6] = Algorithm::ALL;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn key(s: &str) -> Subject<'static> {
    Subject::bytes(s.as_bytes().to_vec())
}

fn limiter(name: &str, store: StoreHandle, alg: Algorithm) -> Limiter {
    // Two rules: (1h, 10) and (1m, 5); long windows, so that nothing refills during a test.
    Limiter::builder(name)
        .limit(Limit::new(LimitType::Key, [rule(3_600_000, 10), rule(60_000, 5)]).algorithm(alg))
        .store(store)
        .build()
        .unwrap()
}

fn remaining(s: &[RuleStatus]) -> Vec<u64> {
    s.iter().map(|s| s.remaining).collect()
}

/// The scenario every store runs, for every algorithm: peek reads without consuming; the
/// counts are exact; reset restores the full quota.
async fn peek_and_reset_scenario(store: StoreHandle, tag: &str) {
    for alg in ALGORITHMS {
        let l = limiter(&format!("admin::{tag}::{alg:?}"), store.clone(), alg);
        let alice = [key("alice")];
        let fresh = l.peek(&alice).await.unwrap();
        assert_eq!(remaining(&fresh), [10, 5], "{alg:?}: a fresh subject has the full quota");
        assert!(fresh.iter().all(|s| s.reset == Duration::ZERO), "{alg:?}: {fresh:?}");
        assert_eq!(fresh[0].policy.rule, rule(3_600_000, 10));
        assert_eq!(fresh[1].policy.limit_type, LimitType::Key);

        for _ in 0..3 {
            l.check(&alice).await.unwrap();
        }
        let after = l.peek(&alice).await.unwrap();
        assert_eq!(remaining(&after), [7, 2], "{alg:?}: {after:?}");
        for s in &after {
            let window = s.policy.rule.window();
            // The sliding window counter's current window still counts through the next one.
            let bound = if alg == Algorithm::SlidingWindowCounter { 2 * window } else { window };
            assert!(s.reset > Duration::ZERO && s.reset <= bound, "{alg:?}: {s:?}");
        }
        // Peeking many times changes nothing: exactly two more calls fit the minute.
        for _ in 0..20 {
            assert_eq!(remaining(&l.peek(&alice).await.unwrap()), [7, 2], "{alg:?}");
        }
        l.check(&alice).await.unwrap();
        l.check(&alice).await.unwrap();
        assert!(l.check(&alice).await.is_err(), "{alg:?}: peek must not have given units back");
        assert_eq!(remaining(&l.peek(&alice).await.unwrap()), [5, 0], "{alg:?}");

        // Another subject is untouched by alice's calls and by her reset.
        let bob = [key("bob")];
        l.check(&bob).await.unwrap();
        l.reset(&alice).await.unwrap();
        let cleared = l.peek(&alice).await.unwrap();
        assert_eq!(remaining(&cleared), [10, 5], "{alg:?}: reset restores the full quota");
        assert!(cleared.iter().all(|s| s.reset == Duration::ZERO), "{alg:?}: {cleared:?}");
        for _ in 0..5 {
            l.check(&alice).await.unwrap();
        }
        assert!(l.check(&alice).await.is_err(), "{alg:?}: a reset subject gets exactly its quota");
        assert_eq!(remaining(&l.peek(&bob).await.unwrap()), [9, 4], "{alg:?}: bob is untouched");

        // The blocking twins agree.
        assert_eq!(remaining(&l.peek(&bob).blocking().unwrap()), [9, 4]);
        l.reset(&bob).blocking().unwrap();
        assert_eq!(remaining(&l.peek(&bob).blocking().unwrap()), [10, 5]);
    }
}

/// Stacked limits: a missing subject leaves its limit out of a peek and alone in a reset.
async fn stacked_scenario(store: StoreHandle, tag: &str) {
    let l = Limiter::builder(format!("admin::{tag}::login"))
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 20)]))
        .limit(Limit::new(LimitType::User, [rule(900_000, 3)]))
        .store(store)
        .build()
        .unwrap();
    let ip = Subject::ip("203.0.113.9".parse().unwrap());
    let both = [ip.clone(), key("carol")];
    for _ in 0..3 {
        l.check(&both).await.unwrap();
    }
    let status = l.peek(&both).await.unwrap();
    assert_eq!(status.iter().map(|s| (s.limit, s.remaining)).collect::<Vec<_>>(), [(0, 17), (1, 0)]);
    // A successful login clears the account, not the IP.
    l.reset(&[Subject::missing(), key("carol")]).await.unwrap();
    let status = l.peek(&both).await.unwrap();
    assert_eq!(status.iter().map(|s| (s.limit, s.remaining)).collect::<Vec<_>>(), [(0, 17), (1, 3)]);
    // Peek of the IP alone.
    let ip_only = l.peek(&[ip]).await.unwrap();
    assert_eq!(ip_only.iter().map(|s| (s.limit, s.remaining)).collect::<Vec<_>>(), [(0, 17)]);
    assert!(l.check(&both).await.is_ok());
}

#[tokio::test]
async fn memory_peek_and_reset() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    peek_and_reset_scenario(store.clone(), "memory").await;
    stacked_scenario(store, "memory").await;
}

/// On a manual clock, every algorithm's peek is exact, time included.
#[tokio::test]
async fn memory_peek_is_exact_over_time() {
    let clock = Arc::new(ManualClock::new(1_000_000_000_000));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    let subject = [key("dave")];
    let one = |alg: Algorithm, name: &str| {
        Limiter::builder(name)
            .limit(Limit::new(LimitType::Key, [rule(10_000, 10)]).algorithm(alg))
            .store(store.clone())
            .build()
            .unwrap()
    };
    // (algorithm, remaining and reset right after 4 calls, then 2.5s later)
    let cases = [
        (Algorithm::SlidingWindow, (6, 10_000), (6, 7_500)),
        (Algorithm::TokenBucket, (6, 4_000), (8, 1_500)),
        (Algorithm::LeakyBucket, (6, 4_000), (8, 1_500)),
        (Algorithm::Gcra, (6, 4_000), (8, 1_500)),
        // The clock starts on a window boundary: the window ends 10s later.
        (Algorithm::FixedWindow, (6, 10_000), (6, 7_500)),
        // The current window's calls count (weighted) through the next window too.
        (Algorithm::SlidingWindowCounter, (6, 20_000), (6, 17_500)),
    ];
    for (alg, first, later) in cases {
        let l = one(alg, &format!("admin::exact::{alg:?}"));
        for _ in 0..4 {
            l.check(&subject).await.unwrap();
        }
        let s = l.peek(&subject).await.unwrap()[0];
        assert_eq!((s.remaining, s.reset.as_millis() as u64), first, "{alg:?}");
        clock.advance(Duration::from_millis(2_500));
        let s = l.peek(&subject).await.unwrap()[0];
        assert_eq!((s.remaining, s.reset.as_millis() as u64), later, "{alg:?}");
        clock.advance(Duration::from_secs(60));
        let s = l.peek(&subject).await.unwrap()[0];
        assert_eq!((s.remaining, s.reset), (10, Duration::ZERO), "{alg:?}: whole again");
        // Back on a window boundary for the next case.
        clock.advance(Duration::from_millis(7_500));
    }
    // The sliding window counter a quarter into the next window: the previous window's 4 calls
    // weigh 3, and the quota is whole when that window has slid out.
    let l = one(Algorithm::SlidingWindowCounter, "admin::exact::swc_next");
    for _ in 0..4 {
        l.check(&subject).await.unwrap();
    }
    clock.advance(Duration::from_millis(12_500));
    let s = l.peek(&subject).await.unwrap()[0];
    assert_eq!((s.remaining, s.reset.as_millis() as u64), (7, 7_500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_peek_and_reset() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap());
    peek_and_reset_scenario(store.clone(), "redis").await;
    stacked_scenario(store.clone(), "redis").await;

    // A peek writes nothing: no key for a fresh subject, no TTL refreshed, no entry added.
    let mut con = server.client();
    let l = limiter("admin::redis::writes", store.clone(), Algorithm::SlidingWindow);
    let before: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    l.peek(&[key("nobody")]).await.unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<u64>(&mut con).unwrap(), before);
    l.check(&[key("erin")]).await.unwrap();
    let keys: Vec<String> = con.keys("rate_limit:{admin::redis::writes|key|erin}*").unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let members: u64 = con.zcard(&keys[0]).unwrap();
    let ttl: i64 = con.pttl(&keys[0]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    l.peek(&[key("erin")]).await.unwrap();
    assert_eq!(con.zcard::<_, u64>(&keys[0]).unwrap(), members);
    assert!(con.pttl::<_, i64>(&keys[0]).unwrap() < ttl, "a peek does not refresh the TTL");
    // A reset deletes the subject's keys.
    l.reset(&[key("erin")]).await.unwrap();
    assert!(!con.exists::<_, bool>(&keys[0]).unwrap());

    // One round trip each: one EVALSHA per peek, one DEL per reset.
    support::reset_stats(&mut con);
    let stacked = Limiter::builder("admin::redis::trips")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 20), rule(1_000, 5)]))
        .limit(Limit::new(LimitType::User, [rule(900_000, 3)]))
        .limit(Limit::new(LimitType::Global, [rule(1_000, 100)]).algorithm(Algorithm::TokenBucket))
        .store(store.clone())
        .build()
        .unwrap();
    let subjects = [Subject::ip("192.0.2.1".parse().unwrap()), key("frank"), Subject::global()];
    assert_eq!(stacked.peek(&subjects).await.unwrap().len(), 4);
    stacked.reset(&subjects).await.unwrap();
    let mut calls = |cmd: &str| support::command_calls(&mut con, cmd);
    assert_eq!((calls("evalsha"), calls("del")), (1, 1));

    // A dead store: the error comes back, within the timeout.
    let mut server = server;
    server.kill();
    let started = std::time::Instant::now();
    assert!(stacked.peek(&subjects).await.is_err());
    assert!(stacked.reset(&subjects).await.is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_peek_and_reset() {
    use ratelimit::store::ClusterStore;
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let store: StoreHandle = Arc::new(ClusterStore::open(&cluster.urls(), Duration::from_secs(2)).unwrap());
    peek_and_reset_scenario(store.clone(), "cluster").await;
    stacked_scenario(store.clone(), "cluster").await;

    // Limits of one call in several slots: each is read and cleared.
    let l = Limiter::builder("admin::cluster::spread")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 4)]))
        .limit(Limit::new(LimitType::User, [rule(60_000, 3)]))
        .limit(Limit::new(LimitType::Global, [rule(60_000, 50)]).algorithm(Algorithm::Gcra))
        .store(store)
        .build()
        .unwrap();
    for n in 0..20 {
        let subjects = [Subject::ip("198.51.100.1".parse().unwrap()), key(&format!("user{n}")), Subject::global()];
        l.check(&subjects).await.unwrap();
        let s = l.peek(&subjects).await.unwrap();
        assert_eq!(s.iter().map(|s| s.limit).collect::<Vec<_>>(), [0, 1, 2], "limit order");
        l.reset(&subjects).await.unwrap();
        assert_eq!(remaining(&l.peek(&subjects).await.unwrap()), [4, 3, 50]);
    }
}

#[rate_limiter(type = Key, rules = [(15m, 3)], key = account, name = "admin::login_failures")]
fn record_failed_login(account: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1m, 2)])]
async fn unnamed() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn attribute_limiters_are_found_by_name() {
    // Declared: known before its first call, with nothing counted.
    let before = ratelimit::limiter("admin::login_failures").expect("known before its first call");
    assert_eq!(before.peek(&[key("grace")]).await.unwrap()[0].remaining, 3);
    for _ in 0..3 {
        record_failed_login("grace").unwrap();
    }
    assert!(record_failed_login("grace").is_err());
    let failures = ratelimit::limiter("admin::login_failures").expect("the same limiter");
    assert_eq!(failures.name(), "admin::login_failures");
    assert_eq!(failures.peek(&[key("grace")]).await.unwrap()[0].remaining, 0);
    failures.reset(&[key("grace")]).await.unwrap();
    assert!(record_failed_login("grace").is_ok(), "the reset reached the attribute's counts");
    assert_eq!(failures.peek(&[key("grace")]).blocking().unwrap()[0].remaining, 2);

    // The default name: module path and function.
    unnamed().await.unwrap();
    let l = ratelimit::limiter("admin::unnamed").expect("module::function");
    assert_eq!(l.peek(&[Subject::global()]).await.unwrap()[0].remaining, 1);
    assert!(ratelimit::limiter("admin::nothing").is_none());
}

/// The login example of docs/waiting.md, as written there.
mod readme_login {
    use ratelimit::{rate_limiter, RateLimited, Subject};

    #[derive(Debug)]
    pub enum LoginError {
        Locked,
        TooManyAttempts(RateLimited),
        WrongPassword { attempts_left: u64 },
    }

    impl From<RateLimited> for LoginError {
        fn from(e: RateLimited) -> Self {
            LoginError::TooManyAttempts(e)
        }
    }

    /// Counts a failed login: 5 per account per 15 minutes.
    #[rate_limiter(type = Key, rules = [(15m, 5)], key = account, name = "login::failures")]
    async fn record_failure(account: &str) -> Result<(), LoginError> {
        Ok(())
    }

    pub async fn login(account: &str, password: &str) -> Result<(), LoginError> {
        let subject = [Subject::bytes(account.as_bytes())];
        let failures = ratelimit::limiter("login::failures"); // declared: known from the start
        if let Some(f) = &failures {
            // No attempt left: locked out, whatever the password (peek consumes nothing).
            if f.peek(&subject).await.is_ok_and(|s| s[0].remaining == 0) {
                return Err(LoginError::Locked);
            }
        }
        if password != "correct horse" {
            record_failure(account).await?;
            let f = ratelimit::limiter("login::failures");
            let attempts_left = match f {
                Some(f) => f.peek(&subject).await.map_or(0, |s| s[0].remaining),
                None => 0,
            };
            return Err(LoginError::WrongPassword { attempts_left });
        }
        // A successful login clears the account's failures.
        if let Some(f) = failures {
            f.reset(&subject).await.ok();
        }
        Ok(())
    }
}

#[tokio::test]
async fn readme_login_example() {
    use readme_login::{login, LoginError};
    for left in (0..5).rev() {
        match login("heidi", "guess").await {
            Err(LoginError::WrongPassword { attempts_left }) => assert_eq!(attempts_left, left),
            Err(LoginError::TooManyAttempts(e)) => panic!("the lockout comes first: {e}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(login("heidi", "correct horse").await, Err(LoginError::Locked)));
    // Another account logs in and its failures are cleared.
    assert!(matches!(login("ivan", "guess").await, Err(LoginError::WrongPassword { attempts_left: 4 })));
    login("ivan", "correct horse").await.unwrap();
    assert!(matches!(login("ivan", "guess").await, Err(LoginError::WrongPassword { attempts_left: 4 })));
}

/// The same pseudo-random sequence of calls through Redis and memory, with pinned times, each
/// decided as the definitions decide it (tests/support/definition.rs); and after each, a peek a
/// little later reads, in both stores, every rule's remaining and reset as the definitions give
/// them.
#[tokio::test]
async fn peek_reads_as_the_definitions_in_redis_and_memory() {
    let server = RedisServer::start();
    let remote_store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap());
    // Far in the future: keys expire by the pinned clock, so it must not be in the past.
    const T0: u64 = 4_000_000_000_000_000;
    const S: u64 = 1_000_000;
    for alg in ALGORITHMS {
        for burst in [None, Some(12)] {
            if burst.is_some() && !alg.supports_burst() {
                continue;
            }
            let spec = definition::LimitSpec {
                limit_type: LimitType::Global,
                alg,
                rules: vec![rule(60_000, 8), rule(20_000, 3)],
                burst,
                block: None,
            };
            let limits = std::slice::from_ref(&spec);
            let name = format!("admin::diff::{alg:?}::{burst:?}");
            // The stores' own answers, exact (the refusal cache: tests/refusal_cache.rs).
            let stores = [("redis", remote_store.clone()), ("memory", Arc::new(MemoryStore::new()) as StoreHandle)];
            for (store_name, store) in stores {
                let l = definition::build(&store, &name, limits);
                let mut models = vec![spec.rules.iter().map(|&r| definition::RuleModel::new(alg, r, burst)).collect()];
                let mut rng = support::Rng(0x9e37_79b9_7f4a_7c15);
                let g = [Subject::global()];
                let mut now = T0;
                let mut admitted = 0;
                for i in 0..150 {
                    now += rng.below(9 * S);
                    let cost = [1, 1, 2, 0, 3][rng.below(5) as usize];
                    let what = format!("{store_name} {alg:?} {burst:?} call {i}");
                    let want = definition::compare(&l, limits, &mut models, &g, now, cost).await;
                    let want = want.unwrap_or_else(|e| panic!("{what}: {e}")).expect("a cost that fits");
                    admitted += usize::from(want.allowed);
                    let later = now + rng.below(3 * S);
                    let peeked = l.peek(&g).at(support::at(later)).await.unwrap();
                    let read: Vec<(u64, u64)> =
                        peeked.iter().map(|s| (s.remaining, u64::try_from(s.reset.as_micros()).unwrap())).collect();
                    let defined: Vec<(u64, u64)> = models[0].iter().map(|m| (m.room(later), m.reset(later))).collect();
                    assert_eq!(read, defined, "{what}: peek at +{}µs (remaining, reset) per rule", later - now);
                }
                assert!(admitted > 15 && admitted < 135, "{store_name} {alg:?}: both outcomes ({admitted} admitted)");
            }
        }
    }
}
