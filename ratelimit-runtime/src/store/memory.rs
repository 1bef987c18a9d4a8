//! The embedded store: the same decisions as the Redis script, computed in process.
//!
//! Sharded maps behind mutexes; each log is a deque of (time, cumulative units) so a window's
//! count and the exact retry-after are binary searches. Idle logs are swept as the shard is used,
//! so memory is bounded by the subjects active within their longest window.

use super::{Call, Pending, Store};
use crate::clock::{Clock, SystemClock};
use crate::algorithm::step;
use crate::{Algorithm, Decision};
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
    states: HashMap<Box<[u8]>, State>,
    ops: u32,
}

/// One key's state: a log (sliding window) or the stored values of an O(1) algorithm.
enum State {
    Log(Log),
    Cells(Cells),
}

impl State {
    fn expired(&self, now: u64) -> bool {
        match self {
            State::Log(log) => log.expired(now),
            State::Cells(cells) => cells.expires_at <= now,
        }
    }
}

/// An O(1) algorithm's values, `cells()` per rule, `None` where never written.
struct Cells {
    values: Vec<Option<f64>>,
    expires_at: u64,
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

/// What an allowed call writes to one key.
enum Write {
    Log,
    Cells(Vec<Option<f64>>, u64),
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
                shard.states.retain(|_, st| !st.expired(now));
                shard.states.len()
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
                shard.states.retain(|_, st| !st.expired(now));
            }
        }

        let cost = call.cost;
        let mut d = Decision { allowed: true, limit: 0, rule: 0, retry_after: Duration::ZERO, remaining: 0, reset: Duration::ZERO };
        let mut tightest: Option<u64> = None;
        let mut writes = Vec::with_capacity(call.limits.len());
        for (g, limit) in call.limits.iter().enumerate() {
            let shard = shard_mut(&mut guards, shard_of_key[g]);
            let state = shard.states.get_mut(keys[g].as_slice()).filter(|st| !st.expired(now));
            if limit.algorithm == Algorithm::SlidingWindow {
                writes.push(Write::Log);
                let Some(State::Log(log)) = state else {
                    // An empty log: every rule has `count` room.
                    for (r, rule) in limit.rules.iter().enumerate() {
                        sliding(&mut d, &mut tightest, g, r, rule.count(), 0, cost, rule.window_us(), || 0, |_| 0);
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
                    sliding(&mut d, &mut tightest, g, r, rule.count(), used, cost, w, oldest_wait, nth_wait);
                }
            } else {
                let k = limit.algorithm.cells();
                let stored = match state {
                    Some(State::Cells(c)) if c.values.len() == k * limit.rules.len() => Some(&c.values),
                    _ => None,
                };
                let mut values = Vec::with_capacity(k * limit.rules.len());
                let mut ttl: f64 = 0.0;
                let none = [None; 3];
                for (r, rule) in limit.rules.iter().enumerate() {
                    let cap = limit.burst.unwrap_or(rule.count());
                    let v = stored.map_or(&none[..k], |s| &s[r * k..(r + 1) * k]);
                    let s = step(
                        limit.algorithm,
                        now as f64,
                        cost as f64,
                        rule.window_us() as f64,
                        rule.count() as f64,
                        cap as f64,
                        v,
                    );
                    // Redis turns the script's numbers into integers by truncation.
                    if s.left < 0.0 {
                        deny(&mut d, g, r, s.wait as u64);
                    } else {
                        room(&mut d, &mut tightest, g, r, s.left as u64, s.wait as u64);
                    }
                    values.extend(s.state[..k].iter().map(|&x| Some(x)));
                    ttl = ttl.max(s.ttl);
                }
                writes.push(Write::Cells(values, now + ttl.ceil() as u64));
            }
        }

        if d.allowed {
            for (g, (limit, write)) in call.limits.iter().zip(writes).enumerate() {
                let shard = shard_mut(&mut guards, shard_of_key[g]);
                let key = keys[g].as_slice();
                match write {
                    Write::Log => {
                        let state = match shard.states.get_mut(key) {
                            Some(st) => st,
                            None => shard.states.entry(key.into()).or_insert(State::Log(Log::default())),
                        };
                        if !matches!(state, State::Log(_)) {
                            *state = State::Log(Log::default());
                        }
                        if let State::Log(log) = state {
                            log.longest_us = limit.longest_us();
                            if cost > 0 {
                                let cum = log.total() + cost;
                                log.entries.push_back((now, cum));
                            }
                        }
                    }
                    Write::Cells(values, expires_at) => {
                        let cells = State::Cells(Cells { values, expires_at });
                        match shard.states.get_mut(key) {
                            Some(st) => *st = cells,
                            None => {
                                shard.states.insert(key.into(), cells);
                            }
                        }
                    }
                }
            }
        }
        d
    }
}

/// The script's `deny`: the denying rule with the longest wait wins.
fn deny(d: &mut Decision, limit: usize, rule: usize, wait_us: u64) {
    let wait = Duration::from_micros(wait_us);
    if d.allowed || wait > d.retry_after {
        *d = Decision { allowed: false, limit, rule, retry_after: wait, remaining: 0, reset: wait };
    }
}

/// The script's `room`: while allowed, the rule with the least remaining is the tightest.
fn room(d: &mut Decision, tightest: &mut Option<u64>, limit: usize, rule: usize, left: u64, reset_us: u64) {
    if d.allowed && tightest.is_none_or(|t| left < t) {
        *tightest = Some(left);
        *d = Decision {
            allowed: true,
            limit,
            rule,
            retry_after: Duration::ZERO,
            remaining: left,
            reset: Duration::from_micros(reset_us),
        };
    }
}

/// One sliding-window rule, as the script's `sw` branch: the waits are computed only when needed.
#[allow(clippy::too_many_arguments)]
fn sliding(
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
        deny(d, limit, rule, if cost <= count { nth_wait(used + cost - count) } else { window_us });
    } else if d.allowed && tightest.is_none_or(|t| count - used - cost < t) {
        room(d, tightest, limit, rule, count - used - cost, if used > 0 { oldest_wait() } else { window_us });
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
