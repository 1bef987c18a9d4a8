//! What the property tests against the definitions share (tests/exact.rs,
//! tests/exact_refunds.rs): the stores they run on, the fixed-seed runner, and random stacks of
//! limits.
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

/// The stores every test here runs on: memory, and the real server.
pub fn stores(server: &RedisServer) -> [StoreHandle; 2] {
    [Arc::new(MemoryStore::new()), redis_store(server)]
}

pub fn redis_store(server: &RedisServer) -> StoreHandle {
    Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap())
}

/// Cases per property (RATELIMIT_PROPTEST_CASES sets it) and the fixed seed CI runs.
pub fn runner(default_cases: u32) -> TestRunner {
    let cases = std::env::var("RATELIMIT_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default_cases);
    let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[0x20; 32]))
}

/// One to three limits of any algorithm (windows 1 ms to 30 days, counts 1 to 10^9, bursts 1,
/// 2, default or random), one or two rules each (longest window first), no block.
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
    prop::collection::vec(limit, 1..=3).prop_map(|limits| {
        let types = [LimitType::Ip, LimitType::User, LimitType::Key, LimitType::Global];
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
    (limits_strategy(), prop::collection::vec(block, 3)).prop_map(|(mut limits, blocks)| {
        for (l, b) in limits.iter_mut().zip(blocks) {
            l.block = b;
        }
        limits
    })
}
