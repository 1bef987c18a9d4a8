//! Every algorithm on a real `redis-server`: the script and its in-memory twin decide call for
//! call as the algorithms' definitions (tests/support/definition.rs), each algorithm shows its
//! defining property, and the O(1) ones stay small.

#[path = "support/definition.rs"]
mod definition;
mod support;

use ratelimit::{
    store::MemoryStore, store::RedisStore, store::StoreHandle, Algorithm, Limit, LimitType, Limiter, RateLimited, Rule,
    Subject,
};
use redis::Commands;
use std::sync::Arc;
use std::time::Duration;
use support::{RedisServer, Rng};

/// Pinned times lie in the future: keys expire at pinned time + TTL by the server clock.
const T0: u64 = 4_000_000_000_000_000;
const MS: u64 = 1000;
const S: u64 = 1_000_000;

const ALL: [Algorithm; 6] = Algorithm::ALL;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap())
}

fn limiter(name: &str, store: StoreHandle, alg: Algorithm, rules: &[Rule], burst: Option<u64>) -> Limiter {
    let mut limit = Limit::new(LimitType::Global, rules.iter().copied()).algorithm(alg);
    if let Some(n) = burst {
        limit = limit.burst(n);
    }
    let b = Limiter::builder(name).limit(limit);
    // These tests compare the stores' own answers: the local refusal cache (on by default for
    // Redis) is tested in tests/refusal_cache.rs.
    b.store(store).refusal_cache(false).build().unwrap()
}

type Summary = (bool, Option<Rule>, Duration, u64, Duration);

fn summarize(r: Result<ratelimit::Permit, RateLimited>) -> Summary {
    match r {
        Ok(p) => {
            let q = p.quota().expect("quota");
            (true, Some(q.policy.rule), Duration::ZERO, q.remaining, q.reset)
        }
        Err(e) => (false, e.rule(), e.retry_after(), 0, Duration::ZERO),
    }
}

/// The same pseudo-random (time, cost) sequence through Redis and memory gives equal decisions,
/// those of the algorithm's definition.
#[tokio::test]
async fn every_algorithm_decides_alike_in_redis_and_memory() {
    let server = RedisServer::start();
    let rules = [rule(60_000, 8), rule(20_000, 3)];
    for alg in ALL {
        for burst in [None, Some(12)] {
            if burst.is_some() && !alg.supports_burst() {
                continue;
            }
            let name = format!("diff::{alg:?}::{burst:?}");
            let remote = limiter(&name, redis_store(&server), alg, &rules, burst);
            let local = limiter(&name, Arc::new(MemoryStore::new()), alg, &rules, burst);
            let spec = [definition::LimitSpec {
                limit_type: LimitType::Global,
                alg,
                rules: rules.to_vec(),
                burst,
                block: None,
            }];
            let mut models = vec![rules.iter().map(|&r| definition::RuleModel::new(alg, r, burst)).collect::<Vec<_>>()];
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let (mut now, mut allowed) = (T0, 0);
            for i in 0..300 {
                now += rng.below(9 * S);
                let cost = [1, 1, 1, 2, 0, 3][rng.below(6) as usize];
                let g = [Subject::global()];
                // Redis against the definition, then memory against it.
                let want = match definition::compare(&remote, &spec, &mut models, &g, now, cost).await {
                    Ok(Some(want)) => want,
                    other => panic!("{alg:?} burst {burst:?}, call {i} at +{}µs cost {cost}: {other:?}", now - T0),
                };
                let reset = if want.allowed { Duration::from_micros(want.reset_us) } else { Duration::ZERO };
                let a =
                    (want.allowed, Some(rules[want.rule]), Duration::from_micros(want.retry_us), want.remaining, reset);
                let b = summarize(local.check(&g).cost(cost).at(support::at(now)).await);
                assert_eq!(
                    a,
                    b,
                    "{alg:?} burst {burst:?}, call {i} at +{}µs cost {cost}: definition / memory",
                    now - T0
                );
                allowed += usize::from(a.0);
            }
            assert!(allowed > 30 && allowed < 270, "{alg:?}: both outcomes exercised ({allowed} allowed)");
        }
    }
}

/// Stacked limits of different algorithms are decided in one call (one `EVALSHA` each), in
/// both stores as their definitions, the calls both admitted and refused.
#[tokio::test]
async fn mixed_algorithms_decide_in_one_call() {
    let server = RedisServer::start();
    let spec = |limit_type, ms, count, alg| definition::LimitSpec {
        limit_type,
        alg,
        rules: vec![rule(ms, count)],
        burst: None,
        block: None,
    };
    let specs = vec![
        spec(LimitType::Ip, 10_000, 4, Algorithm::TokenBucket),
        spec(LimitType::Global, 30_000, 10, Algorithm::SlidingWindow),
        spec(LimitType::Key, 5_000, 3, Algorithm::Gcra),
    ];
    let build = |store: StoreHandle| {
        let mut b = Limiter::builder("diff::mixed");
        for s in &specs {
            b = b.limit(Limit::new(s.limit_type, s.rules.iter().copied()).algorithm(s.alg).prefix("rl:"));
        }
        b.store(store).refusal_cache(false).build().unwrap()
    };
    let (remote, local) = (build(redis_store(&server)), build(Arc::new(MemoryStore::new())));
    // Connected and the script loaded, then counted from 0.
    remote.peek(&[Subject::ip([10, 0, 0, 9].into()), Subject::global(), Subject::bytes(&b"z"[..])]).await.unwrap();
    server.reset_stats();
    let (mut remote_model, mut local_model) = (definition::Stack::new(specs.clone()), definition::Stack::new(specs));
    let mut rng = Rng(7);
    let (mut now, mut allowed, n) = (T0, 0, 300);
    for i in 0..n {
        now += rng.below(3 * S);
        let ip = Subject::ip(["10.0.0.1", "10.0.0.2"][rng.below(2) as usize].parse().unwrap());
        let key = Subject::bytes(["a", "b", "c"][rng.below(3) as usize].as_bytes());
        let subjects = [ip, Subject::global(), key];
        let want = remote_model.compare(&remote, &subjects, now, 1).await;
        let want = want.unwrap_or_else(|e| panic!("redis, call {i}: {e}")).expect("a cost that fits");
        local_model.compare(&local, &subjects, now, 1).await.unwrap_or_else(|e| panic!("memory, call {i}: {e}"));
        allowed += usize::from(want.allowed);
    }
    assert_eq!(server.evalsha_runs(), n as u64, "one script run per call, for all three limits");
    assert!(allowed > n / 10 && allowed < n * 9 / 10, "both outcomes exercised ({allowed} of {n} allowed)");
}

// ---------- defining properties, on Redis ----------

async fn calls(l: &Limiter, at: u64, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(l.check(&[Subject::global()]).at(support::at(at)).await.is_ok());
    }
    ok
}

#[tokio::test]
async fn fixed_window_allows_twice_the_count_across_a_boundary() {
    let server = RedisServer::start();
    let l = limiter("prop::fw", redis_store(&server), Algorithm::FixedWindow, &[rule(10_000, 5)], None);
    let boundary = (T0 / (10 * S) + 1) * 10 * S;
    assert_eq!(calls(&l, boundary - MS, 8).await, 5);
    assert_eq!(calls(&l, boundary, 8).await, 5, "a new window: 10 calls within 1ms (documented 2x burst)");
    let err = l.check(&[Subject::global()]).at(support::at(boundary + S)).await.unwrap_err();
    assert_eq!(err.retry_after(), Duration::from_secs(9), "retry at the next window");
}

#[tokio::test]
async fn sliding_window_counter_stays_within_its_error_bound() {
    let server = RedisServer::start();
    let count = 20;
    let l = limiter("prop::swc", redis_store(&server), Algorithm::SlidingWindowCounter, &[rule(1000, count)], None);
    // Uniform demand at 5x the limit for 30 windows.
    let mut admitted = Vec::new();
    let mut t = T0;
    while t < T0 + 30 * S {
        if l.check(&[Subject::global()]).at(support::at(t)).await.is_ok() {
            admitted.push(t);
        }
        t += 10 * MS;
    }
    // Long-run rate within 10% of the limit.
    let per_window = admitted.len() as f64 / 30.0;
    assert!((per_window - count as f64).abs() <= count as f64 * 0.1, "{per_window} per window");
    // In any sliding window the count stays within one unit plus 10% of the limit (uniform
    // traffic: the estimate's assumption holds); the worst case (bunched traffic) is 2x.
    for (i, &start) in admitted.iter().enumerate() {
        let n = admitted[i..].iter().take_while(|&&x| x < start + S).count() as u64;
        assert!(n <= count + 1 + count / 10, "{n} calls in the window from {start}");
    }
}

#[tokio::test]
async fn token_bucket_refills_at_its_rate_and_caps_at_capacity() {
    let server = RedisServer::start();
    // 10 per second, capacity 20.
    let l = limiter("prop::tb", redis_store(&server), Algorithm::TokenBucket, &[rule(1000, 10)], Some(20));
    assert_eq!(calls(&l, T0, 25).await, 20, "a full bucket holds the burst");
    let err = l.check(&[Subject::global()]).at(support::at(T0)).await.unwrap_err();
    assert_eq!(err.retry_after(), Duration::from_millis(100), "one token per 100ms");
    assert_eq!(calls(&l, T0 + 250 * MS, 5).await, 2, "2.5 tokens after 250ms");
    assert_eq!(calls(&l, T0 + 60 * S, 30).await, 20, "an idle minute refills to capacity, not beyond");
}

#[tokio::test]
async fn leaky_bucket_drains_at_its_leak_rate() {
    let server = RedisServer::start();
    let l = limiter("prop::lb", redis_store(&server), Algorithm::LeakyBucket, &[rule(1000, 10)], None);
    assert_eq!(calls(&l, T0, 15).await, 10, "the funnel holds its capacity");
    assert_eq!(calls(&l, T0 + 300 * MS, 5).await, 3, "300ms leaks 3 units");
    let err = l.check(&[Subject::global()]).at(support::at(T0 + 300 * MS)).await.unwrap_err();
    assert_eq!(err.retry_after(), Duration::from_millis(100));
}

#[tokio::test]
async fn gcra_spaces_calls_by_the_emission_interval() {
    let server = RedisServer::start();
    let l = limiter("prop::gcra", redis_store(&server), Algorithm::Gcra, &[rule(1000, 10)], None);
    assert_eq!(calls(&l, T0, 12).await, 10, "burst tolerance = count");
    let err = l.check(&[Subject::global()]).at(support::at(T0)).await.unwrap_err();
    assert_eq!(err.retry_after(), Duration::from_millis(100), "emission interval 1s/10");
    assert_eq!(calls(&l, T0 + 100 * MS, 3).await, 1);
    // Without burst (burst = 1) calls must be a full interval apart.
    let strict = limiter("prop::gcra1", redis_store(&server), Algorithm::Gcra, &[rule(1000, 10)], Some(1));
    assert_eq!(calls(&strict, T0, 3).await, 1);
    assert_eq!(calls(&strict, T0 + 99 * MS, 1).await, 0);
    assert_eq!(calls(&strict, T0 + 100 * MS, 1).await, 1);
}

/// `MEMORY USAGE` of one key at limit 10 000 after 10 000 admitted units (printed for docs/algorithms.md).
#[tokio::test]
async fn o1_algorithms_use_constant_memory() {
    let server = RedisServer::start();
    let mut con = server.client();
    println!("MEMORY USAGE per key, limit 10000 per 60s, after 10000 admitted units:");
    for alg in ALL {
        let l = limiter(&format!("mem::{alg:?}"), redis_store(&server), alg, &[rule(60_000, 10_000)], None);
        for i in 0..100 {
            l.check(&[Subject::global()]).cost(100).at(support::at(T0 + i * MS)).await.unwrap();
        }
        let keys: Vec<String> = con.keys(format!("*mem::{alg:?}*")).unwrap();
        assert_eq!(keys.len(), 1);
        let bytes: u64 = redis::cmd("MEMORY").arg("USAGE").arg(&keys[0]).query(&mut con).unwrap();
        println!("  {alg:?}: {bytes} bytes");
        if alg == Algorithm::SlidingWindow {
            assert!(bytes > 100_000, "the exact log grows with the limit");
        } else {
            assert!(bytes < 200, "{alg:?} uses {bytes} bytes per key");
        }
    }
}

// ---------- the lean O(1) script (decide_o1_batch.lua) beside the general one ----------

/// The O(1) algorithms stacked (no sliding window: the lean script decides), several rules,
/// bursts and costs above a count: both stores decide as the definitions.
#[tokio::test]
async fn stacked_o1_limits_decide_as_the_definitions_in_redis_and_memory() {
    let server = RedisServer::start();
    let (remote, local) = (o1_stack("o1::stack", redis_store(&server), false), o1_stack("o1::stack", memory(), false));
    compare_random_calls(&[&remote], &[&local], 500, 0x51ce).await;
}

/// The general script (a call with a sliding window among its limits) and the lean one take
/// turns on the same keys (two limiters of one name share their O(1) limits' keys, as slots of a
/// cluster call do): decisions stay the definitions', in both stores.
#[tokio::test]
async fn lean_and_general_scripts_share_keys() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let lean = o1_stack("o1::shared", store.clone(), false);
    let general = o1_stack("o1::shared", store, true);
    let mem = memory();
    let (lean_m, general_m) = (o1_stack("o1::shared", mem.clone(), false), o1_stack("o1::shared", mem, true));
    compare_random_calls(&[&lean, &general], &[&lean_m, &general_m], 500, 0xface).await;
}

/// Every O(1) key, written by either script at the real time, expires no sooner than its state
/// stops mattering and at most a grid step (1/64 of the longest window) after; a busy key's
/// expiry is refreshed only as it moves.
#[tokio::test]
async fn o1_keys_expire_when_their_state_stops_mattering() {
    let server = RedisServer::start();
    let mut con = server.client();
    let rules = [rule(2000, 40), rule(500, 15)];
    let grid_ms = 2000 / 64;
    for alg in ALL.into_iter().filter(|&a| a != Algorithm::SlidingWindow) {
        let name = format!("ttl::{alg:?}");
        let lean = limiter(&name, redis_store(&server), alg, &rules, None);
        let general = Limiter::builder(&name)
            .limit(Limit::new(LimitType::Global, rules).algorithm(alg))
            .limit(Limit::new(LimitType::User, [rule(1000, 1_000_000)]).algorithm(Algorithm::SlidingWindow))
            .store(redis_store(&server))
            .refusal_cache(false)
            .build()
            .unwrap();
        let user = Subject::bytes(&b"u"[..]);
        let mut rng = Rng(0x7711);
        let mut checked = 0;
        for i in 0..120 {
            let cost = [1, 1, 2, 0][rng.below(4) as usize];
            let _ = if i % 3 == 0 {
                general.check(&[Subject::global(), user.clone()]).cost(cost).await
            } else {
                lean.check(&[Subject::global()]).cost(cost).await
            };
            let key = o1_key(alg);
            let fields: std::collections::HashMap<String, Vec<u8>> = con.hgetall(&key).unwrap();
            if fields.is_empty() {
                continue; // nothing admitted yet
            }
            let until_us = matters_until(alg, &fields, &rules);
            let expires_ms: u64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut con).unwrap();
            assert!(
                expires_ms * 1000 >= until_us,
                "{alg:?} call {i}: expires at {expires_ms}ms, matters until {until_us}µs"
            );
            assert!(
                expires_ms <= until_us.div_ceil(1000) + grid_ms,
                "{alg:?} call {i}: expires at {expires_ms}ms, matters until {until_us}µs (grid {grid_ms}ms)"
            );
            checked += 1;
        }
        // Only the calls before the first admission find no key: a key named otherwise than
        // this test expects would leave nothing checked.
        assert!(checked >= 100, "{alg:?}: {checked} of 120 calls found the key {key:?}", key = o1_key(alg));
    }
    // A busy GCRA key: its expiry moves by a grid step (here 937ms) now and then, not per call.
    let busy = limiter("ttl::busy", redis_store(&server), Algorithm::Gcra, &[rule(60_000, 1_000_000)], None);
    let moves = expiry_moves_in_200_admissions(&mut con, &busy).await;
    assert!(moves <= 20, "{moves} PEXPIREAT for 200 decisions");
}

/// How many times 200 admissions of `busy`'s global key move its expiry (`PEXPIREAT`).
async fn expiry_moves_in_200_admissions(con: &mut redis::Connection, busy: &Limiter) -> u64 {
    support::reset_stats(con);
    for _ in 0..200 {
        busy.check(&[Subject::global()]).await.unwrap();
    }
    assert_eq!(support::command_calls(con, "evalsha"), 200);
    support::command_calls(con, "pexpireat")
}

/// A sliding-window key expires no sooner than its newest unit leaves the longest window, and
/// at most two windows after it, through admissions (both scripts), refusals, refunds and gaps
/// longer than a window; a key whose units stay in the window moves its expiry now and then,
/// not on every call.
#[tokio::test]
async fn sliding_keys_expire_after_their_newest_unit_leaves() {
    let server = RedisServer::start();
    let mut con = server.client();
    let (long, short) = (2_000_000u64, 500_000u64);
    let rules = [rule(long / 1000, 12), rule(short / 1000, 5)];
    let lean = limiter("ttl::sliding", redis_store(&server), Algorithm::SlidingWindow, &rules, None);
    let general = Limiter::builder("ttl::sliding")
        .limit(Limit::new(LimitType::Global, rules).algorithm(Algorithm::SlidingWindow))
        .limit(Limit::new(LimitType::User, [rule(1000, 1_000_000)]).algorithm(Algorithm::Gcra))
        .store(redis_store(&server))
        .refusal_cache(false)
        .build()
        .unwrap();
    let key = format!("{}{{ttl::sliding|global|}}:sw:2sx12-500msx5", ratelimit::store::DEFAULT_PREFIX);
    // Pinned times a little ahead of the server's clock, so that no key expires in real time
    // while the test reads it.
    let start =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64 + 1_000_000;
    let mut at = start;
    // The units that last moved the expiry refunded: the next admission past a window after them
    // trims nothing and finds the log not empty, so the refund must have moved the expiry.
    let refunded = limiter("ttl::sliding_refund", redis_store(&server), Algorithm::SlidingWindow, &rules, None);
    let refunded_key = format!("{}{{ttl::sliding_refund|global|}}:sw:2sx12-500msx5", ratelimit::store::DEFAULT_PREFIX);
    let g = [Subject::global()];
    let first = refunded.check(&g).at(support::at(start)).await.unwrap();
    refunded.check(&g).at(support::at(start + long * 9 / 10)).await.unwrap();
    first.refund().await.unwrap();
    let third = start + long * 3 / 2;
    refunded.check(&g).at(support::at(third)).await.unwrap();
    let expires_ms: i64 = redis::cmd("PEXPIRETIME").arg(&refunded_key).query(&mut con).unwrap();
    assert!(expires_ms > 0, "{refunded_key:?} has no expiry ({expires_ms}: -2 is no such key)");
    let expires_us = expires_ms as u64 * 1000;
    assert!(expires_us >= third + long, "expires at {expires_ms}ms, a unit counts until {}µs", third + long);

    let mut rng = Rng(0x5eed);
    let mut kept = Vec::new();
    let mut checked = 0;
    for i in 0..300 {
        at += [1_000, 20_000, 150_000, 900_000, 2_600_000][rng.below(5) as usize];
        let when = support::at(at);
        let cost = [1, 1, 2][rng.below(3) as usize];
        let permit = if i % 4 == 0 {
            general.check(&[Subject::global(), Subject::bytes(&b"u"[..])]).cost(cost).at(when).await
        } else {
            lean.check(&[Subject::global()]).cost(cost).at(when).await
        };
        if let Ok(p) = permit {
            kept.push(p);
            // Every call trims what left the longest window, and an admission leaves no older unit.
            let oldest: Vec<(Vec<u8>, f64)> = con.zrange_withscores(&key, 0, 0).unwrap();
            if let Some((_, oldest)) = oldest.first() {
                assert!(*oldest as u64 > at - long, "call {i}: a unit of {oldest}µs is left in the log at {at}µs");
            }
        }
        if rng.below(6) == 0 && !kept.is_empty() {
            let p = kept.swap_remove(rng.below(kept.len() as u64) as usize);
            p.refund().await.unwrap();
        }
        let newest: Vec<(Vec<u8>, f64)> = con.zrange_withscores(&key, -1, -1).unwrap();
        let Some((_, newest)) = newest.first() else { continue };
        let newest = *newest as u64;
        let expires_ms: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut con).unwrap();
        assert!(expires_ms > 0, "call {i}: the key has no expiry ({expires_ms})");
        let expires_us = expires_ms as u64 * 1000;
        assert!(
            expires_us >= newest + long,
            "call {i}: expires at {expires_us}µs, newest unit counts until {}",
            newest + long
        );
        assert!(
            expires_us <= newest + 2 * long + 2_000,
            "call {i}: expires at {expires_us}µs, newest unit at {newest}"
        );
        checked += 1;
    }
    // The log is empty only while every unit in it was refunded: a key named otherwise than
    // this test expects would leave nothing checked.
    assert!(checked >= 250, "{checked} of 300 calls found units in {key:?}");
    drop(kept);
    // Units that stay in the window: the expiry moves about once per window, not per call.
    let busy =
        limiter("ttl::sliding_busy", redis_store(&server), Algorithm::SlidingWindow, &[rule(60_000, 1_000_000)], None);
    let moves = expiry_moves_in_200_admissions(&mut con, &busy).await;
    assert!(moves <= 2, "{moves} PEXPIREAT for 200 decisions");
}

/// A refused call trims what left the window too, so it must move the key's expiry as an
/// admission's trim does: a later admission that finds nothing to trim moves nothing, and its
/// unit would otherwise outlive the key. Both scripts: one limit (a batch of one) and with a
/// second limit (the general script).
#[tokio::test]
async fn a_refusal_that_trims_moves_the_expiry() {
    let server = RedisServer::start();
    let mut con = server.client();
    let long = 2_000_000u64;
    for (name, second) in [("ttl::refused_trim", false), ("ttl::refused_trim_general", true)] {
        let mut builder = Limiter::builder(name)
            .limit(Limit::new(LimitType::Global, [rule(long / 1000, 2)]).algorithm(Algorithm::SlidingWindow));
        if second {
            builder = builder.limit(Limit::new(LimitType::User, [rule(1000, 1_000_000)]).algorithm(Algorithm::Gcra));
        }
        let limiter = builder.store(redis_store(&server)).refusal_cache(false).build().unwrap();
        let subjects: Vec<Subject> =
            if second { vec![Subject::global(), Subject::bytes(&b"u"[..])] } else { vec![Subject::global()] };
        let key = format!("{}{{{name}|global|}}:sw:2sx2", ratelimit::store::DEFAULT_PREFIX);
        // Ahead of the server's clock, so that nothing expires in real time meanwhile.
        let t0 =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64 + 1_000_000;
        // The first unit moves the expiry (an empty log) to t0 + 2 windows; the second stays.
        limiter.check(&subjects).at(support::at(t0)).await.unwrap();
        limiter.check(&subjects).at(support::at(t0 + long * 9 / 10)).await.unwrap();
        // The first unit leaves: trimmed by a call refused (a cost of 2 where 1 is left).
        let refused = limiter.check(&subjects).cost(2).at(support::at(t0 + long * 12 / 10)).await;
        assert!(refused.is_err(), "{name}: a cost of 2 with one unit in a window of 2 is refused");
        let left: u64 = con.zcard(&key).unwrap();
        assert_eq!(left, 1, "{name}: the refusal trimmed the unit that left the window ({key:?})");
        // Nothing leaves here and the log is not empty: this admission moves no expiry.
        let last = t0 + long * 16 / 10;
        limiter.check(&subjects).at(support::at(last)).await.unwrap();
        let expires_ms: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut con).unwrap();
        assert!(expires_ms > 0, "{name}: {key:?} has no expiry ({expires_ms})");
        assert!(
            expires_ms as u64 * 1000 >= last + long,
            "{name}: expires at {expires_ms}ms, a unit counts until {}µs",
            last + long
        );
    }
}

/// The key of `o1_keys_expire_when_their_state_stops_mattering`'s limit of `alg`.
fn o1_key(alg: Algorithm) -> String {
    format!("{}{{ttl::{alg:?}|global|}}:{}:2sx40-500msx15", ratelimit::store::DEFAULT_PREFIX, alg_code(alg))
}

fn memory() -> StoreHandle {
    Arc::new(MemoryStore::new())
}

fn alg_code(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::SlidingWindowCounter => "swc",
        Algorithm::FixedWindow => "fw",
        Algorithm::TokenBucket => "tb",
        Algorithm::LeakyBucket => "lb",
        Algorithm::Gcra => "gcra",
        _ => "sw",
    }
}

/// When the state in `fields` stops mattering (µs): after it, an absent key decides alike. Rule
/// r's state is the field named r, its integers packed as little-endian doubles: (window index,
/// count) for FixedWindow, (index, count, previous count) for SlidingWindowCounter, and for the
/// buckets (e, f), the instant e + f / count when the bucket is empty.
fn matters_until(alg: Algorithm, fields: &std::collections::HashMap<String, Vec<u8>>, rules: &[Rule]) -> u64 {
    let mut until = 0;
    for (r, rule) in rules.iter().enumerate() {
        let packed = fields.get(&(r + 1).to_string()).expect("a field per rule");
        let v: Vec<u64> =
            packed.chunks_exact(8).map(|d| f64::from_le_bytes(d.try_into().expect("8 bytes")) as u64).collect();
        let w = rule.window().as_micros() as u64;
        let t = match alg {
            Algorithm::FixedWindow => (v[0] + 1) * w,
            Algorithm::SlidingWindowCounter => (v[0] + 2) * w,
            _ => v[0] + u64::from(v[1] > 0),
        };
        until = until.max(t);
    }
    until
}

/// The limits of [`o1_stack`]: five O(1) limits (two of them with two rules, two with a burst),
/// then a sliding window.
fn o1_specs() -> Vec<definition::LimitSpec> {
    let spec = |limit_type, alg, rules: &[Rule], burst| definition::LimitSpec {
        limit_type,
        alg,
        rules: rules.to_vec(),
        burst,
        block: None,
    };
    vec![
        spec(LimitType::Ip, Algorithm::TokenBucket, &[rule(10_000, 6), rule(2_000, 3)], Some(8)),
        spec(LimitType::Key, Algorithm::Gcra, &[rule(5_000, 4)], Some(6)),
        spec(LimitType::Global, Algorithm::FixedWindow, &[rule(20_000, 30), rule(7_000, 12)], None),
        spec(LimitType::User, Algorithm::SlidingWindowCounter, &[rule(9_000, 8)], None),
        spec(LimitType::Ip, Algorithm::LeakyBucket, &[rule(6_000, 5)], None),
        spec(LimitType::User, Algorithm::SlidingWindow, &[rule(4_000, 3)], None),
    ]
}

/// The five O(1) limits of [`o1_specs`]; with `sliding`, its sliding window too, so the general
/// script decides.
fn o1_stack(name: &str, store: StoreHandle, sliding: bool) -> Limiter {
    let mut b = Limiter::builder(name);
    for s in &o1_specs()[..5 + usize::from(sliding)] {
        let prefix = if s.alg == Algorithm::SlidingWindow { "o1sw:" } else { "o1:" };
        let mut limit = Limit::new(s.limit_type, s.rules.iter().copied()).algorithm(s.alg).prefix(prefix);
        if let Some(n) = s.burst {
            limit = limit.burst(n);
        }
        b = b.limit(limit);
    }
    // Exact retry-afters are compared: without the refusal cache (tested in tests/refusal_cache.rs).
    b.store(store).refusal_cache(false).build().unwrap()
}

/// The same pseudo-random calls (time, cost, subjects, and which limiter) through `remote[i]`
/// and `local[i]` (limiters of [`o1_stack`], of one name per store) decide as the definitions:
/// one model of the limits per store, which its limiters share.
async fn compare_random_calls(remote: &[&Limiter], local: &[&Limiter], n: usize, seed: u64) {
    let (mut remote_model, mut local_model) = (definition::Stack::new(o1_specs()), definition::Stack::new(o1_specs()));
    let mut rng = Rng(seed);
    let (mut now, mut allowed) = (T0, 0);
    for i in 0..n {
        now += rng.below(2 * S);
        let cost = [1, 1, 1, 2, 0, 3, 9][rng.below(7) as usize];
        let which = rng.below(remote.len() as u64) as usize;
        let ip = Subject::ip(["10.0.0.1", "10.0.0.2"][rng.below(2) as usize].parse().unwrap());
        let key = Subject::bytes(["a", "b", "c"][rng.below(3) as usize].as_bytes());
        let user = Subject::bytes(["u1", "u2"][rng.below(2) as usize].as_bytes());
        let subjects = [ip.clone(), key, Subject::global(), user.clone(), ip, user];
        let take = 5 + usize::from(which == 1);
        let what =
            |store: &str, e: String| format!("{store}, call {i} at +{}µs through limiter {which}: {e}", now - T0);
        let want = remote_model.compare(remote[which], &subjects[..take], now, cost).await;
        let want = want.unwrap_or_else(|e| panic!("{}", what("redis", e)));
        local_model
            .compare(local[which], &subjects[..take], now, cost)
            .await
            .unwrap_or_else(|e| panic!("{}", what("memory", e)));
        allowed += usize::from(want.is_some_and(|w| w.allowed));
    }
    assert!(allowed > n / 10 && allowed < n * 9 / 10, "both outcomes exercised ({allowed} of {n} allowed)");
}
