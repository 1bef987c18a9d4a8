//! Runtime overrides of the buckets and GCRA: the units a subject used carry across a change of
//! rules (a raised limit admits at once, a lowered one refuses at once a subject already over
//! it) and carry back when the override ends, by its TTL or cleared. In memory on a manual clock
//! and on a real Redis.

mod support;

use ratelimit::clock::ManualClock;
use ratelimit::store::{MemoryStore, RedisStore, StoreHandle};
use ratelimit::{Algorithm, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

const BUCKETS: [Algorithm; 3] = [Algorithm::TokenBucket, Algorithm::LeakyBucket, Algorithm::Gcra];

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn user(s: &str) -> Subject<'static> {
    Subject::bytes(s.as_bytes().to_vec())
}

/// 2 per minute per user with `algorithm`, honouring overrides, on `store`.
fn limiter(algorithm: Algorithm, store: &StoreHandle) -> Limiter {
    let name = format!("levels::{algorithm:?}");
    Limiter::builder(name.as_str())
        .limit(Limit::new(LimitType::User, [rule(60_000, 2)]).algorithm(algorithm))
        .runtime_overrides(true)
        .store(store.clone())
        .build()
        .unwrap()
}

/// How many of `n` calls of `subject` pass.
fn admitted(limiter: &Limiter, subject: &Subject<'_>, n: usize) -> usize {
    (0..n).filter(|_| limiter.check(std::slice::from_ref(subject)).blocking().is_ok()).count()
}

/// The retry-after of `subject`'s next call, which must be refused.
fn refused_for(limiter: &Limiter, subject: &Subject<'_>) -> Duration {
    limiter.check(std::slice::from_ref(subject)).blocking().unwrap_err().retry_after()
}

/// Raised from 2 to 10 per minute at the limit: 8 more at once. Lowered to 3 after 5 used:
/// refused at once. `end` ends an override of 10 per minute (its TTL or a clear); the 10 used
/// carry back as 2 per minute's capacity plus its count (the debt bound): 4 units, so the next
/// call waits 3 units of 30 s (less what a real clock drained meanwhile).
fn scenario(store: &StoreHandle, ttl: Duration, end: impl Fn(&Limiter, &Subject<'_>)) {
    for algorithm in BUCKETS {
        let l = limiter(algorithm, store);
        let (alice, bob) = (user("alice"), user("bob"));
        assert_eq!(admitted(&l, &alice, 3), 2, "{algorithm:?}: the code's rule");
        l.set_override(&alice, [rule(60_000, 10)]).ttl(ttl).blocking().unwrap();
        assert_eq!(admitted(&l, &alice, 10), 8, "{algorithm:?}: raised, 2 used");
        end(&l, &alice);
        let wait = refused_for(&l, &alice);
        assert!(wait > Duration::from_secs(85) && wait <= Duration::from_secs(90), "{algorithm:?}: back, {wait:?}");

        assert_eq!(admitted(&l, &bob, 1), 1);
        l.set_override(&bob, [rule(60_000, 10)]).blocking().unwrap();
        assert_eq!(admitted(&l, &bob, 4), 4, "{algorithm:?}: raised");
        l.set_override(&bob, [rule(60_000, 3)]).blocking().unwrap();
        assert_eq!(admitted(&l, &bob, 1), 0, "{algorithm:?}: lowered below the 5 used");
        l.clear_override(&bob).blocking().unwrap();
        let wait = refused_for(&l, &bob);
        assert!(wait > Duration::from_secs(85) && wait <= Duration::from_secs(90), "{algorithm:?}: cleared, {wait:?}");
    }
}

#[test]
fn memory_levels_carry_across_overrides() {
    let clock = Arc::new(ManualClock::new(1_000_000_000));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    // Ended by its TTL: 30 s later the 10 used under 10 per minute are 5, clamped to 4.
    scenario(&store, Duration::from_secs(30), |_, _| clock.advance(Duration::from_secs(30)));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    scenario(&store, Duration::from_secs(30), |l, s| l.clear_override(s).blocking().unwrap());
}

#[test]
fn redis_levels_carry_across_overrides() {
    let store =
        |s: &RedisServer| -> StoreHandle { Arc::new(RedisStore::open(&s.url(), Duration::from_secs(2)).unwrap()) };
    let server = RedisServer::start();
    scenario(&store(&server), Duration::from_secs(600), |l, s| l.clear_override(s).blocking().unwrap());
    // Ended by Redis at the TTL (its own clock: no clock to inject): waited out.
    let server = RedisServer::start();
    scenario(&store(&server), Duration::from_millis(300), |_, _| std::thread::sleep(Duration::from_millis(400)));
}
