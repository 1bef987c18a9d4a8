//! The scripts decide exactly as the algorithms' definitions, on a real `redis-server` (or the
//! server `RATELIMIT_TEST_SERVER` names): one regression test per symptom seen with the
//! floating-point scripts.

mod support;

use ratelimit::{Algorithm, LimitType, Limiter, RateLimited, RedisStore, Rule, StoreHandle, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

/// Pinned times lie in the future (keys expire at pinned time + TTL by the server clock), where
/// doubles step by 0.25 µs as they do today (2^50 to 2^51 µs): the floating-point scripts
/// rounded there.
const T0: u64 = 2_000_000_000_000_000;
const S: u64 = 1_000_000;

fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap())
}

/// One Global limit of `count` per `window_ms`, without the refusal cache (these tests read the
/// store's own answers).
fn limiter(store: &StoreHandle, name: &str, alg: Algorithm, window_ms: u64, count: u64, burst: Option<u64>) -> Limiter {
    let rule = Rule::from_millis(window_ms, count).unwrap();
    let mut b = Limiter::builder(name).limit_with(LimitType::Global, [rule], alg, ratelimit::DEFAULT_PREFIX);
    if let Some(n) = burst {
        b = b.burst(n);
    }
    b.store(store.clone()).deny_cache(false).build().unwrap()
}

/// What a call answered: admitted with (remaining, reset µs), or refused with retry-after µs.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Admitted { remaining: u64, reset_us: u128 },
    Refused { retry_us: u128 },
}

fn answer(r: Result<ratelimit::Permit<'_>, RateLimited>) -> Answer {
    match r {
        Ok(p) => {
            let q = p.quota().expect("a quota");
            Answer::Admitted { remaining: q.remaining, reset_us: q.reset.as_micros() }
        }
        Err(e) => Answer::Refused { retry_us: e.retry_after().as_micros() },
    }
}

async fn call(l: &Limiter, cost: u64, at: u64) -> Answer {
    answer(l.check_at(&[Subject::global()], cost, Some(at)).await)
}

/// (remaining, reset µs) of the limit's rule, read by a peek at `at`.
async fn peek(l: &Limiter, at: u64) -> (u64, u128) {
    let s = l.peek_at(&[Subject::global()], Some(at)).await.unwrap();
    (s[0].remaining, s[0].reset.as_micros())
}

fn admitted(remaining: u64, reset_us: u128) -> Answer {
    Answer::Admitted { remaining, reset_us }
}

fn refused(retry_us: u128) -> Answer {
    Answer::Refused { retry_us }
}

/// Gcra, 6 per second, burst 1: one call per 166 666⅔ µs. The floating-point script refused
/// every call on an idle key, forever, with a retry-after of 0, while peek said 1 remaining.
#[tokio::test]
async fn gcra_6_per_second_burst_1_admits_one_call_per_interval() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let l = limiter(&store, "exact::gcra6b1", Algorithm::Gcra, 1000, 6, Some(1));
    assert_eq!(peek(&l, T0).await, (1, 0), "an idle bucket");
    assert_eq!(call(&l, 1, T0).await, admitted(0, 166_667));
    assert_eq!(peek(&l, T0).await, (0, 166_667));
    assert_eq!(call(&l, 1, T0).await, refused(166_667));
    // Each call empties the bucket at its instant + 166 666⅔ µs: the next fits 166 667 µs
    // later, not a µs before.
    for k in 1..=12u64 {
        let at = T0 + k * 166_667;
        assert_eq!(call(&l, 1, at - 1).await, refused(1), "call {k}, 1 µs early");
        assert_eq!(peek(&l, at).await, (1, 0), "call {k}: empty again");
        assert_eq!(call(&l, 1, at).await, admitted(0, 166_667), "call {k}");
        assert_eq!(call(&l, 1, at).await, refused(166_667), "call {k}, again at once");
    }
}

/// Gcra, 9 per second, burst 2: a call of cost 2 fits an idle bucket (it was always refused).
#[tokio::test]
async fn gcra_9_per_second_burst_2_admits_cost_2() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let l = limiter(&store, "exact::gcra9b2", Algorithm::Gcra, 1000, 9, Some(2));
    assert_eq!(call(&l, 2, T0).await, admitted(0, 222_223));
    // Full: the next unit fits once one has drained, 111 111⅑ µs later.
    assert_eq!(call(&l, 1, T0).await, refused(111_112));
    assert_eq!(call(&l, 2, T0 + 222_222).await, refused(1));
    assert_eq!(call(&l, 2, T0 + 222_223).await, admitted(0, 222_223));
}

/// Gcra, 7 per second, default burst: 7 simultaneous calls pass (6 did), the 8th does not.
#[tokio::test]
async fn gcra_7_per_second_admits_7_simultaneous_calls() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let l = limiter(&store, "exact::gcra7", Algorithm::Gcra, 1000, 7, None);
    for i in 0..7u64 {
        match call(&l, 1, T0).await {
            Answer::Admitted { remaining, .. } => assert_eq!(remaining, 6 - i, "call {i}"),
            other => panic!("call {i}: {other:?}"),
        }
    }
    assert_eq!(call(&l, 1, T0).await, refused(142_858));
    assert_eq!(peek(&l, T0).await, (0, 1_000_000));
}

/// Gcra at 120 000 per second (T = 8⅓ µs), burst 3, a call every 3 µs for 6 ms: the calls
/// admitted are those of the definition (TAT kept exactly, times count), no more.
#[tokio::test]
async fn gcra_120000_per_second_admits_what_the_definition_admits() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let (count, window_us, burst) = (120_000u128, 1_000_000u128, 3u128);
    let l = limiter(&store, "exact::gcra120k", Algorithm::Gcra, 1000, 120_000, Some(3));
    // The definition: TAT * count; a call passes iff max(TAT, t) + T - t <= burst * T.
    let (mut tat_n, mut expected) = (0u128, Vec::new());
    let mut admitted_at = Vec::new();
    for dt in (0..6000u64).step_by(3) {
        let t_n = u128::from(T0 + dt) * count;
        let start = tat_n.max(t_n);
        if start + window_us - t_n <= burst * window_us {
            tat_n = start + window_us;
            expected.push(dt);
        }
        if l.check_at(&[Subject::global()], 1, Some(T0 + dt)).await.is_ok() {
            admitted_at.push(dt);
        }
    }
    assert_eq!(expected.len(), 722);
    assert_eq!(admitted_at, expected);
}

/// TokenBucket and LeakyBucket, 10 per second: at the exact instant a unit of room arrives, the
/// call passes (it was refused with a 1 µs retry-after).
#[tokio::test]
async fn buckets_admit_at_the_exact_instant_room_arrives() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    for alg in [Algorithm::TokenBucket, Algorithm::LeakyBucket] {
        let l = limiter(&store, &format!("exact::instant::{alg:?}"), alg, 1000, 10, None);
        assert_eq!(call(&l, 10, T0).await, admitted(0, 1_000_000), "{alg:?}");
        assert_eq!(call(&l, 1, T0).await, refused(100_000), "{alg:?}");
        assert_eq!(call(&l, 1, T0 + 99_999).await, refused(1), "{alg:?}");
        assert_eq!(call(&l, 1, T0 + 100_000).await, admitted(0, 1_000_000), "{alg:?}");
        // Three units drain in 300 ms: three fit then, a fourth not.
        assert_eq!(call(&l, 3, T0 + 400_000).await, admitted(0, 1_000_000), "{alg:?}");
        assert_eq!(call(&l, 1, T0 + 400_000).await, refused(100_000), "{alg:?}");
        // Counts that do not divide the second: emptied at T0, one unit taken at ceil(T), the
        // bucket holds room for count - 1 units again at exactly T0 + 1 s (T0 + count * T).
        for count in [3, 6, 7, 9, 11, 13, 17, 19, 23, 29, 31, 37] {
            let l = limiter(&store, &format!("exact::instant::{alg:?}::{count}"), alg, 1000, count, None);
            assert!(matches!(call(&l, count, T0).await, Answer::Admitted { remaining: 0, .. }), "{alg:?} {count}");
            let first = (1_000_000u64).div_ceil(count);
            assert!(matches!(call(&l, 1, T0 + first).await, Answer::Admitted { .. }), "{alg:?} {count}");
            assert_eq!(call(&l, count - 1, T0 + S - 1).await, refused(1), "{alg:?} {count}: 1 µs early");
            assert_eq!(call(&l, count - 1, T0 + S).await, admitted(0, 1_000_000), "{alg:?} {count}: on time");
        }
    }
}

/// For every algorithm, with a count that does not divide the window: waiting the retry-after
/// is exactly enough (1 µs less is not), and the retry-after is never 0.
#[tokio::test]
async fn retry_after_is_exactly_enough() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    for alg in Algorithm::ALL {
        for (window_ms, count, burst) in [(1000, 7, None), (1000, 6, Some(1)), (10_000, 3, Some(2)), (60_000, 29, None)]
        {
            let burst = burst.filter(|_| alg.supports_burst());
            let name = format!("exact::retry::{alg:?}::{window_ms}::{count}::{burst:?}");
            let l = limiter(&store, &name, alg, window_ms, count, burst);
            let mut now = T0 + 123_457;
            let mut refusals = 0;
            for step in 0..80u64 {
                let cost = (1 + step % 2).min(burst.unwrap_or(count));
                match call(&l, cost, now).await {
                    Answer::Admitted { .. } => now += step % 3,
                    Answer::Refused { retry_us } => {
                        refusals += 1;
                        assert!(retry_us > 0, "{name} step {step}: a retry-after of 0");
                        let d = u64::try_from(retry_us).unwrap();
                        if d > 1 {
                            let early = call(&l, cost, now + d - 1).await;
                            assert!(
                                matches!(early, Answer::Refused { .. }),
                                "{name} step {step}: 1 µs early {early:?}"
                            );
                        }
                        let on_time = call(&l, cost, now + d).await;
                        assert!(
                            matches!(on_time, Answer::Admitted { .. }),
                            "{name} step {step}: after {d} µs {on_time:?}"
                        );
                        now += d;
                    }
                }
            }
            assert!(refusals >= 3, "{name}: {refusals} refusals");
        }
    }
}

/// Peek's remaining is the number of cost-1 calls that then pass, one after the other, and its
/// reset the time after which remaining is whole again.
#[tokio::test]
async fn peek_remaining_is_what_passes() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    for alg in Algorithm::ALL {
        for (window_ms, count, burst) in [(1000, 7, None), (1000, 6, Some(1)), (3000, 5, Some(3))] {
            let burst = burst.filter(|_| alg.supports_burst());
            let full = burst.unwrap_or(count);
            let name = format!("exact::peek::{alg:?}::{window_ms}::{count}::{burst:?}");
            let l = limiter(&store, &name, alg, window_ms, count, burst);
            let mut now = T0 + 777;
            for step in 0..12u64 {
                now += step * 61_111;
                let _ = call(&l, (1 + step % 3).min(full), now).await;
                let (remaining, reset) = peek(&l, now).await;
                // The reset empties every rule: a full quota then, not before (1 µs early).
                let (r_full, _) = peek(&l, now + u64::try_from(reset).unwrap()).await;
                assert_eq!(r_full, full, "{name} step {step}: whole after its reset");
                if reset > 0 {
                    let (r_early, _) = peek(&l, now + u64::try_from(reset).unwrap() - 1).await;
                    assert!(r_early < full, "{name} step {step}: whole 1 µs before its reset");
                }
                for i in 0..remaining {
                    let a = call(&l, 1, now).await;
                    assert!(matches!(a, Answer::Admitted { .. }), "{name} step {step}: call {i} of {remaining}: {a:?}");
                }
                let over = call(&l, 1, now).await;
                assert!(matches!(over, Answer::Refused { .. }), "{name} step {step}: a call past {remaining}");
            }
        }
    }
}
