//! The local refusal cache on a real `redis-server`: it changes no decision (the same
//! randomized call sequence with and without it is allowed and refused alike, call for call), a
//! cached refusal answers with the remaining retry-after and expires exactly at it, and a client
//! hammering a refused limit costs a handful of `EVALSHA`, not one per call.

mod support;

use ratelimit::{
    store::RedisStore, store::StoreHandle, Algorithm, Limit, LimitType, Limiter, RateLimited, Rule, Subject,
};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

/// Pinned times lie in the future: keys expire at pinned time + TTL by the server clock.
const T0: u64 = 4_000_000_000_000_000;
const MS: u64 = 1000;

const ALL: [Algorithm; 6] = Algorithm::ALL;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap())
}

fn flush(server: &RedisServer) {
    let _: () = redis::cmd("FLUSHDB").query(&mut server.client()).unwrap();
}

/// A user limit of `alg` with two rules, stacked on a global limit of `global_alg`.
fn stacked(store: StoreHandle, alg: Algorithm, global_alg: Algorithm, cache: bool) -> Limiter {
    Limiter::builder("refusal_cache::diff")
        .limit(Limit::new(LimitType::User, [rule(10_000, 6), rule(1_000, 2)]).algorithm(alg))
        .limit(Limit::new(LimitType::Global, [rule(4_000, 14)]).algorithm(global_alg))
        .store(store)
        .refusal_cache(cache)
        .build()
        .unwrap()
}

/// What one call came to: allowed with its quota, or refused with its retry-after.
#[derive(Debug, PartialEq)]
enum Outcome {
    Allowed { rule: Rule, remaining: u64, reset: Duration },
    Refused { cause: ratelimit::Cause, limit_type: LimitType, retry_after: Duration },
}

fn outcome(r: Result<ratelimit::Permit<'_>, RateLimited>) -> Outcome {
    match r {
        Ok(p) => {
            let q = p.quota().expect("quota");
            Outcome::Allowed { rule: q.policy.rule, remaining: q.remaining, reset: q.reset }
        }
        // A cost of 3 never fits the user's rule of 2 per second: refused as too high.
        Err(e) => Outcome::Refused { cause: e.cause(), limit_type: e.limit_type(), retry_after: e.retry_after() },
    }
}

/// Decides a randomized sequence (three users, costs 1 to 3), mostly bursts within a
/// retry-after, sometimes a long pause, and often a call right at the edge of a user's last
/// refusal (a µs before, at, or a µs after its retry-after). The sequence is built as it runs,
/// from the outcomes; `replay` gives a sequence to follow instead.
async fn run(
    limiter: &Limiter,
    seed: u64,
    replay: Option<&[(u64, usize, u64)]>,
) -> (Vec<(u64, usize, u64)>, Vec<Outcome>) {
    let users: [&[u8]; 3] = [b"alice", b"bob", b"carol"];
    let mut rng = support::Rng(seed);
    let (mut now, mut edges) = (T0, [None::<u64>; 3]);
    let (mut calls, mut out) = (Vec::new(), Vec::new());
    for i in 0..400 {
        let call = match replay {
            Some(calls) => calls[i],
            None => {
                let mut user = rng.below(3) as usize;
                let cost = [1, 1, 1, 2, 3][rng.below(5) as usize];
                match (rng.below(3), edges[user]) {
                    (0, Some(edge)) if edge + 1 >= now + 2 => now = edge + 1 - rng.below(3),
                    _ => {
                        user = rng.below(3) as usize;
                        now += if rng.below(10) == 0 { rng.below(6_000 * MS) } else { rng.below(150 * MS) };
                    }
                }
                (now, user, cost)
            }
        };
        let (t, user, cost) = call;
        let subjects = [Subject::bytes(users[user]), Subject::global()];
        let o = outcome(limiter.check(&subjects).cost(cost).at(support::at(t)).await);
        edges[user] = match o {
            Outcome::Refused { retry_after, .. } => Some(t + retry_after.as_micros() as u64),
            Outcome::Allowed { .. } => None,
        };
        calls.push(call);
        out.push(o);
    }
    (calls, out)
}

/// The same randomized sequence (see `run`: three users, costs 1 to 3, calls at the edges of
/// refusals; a user limit of two rules stacked on a global one, every algorithm, several seeds)
/// decided with and without the cache: every
/// call is allowed or refused alike, allowed calls see the same quota, and a cached refusal's
/// retry-after is never longer than the store's (equal unless the call's cost, or another
/// limit's exhaustion since, makes the store's longer).
#[tokio::test]
async fn the_cache_changes_no_decision() {
    let server = RedisServer::start();
    let store = redis_store(&server);
    let (mut hits, mut refusals, mut exact) = (0usize, 0usize, 0usize);
    for alg in ALL {
        for (s, seed) in
            [0x9e37_79b9_7f4a_7c15u64, 0xdead_beef_1234_5678, 0x0123_4567_89ab_cdef].into_iter().enumerate()
        {
            let global_alg = ALL[(s + 2) % ALL.len()];
            flush(&server);
            server.reset_stats();
            let (calls, plain) = run(&stacked(store.clone(), alg, global_alg, false), seed, None).await;
            let plain_evals = server.calls("evalsha");
            // (One more the first time a script meets this server: NOSCRIPT, then the retry.)
            // Costs that can never fit are refused before any store call.
            let fitting =
                plain.iter().filter(|o| !matches!(o, Outcome::Refused { cause: ratelimit::Cause::CostTooHigh, .. }));
            assert!(plain_evals >= fitting.count() as u64, "without the cache every call goes to Redis");
            flush(&server);
            server.reset_stats();
            let (_, cached) = run(&stacked(store.clone(), alg, global_alg, true), seed, Some(&calls)).await;
            let cached_evals = server.calls("evalsha");
            for (i, (a, b)) in plain.iter().zip(&cached).enumerate() {
                let (t, user, cost) = calls[i];
                let at = format!(
                    "{alg:?}/{global_alg:?} seed {s}, call {i} (+{}ms, user {user}, cost {cost})",
                    (t - T0) / MS
                );
                match (a, b) {
                    (Outcome::Allowed { .. }, _) | (_, Outcome::Allowed { .. }) => assert_eq!(a, b, "{at}"),
                    (
                        Outcome::Refused { cause: ca, retry_after: ra, .. },
                        Outcome::Refused { cause: cb, retry_after: rb, .. },
                    ) => {
                        assert_eq!(ca, cb, "{at}");
                        if *ca == ratelimit::Cause::CostTooHigh {
                            // A cost above a rule's count never fits: refused before the cache
                            // or the store, with no time to come back at.
                            assert_eq!(a, b, "{at}");
                            assert!(ra.is_zero(), "{at}");
                            continue;
                        }
                        assert!(*rb <= *ra, "{at}: the cache answered {rb:?}, the store {ra:?}");
                        assert!(!rb.is_zero(), "{at}");
                        refusals += 1;
                        exact += usize::from(a == b);
                    }
                }
            }
            let allowed = plain.iter().filter(|o| matches!(o, Outcome::Allowed { .. })).count();
            assert!(allowed > 40 && allowed < 360, "{alg:?}: both outcomes exercised ({allowed} allowed)");
            assert!(cached_evals < plain_evals, "{alg:?}: the cache saved no store call");
            hits += calls.len().saturating_sub(cached_evals as usize);
        }
    }
    eprintln!("{refusals} refusals, {hits} answered by the cache, {exact} with the store's exact retry-after");
    assert!(hits * 5 > refusals, "the cache answers a good part of the refusals ({hits} of {refusals})");
}

/// A cached refusal counts down its retry-after and lapses exactly when it runs out.
#[tokio::test]
async fn a_cached_refusal_expires_at_its_retry_after() {
    let server = RedisServer::start();
    let l = Limiter::builder("refusal_cache::expiry")
        .limit(Limit::new(LimitType::User, [rule(1_000, 1)]))
        .store(redis_store(&server))
        .build()
        .unwrap();
    let alice = [Subject::bytes(&b"alice"[..])];
    assert!(l.check(&alice).at(support::at(T0)).await.is_ok());
    let first = l.check(&alice).at(support::at(T0 + 200 * MS)).await.unwrap_err();
    assert_eq!(first.retry_after(), Duration::from_millis(800));
    server.reset_stats();
    let cached = l.check(&alice).at(support::at(T0 + 999_999)).await.unwrap_err();
    assert_eq!(cached.retry_after(), Duration::from_micros(1), "the remaining retry-after");
    assert_eq!(cached.limit_type(), LimitType::User);
    assert_eq!(cached.rule(), Some(rule(1_000, 1)));
    assert!(l.check(&alice).cost(5).at(support::at(T0 + 500 * MS)).await.is_err(), "a higher cost is refused too");
    assert_eq!(server.calls("evalsha"), 0, "answered locally");
    // A call on the clock is not answered by a refusal cached at a pinned time.
    let _ = l.check(&alice).await;
    assert_eq!(server.calls("evalsha"), 1);
    assert!(l.check(&alice).at(support::at(T0 + 1_000 * MS)).await.is_ok(), "room again, at the store");
    assert_eq!(server.calls("evalsha"), 2);
    // Another subject is not affected by alice's refusal.
    assert!(l.check(&[Subject::bytes(&b"bob"[..])]).at(support::at(T0 + 1_000 * MS)).await.is_ok());
}

/// 500 refused calls on the real clock cost a handful of `EVALSHA` with the cache (on by
/// default for Redis), one each without it; `forget_refusals` sends the next call to the store.
#[test]
fn hammering_a_refused_limit_costs_a_handful_of_store_calls() {
    let server = RedisServer::start();
    let hammer = |l: &Limiter| {
        let ip = [Subject::ip(support::addr("203.0.113.9"))];
        flush(&server);
        server.reset_stats();
        assert!(l.check(&ip).blocking().is_ok());
        for _ in 0..500 {
            let e = l.check(&ip).blocking().unwrap_err();
            assert!(e.retry_after() > Duration::from_secs(50), "{:?}", e.retry_after());
        }
        server.calls("evalsha")
    };
    let build = |cache: Option<bool>| {
        let b = Limiter::builder("refusal_cache::hammer")
            .limit(Limit::new(LimitType::Ip, [rule(60_000, 1)]))
            .store(redis_store(&server));
        match cache {
            Some(on) => b.refusal_cache(on),
            None => b,
        }
        .build()
        .unwrap()
    };
    let by_default = build(None);
    let with = hammer(&by_default);
    assert!(with <= 3, "{with} EVALSHA for 1 allowed and 500 refused calls");
    let without = hammer(&build(Some(false)));
    assert_eq!(without, 501);
    eprintln!("501 calls: {with} EVALSHA with the cache, {without} without");

    // After a reset of the counts, forgetting the refusals sends the next call to the store.
    let ip = [Subject::ip(support::addr("203.0.113.9"))];
    assert!(by_default.check(&ip).blocking().is_err());
    flush(&server);
    assert!(by_default.check(&ip).blocking().is_err(), "still cached: no store call");
    by_default.forget_refusals(&ip);
    assert!(by_default.check(&ip).blocking().is_ok(), "forgotten: the store has room");
}
