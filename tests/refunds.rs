//! Refunds, penalties (`block`) and concurrency limits, on the memory store and on real Redis
//! servers (and a real cluster): the runtime API, the attribute, and two example-server
//! processes sharing one Redis.

mod support;

use ratelimit::clock::ManualClock;
use ratelimit::store::{MemoryStore, RedisStore, StoreHandle};
use ratelimit::{rate_limiter, Algorithm, Cause, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{at, RedisServer};

const T0: u64 = 1_800_000_000_000_000;

fn ip(s: &str) -> Subject<'static> {
    Subject::ip(s.parse().unwrap())
}

fn redis(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap())
}

/// A fresh limiter name per call, so that tests sharing a store never share keys.
fn name(what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("refunds::{what}{}", N.fetch_add(1, Ordering::Relaxed))
}

/// `count` per `window_ms` on `Ip`, with `algorithm`, and maybe a block.
fn limiter(store: &StoreHandle, alg: Algorithm, window_ms: u64, count: u64, block: Option<Duration>) -> Limiter {
    let mut limit = Limit::new(LimitType::Ip, [Rule::from_millis(window_ms, count).unwrap()]).algorithm(alg);
    if let Some(block) = block {
        limit = limit.block(block);
    }
    Limiter::builder(name("l")).limit(limit).store(store.clone()).refusal_cache(false).build().unwrap()
}

/// The memory store and a real Redis: every feature is held to the same answers on both.
fn stores(server: &RedisServer) -> Vec<(&'static str, StoreHandle)> {
    vec![("memory", Arc::new(MemoryStore::new()) as StoreHandle), ("redis", redis(server))]
}

/// The remaining quota of the first rule now (pinned at `us`).
async fn remaining(l: &Limiter, subject: &Subject<'_>, us: u64) -> u64 {
    l.peek(std::slice::from_ref(subject)).at(at(us)).await.unwrap()[0].remaining
}

// ---------------------------------------------------------------------------------------------
// Refunds

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_gives_the_units_back_with_every_algorithm_on_every_store() {
    let server = RedisServer::start();
    for (store_name, store) in stores(&server) {
        for alg in Algorithm::ALL {
            let l = limiter(&store, alg, 10_000, 3, None);
            let who = ip("203.0.113.1");
            let s = std::slice::from_ref(&who);
            // Mid-window, so that the fixed windows do not turn over.
            let t = T0 + 1_000_000;
            let permits: Vec<_> = (0..3).map(|_| l.check(s).at(at(t)).blocking().expect("room")).collect();
            assert!(l.check(s).at(at(t)).blocking().is_err(), "{store_name} {alg:?}: full");
            for p in permits {
                p.refund().await.unwrap();
            }
            assert_eq!(remaining(&l, &who, t).await, 3, "{store_name} {alg:?}: all given back");
            // Never more than the capacity: a second refund of the same call cannot happen
            // (`refund` takes the permit), and refunds of units that are gone give nothing.
            let kept = l.check(s).cost(2).at(at(t)).blocking().unwrap();
            let refunded = l.check(s).at(at(t)).blocking().unwrap();
            assert!(l.check(s).at(at(t)).blocking().is_err(), "{store_name} {alg:?}: full again");
            refunded.refund().await.unwrap();
            assert_eq!(remaining(&l, &who, t).await, 1, "{store_name} {alg:?}: only the refunded call left");
            drop(kept);
        }
    }
}

#[test]
fn a_refund_is_a_no_op_once_the_units_no_longer_count() {
    // Memory on a manual clock: exact instants, no sleeping.
    for alg in Algorithm::ALL {
        let clock = Arc::new(ManualClock::new(T0 + 500_000));
        let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
        let l = limiter(&store, alg, 1_000, 2, None);
        let who = [ip("203.0.113.2")];
        let old = l.check(&who).blocking().unwrap();
        // A whole window later the call counts nowhere: its refund must not make room beyond
        // the rules (two fresh calls fill the quota, the refund of the old one gives nothing).
        clock.advance(Duration::from_millis(1_500));
        let _a = l.check(&who).blocking().unwrap();
        let _b = l.check(&who).blocking().unwrap();
        old.refund().blocking().unwrap();
        assert!(l.check(&who).blocking().is_err(), "{alg:?}: a stale refund made room");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_refunds_on_redis_give_nothing() {
    // The server's clock cannot be driven (nor pinned: a pinned permit gives back at its own
    // time). One call per 2 s window, every algorithm at once: the old call just after a window
    // starts (the server's clock is this machine's), the fresh one and the refund two windows
    // later, when the old call counts nowhere. The fresh call and the check after the refund
    // have the rest of that window, and 2 s before a bucket earns its next unit.
    const WINDOW_MS: u64 = 2_000;
    let server = RedisServer::start();
    let store = redis(&server);
    let window = Duration::from_millis(WINDOW_MS);
    let now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let start = (now().as_millis() as u64 / WINDOW_MS + 1) * WINDOW_MS;
    let since_start = move || now().saturating_sub(Duration::from_millis(start));
    tokio::time::sleep(Duration::from_millis(start + 20).saturating_sub(now())).await;
    let tasks: Vec<_> = Algorithm::ALL
        .into_iter()
        .map(|alg| {
            let l = limiter(&store, alg, WINDOW_MS, 1, None);
            tokio::spawn(async move {
                let who = [ip("203.0.113.3")];
                let old = l.check(&who).await.unwrap();
                tokio::time::sleep((2 * window + Duration::from_millis(20)).saturating_sub(since_start())).await;
                let _fresh = l.check(&who).await.expect("a window later, room again");
                old.refund().await.unwrap();
                let refused = l.check(&who).await.is_err();
                let end = since_start();
                assert!(end < 3 * window, "{alg:?}: the calls took until {end:?} after the start, past their window");
                assert!(refused, "{alg:?}: a stale refund made room");
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refund_races_never_exceed_the_limit_nor_go_negative() {
    let server = RedisServer::start();
    for (store_name, store) in stores(&server) {
        for alg in [Algorithm::SlidingWindow, Algorithm::FixedWindow, Algorithm::Gcra] {
            // A long window: nothing leaves it during the test.
            let l = limiter(&store, alg, 3_600_000, 10, None);
            let held = Arc::new(AtomicU64::new(0));
            let peak = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = (0..16)
                .map(|task| {
                    let (l, held, peak) = (l.clone(), held.clone(), peak.clone());
                    tokio::spawn(async move {
                        let mut kept = 0;
                        for i in 0..25u64 {
                            let Ok(permit) = l.check(&[ip("198.51.100.9")]).await else { continue };
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            if (task + i) % 3 != 0 {
                                held.fetch_sub(1, Ordering::SeqCst);
                                permit.refund().await.unwrap();
                            } else {
                                kept += 1;
                            }
                        }
                        kept
                    })
                })
                .collect();
            let mut kept = 0;
            for t in tasks {
                kept += t.await.unwrap();
            }
            // Units are taken before a refund is possible: never more than 10 counted at once.
            assert!(peak.load(Ordering::SeqCst) <= 10, "{store_name} {alg:?}: {} at once", peak.load(Ordering::SeqCst));
            // Which calls won the race is up to the scheduler (a task whose turn to keep comes
            // while others hold the last unit is refused), so the kept count is anything up to
            // 10; what must hold is that the store counts exactly the kept calls.
            assert!(kept <= 10, "{store_name} {alg:?}: {kept} kept");
            let left = l.peek(&[ip("198.51.100.9")]).await.unwrap()[0].remaining;
            assert_eq!(left, 10 - kept, "{store_name} {alg:?}: the quota is used by kept calls only");
            // And exactly the rest of the quota is still there to be taken.
            let mut more = 0;
            while l.check(&[ip("198.51.100.9")]).await.is_ok() {
                more += 1;
                assert!(more <= 10, "{store_name} {alg:?}: more than the limit admitted");
            }
            assert_eq!(kept + more, 10, "{store_name} {alg:?}: refunds gave back exactly what they took");
            // Refunds of units that no longer count never go below zero: ten permits held across
            // a reset are refunded, and the quota is still exactly 10.
            let who = [ip("198.51.100.9")];
            l.reset(&who).await.unwrap();
            let mut held = Vec::new();
            for _ in 0..10 {
                held.push(l.check(&who).await.expect("room after a reset"));
            }
            assert!(l.check(&who).await.is_err(), "{store_name} {alg:?}: full");
            l.reset(&who).await.unwrap();
            for p in held {
                p.refund().await.unwrap();
            }
            assert_eq!(l.peek(&who).await.unwrap()[0].remaining, 10, "{store_name} {alg:?}: no more than the limit");
            let mut admitted = 0;
            while l.check(&who).await.is_ok() {
                admitted += 1;
                assert!(admitted <= 10, "{store_name} {alg:?}: refunds after a reset made room beyond the limit");
            }
            assert_eq!(admitted, 10, "{store_name} {alg:?}: the whole quota after the reset");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_starts_a_block_that_refusals_do_not_extend() {
    let server = RedisServer::start();
    for (store_name, store) in stores(&server) {
        for alg in Algorithm::ALL {
            let block = Duration::from_secs(120);
            let l = limiter(&store, alg, 60_000, 5, Some(block));
            let who = [ip("192.0.2.50")];
            let t = T0 + 1_000;
            for _ in 0..5 {
                l.check(&who).at(at(t)).await.unwrap();
            }
            let first = l.check(&who).at(at(t + 1_000)).await.unwrap_err();
            assert_eq!(first.cause(), Cause::Exceeded, "{store_name} {alg:?}");
            assert_eq!(first.retry_after(), block, "{store_name} {alg:?}: the whole block");
            assert_eq!(first.rule(), Some(Rule::from_millis(60_000, 5).unwrap()));
            // 90 s later the rule alone would have room again; the block still refuses, and
            // these refusals do not extend it.
            for s in [30, 61, 90, 119] {
                let e = l.check(&who).at(at(t + 1_000 + s * 1_000_000)).await.unwrap_err();
                assert_eq!(e.retry_after(), block - Duration::from_secs(s), "{store_name} {alg:?} at +{s}s");
            }
            // Once the block has run out, the subject starts afresh.
            l.check(&who).at(at(t + 1_000 + 120_000_000)).await.expect("the block ended");
            // Another subject was never blocked.
            l.check(&[ip("192.0.2.51")]).at(at(t + 2_000)).await.unwrap();
            // A reset forgets the block too.
            for _ in 0..5 {
                let _ = l.check(&who).at(at(t + 200_000_000)).await;
            }
            assert!(l.check(&who).at(at(t + 200_000_001)).await.is_err());
            l.reset(&who).await.unwrap();
            l.check(&who).at(at(t + 200_000_002)).await.expect("reset lifted the block");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refusal_cache_answers_a_block_without_the_store() {
    let server = RedisServer::start();
    let l = Limiter::builder(name("cache"))
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 2).unwrap()]).block(Duration::from_secs(60)))
        .store(redis(&server))
        .refusal_cache(true)
        .build()
        .unwrap();
    let who = [ip("192.0.2.60")];
    l.check(&who).await.unwrap();
    l.check(&who).await.unwrap();
    let first = l.check(&who).await.unwrap_err();
    assert!(first.retry_after() > Duration::from_secs(59));
    let before = server.calls("evalsha");
    for _ in 0..20 {
        let e = l.check(&who).await.unwrap_err();
        assert!(e.retry_after() > Duration::from_secs(58) && e.retry_after() <= Duration::from_secs(60));
    }
    assert_eq!(server.calls("evalsha"), before, "refusals during a block need no store call");
}

#[test]
fn the_block_key_shares_the_limits_slot_and_expires() {
    let server = RedisServer::start();
    let limiter_name = name("keys");
    let l = Limiter::builder(&limiter_name)
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 1).unwrap()]).block(Duration::from_secs(30)))
        .store(redis(&server))
        .build()
        .unwrap();
    let who = [ip("192.0.2.70")];
    l.check(&who).blocking().unwrap();
    l.check(&who).blocking().unwrap_err();
    let mut c = server.client();
    let key = format!("rate_limit:{{{limiter_name}|ip|192.0.2.70}}:sw:1mx1:blk");
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut c).unwrap();
    assert!(ttl > 28_000 && ttl <= 31_000, "the block key expires with the block ({ttl} ms)");
}

// ---------------------------------------------------------------------------------------------
// Concurrency

fn concurrency(store: &StoreHandle, n: u64, lease: Duration) -> Limiter {
    Limiter::builder(name("cc"))
        .limit(Limit::concurrency(LimitType::Ip, n).lease(lease))
        .store(store.clone())
        .build()
        .unwrap()
}

/// Waits (up to 5 s) until `l` admits a call for `who`: a slot freed in the background.
async fn admitted_soon<'l>(l: &'l Limiter, who: &[Subject<'_>]) -> ratelimit::Permit<'l> {
    let every = Duration::from_millis(10);
    support::poll_until_async(Duration::from_secs(5), every, "no slot was freed", || async {
        match l.check(who).await {
            Ok(p) => Some(p),
            Err(e) => {
                assert_eq!(e.cause(), Cause::Concurrency);
                None
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_calls_in_flight_and_a_dropped_permit_frees_its_slot() {
    let server = RedisServer::start();
    for (store_name, store) in stores(&server) {
        let l = concurrency(&store, 2, Duration::from_secs(60));
        let who = [ip("203.0.113.80")];
        let a = l.check(&who).await.unwrap();
        let b = l.check(&who).await.unwrap();
        let refused = l.check(&who).await.unwrap_err();
        assert_eq!(refused.cause(), Cause::Concurrency, "{store_name}");
        assert_eq!(refused.rule(), None);
        assert!(refused.retry_after() <= Duration::from_millis(100) && !refused.retry_after().is_zero());
        assert!(refused.to_string().contains("too many calls in flight"), "{refused}");
        // Another subject has its own slots.
        let _other = l.check(&[ip("203.0.113.81")]).await.unwrap();
        drop(a);
        let c = admitted_soon(&l, &who).await;
        drop((b, c));
        let _d = admitted_soon(&l, &who).await;
        let _e = admitted_soon(&l, &who).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_slot_is_freed_when_its_lease_ends() {
    let server = RedisServer::start();
    for (store_name, store) in stores(&server) {
        let l = concurrency(&store, 1, Duration::from_secs(30));
        let who = [ip("203.0.113.90")];
        // A permit never dropped: its process died.
        std::mem::forget(l.check(&who).at(at(T0)).await.unwrap());
        let e = l.check(&who).at(at(T0 + 29_999_999)).await.unwrap_err();
        assert_eq!(e.cause(), Cause::Concurrency, "{store_name}");
        assert_eq!(e.retry_after(), Duration::from_micros(1), "{store_name}: the lease ends in 1 µs");
        let p = l.check(&who).at(at(T0 + 30_000_000)).await.expect("the lease ended");
        drop(p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_stacked_with_rules_admits_in_one_round_trip() {
    let server = RedisServer::start();
    let l = Limiter::builder(name("stacked"))
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 3).unwrap()]).block(Duration::from_secs(60)))
        .limit(Limit::concurrency(LimitType::Ip, 2))
        .store(redis(&server))
        .refusal_cache(false)
        .build()
        .unwrap();
    let who = [ip("203.0.113.100"), ip("203.0.113.100")];
    // Once the scripts are loaded (a first call may meet NOSCRIPT and load them).
    l.check(&[ip("203.0.113.101"), ip("203.0.113.101")]).await.unwrap().refund().await.unwrap();
    let before = server.calls("evalsha");
    let a = l.check(&who).await.unwrap();
    assert_eq!(server.calls("evalsha") - before, 1, "one EVALSHA to admit");
    let b = l.check(&who).await.unwrap();
    let full = l.check(&who).await.unwrap_err();
    assert_eq!(full.cause(), Cause::Concurrency);
    assert_eq!(server.calls("evalsha") - before, 3, "one EVALSHA per decision, refused ones too");
    drop(a);
    drop(b);
    // The concurrency refusal took nothing from the rule: one unit is left of 3.
    let c = admitted_soon(&l, &who).await;
    let exceeded = l.check(&who).await.unwrap_err();
    assert_eq!(exceeded.cause(), Cause::Exceeded);
    assert_eq!(exceeded.retry_after(), Duration::from_secs(60), "the block started");
    drop(c);
}

// ---------------------------------------------------------------------------------------------
// The attribute

#[derive(Debug, PartialEq)]
enum LoginError {
    WrongPassword,
    Limited(Cause),
}

impl From<RateLimited> for LoginError {
    fn from(e: RateLimited) -> Self {
        LoginError::Limited(e.cause())
    }
}

#[rate_limiter(type = Ip, rules = [(60s, 3)], ip = peer, refund = on_ok, block = 2m)]
async fn login(peer: std::net::IpAddr, password: &str) -> Result<&'static str, LoginError> {
    if password == "letmein" {
        return Ok("welcome");
    }
    Err(LoginError::WrongPassword)
}

#[tokio::test]
async fn refund_on_ok_counts_only_failures_and_a_block_follows() {
    let peer: std::net::IpAddr = "10.1.0.1".parse().unwrap();
    for _ in 0..20 {
        assert_eq!(login(peer, "letmein").await, Ok("welcome"));
    }
    for _ in 0..3 {
        assert_eq!(login(peer, "guess").await, Err(LoginError::WrongPassword));
    }
    // The fourth failure in the window is refused before the body runs, and blocks.
    assert_eq!(login(peer, "guess").await, Err(LoginError::Limited(Cause::Exceeded)));
    assert_eq!(login(peer, "letmein").await, Err(LoginError::Limited(Cause::Exceeded)));
    let l = ratelimit::limiter("refunds::login").expect("registered");
    let e = l.check(&[Subject::ip(peer)]).await.unwrap_err();
    assert!(e.retry_after() > Duration::from_secs(119), "{e}");
}

#[derive(Debug)]
enum ExportError {
    Failed,
    Limited(Cause),
}

impl From<RateLimited> for ExportError {
    fn from(e: RateLimited) -> Self {
        ExportError::Limited(e.cause())
    }
}

fn rows(fail: bool) -> Result<u32, ExportError> {
    if fail {
        Err(ExportError::Failed)
    } else {
        Ok(7)
    }
}

#[rate_limiter(type = Key, rules = [(60s, 2)], key = "exports", refund = on_err)]
fn export(fail: bool) -> Result<u32, ExportError> {
    // `?` and `return` inside the body keep their meaning.
    let n = rows(fail)?;
    if n == 0 {
        return Err(ExportError::Failed);
    }
    Ok(n)
}

#[test]
fn refund_on_err_makes_failures_free() {
    for _ in 0..10 {
        assert!(matches!(export(true), Err(ExportError::Failed)));
    }
    assert_eq!(export(false).unwrap(), 7);
    assert_eq!(export(false).unwrap(), 7);
    assert!(matches!(export(false), Err(ExportError::Limited(Cause::Exceeded))));
}

static STARTED: AtomicU64 = AtomicU64::new(0);

#[rate_limiter(type = Key, key = tenant, concurrency = 1)]
async fn slow_report(tenant: &str, hold: Duration) -> Result<(), RateLimited> {
    STARTED.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(hold).await;
    Ok(())
}

#[rate_limiter(type = Key, key = "panics", concurrency = 1)]
fn panicking(panic: bool) -> Result<(), RateLimited> {
    assert!(!panic, "the body panics");
    Ok(())
}

#[derive(Debug)]
enum ReportError {
    Failed,
    Limited(Cause),
}

impl From<RateLimited> for ReportError {
    fn from(e: RateLimited) -> Self {
        ReportError::Limited(e.cause())
    }
}

/// A body that returns its own error while it holds the slot.
#[rate_limiter(type = Key, key = tenant, concurrency = 1)]
async fn failing_report(tenant: &str, fail: bool) -> Result<(), ReportError> {
    if fail {
        Err(ReportError::Failed)
    } else {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_frees_slots_on_return_error_panic_and_drop() {
    // On return: one after the other always passes.
    slow_report("acme", Duration::ZERO).await.unwrap();
    slow_report("acme", Duration::ZERO).await.unwrap();
    // While one runs, a second is refused.
    let running = tokio::spawn(slow_report("acme", Duration::from_millis(300)));
    while STARTED.load(Ordering::SeqCst) < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(slow_report("acme", Duration::ZERO).await.unwrap_err().cause(), Cause::Concurrency);
    running.await.unwrap().unwrap();
    slow_report("acme", Duration::ZERO).await.unwrap();
    // A dropped future frees its slot.
    let dropped = tokio::time::timeout(Duration::from_millis(50), slow_report("acme", Duration::from_secs(60))).await;
    assert!(dropped.is_err(), "timed out, and dropped");
    slow_report("acme", Duration::ZERO).await.unwrap();
    // An error returned by the body frees its slot.
    for _ in 0..3 {
        match failing_report("acme", true).await {
            Err(ReportError::Failed) => {}
            Err(ReportError::Limited(cause)) => panic!("the failed call kept its slot: {cause:?}"),
            Ok(()) => panic!("the body failed"),
        }
    }
    failing_report("acme", false).await.unwrap();
    // A panic frees its slot.
    assert!(std::panic::catch_unwind(|| panicking(true)).is_err());
    panicking(false).unwrap();
    panicking(false).unwrap();
}

// ---------------------------------------------------------------------------------------------
// A process that dies holding a slot

/// Set to the Redis URL in the child process of [`a_killed_process_frees_its_slot_by_lease`].
const HOLDER_REDIS: &str = "RATELIMIT_TEST_SLOT_HOLDER_REDIS";

fn holder(store: StoreHandle) -> Limiter {
    Limiter::builder("refunds::holder")
        .limit(Limit::concurrency(LimitType::Key, 1).lease(Duration::from_secs(3)))
        .store(store)
        .build()
        .unwrap()
}

/// Not a test of its own: the body of the child process that takes a slot and waits to be
/// killed (see tests/support/child.rs).
#[test]
#[ignore = "the child process of a_killed_process_frees_its_slot_by_lease"]
fn slot_holder_process() {
    let Some(url) = support::child::given(HOLDER_REDIS) else { return };
    let store: StoreHandle = Arc::new(RedisStore::open(&url, Duration::from_secs(2)).unwrap());
    let l = holder(store);
    let permit = l.check(&[Subject::bytes(&b"job"[..])]).blocking().expect("a free slot");
    println!("held");
    std::thread::sleep(Duration::from_secs(60));
    drop(permit);
}

#[test]
fn a_killed_process_frees_its_slot_by_lease() {
    use std::io::BufRead;
    let server = RedisServer::start();
    let mut child = support::child::command("slot_holder_process")
        .env(HOLDER_REDIS, server.url())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("held"))), "the child took its slot");
    let held_at = Instant::now();
    child.kill().unwrap();
    child.wait().unwrap();

    let l = holder(redis(&server));
    let job = [Subject::bytes(&b"job"[..])];
    assert_eq!(l.check(&job).blocking().unwrap_err().cause(), Cause::Concurrency, "the dead process's slot");
    let every = Duration::from_millis(50);
    let admitted = support::poll_until(Duration::from_secs(10), every, "the lease never freed the slot", || {
        match l.check(&job).blocking() {
            Ok(p) => Some(p),
            Err(e) => {
                assert_eq!(e.cause(), Cause::Concurrency);
                None
            }
        }
    });
    let waited = held_at.elapsed();
    assert!(waited >= Duration::from_millis(2_500), "freed only by the 3 s lease, after {waited:?}");
    drop(admitted);
}

// ---------------------------------------------------------------------------------------------
// A real cluster

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_blocks_and_slots_on_a_cluster() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let store: StoreHandle =
        Arc::new(ratelimit::store::ClusterStore::open(&cluster.urls(), Duration::from_secs(2)).unwrap());
    // An IP limit with a block and a concurrency limit on the IP, and a user limit (another
    // slot, most likely): one script per slot.
    let l = Limiter::builder(name("cluster"))
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 3).unwrap()]).block(Duration::from_secs(90)))
        .limit(Limit::concurrency(LimitType::Ip, 2))
        .limit(Limit::new(LimitType::User, [Rule::from_millis(60_000, 100).unwrap()]))
        .store(store)
        .refusal_cache(false)
        .build()
        .unwrap();
    let who = [ip("198.51.100.40"), ip("198.51.100.40"), Subject::bytes(&b"carol"[..])];
    // Refunded calls never count, and free their slots.
    for _ in 0..10 {
        l.check(&who).await.unwrap().refund().await.unwrap();
    }
    let statuses = l.peek(&who).await.unwrap();
    assert_eq!(statuses.iter().map(|s| s.remaining).collect::<Vec<_>>(), [3, 100]);
    // Two in flight, a third refused for concurrency.
    let a = l.check(&who).await.unwrap();
    let b = l.check(&who).await.unwrap();
    assert_eq!(l.check(&who).await.unwrap_err().cause(), Cause::Concurrency);
    drop(a);
    let c = admitted_soon(&l, &who).await;
    drop((b, c));
    // Three units used: the next is refused and blocks for 90 s.
    let e = loop {
        match l.check(&who).await {
            Err(e) if e.cause() == Cause::Exceeded => break e,
            Err(e) => {
                assert_eq!(e.cause(), Cause::Concurrency);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(p) => panic!("a fourth unit was admitted: {p:?}"),
        }
    };
    assert_eq!(e.retry_after(), Duration::from_secs(90));
    let again = l.check(&who).await.unwrap_err();
    assert!(again.retry_after() <= Duration::from_secs(90) && again.retry_after() > Duration::from_secs(88));
}

#[test]
fn wait_waits_for_a_free_slot() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let l = concurrency(&store, 1, Duration::from_secs(60));
    let who = [ip("203.0.113.120")];
    let held = l.check(&who).blocking().unwrap();
    // Without waiting: refused. With a wait longer than the call that holds the slot: admitted
    // once it ends.
    assert_eq!(l.check(&who).wait(Duration::from_millis(1)).blocking().unwrap_err().cause(), Cause::Concurrency);
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(held);
        });
        let started = Instant::now();
        let permit = l.check(&who).wait(Duration::from_secs(5)).blocking().expect("a slot within 5 s");
        assert!(started.elapsed() >= Duration::from_millis(150), "{:?}", started.elapsed());
        drop(permit);
    });
}

// ---------------------------------------------------------------------------------------------
// Sentinel

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_blocks_and_slots_through_sentinel() {
    use ratelimit::store::{SentinelSpec, SentinelStore};
    let set = support::sentinel::SentinelSet::start();
    let spec = SentinelSpec::new([set.sentinel_url()], support::sentinel::MASTER);
    let store: StoreHandle = Arc::new(SentinelStore::open(&spec, Duration::from_secs(2)).unwrap());
    let l = Limiter::builder(name("sentinel"))
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 2).unwrap()]).block(Duration::from_secs(120)))
        .limit(Limit::concurrency(LimitType::Ip, 1))
        .store(store)
        .refusal_cache(false)
        .build()
        .unwrap();
    let who = [ip("198.51.100.60"), ip("198.51.100.60")];
    for _ in 0..5 {
        l.check(&who).await.unwrap().refund().await.unwrap();
    }
    let held = l.check(&who).await.unwrap();
    assert_eq!(l.check(&who).await.unwrap_err().cause(), Cause::Concurrency);
    drop(held);
    drop(admitted_soon(&l, &who).await);
    let e = loop {
        match l.check(&who).await {
            Err(e) if e.cause() == Cause::Exceeded => break e,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Ok(p) => panic!("a third unit was admitted: {p:?}"),
        }
    };
    // The block (120 s) outlasts the rule's own wait (60 s).
    assert_eq!(e.retry_after(), Duration::from_secs(120));
}

#[test]
fn refunds_racing_on_one_memory_log_give_back_every_unit() {
    // Threads read the clock in one order and take the key's lock in another: the log must
    // still keep its times in order, or a refund looks for its units in the wrong place.
    let store: StoreHandle = Arc::new(MemoryStore::new());
    for alg in [Algorithm::SlidingWindow, Algorithm::FixedWindow, Algorithm::Gcra] {
        let l = limiter(&store, alg, 3_600_000, 1_000, None);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        if let Ok(p) = l.check(&[ip("198.51.100.10")]).blocking() {
                            p.refund().blocking().unwrap();
                        }
                    }
                });
            }
        });
        let left = l.peek(&[ip("198.51.100.10")]).blocking().unwrap()[0].remaining;
        assert_eq!(left, 1_000, "{alg:?}: every refund gave its unit back");
    }
}
