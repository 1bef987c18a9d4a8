//! What the property tests against the definitions share (tests/exact.rs,
//! tests/exact_settle.rs): the stores they run on, their runs (a fixed seed, and a seed of the
//! caller's), and random stacks of limits.
//!
//! Every property runs its cases from a fixed seed, the same on every run. With
//! `RATELIMIT_PROPTEST_SEED=<16 hex digits>` it also runs as many cases from that seed:
//! `scripts/test.sh` draws one at random on every run and prints it, and a failure names its
//! seed, so that it can be replayed:
//!
//! ```text
//! RATELIMIT_PROPTEST_SEED=0123456789abcdef scripts/test.sh --test exact --test exact_settle
//! ```
//!
//! `RATELIMIT_PROPTEST_CASES=N` sets the cases per seed (at least 1: a property of no cases
//! checks nothing, and is an error).
#![allow(dead_code)]

use super::definition::LimitSpec;
use super::support::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use ratelimit::store::{MemoryStore, RedisStore, StoreHandle};
use ratelimit::{Algorithm, LimitType, Rule};
use std::sync::Arc;
use std::time::Duration;

/// Pinned times lie in the future (keys expire at pinned time + TTL by the server clock), where
/// doubles step by 0.25 µs as they do today (2^50 to 2^51 µs): the floating-point scripts
/// rounded there.
pub const T0: u64 = 2_000_000_000_000_000;

/// How far a step of kind `kind` moves the clock, for the kinds every schedule shares: not at
/// all, 1 µs, `k` emission intervals of the first rule (`w0 / n0`) rounded down or up, a random
/// part of its window, a whole window, the last retry-after or 1 µs short of it (the exact
/// boundaries). `None` for a kind of the caller's own.
pub fn gap(kind: u8, k: u64, random: u64, (w0, n0): (u64, u64), last_retry: u64) -> Option<u64> {
    Some(match kind {
        0 => 0,
        1 => 1,
        2 => k * w0 / n0,
        3 => (k * w0).div_ceil(n0),
        4 => random % w0 + 1,
        5 => w0,
        6 => last_retry,
        7 => last_retry.saturating_sub(1),
        _ => return None,
    })
}

/// The stores every test here runs on: memory, and the real server.
pub fn stores(server: &RedisServer) -> [StoreHandle; 2] {
    [Arc::new(MemoryStore::new()), redis_store(server)]
}

pub fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap())
}

/// Cases per seed: `RATELIMIT_PROPTEST_CASES`, else `default_cases`. Zero, or not a number, is
/// an error.
pub fn cases(default_cases: u32) -> u32 {
    let Ok(text) = std::env::var("RATELIMIT_PROPTEST_CASES") else { return default_cases };
    match text.trim().parse::<u32>() {
        Ok(0) => panic!("RATELIMIT_PROPTEST_CASES=0: a property of no cases checks nothing"),
        Ok(cases) => cases,
        Err(e) => panic!("RATELIMIT_PROPTEST_CASES={text:?} is not a number of cases: {e}"),
    }
}

/// One run of a property: its seed (as `RATELIMIT_PROPTEST_SEED` gives it, or "fixed") and its
/// runner.
pub struct Run {
    pub seed: String,
    pub runner: TestRunner,
}

impl Run {
    /// How to run this again, for a failure's message.
    pub fn replay(&self, test: &str) -> String {
        match self.seed.as_str() {
            "fixed" => format!("the fixed seed: cargo test --all-features --test {test}"),
            seed => format!("seed {seed}: RATELIMIT_PROPTEST_SEED={seed} cargo test --all-features --test {test}"),
        }
    }
}

/// The runs of a property: [`cases`] cases from the fixed seed, then as many from
/// `RATELIMIT_PROPTEST_SEED` when it is set (16 hex digits).
pub fn runs(default_cases: u32) -> Vec<Run> {
    let cases = cases(default_cases);
    let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
    let run = |seed: String, bytes: [u8; 32]| Run {
        seed,
        runner: TestRunner::new_with_rng(config.clone(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)),
    };
    let mut runs = vec![run("fixed".to_owned(), [0x20; 32])];
    if let Ok(text) = std::env::var("RATELIMIT_PROPTEST_SEED") {
        let seed = u64::from_str_radix(text.trim(), 16)
            .unwrap_or_else(|e| panic!("RATELIMIT_PROPTEST_SEED={text:?} is not 16 hex digits: {e}"));
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_exact_mut(8) {
            chunk.copy_from_slice(&seed.to_le_bytes());
        }
        runs.push(run(format!("{seed:016x}"), bytes));
    }
    runs
}

/// One to four limits of any algorithm (windows 1 ms to 30 days, counts 1 to 10^9, bursts 1,
/// 2, default or random), one or two rules each (longest window first), no block; each of a
/// distinct type (the type names a limit in the answers), any type in any position.
pub fn limits_strategy() -> impl Strategy<Value = Vec<LimitSpec>> {
    let window_ms = prop_oneof![
        Just(1u64),
        Just(1000),
        Just(7000),
        Just(60_000),
        Just(3_600_000),
        Just(86_400_000),
        Just(30 * 86_400_000),
        1..=30 * 86_400_000u64,
    ];
    let count = prop_oneof![
        Just(1u64),
        Just(2),
        Just(3),
        Just(7),
        Just(1000),
        Just(1_000_000),
        Just(1_000_000_000),
        1..=1_000_000_000u64,
    ];
    let burst = prop_oneof![Just(None), Just(Some(1u64)), Just(Some(2)), (1..=1_000_000_000u64).prop_map(Some)];
    let alg = prop::sample::select(Algorithm::ALL.to_vec());
    let limit = (alg, prop::collection::vec((window_ms, count), 1..=2), burst);
    let types = Just(vec![LimitType::Ip, LimitType::User, LimitType::Key, LimitType::Global]).prop_shuffle();
    (prop::collection::vec(limit, 1..=4), types).prop_map(|(limits, types)| {
        limits
            .into_iter()
            .zip(types)
            .map(|((alg, mut rules, burst), limit_type)| {
                rules.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                rules.dedup_by_key(|r| r.0);
                let rules: Vec<Rule> = rules.into_iter().map(|(ms, n)| Rule::from_millis(ms, n).unwrap()).collect();
                // A burst only where it means something, and only as long as a full bucket
                // drains within the longest window allowed.
                let burst = burst.filter(|&b| {
                    alg.supports_burst()
                        && rules.iter().all(|r| {
                            u128::from(b) * r.window().as_micros() / u128::from(r.count())
                                <= ratelimit::rule::MAX_WINDOW.as_micros()
                        })
                });
                LimitSpec { limit_type, alg, rules, burst, block: None }
            })
            .collect()
    })
}

/// As [`limits_strategy`], each limit with or without a block: 1 ms (the least), 1 s + 1 µs, or
/// any µs from 1 ms to 30 days.
pub fn blocked_limits_strategy() -> impl Strategy<Value = Vec<LimitSpec>> {
    let block = prop_oneof![
        2 => Just(None),
        1 => Just(Some(1000u64)),
        1 => Just(Some(1_000_001)),
        2 => (1000..=30 * 86_400_000_000u64).prop_map(Some),
    ];
    (limits_strategy(), prop::collection::vec(block, 4)).prop_map(|(mut limits, blocks)| {
        for (l, b) in limits.iter_mut().zip(blocks) {
            l.block = b;
        }
        limits
    })
}
