//! Concurrent decisions on one `RedisStore` (sliding windows, and O(1) algorithms) go to Redis
//! coalesced (several calls per script run): each is still decided exactly as alone, as the
//! algorithms' definitions decide it (tests/support/definition.rs), on a real `redis-server`.

#[path = "support/definition.rs"]
mod definition;
mod support;

use definition::LimitSpec;
use ratelimit::store::DEFAULT_PREFIX;
use ratelimit::store::{RedisStore, StoreHandle};
use ratelimit::{Algorithm, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;

/// Concurrent tasks, and calls per task, of the tests on one key.
use support::{evalsha_runs, remaining_of_concurrent_calls, reset_stats, RedisServer, CALLS, TASKS};

/// 64 tasks calling at once on one key of limit 500: exactly 500 admitted, each with its own
/// remaining (every reply reached its own caller), the log holding 500 entries, and fewer script
/// runs than calls. The scripts are flushed first: the batches load them again (`NOSCRIPT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_on_one_key_admit_exactly_the_limit() {
    const LIMIT: u64 = 500;
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let limiter = Arc::new(
        Limiter::builder("batch::one_key")
            .limit(Limit::new(LimitType::Global, [Rule::from_millis(600_000, LIMIT).unwrap()]))
            .store(store.clone())
            .refusal_cache(false)
            .build()
            .unwrap(),
    );
    // Connected and warm (another key), then the scripts gone as after a server restart.
    let warm_up = Limiter::builder("batch::warm_up")
        .limit(Limit::new(LimitType::Global, [Rule::from_millis(1_000, 1).unwrap()]))
        .store(store.clone())
        .build()
        .unwrap();
    warm_up.check(&[Subject::global()]).await.unwrap();
    let mut con = server.client();
    assert_coalesced(&mut con, &limiter, None, LIMIT, "SlidingWindow").await;
    let key = "rate_limit:{batch::one_key|global|}:sw:10mx500";
    let logged: u64 = redis::cmd("ZCARD").arg(key).query(&mut con).unwrap();
    assert_eq!(logged, LIMIT);
}

/// After `SCRIPT FLUSH` (so that the `NOSCRIPT` reload runs) and `CONFIG RESETSTAT`: the
/// concurrent calls of [`remaining_of_concurrent_calls`] on `limiter`'s global key (of budget
/// `limit`) admit exactly `limit`, each with its own remaining, in fewer script runs than half
/// the calls.
async fn assert_coalesced(
    con: &mut redis::Connection,
    limiter: &Arc<Limiter>,
    pinned: Option<std::time::SystemTime>,
    limit: u64,
    what: &str,
) {
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(con).unwrap();
    reset_stats(con);
    let remaining = remaining_of_concurrent_calls(limiter, pinned).await;
    assert_eq!(remaining, (0..limit).collect::<Vec<_>>(), "{what}: each admitted call has its own remaining");
    let calls = (TASKS * CALLS) as u64;
    let runs = evalsha_runs(con);
    assert!(runs < calls / 2, "{what}: {runs} script runs for {calls} concurrent calls: not coalesced");
}

/// What a call answered: admitted with its tightest rule's remaining and reset, or refused with
/// the retry-after of the rule that refused it.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Admitted { remaining: u64, reset_us: u128, limit_type: LimitType, rule: Rule },
    Refused { retry_us: u128, limit_type: LimitType, rule: Option<Rule> },
}

fn answer(r: Result<ratelimit::Permit<'_>, RateLimited>) -> Answer {
    match r {
        Ok(p) => {
            let q = p.quota().expect("a quota");
            Answer::Admitted {
                remaining: q.remaining,
                reset_us: q.reset.as_micros(),
                limit_type: q.policy.limit_type,
                rule: q.policy.rule,
            }
        }
        Err(e) => Answer::Refused { retry_us: e.retry_after().as_micros(), limit_type: e.limit_type(), rule: e.rule() },
    }
}

/// A limit of `limit_type`, `alg` and `rules` (longest window first), as the definitions and a
/// limiter take it.
fn spec(limit_type: LimitType, alg: Algorithm, rules: &[(u64, u64)], burst: Option<u64>) -> LimitSpec {
    let rules = rules.iter().map(|&(ms, n)| Rule::from_millis(ms, n).unwrap()).collect();
    LimitSpec { limit_type, alg, rules, burst, block: None }
}

/// The limiters of one store, by name and limits.
fn build<const N: usize>(store: &StoreHandle, specs: &[(&str, Vec<LimitSpec>); N]) -> [Limiter; N] {
    specs.each_ref().map(|(name, limits)| {
        let mut b = Limiter::builder(*name);
        for l in limits {
            let mut limit = Limit::new(l.limit_type, l.rules.iter().copied()).algorithm(l.alg);
            if let Some(n) = l.burst {
                limit = limit.burst(n);
            }
            b = b.limit(limit);
        }
        b.store(store.clone()).refusal_cache(false).build().unwrap()
    })
}

/// One rule on a `Key`; an `Ip` limit of two rules stacked with a `Key` limit of one; a single
/// rule whose calls cost several units (sliding windows). The calls of every task mix in the
/// same batches: short and long replies, one and several keys per call.
fn sliding_specs() -> [(&'static str, Vec<LimitSpec>); 3] {
    let sw = Algorithm::SlidingWindow;
    [
        ("batch::single", vec![spec(LimitType::Key, sw, &[(1_000, 5)], None)]),
        (
            "batch::stacked",
            vec![
                spec(LimitType::Ip, sw, &[(10_000, 8), (1_000, 3)], None),
                spec(LimitType::Key, sw, &[(2_000, 4)], None),
            ],
        ),
        ("batch::costly", vec![spec(LimitType::Key, sw, &[(5_000, 10)], None)]),
    ]
}

/// One task's calls among `limiters` limiters, at pinned times (µs): which limiter, its cost,
/// its time.
fn schedule(task: u64, limiters: u64) -> Vec<(usize, u64, u64)> {
    let t0 = 1_900_000_000_000_000 + task * 7;
    (0..40u64).map(|i| ((i % limiters) as usize, 1 + (i * task) % 3, t0 + i * 150_000 + (i % 4) * 1_000)).collect()
}

/// The subjects of `task`'s calls through limiter `which`: its own (no other task's calls touch
/// them). The second limiter takes an IP and a key, the others a key.
fn task_subjects(task: u64, which: usize) -> Vec<Subject<'static>> {
    let ip = std::net::IpAddr::from([10, 1, (task / 256) as u8, (task % 256) as u8]);
    let key = Subject::bytes(format!("task-{task}").into_bytes());
    match which {
        1 => vec![Subject::ip(ip), key],
        _ => vec![key],
    }
}

/// One task's calls through `limiters`, and their answers.
async fn run_task(limiters: &[Limiter], task: u64) -> Vec<Answer> {
    let mut out = Vec::new();
    for (which, cost, at) in schedule(task, limiters.len() as u64) {
        let r = limiters[which].check(&task_subjects(task, which)).cost(cost).at(support::at(at)).await;
        out.push(answer(r));
    }
    out
}

/// The answers the definitions give `task`'s calls through limiters of `specs`, each decided
/// alone (`stacks`: the definition of each limiter's limits, shared by the tasks).
fn expected_task(stacks: &mut [definition::Stack], task: u64) -> Vec<Answer> {
    let mut out = Vec::new();
    for (which, cost, at) in schedule(task, stacks.len() as u64) {
        let stack = &mut stacks[which];
        let want = stack.expect(&task_subjects(task, which), at, cost).expect("a cost that fits");
        let limit = &stack.limits[want.limit];
        let (limit_type, rule) = (limit.limit_type, limit.rules[want.rule]);
        out.push(if want.allowed {
            Answer::Admitted { remaining: want.remaining, reset_us: want.reset_us.into(), limit_type, rule }
        } else {
            Answer::Refused { retry_us: want.retry_us.into(), limit_type, rule: Some(rule) }
        });
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_mixed_calls_decides_each_as_alone() {
    let server = RedisServer::start();
    let redis: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    compare_with_definitions(&server, &redis, sliding_specs()).await;
}

/// 48 tasks run their schedules on limiters of `specs` on Redis, concurrently; each task's
/// answers must be the definitions' for its calls decided alone, and the calls coalesced.
async fn compare_with_definitions<const N: usize>(
    server: &RedisServer,
    redis: &StoreHandle,
    specs: [(&'static str, Vec<LimitSpec>); N],
) {
    const TASKS: u64 = 48;
    let on_redis = Arc::new(build(redis, &specs));
    let mut stacks: Vec<definition::Stack> =
        specs.into_iter().map(|(_, limits)| definition::Stack::new(limits)).collect();
    let mut con = server.client();
    reset_stats(&mut con);

    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let on_redis = on_redis.clone();
            tokio::spawn(async move { run_task(&on_redis[..], task).await })
        })
        .collect();
    let mut refused = 0;
    for (task, t) in tasks.into_iter().enumerate() {
        let got = t.await.unwrap();
        let expected = expected_task(&mut stacks, task as u64);
        refused += expected.iter().filter(|a| matches!(a, Answer::Refused { .. })).count();
        assert_eq!(got, expected, "task {task}");
    }
    let calls = TASKS * 40;
    assert!(refused > 0 && refused < calls as usize / 2, "the schedule both admits and refuses ({refused})");
    let runs = evalsha_runs(&mut con);
    assert!(runs < calls / 2, "{runs} script runs for {calls} concurrent calls: not coalesced");
}

/// A call at a time, from a plain thread: each alone in its batch, answered as before.
#[test]
fn blocking_calls_one_at_a_time() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let limiter = Limiter::builder("batch::blocking")
        .limit(Limit::new(LimitType::Global, [Rule::from_millis(60_000, 3).unwrap()]))
        .store(store)
        .refusal_cache(false)
        .build()
        .unwrap();
    let mut con = server.client();
    reset_stats(&mut con);
    for left in [2, 1, 0] {
        let permit = limiter.check(&[Subject::global()]).blocking().unwrap();
        assert_eq!(permit.quota().unwrap().remaining, left);
    }
    let refused = limiter.check(&[Subject::global()]).blocking().unwrap_err();
    assert!(refused.retry_after() > Duration::from_secs(59), "{refused}");
    assert_eq!(evalsha_runs(&mut con), 4, "one script run per call");
}

/// Concurrent calls with a shadow limit beside the enforced one are never coalesced as if both
/// were enforced: the shadow limit (50 per 10 min) fills up and every call still passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_a_shadow_limit_are_never_refused_by_it() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let rule = |count| Rule::from_millis(600_000, count).unwrap();
    let limiter = Arc::new(
        Limiter::builder("batch::shadowed")
            .limit(Limit::new(LimitType::Key, [rule(10_000)]))
            .limit(Limit::new(LimitType::Global, [rule(50)]).mode(ratelimit::Mode::Shadow))
            .store(store.clone())
            .refusal_cache(false)
            .build()
            .unwrap(),
    );
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let subjects = [Subject::bytes(&b"k"[..]), Subject::global()];
                let mut refused = 0;
                for _ in 0..10 {
                    if limiter.check(&subjects).await.is_err() {
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let mut refused = 0;
    for t in tasks {
        refused += t.await.unwrap();
    }
    assert_eq!(refused, 0, "a shadow limit refused calls");
    // The shadow limit counted exactly what it admitted: its quota, no more.
    let mut con = server.client();
    let key = format!("{DEFAULT_PREFIX}{{batch::shadowed|global|}}:sw:10mx50");
    let logged: u64 = redis::cmd("ZCARD").arg(&key).query(&mut con).unwrap();
    assert_eq!(logged, 50, "{key}");
}

/// 64 tasks calling at once on one key of an O(1) algorithm, limit 500 a day (a bucket's refill,
/// one unit per 172.8 s, does not come during the test however slow the machine; the fixed
/// window's calls are pinned inside one window): exactly 500 admitted, each with its own
/// remaining, and fewer script runs than calls.
/// The scripts are flushed first: the batches load them again (`NOSCRIPT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_o1_callers_on_one_key_admit_exactly_the_limit() {
    const LIMIT: u64 = 500;
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let mut con = server.client();
    for alg in [Algorithm::Gcra, Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let name = format!("batch::o1::{alg:?}");
        let rule = Rule::from_millis(86_400_000, LIMIT).unwrap();
        let limiter = Arc::new(
            Limiter::builder(&name)
                .limit(Limit::new(LimitType::Global, [rule]).algorithm(alg))
                .store(store.clone())
                .refusal_cache(false)
                .build()
                .unwrap(),
        );
        // The server's time, but for the fixed window: pinned within one window.
        let pinned = (alg == Algorithm::FixedWindow).then(|| support::at(1_900_000_000_000_000 + 1_000_000_000));
        assert_coalesced(&mut con, &limiter, pinned, LIMIT, &format!("{alg:?}")).await;
    }
}

/// Every algorithm: a GCRA rule on a `Key`; an `Ip` token bucket of two rules stacked with a
/// `Key` fixed window; a sliding window counter whose calls cost several units; a leaky bucket
/// with a burst; and a sliding window, whose calls go in batches of their own between the O(1)
/// ones.
fn o1_specs() -> [(&'static str, Vec<LimitSpec>); 5] {
    let key = |alg, rules: &[(u64, u64)], burst| vec![spec(LimitType::Key, alg, rules, burst)];
    [
        ("batch::gcra", key(Algorithm::Gcra, &[(1_000, 5)], None)),
        (
            "batch::o1_stacked",
            vec![
                spec(LimitType::Ip, Algorithm::TokenBucket, &[(10_000, 8), (1_000, 3)], None),
                spec(LimitType::Key, Algorithm::FixedWindow, &[(2_000, 4)], None),
            ],
        ),
        ("batch::swc", key(Algorithm::SlidingWindowCounter, &[(5_000, 10)], None)),
        ("batch::leaky", key(Algorithm::LeakyBucket, &[(1_000, 5)], Some(3))),
        ("batch::sw", key(Algorithm::SlidingWindow, &[(1_000, 5)], None)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_mixed_o1_calls_decides_each_as_alone() {
    let server = RedisServer::start();
    let redis: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    compare_with_definitions(&server, &redis, o1_specs()).await;
}

/// Concurrent GCRA calls, coalesced, each refunded once admitted: every refund finds the time its
/// call was admitted at (the batch's server time, or the call's own pinned time, which a batch
/// of several calls does not send back), so all `LIMIT` units come back and as many calls pass
/// again. A call on the server's time given a wrong admission time would refund nothing (its
/// units look drained); a pinned call is refunded at its admission time, whatever it is, so a
/// wrong one shows in the unit test of the reply's parsing instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_o1_calls_refund_at_the_time_they_were_admitted() {
    const LIMIT: u64 = 200;
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let mut con = server.client();
    for pinned in [false, true] {
        let limiter = Arc::new(
            Limiter::builder(format!("batch::refund::{pinned}"))
                .limit(
                    Limit::new(LimitType::Global, [Rule::from_millis(86_400_000, LIMIT).unwrap()])
                        .algorithm(Algorithm::Gcra),
                )
                .store(store.clone())
                .refusal_cache(false)
                .build()
                .unwrap(),
        );
        // Pinned at the test's time: the refunds, at the server's, come a moment later (a refund
        // never takes the bucket back before its own time, so the second round is pinned an
        // hour on, when the bucket is full again whatever that moment was).
        let start = std::time::SystemTime::now();
        reset_stats(&mut con);
        for round in 0..2u64 {
            let at = pinned.then(|| start + Duration::from_secs(3600 * round));
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let mut admitted = 0u64;
                        let global = [Subject::global()];
                        for _ in 0..CALLS {
                            let check = limiter.check(&global);
                            let decided = match at {
                                Some(at) => check.at(at).await,
                                None => check.await,
                            };
                            if let Ok(permit) = decided {
                                admitted += 1;
                                if round == 0 {
                                    permit.refund().await.unwrap();
                                }
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
            let expected = if round == 0 { (TASKS * CALLS) as u64 } else { LIMIT };
            assert_eq!(admitted, expected, "pinned {pinned}, round {round}: every refund returned its units");
        }
        // Two rounds of checks and the first round's refunds (which are not coalesced).
        let (runs, calls) = (evalsha_runs(&mut con), (TASKS * CALLS) as u64);
        assert!(runs < 2 * calls, "pinned {pinned}: {runs} script runs for {calls} refunds and twice as many checks");
    }
}
