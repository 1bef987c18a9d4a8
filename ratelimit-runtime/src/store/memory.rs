//! The embedded store: the same decisions as the Redis script, computed in process.
//!
//! Sharded maps behind mutexes; each log is a deque of (time, cumulative units) so a window's
//! count and the exact retry-after are binary searches. Idle logs are swept as the shard is used,
//! so memory is bounded by the subjects active within their longest window.

use super::{Call, Pending, Store};
use crate::clock::{Clock, SystemClock};
use crate::Decision;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const SHARDS: usize = 64;
/// Every this many decisions a shard drops its expired logs.
const SWEEP_EVERY: u32 = 1024;

/// The in-memory store: the default when no Redis is configured.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct Shard {
    logs: HashMap<Box<[u8]>, Log>,
    ops: u32,
}

/// One subject's log: admitted units in time order.
#[derive(Default)]
struct Log {
    /// (time µs, cumulative units up to and including this entry)
    entries: VecDeque<(u64, u64)>,
    /// Cumulative units of everything trimmed so far.
    base: u64,
    /// Longest window of the rules using this log: entries older than it are dropped.
    longest_us: u64,
}

impl Log {
    fn trim(&mut self, now: u64) {
        let cutoff = now.saturating_sub(self.longest_us);
        while let Some(&(t, cum)) = self.entries.front() {
            if t > cutoff {
                break;
            }
            self.base = cum;
            self.entries.pop_front();
        }
    }

    fn total(&self) -> u64 {
        self.entries.back().map_or(self.base, |e| e.1)
    }

    /// Index of the first entry inside a window of `w` µs ending at `now`, and the cumulative
    /// units before it.
    fn window_start(&self, now: u64, w: u64) -> (usize, u64) {
        let cutoff = now.saturating_sub(w);
        let i = self.entries.partition_point(|&(t, _)| t <= cutoff);
        (i, if i == 0 { self.base } else { self.entries[i - 1].1 })
    }

    fn expired(&self, now: u64) -> bool {
        self.entries.back().is_none_or(|&(t, _)| t + self.longest_us <= now)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// A store on the system clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }

    /// A store on the given clock (tests drive time by hand with [`ManualClock`](crate::ManualClock)).
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
            clock,
        }
    }

    /// How many subjects hold state now (after dropping the expired ones).
    pub fn len(&self) -> usize {
        let now = self.clock.now_us();
        self.shards
            .iter()
            .map(|s| {
                let mut shard = lock(s);
                shard.logs.retain(|_, log| !log.expired(now));
                shard.logs.len()
            })
            .sum()
    }

    /// Whether no subject holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    fn decide_now(&self, call: &Call<'_>) -> Decision {
        let now = call.now_us.unwrap_or_else(|| self.clock.now_us());
        let keys: Vec<Vec<u8>> =
            call.limits.iter().zip(call.subjects).map(|(limit, subject)| limit.memory_key(subject)).collect();
        // Lock every shard the call touches, in index order so two calls cannot deadlock.
        let mut order: Vec<usize> = keys.iter().map(|k| self.shard_of(k)).collect();
        let shard_of_key = order.clone();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, lock(&self.shards[i]))).collect();

        for (_, shard) in &mut guards {
            shard.ops = shard.ops.wrapping_add(1);
            if shard.ops % SWEEP_EVERY == 0 {
                shard.logs.retain(|_, log| !log.expired(now));
            }
        }

        let cost = call.cost;
        let mut decision = Decision {
            allowed: true,
            limit: 0,
            rule: 0,
            retry_after: Duration::ZERO,
            remaining: 0,
            reset: Duration::ZERO,
        };
        let mut tightest: Option<u64> = None;
        for (g, limit) in call.limits.iter().enumerate() {
            let shard = shard_mut(&mut guards, shard_of_key[g]);
            let log = shard.logs.get_mut(keys[g].as_slice());
            let Some(log) = log else {
                // An empty log: every rule has `count` room.
                for (r, rule) in limit.rules.iter().enumerate() {
                    judge(&mut decision, &mut tightest, g, r, rule.count(), 0, cost, rule.window_us(), || 0, |_| 0);
                }
                continue;
            };
            log.longest_us = limit.longest_us();
            log.trim(now);
            for (r, rule) in limit.rules.iter().enumerate() {
                let w = rule.window_us();
                let (start, before) = log.window_start(now, w);
                let used = log.total() - before;
                let oldest_wait = || log.entries.get(start).map_or(w, |&(t, _)| t + w - now);
                let nth_wait = |need: u64| {
                    // The first entry whose cumulative units (from the window start) reach `need`.
                    let i = start + partition(&log.entries, start, |cum| cum - before < need);
                    log.entries.get(i).map_or(w, |&(t, _)| t + w - now)
                };
                judge(&mut decision, &mut tightest, g, r, rule.count(), used, cost, w, oldest_wait, nth_wait);
            }
        }

        if decision.allowed {
            for (g, limit) in call.limits.iter().enumerate() {
                let shard = shard_mut(&mut guards, shard_of_key[g]);
                let log = shard.logs.entry(keys[g].clone().into_boxed_slice()).or_default();
                log.longest_us = limit.longest_us();
                if cost > 0 {
                    let cum = log.total() + cost;
                    log.entries.push_back((now, cum));
                }
            }
        }
        decision
    }
}

/// Applies one rule's count to the decision, exactly as the script does: the denying rule with
/// the longest wait wins; while allowed, the rule with the least remaining is the tightest.
#[allow(clippy::too_many_arguments)]
fn judge(
    d: &mut Decision,
    tightest: &mut Option<u64>,
    limit: usize,
    rule: usize,
    count: u64,
    used: u64,
    cost: u64,
    window_us: u64,
    oldest_wait: impl Fn() -> u64,
    nth_wait: impl Fn(u64) -> u64,
) {
    if used + cost > count {
        let wait = if cost <= count { nth_wait(used + cost - count) } else { window_us };
        if d.allowed || Duration::from_micros(wait) > d.retry_after {
            let wait = Duration::from_micros(wait);
            *d = Decision { allowed: false, limit, rule, retry_after: wait, remaining: 0, reset: wait };
        }
    } else if d.allowed {
        let left = count - used - cost;
        if tightest.is_none_or(|t| left < t) {
            *tightest = Some(left);
            let reset = if used > 0 { oldest_wait() } else { window_us };
            *d = Decision {
                allowed: true,
                limit,
                rule,
                retry_after: Duration::ZERO,
                remaining: left,
                reset: Duration::from_micros(reset),
            };
        }
    }
}

/// The first index `i >= start` where `pred(cum)` turns false (entries are sorted by `cum`).
fn partition(entries: &VecDeque<(u64, u64)>, start: usize, pred: impl Fn(u64) -> bool) -> usize {
    let (mut lo, mut hi) = (start, entries.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(entries[mid].1) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - start
}

fn shard_mut<'a, 'g>(guards: &'a mut [(usize, MutexGuard<'g, Shard>)], index: usize) -> &'a mut Shard {
    // Every shard of the call was locked above, so the search always finds it.
    let at = guards.partition_point(|(i, _)| *i < index);
    &mut guards[at].1
}

/// Locks a shard even if a panicking thread poisoned it: the shard's data is always consistent
/// between statements, so the poison carries no information here.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store for MemoryStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        Pending::Ready(Ok(self.decide_now(call)))
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}
