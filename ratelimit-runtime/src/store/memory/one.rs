//! The in-memory store's path for a call of one limit (most calls): the key as words in
//! registers (or, when long, on the stack), one shard lock, one lookup, and the rules checked
//! and recorded in one pass.
//!
//! It decides exactly as `decide_general` (which checks every limit, then records): the same
//! steps (`sliding`, `step_rule`, `room`, `deny`) on the same state, only fused. The unit tests
//! below hold the two paths to the same decisions and the same stored state.

use super::carry::{carry, kept_of};
use super::check::{check_log, sliding_step};
use super::inline::{KeyWords, Values};
use super::log::Log;
use super::shard::{shard_of, Cells, Shard, State};
use super::MemoryStore;
use crate::algorithm::step;
use crate::algorithm::Algorithm;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::{Decision, Why};
use crate::store::Call;

/// Keys up to this many bytes (hash, limit id, subject) are built on the stack; longer ones go
/// the general way.
const INLINE_KEY: usize = 80;
/// Rules of an O(1) limit whose steps are kept on the stack between check and record.
const INLINE_RULES: usize = 4;
/// A rule's values when nothing is stored.
const NONE: [Option<u64>; 3] = [None; 3];

impl MemoryStore {
    /// The limit and subject of `call` when the one-limit path decides it (else `None`: the
    /// general path does).
    #[inline(always)]
    pub(super) fn one_limit<'c>(call: &Call<'c>) -> Option<(&'c CompiledLimit, &'c [u8])> {
        let ([limit], [subject]) = (call.limits, call.subjects) else { return None };
        // A shadow limit (decided only once the others admit) goes the general way.
        (call.shadow == 0 && Self::takes_one(limit) && Self::fits_one(subject)).then_some((limit, subject))
    }

    /// Whether the one-limit path decides calls of `limit` alone (with a subject that
    /// [fits](Self::fits_one)): no block or concurrency slots, and no more O(1) rules than it
    /// keeps on the stack. A limiter resolves this once (see `limiter/plain.rs`).
    #[inline(always)]
    pub(crate) fn takes_one(limit: &CompiledLimit) -> bool {
        !limit.has_block_or_slots()
            && (limit.algorithm == Algorithm::SlidingWindow || limit.rules.len() <= INLINE_RULES)
    }

    /// Whether the key of `subject` is built on the stack by the one-limit path.
    #[inline(always)]
    pub(super) fn fits_one(subject: &[u8]) -> bool {
        16 + subject.len() <= INLINE_KEY
    }

    /// Decides a call of `limit` alone for `subject` (see [`one_limit`](Self::one_limit)), of
    /// `cost` units at `pinned` (µs since the epoch, or the store's time). Returns the decision
    /// itself, not an `Option` of it: wrapping it moved the whole decision once more, piecewise
    /// around the niche, right before the caller read it back.
    #[inline]
    pub(super) fn decide_one(&self, limit: &CompiledLimit, subject: &[u8], cost: u64, pinned: Option<u64>) -> Decision {
        let hash = self.key_hash(limit, subject);
        let now = pinned.unwrap_or_else(|| self.now_us());
        // The key as words in registers, not bytes on the stack: bytes just written in pieces
        // and read back as words wait for every piece to land (and so would the lock, for each
        // store before it).
        let words = KeyWords::of(hash, limit.memory_id(), subject);
        let mut shard = self.shards[shard_of(hash, self.mask)].lock();
        let found = match &words {
            Some(words) => shard.get_mut_words(words),
            None => shard.get_mut(&InlineKey::new(hash, limit, subject)),
        };
        // The clock was read before the lock (reading it under the lock costs every call
        // more than this look): a call that read it earlier may take the lock later. A log
        // appends in time order, and a refund finds its units by time, so its time never
        // goes back. (A pinned time is the caller's.)
        let now = match &found {
            Some(State::Log(log)) if pinned.is_none() => now.max(log.newest_time()),
            _ => now,
        };
        match found {
            Some(state) => decide_in(limit, state, now, cost),
            None => decide_new(&mut shard, &InlineKey::new(hash, limit, subject), limit, now, cost),
        }
    }
}

/// A key as `decide_general` builds it (its seeded hash, the limit's id, the subject), on the
/// stack: what a new subject is stored under, and what a subject too long for [`KeyWords`] is
/// looked up by.
struct InlineKey {
    buf: [u8; INLINE_KEY],
    len: usize,
}

impl InlineKey {
    /// The key of `subject` (one that [fits](MemoryStore::fits_one)) under `limit`.
    #[inline]
    fn new(hash: u64, limit: &CompiledLimit, subject: &[u8]) -> InlineKey {
        let len = 16 + subject.len();
        let mut buf = [0u8; INLINE_KEY];
        buf[..8].copy_from_slice(&hash.to_le_bytes());
        buf[8..16].copy_from_slice(&limit.memory_id().to_le_bytes());
        if let Some(to) = buf.get_mut(16..len) {
            crate::model::key::copy_key(to, subject);
        }
        InlineKey { buf, len }
    }
}

impl std::ops::Deref for InlineKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

/// Decides one limit of a subject with nothing stored: on an empty state, kept only if the call
/// is allowed. Out of line: the usual call finds its subject.
#[inline(never)]
fn decide_new(shard: &mut Shard, key: &[u8], limit: &CompiledLimit, now: u64, cost: u64) -> Decision {
    let mut state = State::Log(Log::default());
    let d = decide_in(limit, &mut state, now, cost);
    if d.allowed {
        shard.set(key, state, now);
    }
    d
}

/// Decides one limit on its stored `state` (any state: an expired or foreign one counts as
/// nothing stored) and records the call in it if allowed.
#[inline(always)]
fn decide_in(limit: &CompiledLimit, state: &mut State, now: u64, cost: u64) -> Decision {
    if let State::Cells(c) = state {
        carry(c, limit, now);
    }
    if let [rule] = limit.rules[..] {
        // One rule (most limits): each algorithm's step specialised, nothing in loops. First,
        // before any decision is written: the paths below start from `Decision::admitted`,
        // which the compiler writes out whole before it knows the path (then written again).
        return match limit.algorithm {
            Algorithm::SlidingWindow => one_log(rule, state, now, cost),
            Algorithm::Gcra => one_rule(Algorithm::Gcra, limit, rule, state, now, cost),
            Algorithm::TokenBucket => one_rule(Algorithm::TokenBucket, limit, rule, state, now, cost),
            Algorithm::LeakyBucket => one_rule(Algorithm::LeakyBucket, limit, rule, state, now, cost),
            Algorithm::FixedWindow => one_rule(Algorithm::FixedWindow, limit, rule, state, now, cost),
            _ => one_rule(Algorithm::SlidingWindowCounter, limit, rule, state, now, cost),
        };
    }
    if limit.algorithm == Algorithm::SlidingWindow {
        let (mut d, mut tightest) = (Decision::admitted(now), None);
        let log = state.live_log(now);
        check_log(log, 0, limit, now, cost, &mut d, &mut tightest);
        if d.allowed {
            log.admit(now, cost);
        }
        return d;
    }
    // Several rules of an O(1) algorithm: as for one, each algorithm's loop specialised.
    match limit.algorithm {
        Algorithm::Gcra => many_rules(Algorithm::Gcra, limit, state, now, cost),
        Algorithm::TokenBucket => many_rules(Algorithm::TokenBucket, limit, state, now, cost),
        Algorithm::LeakyBucket => many_rules(Algorithm::LeakyBucket, limit, state, now, cost),
        Algorithm::FixedWindow => many_rules(Algorithm::FixedWindow, limit, state, now, cost),
        _ => many_rules(Algorithm::SlidingWindowCounter, limit, state, now, cost),
    }
}

/// Several rules (at most [`INLINE_RULES`]) of an O(1) algorithm `alg` (a constant where it is
/// inlined): every rule stepped, then all recorded or none. The decision is folded as the
/// script's `room` and `deny` fold it (the tightest rule, the earlier on ties; else the refusal
/// with the longest wait, the earlier on ties), in locals, and written once: folded into a
/// decision per rule, it was written whole at each rule.
#[inline(always)]
fn many_rules(alg: Algorithm, limit: &CompiledLimit, state: &mut State, now: u64, cost: u64) -> Decision {
    let k = alg.cells();
    // `one_limit` sends no more rules than the steps kept on the stack.
    debug_assert!(limit.rules.len() <= INLINE_RULES);
    let rules = &limit.rules[..];
    let n = k * rules.len();
    let stored = match state {
        State::Cells(c) if c.expires_at > now && c.values.len() == n => Some(&c.values[..]),
        _ => None,
    };
    let mut steps = [[0u64; 3]; INLINE_RULES];
    let mut ttl: u64 = 0;
    // (rule, units left, reset) of the tightest rule so far; (rule, wait) of the refusal.
    let mut tightest: Option<(usize, u64, u64)> = None;
    let mut refusal: Option<(usize, u64)> = None;
    for (r, (rule, slot)) in rules.iter().zip(&mut steps).enumerate() {
        let v = stored.and_then(|s| s.get(r * k..(r + 1) * k)).unwrap_or(&NONE[..k]);
        let s = step(alg, rule.rate(limit.capacity(r)), now, cost, v, false);
        if !s.allowed {
            if refusal.is_none_or(|(_, wait)| s.wait > wait) {
                refusal = Some((r, s.wait));
            }
        } else if tightest.is_none_or(|(_, left, _)| s.left < left) {
            tightest = Some((r, s.left, s.wait));
        }
        *slot = s.state;
        ttl = ttl.max(s.ttl);
    }
    if let Some((r, wait)) = refusal {
        return Decision::refused(0, r, wait, now, Why::Exceeded);
    }
    let (rule, remaining, reset_us) = tightest.unwrap_or((0, 0, 0));
    let d = Decision { rule, remaining, reset_us, ..Decision::admitted(now) };
    let expires_at = now + ttl;
    let steps = &steps[..rules.len()];
    match state {
        State::Cells(c) if c.values.len() == n => {
            c.values.set_steps(k, steps);
            c.expires_at = expires_at;
        }
        _ => {
            let mut values = Values::new(n);
            values.set_steps(k, steps);
            *state = State::Cells(Cells { values, expires_at, kept: kept_of(limit) });
        }
    }
    d
}

/// One sliding-window rule: `check_log` and the record of `decide_in`'s general path in one
/// pass, the decision written once.
#[inline(always)]
fn one_log(rule: crate::model::rule::Rule, state: &mut State, now: u64, cost: u64) -> Decision {
    let log = state.live_log(now);
    let w = rule.window_us();
    log.longest_us = w;
    log.trim(now);
    // The one window is the longest: it holds everything the trim left.
    let before = log.base();
    let nth_wait = |need: u64| log.nth_time(0, before, need).map_or(w, |t| t + w - now);
    match sliding_step(rule.count(), log.total() - before, cost, w, nth_wait) {
        Err(wait) => Decision::refused(0, 0, wait, now, Why::Exceeded),
        Ok(left) => {
            log.admit(now, cost);
            Decision { remaining: left, reset_us: w, ..Decision::admitted(now) }
        }
    }
}

/// One O(1) rule: `step_rule` and the records of `decide_in`'s general loop, for one rule of
/// algorithm `alg` (a constant where it is inlined).
#[inline(always)]
fn one_rule(
    alg: Algorithm,
    limit: &CompiledLimit,
    rule: crate::model::rule::Rule,
    state: &mut State,
    now: u64,
    cost: u64,
) -> Decision {
    let k = alg.cells();
    // Nothing stored reads as `None`s kept as a constant: an array of them here was written on
    // every call, found or not.
    let v = match state {
        State::Cells(c) if c.expires_at > now && c.values.len() == k => &c.values[..],
        _ => &NONE[..k],
    };
    let s = step(alg, rule.rate(limit.capacity(0)), now, cost, v, false);
    if !s.allowed {
        return Decision::refused(0, 0, s.wait, now, Why::Exceeded);
    }
    let d = Decision { remaining: s.left, reset_us: s.wait, ..Decision::admitted(now) };
    let expires_at = now + s.ttl;
    match state {
        State::Cells(c) if c.values.len() == k => {
            c.values.set_steps(k, &[s.state]);
            c.expires_at = expires_at;
        }
        _ => {
            let mut values = Values::new(k);
            values.set_steps(k, &[s.state]);
            *state = State::Cells(Cells { values, expires_at, kept: kept_of(limit) });
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::compiled::CompiledLimit;
    use crate::model::limit::Limit;
    use crate::model::limit_type::LimitType;
    use crate::model::rule::Rule;
    use crate::rt::clock::ManualClock;
    use std::sync::Arc;
    use std::time::Duration;

    fn limit(alg: Algorithm, rules: &[(u64, u64)], burst: Option<u64>, name: &str) -> CompiledLimit {
        let rules = rules.iter().map(|&(ms, c)| Rule::from_millis(ms, c).expect("rule"));
        let spec = Limit::new(LimitType::User, rules).algorithm(alg).prefix("t:");
        let spec = match burst {
            Some(b) => spec.burst(b),
            None => spec,
        };
        CompiledLimit::compile(name, spec, 0).expect("limit")
    }

    /// The one-limit path and the general path, on two stores fed the same calls, give the same
    /// decisions, the same peeks and the same number of live subjects, for every algorithm.
    #[test]
    fn one_limit_path_decides_as_the_general_path() {
        let shapes: &[&[(u64, u64)]] = &[
            &[(1000, 5)],
            &[(1000, 5), (200, 2)],
            &[(3000, 7), (700, 3), (100, 1)],
            &[(3000, 7), (2000, 6), (700, 3), (300, 2), (100, 1)],
        ];
        // The crate's own generator, seeded: the same calls on every run.
        let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        for alg in Algorithm::ALL {
            for (i, &rules) in shapes.iter().enumerate() {
                let burst = alg.supports_burst().then_some(4 + i as u64);
                for burst in [None, burst] {
                    let limit = limit(alg, rules, burst, &format!("one-{alg:?}-{i}-{burst:?}"));
                    let limits = std::slice::from_ref(&limit);
                    let start = 1_700_000_000_000_000 + rng.u64(..1_000_000);
                    let (ca, cb) = (Arc::new(ManualClock::new(start)), Arc::new(ManualClock::new(start)));
                    let (a, b) = (MemoryStore::with_clock(ca.clone()), MemoryStore::with_clock(cb.clone()));
                    // Short keys (inline), a key kept on the heap, and one too long for the stack.
                    let subjects: [&[u8]; 5] = [b"alice", b"bob", b"", &[7; 40], &[9; 100]];
                    let mut seen = [0usize; 2];
                    for step in 0..3000 {
                        let subject = [subjects[rng.u64(..5) as usize]];
                        let cost = [0, 1, 1, 1, 2, 3, 9][rng.u64(..7) as usize];
                        let call = Call { limits, subjects: &subject, cost, now_us: None, shadow: 0 };
                        let fast = a.decide_now(&call);
                        let general = b.decide_general(&call);
                        assert_eq!(fast, general, "{alg:?} rules {rules:?} burst {burst:?} call {step}");
                        seen[usize::from(fast.allowed)] += 1;
                        let by =
                            Duration::from_micros([0, 1, 37, 1000, 40_000, 250_000, 1_100_000][rng.u64(..7) as usize]);
                        ca.advance(by);
                        cb.advance(by);
                        if step % 97 == 0 {
                            let present = [Some(subject[0])];
                            let targets = crate::store::Targets { limits, subjects: &present, now_us: None };
                            assert_eq!(a.peek_now(&targets), b.peek_now(&targets), "peek, {alg:?} call {step}");
                            assert_eq!(a.len(), b.len());
                        }
                    }
                    assert!(seen[0] > 100 && seen[1] > 100, "{alg:?} {rules:?}: both answers exercised ({seen:?})");
                }
            }
        }
    }
}
