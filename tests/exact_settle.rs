//! Settling decides exactly as its definition (docs/design.md, "Settling"), on the memory store
//! and a real `redis-server`: random and boundary schedules interleave calls, settles of earlier
//! permits (to 0, below, at and above their cost, far above it; some after their units left
//! their window or drained), and time steps (the shared kinds: the same µs, emission intervals,
//! a window, a retry-after and 1 µs before it), through stacks of limits of every algorithm with
//! and without a block. Every call's answer (allowed, the rule, remaining, reset, retry-after:
//! while in debt too) is compared with the reference model, call by call.

#[path = "support/definition.rs"]
mod definition;
#[path = "support/schedule.rs"]
mod schedule;
mod support;

use definition::{build, expect_blocked, judge, subjects, LimitSpec, Penalty, RuleModel};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratelimit::clock::ManualClock;
use ratelimit::store::{MemoryStore, StoreHandle};
use ratelimit::Algorithm;
use schedule::{blocked_limits_strategy, gap, runs, stores, T0};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

/// A step of a schedule: how far time moves (a shared kind of `schedule::gap`, else a random
/// span up to three windows), then a call or a settle.
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    k: u64,
    /// 0 to 5: a call, of cost 0, 1, 2, the least capacity (at most 50 with a sliding log), the
    /// least capacity + 1, or random up to the least capacity; 6 to 12: a settle of a permit
    /// held (`random` picks which; a call of cost 1 when none is held) to 0, its cost less one,
    /// its cost, its cost + 1, random up to three capacities, the least capacity plus its count
    /// and more (the debt bound), or u64::MAX.
    op: u8,
    random: u64,
}

fn steps_strategy() -> impl Strategy<Value = Vec<Step>> {
    let step = (0u8..9, 1u64..=3, 0u8..13, any::<u64>()).prop_map(|(kind, k, op, random)| Step { kind, k, op, random });
    prop::collection::vec(step, 1..=40)
}

#[derive(Default)]
struct Counts {
    cases: AtomicU64,
    calls: AtomicU64,
    settles: AtomicU64,
    /// Settles above the cost (debt taken), and calls refused while some was owed.
    above: AtomicU64,
    below: AtomicU64,
    /// Settles that changed nothing by the definition (equal, or the units count nowhere).
    moot: AtomicU64,
    refused: AtomicU64,
}

/// One schedule on `store` (settles at the permit's pinned time when `clock` is None, else at
/// the manual clock's time).
async fn run(
    store: &StoreHandle,
    clock: Option<&ManualClock>,
    name: &str,
    limits: &[LimitSpec],
    steps: &[Step],
    counts: &Counts,
) -> Result<(), String> {
    let l = build(store, name, limits);
    let subjects = subjects(limits);
    let mut models: Vec<Vec<RuleModel>> =
        limits.iter().map(|s| s.rules.iter().map(|&r| RuleModel::new(s.alg, r, s.burst)).collect()).collect();
    let mut blocks: Vec<Penalty> =
        limits.iter().map(|s| Penalty { length: s.block.map(|us| us - us % 1000), until: None }).collect();
    let least_cap = models.iter().flatten().map(|m| m.cap).min().unwrap();
    let sliding = limits.iter().any(|s| s.alg == Algorithm::SlidingWindow);
    let fitting = if sliding { least_cap.min(50) } else { least_cap };
    // A sliding log in Redis holds a member per unit (a settle writes at most the largest count
    // + 1 of them): keep what a settle writes there small.
    let log_most = limits
        .iter()
        .filter(|s| s.alg == Algorithm::SlidingWindow)
        .flat_map(|s| s.rules.iter().map(|r| r.count()))
        .max();
    let (w0, n0) = (models[0][0].w, models[0][0].n);
    let mut t = clock.map_or(T0, ratelimit::clock::Clock::now_us);
    let mut last_retry = 0u64;
    let mut held = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        t += gap(s.kind, s.k, s.random, (w0, n0), last_retry).unwrap_or(s.random % (3 * w0) + 1);
        if let Some(clock) = clock {
            clock.advance(Duration::from_micros(t - ratelimit::clock::Clock::now_us(clock)));
        }
        if s.op >= 6 && !held.is_empty() {
            let (permit, at, c): (ratelimit::Permit<'_>, u64, u64) =
                held.swap_remove(usize::try_from(s.random % held.len() as u64).unwrap());
            let mut actual = match s.op {
                6 => 0,
                7 => c.saturating_sub(1),
                8 => c,
                9 => c + 1,
                10 => s.random % (3 * least_cap + 1),
                11 => c + least_cap + n0 + s.random % 3,
                _ => u64::MAX,
            };
            if log_most.is_some_and(|m| m > 200) {
                actual = actual.min(c + 200);
            }
            permit.settle(actual).await.map_err(|e| format!("step {i}: settle: {e}"))?;
            let when = if clock.is_some() { t } else { at };
            let before = format!("{models:?}");
            models.iter_mut().flatten().for_each(|m| m.settle(when, at, c, actual));
            counts.settles.fetch_add(1, Relaxed);
            let counter = if actual > c { &counts.above } else { &counts.below };
            counter.fetch_add(1, Relaxed);
            if format!("{models:?}") == before {
                counts.moot.fetch_add(1, Relaxed);
            }
            continue;
        }
        let c = match s.op {
            0 => 0,
            1 | 6..=12 => 1,
            2 => 2,
            3 => fitting,
            4 => least_cap + 1,
            _ => 1 + s.random % fitting,
        };
        let got = match clock {
            Some(_) => l.check(&subjects).cost(c).await,
            None => l.check(&subjects).cost(c).at(support::at(t)).await,
        };
        let want = expect_blocked(&mut models, &mut blocks, t, c);
        counts.calls.fetch_add(1, Relaxed);
        let (want, permit) = judge(got, limits, want, t, c).map_err(|e| format!("step {i}: {e}"))?;
        if want.as_ref().is_some_and(|w| !w.allowed) {
            counts.refused.fetch_add(1, Relaxed);
        }
        last_retry = want.filter(|e| !e.allowed).map_or(0, |e| e.retry_us);
        if let Some(p) = permit {
            held.push((p, t, c));
        }
    }
    Ok(())
}

fn property(label: &str, store: &StoreHandle, clock: Option<Arc<ManualClock>>, default_cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for mut seeded in runs(default_cases) {
        let counts = Counts::default();
        let started = std::time::Instant::now();
        let seed = seeded.seed.clone();
        seeded
            .runner
            .run(&(blocked_limits_strategy(), steps_strategy()), |(limits, steps)| {
                let name = format!("exact_settle::{label}::{seed}::{}", counts.cases.fetch_add(1, Relaxed));
                rt.block_on(async {
                    let _guard = rt.enter();
                    run(store, clock.as_deref(), &name, &limits, &steps, &counts).await
                })
                .map_err(|e| TestCaseError::fail(format!("{name} ({}): {e}", store.describe())))
            })
            .unwrap_or_else(|e| panic!("{e}\n(replay with {})", seeded.replay("exact_settle")));
        let c = |n: AtomicU64| n.into_inner();
        let (cases, calls, settles) = (c(counts.cases), c(counts.calls), c(counts.settles));
        let (above, below, moot, refused) = (c(counts.above), c(counts.below), c(counts.moot), c(counts.refused));
        println!(
            "{label} on {} seed {seed}: {cases} cases, {calls} calls ({refused} refused), {settles} settles \
             ({above} above the cost, {below} at or below it, {moot} changing nothing), in {:?}",
            store.describe(),
            started.elapsed()
        );
        assert_eq!(cases, u64::from(seeded.runner.config().cases), "every case ran");
        for (what, n) in [("settles above the cost", above), ("settles below it", below), ("moot settles", moot)] {
            assert!(n > 0, "{label} seed {seed}: the schedules made no {what}");
        }
    }
}

/// Calls at pinned times and settles of earlier permits at their own time, on memory and on the
/// real server.
#[test]
fn settles_decide_as_the_definitions() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for store in rt.block_on(async { stores(&server) }) {
        property("pinned", &store, None, 1024);
    }
}

/// The memory store on a manual clock: settles made later, at their own time (units that have
/// left, buckets drained or poured into since).
#[test]
fn late_settles_on_a_clock_decide_as_the_definitions() {
    let clock = Arc::new(ManualClock::new(T0));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    property("clock", &store, Some(clock), 1024);
}

/// Found by the refunds' property (a refund is a settle to 0): a permit of a sliding window counter, decided at a pinned time
/// and refunded after a call in the next window, gave nothing back (its window is stored as the
/// previous count of the next one; the stores also asked that `now`, the permit's own time, be
/// in that next window).
#[tokio::test]
async fn a_pinned_refund_reaches_the_previous_window_of_a_counter() {
    use ratelimit::{LimitType, Rule};
    let server = RedisServer::start();
    for store in stores(&server) {
        let limits = [LimitSpec {
            limit_type: LimitType::Global,
            alg: Algorithm::SlidingWindowCounter,
            rules: vec![Rule::from_millis(1000, 10).unwrap()],
            burst: None,
            block: None,
        }];
        let l = build(&store, "exact_settle::counter_refund", &limits);
        let g = subjects(&limits);
        let first = l.check(&g).at(support::at(T0 + 100_000)).await.unwrap();
        l.check(&g).at(support::at(T0 + 1_100_000)).await.unwrap();
        first.refund().await.unwrap();
        // 10 − 1 counted in this window − ⌈0 · 0.9⌉ of the previous one: 9 (8 while the
        // refunded unit still weighed).
        let p = l.check(&g).cost(0).at(support::at(T0 + 1_100_000)).await.unwrap();
        assert_eq!(p.quota().unwrap().remaining, 9, "{}", store.describe());
    }
}

/// A bucket refunded to full, then a debt settled at the permit's own, earlier time: the debt
/// is poured from that time, on memory and on the real server. (Random schedules found this
/// case where the reference model poured it from the bucket's last call, 1 µs later.)
#[test]
fn a_debt_settled_at_an_earlier_time_pours_from_it() {
    use ratelimit::{LimitType, Rule};
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rule = |ms: u64, count: u64| vec![Rule::from_millis(ms, count).unwrap()];
    let limits = [
        LimitSpec {
            limit_type: LimitType::Ip,
            alg: Algorithm::SlidingWindow,
            rules: rule(1000, 1),
            burst: None,
            block: None,
        },
        LimitSpec {
            limit_type: LimitType::User,
            alg: Algorithm::TokenBucket,
            rules: rule(2_592_000_000, 1_000_000),
            burst: Some(1),
            block: Some(1_000_001),
        },
        LimitSpec {
            limit_type: LimitType::Key,
            alg: Algorithm::SlidingWindow,
            rules: rule(1, 1),
            burst: None,
            block: None,
        },
    ];
    // A call of 1 and two of 0 (the last 1 µs later), the first permit refunded, the second
    // settled to 3 units, then a call of 0: refused, its retry-after the debt's.
    let step = |kind: u8, op: u8, random: u64| Step { kind, k: 1, op, random };
    let steps = [
        step(0, 1, 0),
        step(0, 0, 0),
        step(1, 0, 0),
        step(0, 6, 4_468_218_809_103_059_619),
        step(0, 11, 1_030_326_590_317_533_679),
        step(0, 0, 0),
    ];
    for store in rt.block_on(async { stores(&server) }) {
        let counts = Counts::default();
        let name = format!("exact_settle::earlier::{}", store.describe());
        rt.block_on(async {
            let _guard = rt.enter();
            run(&store, None, &name, &limits, &steps, &counts).await
        })
        .unwrap_or_else(|e| panic!("{} : {e}", store.describe()));
        assert_eq!(counts.refused.into_inner(), 1, "the last call is refused");
    }
}
