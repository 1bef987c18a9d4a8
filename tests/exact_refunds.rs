//! Refunds and blocks decide exactly as their definitions (docs/design.md, "Refunds, blocks and
//! concurrency limits"), on the memory store and a real `redis-server` (or the server
//! `RATELIMIT_TEST_SERVER` names): random and boundary schedules interleave calls, refunds of
//! earlier permits (some stale: their units left their window or drained), and time steps (the
//! same µs, 1 µs, emission intervals, a whole window, a retry-after and 1 µs before it, a block's
//! end and 1 µs before it), through stacks of limits of every algorithm with and without a
//! block; every answer is compared with the reference model, call by call.

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

/// A step of a schedule: how far time moves, then a call or a refund.
#[derive(Clone, Debug)]
struct Step {
    /// 0: the same µs; 1: 1 µs; 2, 3: k emission intervals of the first rule (rounded down, up);
    /// 4: a random span within its window; 5: its whole window; 6: the last refusal's
    /// retry-after; 7: 1 µs less; 8: to the end of the first block to end; 9: 1 µs less.
    kind: u8,
    k: u64,
    /// 0 to 5: a call, of cost 0, 1, 2, the least capacity (at most 50 with a sliding log), the
    /// least capacity + 1, or random up to the least capacity; 6 to 8: a refund of a permit held
    /// (`random` picks which; a call of cost 1 when none is held).
    op: u8,
    random: u64,
}

fn steps_strategy() -> impl Strategy<Value = Vec<Step>> {
    let step = (0u8..10, 1u64..=3, 0u8..9, any::<u64>()).prop_map(|(kind, k, op, random)| Step { kind, k, op, random });
    prop::collection::vec(step, 1..=40)
}

/// What a property run did, printed at the end.
#[derive(Default)]
struct Counts {
    cases: AtomicU64,
    calls: AtomicU64,
    refunds: AtomicU64,
    /// Refunds that gave nothing back by the definition (the units counted nowhere any more).
    stale: AtomicU64,
    blocks: AtomicU64,
    blocked: AtomicU64,
}

/// One schedule on `store`: refunds at the permit's own pinned time (`clock` None), or, on a
/// memory store with a manual clock, calls at the clock's time and refunds later, at the time
/// of the refund (so bucket refunds go stale too).
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
    // A block has a window's resolution: whole milliseconds (sub-millisecond parts dropped).
    let mut blocks: Vec<Penalty> =
        limits.iter().map(|s| Penalty { length: s.block.map(|us| us - us % 1000), until: None }).collect();
    let least_cap = models.iter().flatten().map(|m| m.cap).min().unwrap();
    // The sliding log holds a member per unit: costs that fit stay small there.
    let sliding = limits.iter().any(|s| s.alg == Algorithm::SlidingWindow);
    let fitting = if sliding { least_cap.min(50) } else { least_cap };
    let (w0, n0) = (models[0][0].w, models[0][0].n);
    // Each case starts where the clock is (the cases share it).
    let mut t = clock.map_or(T0, ratelimit::clock::Clock::now_us);
    let mut last_retry = 0u64;
    // Permits held, with the time and cost they were admitted at.
    let mut held = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let block_end = blocks.iter().filter_map(|p| p.until).map(|(end, _)| end).filter(|&e| e > t).min();
        // Past the shared kinds: to the end of the running block, or 1 µs short of it.
        t += gap(s.kind, s.k, s.random, (w0, n0), last_retry).unwrap_or_else(|| match s.kind {
            8 => block_end.map_or(0, |e| e - t),
            _ => block_end.map_or(0, |e| e - t - 1),
        });
        if let Some(clock) = clock {
            clock.advance(Duration::from_micros(t - ratelimit::clock::Clock::now_us(clock)));
        }
        if s.op >= 6 && !held.is_empty() {
            let (permit, at, c): (ratelimit::Permit<'_>, u64, u64) =
                held.swap_remove(usize::try_from(s.random % held.len() as u64).unwrap());
            permit.refund().await.map_err(|e| format!("call {i}: refund: {e}"))?;
            // A pinned permit gives back at its own time; otherwise at the store's time now.
            let when = if clock.is_some() { t } else { at };
            let before = format!("{models:?}");
            models.iter_mut().flatten().for_each(|m| m.refund(when, at, c));
            counts.refunds.fetch_add(1, Relaxed);
            if format!("{models:?}") == before {
                counts.stale.fetch_add(1, Relaxed);
            }
            continue;
        }
        let c = match s.op {
            0 => 0,
            1 | 6..=8 => 1,
            2 => 2,
            3 => fitting,
            4 => least_cap + 1,
            _ => 1 + s.random % fitting,
        };
        let got = match clock {
            Some(_) => l.check(&subjects).cost(c).await,
            None => l.check(&subjects).cost(c).at(support::at(t)).await,
        };
        let before: Vec<_> = blocks.iter().map(|p| p.until).collect();
        let was_blocked = blocks.iter().any(|p| p.until.is_some_and(|(end, _)| end > t));
        let want = expect_blocked(&mut models, &mut blocks, t, c);
        counts.calls.fetch_add(1, Relaxed);
        let started = blocks.iter().zip(&before).filter(|(p, b)| p.until != **b).count();
        counts.blocks.fetch_add(started as u64, Relaxed);
        let (want, permit) = judge(got, limits, want, t, c).map_err(|e| format!("call {i}: {e}"))?;
        if want.as_ref().is_some_and(|w| !w.allowed) && was_blocked {
            counts.blocked.fetch_add(1, Relaxed);
        }
        last_retry = want.filter(|e| !e.allowed).map_or(0, |e| e.retry_us);
        if let Some(p) = permit {
            held.push((p, t, c));
        }
    }
    Ok(())
}

/// Runs the schedules of each seed (tests/support/schedule.rs) on `store`, prints what they did,
/// and fails unless every case ran and they made refunds, stale refunds, blocks and refusals
/// during a block.
fn property(label: &str, store: &StoreHandle, clock: Option<Arc<ManualClock>>, default_cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for mut seeded in runs(default_cases) {
        let counts = Counts::default();
        let started = std::time::Instant::now();
        let seed = seeded.seed.clone();
        seeded
            .runner
            .run(&(blocked_limits_strategy(), steps_strategy()), |(limits, steps)| {
                let name = format!("exact_refunds::{label}::{seed}::{}", counts.cases.fetch_add(1, Relaxed));
                rt.block_on(async {
                    let _guard = rt.enter();
                    run(store, clock.as_deref(), &name, &limits, &steps, &counts).await
                })
                .map_err(|e| TestCaseError::fail(format!("{name} ({}): {e}", store.describe())))
            })
            .unwrap_or_else(|e| panic!("{e}\n(replay with {})", seeded.replay("exact_refunds")));
        let c = |n: AtomicU64| n.into_inner();
        let (cases, calls, refunds) = (c(counts.cases), c(counts.calls), c(counts.refunds));
        let (stale, blocks, blocked) = (c(counts.stale), c(counts.blocks), c(counts.blocked));
        println!(
            "{label} on {} seed {seed}: {cases} cases, {calls} calls, {refunds} refunds ({stale} giving nothing back), \
             {blocks} blocks started, {blocked} refusals during a block, in {:?}",
            store.describe(),
            started.elapsed()
        );
        assert_eq!(cases, u64::from(seeded.runner.config().cases), "every case ran");
        for (what, n) in
            [("refunds", refunds), ("stale refunds", stale), ("blocks", blocks), ("refusals in a block", blocked)]
        {
            assert!(n > 0, "{label} seed {seed}: the schedules made no {what}");
        }
    }
}

/// Calls at pinned times and refunds of earlier permits (each gives back at its own time: a
/// window that has moved on, or a log that has dropped the call, gives nothing) with blocks, on
/// memory and on the real server.
#[test]
fn refunds_and_blocks_decide_as_the_definitions() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for store in rt.block_on(async { stores(&server) }) {
        property("pinned", &store, None, 1024);
    }
}

/// The memory store on a manual clock: calls at the clock's time, refunds later at the time
/// they are made, so that stale refunds of buckets (drained since) give nothing either.
#[test]
fn late_refunds_on_a_clock_decide_as_the_definitions() {
    let clock = Arc::new(ManualClock::new(T0));
    let store: StoreHandle = Arc::new(MemoryStore::with_clock(clock.clone()));
    property("clock", &store, Some(clock), 1024);
}

/// Found by the property above: a permit of a sliding window counter, decided at a pinned time
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
        let l = build(&store, "exact_refunds::counter_refund", &limits);
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
