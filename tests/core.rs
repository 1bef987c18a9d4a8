//! The runtime core against a real `redis-server` and the in-memory store: exactness under
//! concurrency, all-or-nothing, exact retry-after, TTLs, hostile subjects, and both stores
//! deciding as the algorithms' definitions.

#[path = "support/definition.rs"]
mod definition;
mod support;

use ratelimit::{
    clock::ManualClock, store::MemoryStore, store::RedisStore, store::StoreHandle, Cause, FailurePolicy, Limit,
    LimitType, Limiter, Rule, Subject,
};
use redis::Commands;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_millis(500)).unwrap())
}

fn ip(s: &str) -> Subject<'static> {
    Subject::ip(s.parse().unwrap())
}

fn user(s: &str) -> Subject<'static> {
    Subject::bytes(s.as_bytes().to_vec())
}

/// Every key in the server, sorted.
fn keys(server: &RedisServer) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = server.client().keys("*").unwrap();
    keys.sort();
    keys
}

/// A key and its (member, score) pairs.
type Log = (Vec<u8>, Vec<(Vec<u8>, f64)>);

/// Every (member, score) of every key.
fn snapshot(server: &RedisServer) -> Vec<Log> {
    let mut con = server.client();
    keys(server)
        .into_iter()
        .map(|k| {
            let members: Vec<(Vec<u8>, f64)> = con.zrange_withscores(&k, 0, -1).unwrap();
            (k, members)
        })
        .collect()
}

// ---------- exactness under concurrency ----------

async fn concurrent_calls_admit_exactly_the_limit(store: StoreHandle) {
    const LIMIT: u64 = 100;
    let limiter = Limiter::builder("core::exact")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, LIMIT)]))
        .store(store)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..40 {
                    if limiter.check(&[ip("203.0.113.7")]).await.is_ok() {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, LIMIT, "8 tasks x 40 calls on one key with limit {LIMIT}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_concurrent_calls_admit_exactly_the_limit() {
    let server = RedisServer::start();
    concurrent_calls_admit_exactly_the_limit(redis_store(&server)).await;
    let log = &keys(&server)[0];
    let n: u64 = server.client().zcard(log).unwrap();
    assert_eq!(n, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_concurrent_calls_admit_exactly_the_limit() {
    concurrent_calls_admit_exactly_the_limit(Arc::new(MemoryStore::new())).await;
}

#[test]
fn memory_threads_admit_exactly_the_limit() {
    let limiter = Limiter::builder("core::threads")
        .limit(Limit::new(LimitType::Global, [rule(60_000, 1000)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let admitted: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| (0..600).filter(|_| limiter.check(&[Subject::global()]).blocking().is_ok()).count() as u64)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(admitted, 1000);
}

// ---------- all or nothing ----------

fn three_rules_two_subjects(store: StoreHandle) -> Limiter {
    Limiter::builder("core::all_or_nothing")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 10), rule(30_000, 5)]))
        .limit(Limit::new(LimitType::User, [rule(60_000, 2)]))
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn redis_denied_call_changes_no_key() {
    let server = RedisServer::start();
    let limiter = three_rules_two_subjects(redis_store(&server));
    let subjects = [ip("198.51.100.1"), user("alice")];
    assert!(limiter.check(&subjects).await.is_ok());
    assert!(limiter.check(&subjects).await.is_ok());
    let before = snapshot(&server);
    assert_eq!(before.len(), 2, "one log per subject");
    assert!(before.iter().all(|(_, members)| members.len() == 2));

    // The user's rule denies: the IP's log must not record the call either.
    let err = limiter.check(&subjects).await.unwrap_err();
    assert_eq!(err.cause(), Cause::Exceeded);
    assert_eq!(err.limit_type(), LimitType::User);
    assert_eq!(err.rule(), Some(rule(60_000, 2)));
    assert_eq!(snapshot(&server), before, "a denied call must leave every key unchanged");

    // Another user on the same IP is still admitted, and both logs grow by one.
    assert!(limiter.check(&[ip("198.51.100.1"), user("bob")]).await.is_ok());
    let ip_key = &before.iter().find(|(k, _)| k.windows(4).any(|w| w == b"|ip|")).unwrap().0;
    let n: usize = server.client().zcard(ip_key).unwrap();
    assert_eq!(n, 3);
}

#[test]
fn memory_denied_call_records_nothing() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let limiter = three_rules_two_subjects(Arc::new(MemoryStore::with_clock(clock.clone())));
    let alice = [ip("198.51.100.1"), user("alice")];
    assert!(limiter.check(&alice).blocking().is_ok());
    assert!(limiter.check(&alice).blocking().is_ok());
    assert!(limiter.check(&alice).blocking().is_err());
    // Had the denied call been recorded under the IP, these 3 would exceed the 30s rule of 5.
    for other in ["u1", "u2", "u3"] {
        assert!(limiter.check(&[ip("198.51.100.1"), user(other)]).blocking().is_ok());
    }
    let err = limiter.check(&[ip("198.51.100.1"), user("u4")]).blocking().unwrap_err();
    assert_eq!((err.limit_type(), err.rule()), (LimitType::Ip, Some(rule(30_000, 5))));
}

// ---------- retry-after ----------

/// Pinned times lie in the future: keys expire at pinned time + TTL by the server clock.
const T0: u64 = 4_000_000_000_000_000;

async fn retry_after_is_exact(store: StoreHandle) {
    let limiter = Limiter::builder("core::retry")
        .limit(Limit::new(LimitType::Global, [rule(1000, 2)]))
        .store(store)
        .build()
        .unwrap();
    let g = [Subject::global()];
    assert!(limiter.check(&g).at(support::at(T0)).await.is_ok());
    assert!(limiter.check(&g).at(support::at(T0 + 100_000)).await.is_ok());
    let err = limiter.check(&g).at(support::at(T0 + 200_000)).await.unwrap_err();
    // The oldest call (at T0) leaves the 1s window at T0 + 1s: 800ms after the denied call.
    assert_eq!(err.retry_after(), Duration::from_millis(800));
    let at = T0 + 200_000 + 800_000;
    assert!(limiter.check(&g).at(support::at(at - 1)).await.is_err(), "one µs early is still denied");
    assert!(limiter.check(&g).at(support::at(at)).await.is_ok(), "waiting retry_after admits the call");
    // A cost-2 call needs both the T0+100ms and the new call to leave.
    let err = limiter.check(&g).cost(2).at(support::at(at)).await.unwrap_err();
    assert_eq!(err.retry_after(), Duration::from_millis(1000));
}

#[tokio::test]
async fn redis_retry_after_is_exact() {
    let server = RedisServer::start();
    retry_after_is_exact(redis_store(&server)).await;
}

#[tokio::test]
async fn memory_retry_after_is_exact() {
    retry_after_is_exact(Arc::new(MemoryStore::new())).await;
}

/// The same on the server's own clock, with generous margins for a noisy machine.
#[tokio::test]
async fn redis_retry_after_on_server_time() {
    let server = RedisServer::start();
    let limiter = Limiter::builder("core::retry_live")
        .limit(Limit::new(LimitType::Global, [rule(1500, 1)]))
        .store(redis_store(&server))
        .build()
        .unwrap();
    let g = [Subject::global()];
    assert!(limiter.check(&g).await.is_ok());
    let wait = limiter.check(&g).await.unwrap_err().retry_after();
    assert!(wait > Duration::from_millis(1000) && wait <= Duration::from_millis(1500), "{wait:?}");
    tokio::time::sleep(wait / 3).await;
    assert!(limiter.check(&g).await.is_err(), "a third of the wait is not enough");
    let wait = limiter.check(&g).await.unwrap_err().retry_after();
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
    assert!(limiter.check(&g).await.is_ok(), "waiting retry_after is enough");
}

// ---------- TTLs ----------

#[tokio::test]
async fn redis_keys_have_ttls_and_vanish() {
    let server = RedisServer::start();
    let limiter = Limiter::builder("core::ttl")
        .limit(Limit::new(LimitType::Ip, [rule(600, 5), rule(300, 2)]))
        .limit(Limit::new(LimitType::Global, [rule(400, 100)]))
        .store(redis_store(&server))
        .build()
        .unwrap();
    limiter.check(&[ip("192.0.2.1"), Subject::global()]).await.unwrap();
    let mut con = server.client();
    let all = keys(&server);
    assert_eq!(all.len(), 2);
    for key in &all {
        let ttl: i64 = con.pttl(key).unwrap();
        assert!(ttl > 0 && ttl <= 2 * 600 + 2, "TTL {ttl}ms must be positive and at most two longest windows + margin");
    }
    // After the windows pass with no traffic, nothing is left (poll: expiry is lazy + active).
    let every = Duration::from_millis(100);
    support::poll_until_async(Duration::from_secs(5), every, "keys outlived their windows", || async {
        keys(&server).is_empty().then_some(())
    })
    .await;
}

#[test]
fn memory_evicts_idle_subjects() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let limiter = Limiter::builder("core::evict")
        .limit(Limit::new(LimitType::User, [rule(1000, 5)]))
        .store(store.clone())
        .build()
        .unwrap();
    for i in 0..5000 {
        limiter.check(&[user(&format!("user-{i}"))]).blocking().unwrap();
    }
    assert_eq!(store.len(), 5000);
    clock.advance(Duration::from_millis(1001));
    // Traffic from a new subject sweeps the idle ones as the shards are used.
    for _ in 0..70_000 {
        limiter.check(&[user("active")]).cost(0).blocking().unwrap();
    }
    assert_eq!(store.len(), 0, "idle subjects are evicted");
}

/// Calls pinned to a time after the store's clock (replays, tests) sweep nothing the clock has
/// not reached: a subject decided at an earlier pinned time keeps its count.
#[test]
fn a_pinned_time_ahead_of_the_clock_sweeps_no_state() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let limiter = Limiter::builder("core::pinned_sweep")
        .limit(Limit::new(LimitType::User, [rule(1000, 2)]))
        .store(store.clone())
        .build()
        .unwrap();
    let early = support::at(T0 + 10_000_000);
    limiter.check(&[user("early")]).cost(2).at(early).blocking().unwrap();
    // Enough calls an hour later to sweep every shard many times over.
    let late = support::at(T0 + 3_600_000_000);
    for _ in 0..70_000 {
        limiter.check(&[user("late")]).cost(0).at(late).blocking().unwrap();
    }
    let e = limiter.check(&[user("early")]).at(early).blocking().unwrap_err();
    assert_eq!(e.cause(), ratelimit::Cause::Exceeded, "{e}");
}

/// Entries that have left the window are dropped: the log never holds more than the limit.
#[tokio::test]
async fn redis_log_stays_bounded_by_the_limit() {
    let server = RedisServer::start();
    let limiter = Limiter::builder("core::bounded")
        .limit(Limit::new(LimitType::Global, [rule(1000, 5)]))
        .store(redis_store(&server))
        .build()
        .unwrap();
    let mut con = server.client();
    let (mut admitted, mut largest) = (0, 0);
    // 200 windows of demand at twice the limit.
    for i in 0..2000u64 {
        admitted += usize::from(limiter.check(&[Subject::global()]).at(support::at(T0 + i * 100_000)).await.is_ok());
        let key = &keys(&server)[0];
        largest = largest.max(con.zcard::<_, usize>(key).unwrap());
    }
    assert_eq!(admitted, 1000, "exactly 5 per second");
    assert!(largest <= 5, "the log held {largest} entries for a limit of 5");
}

// ---------- hostile subjects ----------

#[tokio::test]
async fn redis_hostile_subjects_never_share_keys() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let limiter = |t| {
        Limiter::builder("core::hostile").limit(Limit::new(t, [rule(60_000, 1)])).store(store.clone()).build().unwrap()
    };
    let (users, ips) = (limiter(LimitType::User), limiter(LimitType::Ip));
    let long = "x".repeat(10_000);
    let hostile: Vec<Subject<'static>> = vec![
        user("{"),
        user("}"),
        user(":"),
        user("|"),
        user("\n"),
        user("a|user|b"),
        user("}:sw:60sx1"),
        user("%7B"),
        user("#"),
        user(&long),
        user(&long[1..]),
        Subject::bytes(vec![0xff, 0xfe, 0x00]),
        Subject::bytes(vec![0xef, 0xbf, 0xbd]),
        user("203.0.113.9"),
    ];
    for s in &hostile {
        users.check(std::slice::from_ref(s)).await.unwrap();
    }
    ips.check(&[ip("203.0.113.9")]).await.unwrap();
    let all = keys(&server);
    assert_eq!(all.len(), hostile.len() + 1, "every subject has its own key");
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
    for key in &all {
        assert!(key.len() < 300, "{} bytes: {}", key.len(), String::from_utf8_lossy(key));
    }
    // Each subject used its one unit: a second call of each is denied, of the IP too.
    for s in &hostile {
        assert!(users.check(std::slice::from_ref(s)).await.is_err());
    }
    assert!(ips.check(&[ip("203.0.113.9")]).await.is_err());
}

// ---------- the two stores decide as the definitions ----------

/// A fixed pseudo-random sequence of (time step, cost, subject) calls: the Redis script and the
/// in-memory twin each decide as the definitions (tests/support/definition.rs).
#[tokio::test]
async fn redis_and_memory_decide_as_the_definitions() {
    let server = RedisServer::start();
    let spec = |limit_type, rules: &[Rule]| definition::LimitSpec {
        limit_type,
        alg: ratelimit::Algorithm::SlidingWindow,
        rules: rules.to_vec(),
        burst: None,
        block: None,
    };
    let specs = vec![spec(LimitType::Ip, &[rule(1000, 5), rule(300, 2)]), spec(LimitType::Global, &[rule(2000, 8)])];
    let build = |store: StoreHandle| {
        let mut b = Limiter::builder("core::differential");
        for s in &specs {
            b = b.limit(Limit::new(s.limit_type, s.rules.iter().copied()));
        }
        // The stores' own answers (the refusal cache: tests/refusal_cache.rs).
        b.store(store).refusal_cache(false).build().unwrap()
    };
    let (remote, local) = (build(redis_store(&server)), build(Arc::new(MemoryStore::new())));
    let (mut remote_model, mut local_model) = (definition::Stack::new(specs.clone()), definition::Stack::new(specs));
    let mut rng = support::Rng(0x2545_f491_4f6c_dd1d);
    let mut now = T0;
    let mut allowed = 0;
    for _ in 0..400 {
        now += rng.below(120_000);
        let cost = [1, 1, 1, 2, 0, 3][rng.below(6) as usize];
        let subjects = [ip(["10.0.0.1", "10.0.0.2", "10.0.0.3"][rng.below(3) as usize]), Subject::global()];
        let want = remote_model.compare(&remote, &subjects, now, cost).await;
        let want = want.unwrap_or_else(|e| panic!("redis at {now}: {e}"));
        local_model.compare(&local, &subjects, now, cost).await.unwrap_or_else(|e| panic!("memory at {now}: {e}"));
        allowed += usize::from(want.is_some_and(|w| w.allowed));
    }
    assert!(allowed > 50 && allowed < 350, "the sequence exercises both outcomes: {allowed} allowed");
}

// ---------- plain fns need no runtime ----------

#[test]
fn redis_blocking_check_needs_no_runtime() {
    let server = RedisServer::start();
    let limiter = Limiter::builder("core::blocking")
        .limit(Limit::new(LimitType::Key, [rule(60_000, 3)]))
        .store(redis_store(&server))
        .build()
        .unwrap();
    let key = [Subject::bytes(&b"report"[..])];
    let results: Vec<bool> = (0..5).map(|_| limiter.check(&key).blocking().is_ok()).collect();
    assert_eq!(results, [true, true, true, false, false]);
}

/// A blocking call decided by the limits in force (a shadow limit beside an enforced one: the
/// path an overrides file takes) on a Redis that answers late, within the timeout: it waits for
/// the answer like any call, and is never refused as "store unavailable" for it.
#[test]
fn redis_blocking_check_in_force_waits_for_a_slow_store() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(3)).unwrap());
    let limiter = Limiter::builder("core::blocking_in_force")
        .limit(Limit::new(LimitType::Key, [rule(60_000, 3)]))
        .limit(Limit::new(LimitType::Global, [rule(60_000, 1)]).mode(ratelimit::Mode::Shadow))
        .on_error(FailurePolicy::Deny)
        .store(store)
        .build()
        .unwrap();
    let key = [Subject::bytes(&b"report"[..]), Subject::global()];
    assert!(limiter.check(&key).blocking().is_ok(), "connected");
    server.pause();
    let slow = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            server.resume();
        });
        let started = std::time::Instant::now();
        let decided = limiter.check(&key).blocking();
        (decided.map(|p| p.quota().map(|q| q.remaining)), started.elapsed())
    });
    assert_eq!(slow.0.map_err(|e| e.cause()), Ok(Some(1)), "decided by the store, not refused");
    assert!(slow.1 >= Duration::from_millis(250), "it waited for the store: {:?}", slow.1);
    let refused = limiter.check(&key).blocking().and_then(|_| limiter.check(&key).blocking()).unwrap_err();
    assert_eq!(refused.cause(), Cause::Exceeded, "the enforced limit still decides");
}

// ---------- failures ----------

fn failing_limiter(server: &RedisServer, policy: FailurePolicy, timeout: Duration) -> Limiter {
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), timeout).unwrap());
    Limiter::builder(format!("core::failure::{policy:?}"))
        .limit(Limit::new(LimitType::Global, [rule(60_000, 1000)]))
        .on_error(policy)
        .store(store)
        .build()
        .unwrap()
}

/// Calls until one is decided by the store (a quota is known), or panics after `within`.
async fn until_recovered(limiter: &Limiter, within: Duration) {
    support::poll_until_async(within, Duration::from_millis(50), "the store did not recover", || async {
        limiter.check(&[Subject::global()]).await.ok()?.quota().map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted() {
    let mut server = RedisServer::start();
    let timeout = Duration::from_millis(200);
    let open = failing_limiter(&server, FailurePolicy::Allow, timeout);
    let closed = failing_limiter(&server, FailurePolicy::Deny, timeout);
    assert!(open.check(&[Subject::global()]).await.unwrap().quota().is_some());
    assert!(closed.check(&[Subject::global()]).await.is_ok());

    server.kill();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let permit = open.check(&[Subject::global()]).await.expect("fail open lets the call through");
        assert!(permit.quota().is_none(), "no quota: the store did not decide");
        let err = closed.check(&[Subject::global()]).await.unwrap_err();
        assert_eq!(err.cause(), Cause::StoreUnavailable);
        assert!(std::error::Error::source(&err).is_some(), "the store error is the source");
        assert!(started.elapsed() < Duration::from_secs(2), "a dead Redis answers fast: {:?}", started.elapsed());
    }

    server.restart();
    until_recovered(&open, Duration::from_secs(10)).await;
    until_recovered(&closed, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_answers_within_the_timeout() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(200);
    let open = failing_limiter(&server, FailurePolicy::Allow, timeout);
    let closed = failing_limiter(&server, FailurePolicy::Deny, timeout);
    until_recovered(&open, Duration::from_secs(5)).await;
    until_recovered(&closed, Duration::from_secs(5)).await;

    server.pause();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        assert!(open.check(&[Subject::global()]).await.unwrap().quota().is_none());
        let err = closed.check(&[Subject::global()]).await.unwrap_err();
        assert_eq!(err.cause(), Cause::StoreUnavailable);
        let took = started.elapsed();
        // Two calls, each bounded by the 200ms timeout; generous slack for a loaded machine.
        assert!(took < Duration::from_millis(1500), "a hung Redis must not hang the caller: {took:?}");
    }
    // Many callers at once: each gets its answer within the timeout, none waits behind a queue.
    let started = std::time::Instant::now();
    let callers: Vec<_> = (0..200)
        .map(|_| {
            let open = open.clone();
            tokio::spawn(async move { open.check(&[Subject::global()]).await.is_ok() })
        })
        .collect();
    for caller in callers {
        assert!(caller.await.unwrap(), "fail open");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "200 concurrent calls took {took:?} against a hung Redis");
    server.resume();
    until_recovered(&open, Duration::from_secs(10)).await;
    until_recovered(&closed, Duration::from_secs(10)).await;
}

/// A limiter that cannot be built refuses every call as misconfigured, naming itself: a server
/// error (500, no `Retry-After`), never a store outage (503).
#[cfg(feature = "axum")]
#[test]
fn a_misconfigured_limiter_is_a_500_naming_it() {
    use ratelimit::__private::LazyLimiter;
    static INVALID: LazyLimiter =
        LazyLimiter::new(|| "core_test::invalid".to_owned(), |name| Limiter::builder(name).build());
    let e = INVALID.get().unwrap_err();
    assert_eq!(e.cause(), Cause::Misconfigured);
    assert_eq!(e.limiter(), "core_test::invalid");
    assert_eq!(e.status(), 500);
    assert!(e.headers().get("retry-after").is_none());
    assert_eq!(e.json_body(), r#"{"error":"rate_limiter_misconfigured","limiter":"core_test::invalid"}"#);
    // A build error, not a store's: no store was ever asked.
    let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<ratelimit::error::BuildError>());
    assert_eq!(source, Some(&ratelimit::error::BuildError::NoLimits));
    assert!(e.to_string().contains("core_test::invalid"), "{e}");
}

/// A cost above a rule's capacity can never pass: it is refused at once with its own cause, no
/// retry-after, no store call, and nothing recorded, on every store.
#[tokio::test]
async fn a_cost_that_can_never_fit_is_refused_without_a_wait() {
    let server = RedisServer::start();
    let stores: [(&str, StoreHandle); 2] = [("memory", Arc::new(MemoryStore::new())), ("redis", redis_store(&server))];
    for (name, store) in stores {
        let limiter = Limiter::builder(format!("core::cost_too_high::{name}"))
            .limit(Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(10), 5).unwrap()]))
            .limit(
                Limit::new(LimitType::User, [Rule::new(Duration::from_secs(1), 9).unwrap()])
                    .algorithm(ratelimit::Algorithm::Gcra)
                    .burst(2),
            )
            .store(store)
            .build()
            .unwrap();
        let subjects = [Subject::global(), user("alice")];
        // Cost 3: the first limit has room for 5, the bucket holds 2.
        let e = limiter.check(&subjects).cost(3).await.unwrap_err();
        assert_eq!(e.cause(), Cause::CostTooHigh, "{name}: {e}");
        assert_eq!(e.retry_after(), Duration::ZERO, "{name}");
        assert_eq!(e.rule(), Some(Rule::new(Duration::from_secs(1), 9).unwrap()), "{name}");
        assert!(e.to_string().contains("can never fit"), "{name}: {e}");
        // Nothing was recorded: the whole burst and the whole window are still there.
        assert!(limiter.check(&subjects).cost(2).await.is_ok(), "{name}");
        let e = limiter.check(&subjects).cost(6).await.unwrap_err();
        assert_eq!(e.cause(), Cause::CostTooHigh, "{name}");
        assert_eq!(e.rule(), Some(Rule::new(Duration::from_secs(10), 5).unwrap()), "{name}");
    }
}
