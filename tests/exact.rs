//! Every store decides exactly as the algorithms' definitions: the memory store, and a real
//! `redis-server` (or the server `RATELIMIT_TEST_SERVER` names). One regression test per symptom
//! seen with the floating-point arithmetic, property tests against the reference model, and a
//! sweep of Gcra configurations; each runs on both stores.

#[path = "support/definition.rs"]
mod definition;
#[path = "support/schedule.rs"]
mod schedule;
mod support;

use definition::{build, compare, subjects, LimitSpec, RuleModel};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratelimit::store::StoreHandle;
use ratelimit::{Algorithm, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use schedule::{gap, limits_strategy, runs, stores, T0};
use std::sync::Arc;
use support::RedisServer;

const S: u64 = 1_000_000;

/// One Global limit of `count` per `window_ms`, without the refusal cache (these tests read the
/// store's own answers).
fn limiter(store: &StoreHandle, name: &str, alg: Algorithm, window_ms: u64, count: u64, burst: Option<u64>) -> Limiter {
    let rule = Rule::from_millis(window_ms, count).unwrap();
    let mut limit = Limit::new(LimitType::Global, [rule]).algorithm(alg);
    if let Some(n) = burst {
        limit = limit.burst(n);
    }
    Limiter::builder(name).limit(limit).store(store.clone()).refusal_cache(false).build().unwrap()
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
    answer(l.check(&[Subject::global()]).cost(cost).at(support::at(at)).await)
}

/// (remaining, reset µs) of the limit's rule, read by a peek at `at`.
async fn peek(l: &Limiter, at: u64) -> (u64, u128) {
    let s = l.peek(&[Subject::global()]).at(support::at(at)).await.unwrap();
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
    for store in stores(&server) {
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
}

/// Gcra, 9 per second, burst 2: a call of cost 2 fits an idle bucket (it was always refused).
#[tokio::test]
async fn gcra_9_per_second_burst_2_admits_cost_2() {
    let server = RedisServer::start();
    for store in stores(&server) {
        let l = limiter(&store, "exact::gcra9b2", Algorithm::Gcra, 1000, 9, Some(2));
        assert_eq!(call(&l, 2, T0).await, admitted(0, 222_223));
        // Full: the next unit fits once one has drained, 111 111⅑ µs later.
        assert_eq!(call(&l, 1, T0).await, refused(111_112));
        assert_eq!(call(&l, 2, T0 + 222_222).await, refused(1));
        assert_eq!(call(&l, 2, T0 + 222_223).await, admitted(0, 222_223));
    }
}

/// Gcra, 7 per second, default burst: 7 simultaneous calls pass (6 did), the 8th does not.
#[tokio::test]
async fn gcra_7_per_second_admits_7_simultaneous_calls() {
    let server = RedisServer::start();
    for store in stores(&server) {
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
}

/// Gcra at 120 000 per second (T = 8⅓ µs), burst 3, a call every 3 µs for 6 ms: the calls
/// admitted are those of the definition (TAT kept exactly, times count), no more.
#[tokio::test]
async fn gcra_120000_per_second_admits_what_the_definition_admits() {
    let server = RedisServer::start();
    for store in stores(&server) {
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
            if l.check(&[Subject::global()]).at(support::at(T0 + dt)).await.is_ok() {
                admitted_at.push(dt);
            }
        }
        assert_eq!(expected.len(), 722);
        assert_eq!(admitted_at, expected);
    }
}

/// TokenBucket and LeakyBucket, 10 per second: at the exact instant a unit of room arrives, the
/// call passes (it was refused with a 1 µs retry-after).
#[tokio::test]
async fn buckets_admit_at_the_exact_instant_room_arrives() {
    let server = RedisServer::start();
    for store in stores(&server) {
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
}

/// For every algorithm, with a count that does not divide the window: waiting the retry-after
/// is exactly enough (1 µs less is not), and the retry-after is never 0.
#[tokio::test]
async fn retry_after_is_exactly_enough() {
    let server = RedisServer::start();
    for store in stores(&server) {
        for alg in Algorithm::ALL {
            for (window_ms, count, burst) in
                [(1000, 7, None), (1000, 6, Some(1)), (10_000, 3, Some(2)), (60_000, 29, None)]
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
}

/// Peek's remaining is the number of cost-1 calls that then pass, one after the other, and its
/// reset the time after which remaining is whole again.
#[tokio::test]
async fn peek_remaining_is_what_passes() {
    let server = RedisServer::start();
    for store in stores(&server) {
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
                        assert!(
                            matches!(a, Answer::Admitted { .. }),
                            "{name} step {step}: call {i} of {remaining}: {a:?}"
                        );
                    }
                    let over = call(&l, 1, now).await;
                    assert!(matches!(over, Answer::Refused { .. }), "{name} step {step}: a call past {remaining}");
                }
            }
        }
    }
}

// ---------- the definitions, plainly, and the scripts held to them ----------

/// The brute force the searches stand on, for small numbers: least waits and rooms counted one
/// by one agree with them.
#[test]
fn the_model_searches_agree_with_counting() {
    for alg in Algorithm::ALL {
        for (ms, count, burst) in [(1, 3, None), (2, 7, Some(2)), (3, 2, Some(5)), (1, 1, None)] {
            let rule = Rule::from_millis(ms, count).unwrap();
            let mut m = RuleModel::new(alg, rule, burst.filter(|_| alg.supports_burst()));
            let mut t = T0;
            for step in 0..60u64 {
                t += step % 5 * 137;
                let c = 1 + step % m.cap.min(2);
                if m.passes(t, c) {
                    m.record(t, c);
                } else {
                    let d = (1..).find(|d| m.passes(t + d, c)).unwrap();
                    assert_eq!(m.retry(t, c), d, "{alg:?} step {step}");
                }
                let room = (0..=m.cap).take_while(|&j| m.passes(t, j)).last().unwrap_or(0);
                assert_eq!(m.room(t), room, "{alg:?} step {step}");
                let reset = (0..).find(|&d| m.room(t + d) == m.cap).unwrap();
                assert_eq!(m.reset(t), reset, "{alg:?} step {step}");
            }
        }
    }
}

/// A step of a schedule: how far time moves before the call, and its cost.
#[derive(Clone, Debug)]
struct Step {
    /// 0: the same µs (simultaneous calls); 1: 1 µs; 2, 3: k emission intervals of the first
    /// rule (rounded down, up); 4: a random span within its window; 5: its whole window; 6: the
    /// last refusal's retry-after; 7: 1 µs less than it.
    kind: u8,
    k: u64,
    /// 0: cost 0; 1, 2: that cost; 3: the least capacity (at most 50 with a sliding log); 4: the
    /// least capacity + 1; 5: random up to 3's.
    cost: u8,
    random: u64,
}

fn steps_strategy() -> impl Strategy<Value = Vec<Step>> {
    let step =
        (0u8..8, 1u64..=3, 0u8..6, any::<u64>()).prop_map(|(kind, k, cost, random)| Step { kind, k, cost, random });
    prop::collection::vec(step, 1..=40)
}

/// Random and boundary schedules through stacked limits of every algorithm (windows 1 ms to
/// 30 days, counts 1 to 10^9, bursts 1, 2, default or random, costs 0 to the capacity + 1,
/// simultaneous calls, calls at exact multiples of the emission interval and at retry-after
/// and 1 µs before it): the store answers as the definitions, call by call. (The seeds:
/// tests/support/schedule.rs.)
#[test]
fn stacked_limits_decide_as_the_definitions() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for store in rt.block_on(async { stores(&server) }) {
        for mut run in runs(256) {
            let (case, calls, admitted, refused, never_fit) =
                (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
            let seed = run.seed.clone();
            // Which limit types came in which position of a stack.
            let placed = std::sync::Mutex::new(std::collections::HashSet::new());
            run.runner
                .run(&(limits_strategy(), steps_strategy()), |(limits, steps)| {
                    placed.lock().unwrap().extend(limits.iter().enumerate().map(|(i, l)| (i, l.limit_type)));
                    let name = format!("exact::prop::{seed}::{}", case.fetch_add(1, Relaxed));
                    rt.block_on(async {
                        let _guard = rt.enter();
                        let l = build(&store, &name, &limits);
                        let subjects = subjects(&limits);
                        let mut models: Vec<Vec<RuleModel>> = limits
                            .iter()
                            .map(|s| s.rules.iter().map(|&r| RuleModel::new(s.alg, r, s.burst)).collect())
                            .collect();
                        let least_cap = models.iter().flatten().map(|m| m.cap).min().unwrap();
                        // The sliding log holds a member per unit: costs that fit stay small there.
                        let sliding = limits.iter().any(|s| s.alg == Algorithm::SlidingWindow);
                        let fitting = if sliding { least_cap.min(50) } else { least_cap };
                        let (w0, n0) = (models[0][0].w, models[0][0].n);
                        let (mut t, mut last_retry) = (T0, 0u64);
                        for (i, s) in steps.iter().enumerate() {
                            // Kinds are drawn from 0..8: all shared ones.
                            t += gap(s.kind, s.k, s.random, (w0, n0), last_retry).unwrap_or(0);
                            let c = match s.cost {
                                0 => 0,
                                1 => 1,
                                2 => 2,
                                3 => fitting,
                                4 => least_cap + 1,
                                _ => 1 + s.random % fitting,
                            };
                            calls.fetch_add(1, Relaxed);
                            let got = compare(&l, &limits, &mut models, &subjects, t, c).await;
                            let e = got.map_err(|e| TestCaseError::fail(format!("{name} call {i}: {e}")))?;
                            let counter = match &e {
                                Some(e) if e.allowed => &admitted,
                                Some(_) => &refused,
                                None => &never_fit,
                            };
                            counter.fetch_add(1, Relaxed);
                            last_retry = e.filter(|e| !e.allowed).map_or(0, |e| e.retry_us);
                        }
                        Ok(())
                    })
                })
                .unwrap_or_else(|e| panic!("{} {e}\n(replay with {})", store.describe(), run.replay("exact")));
            let (case, calls) = (case.into_inner(), calls.into_inner());
            let (admitted, refused, never_fit) = (admitted.into_inner(), refused.into_inner(), never_fit.into_inner());
            println!(
            "{} seed {seed}: {case} cases, {calls} calls: {admitted} admitted, {refused} refused, {never_fit} that never fit",
            store.describe()
        );
            assert_eq!(case, u64::from(run.runner.config().cases), "every case ran");
            assert!(admitted > 0 && refused > 0 && never_fit > 0, "the schedules reach every answer");
            let placed = placed.into_inner().unwrap();
            assert_eq!(placed.len(), 16, "every limit type in each of 4 positions: {placed:?}");
        }
    }
}

/// Gcra, counts 1 to 1000 x windows 1 s, 10 s, 1 min, 1 h x burst 1, 2 and default: on each
/// idle key, calls at and around the exact boundaries (the bucket filled exactly, the instant
/// room arrives and 1 µs before, the instant it is empty again and 1 µs before), each answer
/// compared with the definition. The configurations run side by side on one multiplexed
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_sweep_agrees_with_the_definition() {
    let server = RedisServer::start();
    for store in stores(&server) {
        let mut configs = Vec::new();
        for window_ms in [1000, 10_000, 60_000, 3_600_000] {
            for count in 1..=1000u64 {
                for burst in [Some(1), Some(2), None] {
                    configs.push((window_ms, count, burst));
                }
            }
        }
        let started = std::time::Instant::now();
        let configs = Arc::new(configs);
        let lanes = 48;
        let mut tasks = tokio::task::JoinSet::new();
        for lane in 0..lanes {
            let (configs, store) = (configs.clone(), store.clone());
            tasks.spawn(async move {
                let mut calls = 0u64;
                for &(window_ms, count, burst) in configs.iter().skip(lane).step_by(lanes) {
                    let limits = [LimitSpec {
                        limit_type: LimitType::Global,
                        alg: Algorithm::Gcra,
                        rules: vec![Rule::from_millis(window_ms, count).unwrap()],
                        burst,
                        block: None,
                    }];
                    let name = format!("exact::sweep::{}::{window_ms}::{count}::{burst:?}", store.describe());
                    let l = build(&store, &name, &limits);
                    let mut models = vec![vec![RuleModel::new(Algorithm::Gcra, limits[0].rules[0], burst)]];
                    let cap = models[0][0].cap;
                    let g = [Subject::global()];
                    let mut run = async |t: u64, c: u64| {
                        calls += 1;
                        compare(&l, &limits, &mut models, &g, t, c)
                            .await
                            .map_err(|e| format!("{name}: {e}"))
                            .map(|e| e.expect("a cost that fits"))
                    };
                    // Filled exactly: min(2, burst), then the rest of the burst, at once.
                    let two = cap.min(2);
                    run(T0, two).await?;
                    if cap > two {
                        run(T0, cap - two).await?;
                    }
                    // Full: one unit fits after `d`, not 1 µs before; then the bucket is full again.
                    let d = run(T0, 1).await?.retry_us;
                    if d > 1 {
                        run(T0 + d - 1, 1).await?;
                    }
                    let reset = run(T0 + d, 1).await?.reset_us;
                    let d2 = run(T0 + d, two).await?.retry_us;
                    run(T0 + d + d2 - 1, two).await?;
                    run(T0 + d + d2, two).await?;
                    // Empty again at exactly its reset: the whole burst fits then, not 1 µs before.
                    let t = T0 + d + d2 + reset;
                    run(t - 1, cap).await?;
                    run(t, cap).await?;
                }
                Ok::<u64, String>(calls)
            });
        }
        let mut calls = 0;
        while let Some(done) = tasks.join_next().await {
            calls += done.unwrap().unwrap_or_else(|e| panic!("{e}"));
        }
        println!("Gcra sweep: {} configurations, {calls} calls in {:?}", configs.len(), started.elapsed());
    }
}
