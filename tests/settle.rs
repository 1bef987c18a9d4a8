//! Settling a permit on every store: Redis Cluster and Sentinel (the memory store and one Redis
//! are held to the definitions call by call in tests/exact_settle.rs), one round trip, debt with
//! its exact retry-after, a permit dropped or a body that panicked keeping its estimate, and the
//! concurrency slot freed by the same settle.

mod support;

use ratelimit::store::{MemoryStore, RedisStore, SentinelSpec, SentinelStore, StoreHandle};
use ratelimit::{rate_limiter, Algorithm, Cause, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{at, RedisServer};

const T0: u64 = 1_900_000_000_000_000;

fn name(what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("settle::{what}{}", N.fetch_add(1, Ordering::Relaxed))
}

/// 1000 units per 60 s of `alg` on a user.
fn limiter(store: &StoreHandle, alg: Algorithm) -> Limiter {
    Limiter::builder(name("l"))
        .limit(Limit::new(LimitType::User, [Rule::from_millis(60_000, 1000).unwrap()]).algorithm(alg))
        .store(store.clone())
        .refusal_cache(false)
        .build()
        .unwrap()
}

/// On `store`, for each algorithm, at pinned times: an estimate of 100 settled to 40 gives 60
/// back; one settled to 1300 puts the user 300 units past the limit, and the next estimate is
/// refused with the wait the algorithm defines.
async fn settles_on(store: &StoreHandle, label: &str) {
    for alg in Algorithm::ALL {
        let l = limiter(store, alg);
        let who = [Subject::bytes(&b"alice"[..])];
        let t = T0 - T0 % 60_000_000 + 1_000_000;
        l.check(&who).cost(100).at(at(t)).await.unwrap().settle(40).await.unwrap();
        let left = l.peek(&who).at(at(t)).await.unwrap()[0].remaining;
        assert_eq!(left, 960, "{label} {alg:?}: settled below the estimate");
        l.check(&who).cost(100).at(at(t)).await.unwrap().settle(1300).await.unwrap();
        let left = l.peek(&who).at(at(t)).await.unwrap()[0].remaining;
        assert_eq!(left, 0, "{label} {alg:?}: in debt, never below 0");
        let refused = l.check(&who).cost(100).at(at(t)).await.unwrap_err();
        assert_eq!(refused.cause(), Cause::Exceeded, "{label} {alg:?}");
        let wait = refused.retry_after();
        let want = match alg {
            // The log's units leave a window after they came (the counter weighs them in the
            // next window too: its wait is longer).
            Algorithm::SlidingWindow => Duration::from_secs(60),
            // The call's window ends 59 s after it (the calls came 1 s into it).
            Algorithm::FixedWindow => Duration::from_secs(59),
            Algorithm::SlidingWindowCounter => wait.max(Duration::from_secs(60)),
            // 1340 units in a bucket of 1000 draining 1000 per minute: 100 fit once 440 drained.
            _ => Duration::from_micros(440 * 60_000),
        };
        assert_eq!(wait, want, "{label} {alg:?}: the next estimate fits after exactly this");
        assert!(l.check(&who).cost(100).at(at(t + u64::try_from(wait.as_micros()).unwrap())).await.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_on_every_store() {
    let memory: StoreHandle = Arc::new(MemoryStore::new());
    settles_on(&memory, "memory").await;
    let server = RedisServer::start();
    let redis: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap());
    settles_on(&redis, "redis").await;
    let set = support::sentinel::SentinelSet::start();
    let spec = SentinelSpec::new([set.sentinel_url()], support::sentinel::MASTER);
    let sentinel: StoreHandle = Arc::new(SentinelStore::open(&spec, Duration::from_secs(2)).unwrap());
    settles_on(&sentinel, "sentinel").await;
    #[cfg(feature = "cluster")]
    {
        let cluster = support::cluster::RedisCluster::start(3, 0);
        let store: StoreHandle =
            Arc::new(ratelimit::store::ClusterStore::open(&cluster.urls(), Duration::from_secs(2)).unwrap());
        settles_on(&store, "cluster").await;
    }
}

/// One round trip per settle, none for a settle to the estimate; a dropped permit keeps its
/// estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_is_one_round_trip_and_a_dropped_permit_keeps_its_estimate() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap());
    let l = limiter(&store, Algorithm::Gcra);
    let who = [Subject::bytes(&b"bob"[..])];
    let permit = l.check(&who).cost(100).await.unwrap();
    server.reset_stats();
    permit.settle(250).await.unwrap();
    assert_eq!(server.evalsha_runs(), 1, "one script run");
    let permit = l.check(&who).cost(100).await.unwrap();
    server.reset_stats();
    permit.settle(100).await.unwrap();
    assert_eq!(server.evalsha_runs(), 0, "nothing to settle");
    drop(l.check(&who).cost(100).await.unwrap());
    let left = l.peek(&who).await.unwrap()[0].remaining;
    // 250 + 100 + 100 taken, less what drained meanwhile (a unit per 60 ms).
    assert!((550..=556).contains(&left), "{left}");
}

#[derive(Debug)]
struct Reply {
    tokens: u64,
}

#[rate_limiter(type = Key, key = "gateway", rules = [(60s, 1000)], cost = 100, settle = |r| r.as_ref().map_or(0, |r| r.tokens))]
fn generate(tokens: u64, panics: bool) -> Result<Reply, RateLimited> {
    assert!(!panics, "the model crashed");
    Ok(Reply { tokens })
}

#[rate_limiter(type = Key, key = "slow", rules = [(60s, 1000)], cost = 100, settle = |r| *r.as_ref().unwrap_or(&0))]
#[rate_limiter(type = Key, key = "slow", concurrency = 1)]
async fn slow(tokens: u64) -> Result<u64, RateLimited> {
    Ok(tokens)
}

/// The attribute: a body that panicked keeps its estimate; the settle frees a concurrency slot
/// in the same round trip.
#[tokio::test]
async fn a_panicking_body_keeps_its_estimate_and_a_settle_frees_the_slot() {
    // 9 calls settled to 0, one panic (100 kept), then a call of 850: 950 used, and the next
    // estimate no longer fits.
    for _ in 0..9 {
        generate(0, false).unwrap();
    }
    assert!(std::panic::catch_unwind(|| generate(0, true)).is_err());
    assert_eq!(generate(850, false).unwrap().tokens, 850);
    assert_eq!(generate(0, false).unwrap_err().cause(), Cause::Exceeded);
    // One call at a time: each settles and frees its slot, so the next is admitted at once.
    for _ in 0..5 {
        assert_eq!(slow(10).await.unwrap(), 10);
    }
}
