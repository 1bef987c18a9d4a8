//! The counting algorithms, and each O(1) algorithm's step in exact integer arithmetic: the
//! one Rust definition the memory store decides with (the Redis scripts hold the same steps in
//! Lua, in `store/lua/`, and the property tests hold both to the plain definitions).
//!
//! Times are integer microseconds. Rates are exact fractions: a bucket's state is kept in units
//! of 1/count µs, so that `window / count` never rounds; products go through u128.

pub(crate) mod calendar;
mod convert;
mod settle;

pub(crate) use convert::carry_level;
pub(crate) use settle::{charge, empty_at};

/// How a limit counts (the attribute's `algorithm = …`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Exact sliding log: every admitted unit is remembered for the longest window (memory grows
    /// with the limit). Retry-after is exact.
    #[default]
    SlidingWindow,
    /// Two fixed windows, the previous one weighted by its overlap with the sliding window:
    /// O(1) memory, approximate (assumes the previous window's calls were spread evenly).
    SlidingWindowCounter,
    /// A counter per aligned window: O(1) memory; allows up to 2x the count around a boundary.
    FixedWindow,
    /// A bucket of `count` tokens (or `burst`), refilled at `count` per window.
    TokenBucket,
    /// The funnel: `count` (or `burst`) capacity, leaking `count` per window.
    LeakyBucket,
    /// Generic cell rate algorithm: one theoretical arrival time per rule; calls are spaced by
    /// `window / count` with a burst tolerance of `count` (or `burst`).
    Gcra,
}

impl Algorithm {
    /// Every algorithm, in the order of their declaration (for tests and tools that try each).
    pub const ALL: [Algorithm; 6] = [
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounter,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ];

    /// The short code used in keys and in the script's arguments.
    pub(crate) const fn code(self) -> &'static str {
        match self {
            Algorithm::SlidingWindow => "sw",
            Algorithm::SlidingWindowCounter => "swc",
            Algorithm::FixedWindow => "fw",
            Algorithm::TokenBucket => "tb",
            Algorithm::LeakyBucket => "lb",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether `burst` (a capacity other than `count`) means something for this algorithm.
    pub const fn supports_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra)
    }

    /// How many stored values one rule has (0: the sliding log).
    pub(crate) const fn cells(self) -> usize {
        match self {
            Algorithm::SlidingWindow => 0,
            Algorithm::SlidingWindowCounter => 3,
            Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra => 2,
        }
    }
}

/// The outcome of one rule of an O(1) algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    /// Whether the call fits this rule.
    pub allowed: bool,
    /// Cost-1 calls that would still pass after this one (0 when refused).
    pub left: u64,
    /// When refused: the least wait (µs) after which the same call passes. Else the reset: how
    /// long until the rule's quota is whole again if nothing else happens.
    pub wait: u64,
    /// The rule's new stored values (written only if the whole call is allowed).
    pub state: [u64; 3],
    /// How long (µs from now) the new state matters.
    pub ttl: u64,
}

/// One rule as the steps read it: `count` per `w` µs, holding at most `cap` units at once (the
/// burst of a bucket, the count otherwise); `months` > 0: the fixed windows are that many
/// calendar months (and `w` the longest such a window can be).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rate {
    pub w: u64,
    pub count: u64,
    pub cap: u64,
    pub months: u64,
}

impl Rate {
    /// The fixed window holding `t`: its index, start and end (µs). Windows of `w` µs start at
    /// multiples of `w` since the epoch; windows of calendar months at month starts in UTC.
    #[inline]
    fn window_at(self, t: u64) -> (u64, u64, u64) {
        if self.months > 0 {
            return calendar::month_window(self.months, t);
        }
        let idx = t / self.w;
        (idx, idx * self.w, (idx + 1) * self.w)
    }
}

/// One rule of an O(1) algorithm on its stored values `v` (`None` where absent); `peek` asks for
/// a peek's reset (an empty fixed window reads 0, where an admission of cost 0 still ends with
/// the window). Always inlined: where the algorithm is a constant, only its own step remains.
#[inline(always)]
pub(crate) fn step(alg: Algorithm, rate: Rate, now: u64, cost: u64, v: &[Option<u64>], peek: bool) -> Step {
    let Rate { w, count, cap, .. } = rate;
    let get = |i: usize| v.get(i).copied().flatten();
    match alg {
        Algorithm::FixedWindow => fixed_window(now, cost, rate.window_at(now), count, get(0).zip(get(1)), peek),
        Algorithm::SlidingWindowCounter => {
            window_counter(now, cost, w, count, get(0).zip(get(1)).map(|(i, c)| (i, c, get(2).unwrap_or(0))))
        }
        // The three buckets are one admission rule: GCRA is the leaky bucket seen as a meter
        // (its theoretical arrival time is the instant the bucket is empty), and a token bucket
        // refilling continuously holds `cap - level` tokens.
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra | Algorithm::SlidingWindow => {
            bucket(now, cost, w, count, cap, get(0).zip(get(1)))
        }
    }
}

/// A call passes iff the count of the window holding `now` (its index, start and end, from
/// [`Rate::window_at`]) plus its cost is at most `count`. State: (window index, its count).
#[inline]
fn fixed_window(
    now: u64,
    cost: u64,
    window: (u64, u64, u64),
    count: u64,
    stored: Option<(u64, u64)>,
    peek: bool,
) -> Step {
    let (idx, start, window_end) = window;
    let cur = match stored {
        Some((i, c)) if i == idx => c,
        _ => 0,
    };
    let end = window_end - now;
    let ttl = end;
    let used = cur.saturating_add(cost);
    let state = [idx, used, 0];
    if used <= count {
        let wait = if peek && cur == 0 { 0 } else { end };
        return Step { allowed: true, left: count - used, wait, state, ttl };
    }
    // The next window holds nothing; a cost above the count never fits (the decision path
    // refuses it before asking), and is refused for a whole window here.
    Step { allowed: false, left: 0, wait: if cost > count { window_end - start } else { end }, state, ttl }
}

/// Two fixed windows, the previous one weighted by its overlap with the sliding window: with
/// `e` the time into the current window, a call passes iff
/// `prev * (w - e) + (cur + cost) * w <= count * w`. State: (window index, its count, the
/// previous window's count).
#[inline]
fn window_counter(now: u64, cost: u64, w: u64, count: u64, stored: Option<(u64, u64, u64)>) -> Step {
    let (idx, e) = (now / w, now % w);
    let (cur, prev): (u64, u64) = match stored {
        Some((i, c, p)) if i == idx => (c, p),
        Some((i, c, _)) if i + 1 == idx => (0, c),
        _ => (0, 0),
    };
    let (w128, n128) = (u128::from(w), u128::from(count));
    // The previous window's weight now, rounded up.
    let weight = (u128::from(prev) * u128::from(w - e)).div_ceil(w128);
    let used = u128::from(cur) + u128::from(cost) + weight;
    let reset = if cur.saturating_add(cost) > 0 {
        2 * w - e
    } else if prev > 0 {
        w - e
    } else {
        0
    };
    let state = [idx, cur.saturating_add(cost), prev];
    let ttl = 2 * w - e;
    if used <= n128 {
        return Step { allowed: true, left: (n128 - used) as u64, wait: reset, state, ttl };
    }
    let wait = if cost > count {
        w
    } else if cur + cost > count {
        // Not in this window. In the next (prev = cur, cur = 0) it passes from the least e'
        // with cur * (w - e') <= (count - cost) * w.
        let room = u128::from(count - cost) * w128 / u128::from(cur);
        (2 * u128::from(w) - u128::from(e) - room) as u64
    } else {
        // Later in this window, once the previous window's weight has decayed enough.
        let room = (n128 - u128::from(cur) - u128::from(cost)) * w128 / u128::from(prev);
        (u128::from(w - e) - room) as u64
    };
    Step { allowed: false, left: 0, wait, state, ttl }
}

/// A bucket of capacity `cap` draining at `count` per `w`; a call passes iff the level plus its
/// cost is at most `cap`. State: the instant E the bucket is empty, as (e, f) with
/// E = e + f / count µs (exact: one unit drains in w / count µs, a fraction).
#[inline(always)]
fn bucket(now: u64, cost: u64, w: u64, count: u64, cap: u64, stored: Option<(u64, u64)>) -> Step {
    let (w, n) = (u128::from(w), u128::from(count));
    // Spans in units of 1/count µs: a unit of the bucket is w of them.
    let now_n = u128::from(now) * n;
    let empty_n = stored.map_or(0, |(e, f)| u128::from(e) * n + u128::from(f));
    let level = empty_n.saturating_sub(now_n);
    let after = level + u128::from(cost) * w;
    let full = u128::from(cap) * w;
    // The new empty instant is `now_n + after`; `now_n` is whole µs, so its µs and fraction are
    // `now` plus `after`'s, and the one division gives the wait until empty as well.
    let (q, r) = div_rem(after, n);
    let until_empty = (q + u128::from(r != 0)) as u64;
    let state = [(u128::from(now) + q) as u64, r as u64, 0];
    if cost > cap {
        // Never fits (the decision path refuses such a cost before asking).
        return Step { allowed: false, left: 0, wait: w as u64, state, ttl: 0 };
    }
    if after <= full {
        let left = cap - div_ceil(after, w) as u64;
        return Step { allowed: true, left, wait: until_empty, state, ttl: until_empty };
    }
    Step { allowed: false, left: 0, wait: div_ceil(after - full, n) as u64, state, ttl: until_empty }
}

/// `a / b` and `a % b`, exact: in 64 bits when both fit (the usual case: a bucket's level in
/// units of 1/count µs), where the 128-bit division would be a library call.
#[inline(always)]
fn div_rem(a: u128, b: u128) -> (u128, u128) {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) if b != 0 => (u128::from(a / b), u128::from(a % b)),
        _ => (a / b, a % b),
    }
}

/// `a / b` rounded up, exact (see [`div_rem`]).
#[inline(always)]
fn div_ceil(a: u128, b: u128) -> u128 {
    let (q, r) = div_rem(a, b);
    q + u128::from(r != 0)
}

/// Gives back the `cost` units a call admitted at `at` (µs) took from one rule of an O(1)
/// algorithm, at `now`, from its stored values `v`: the new values, or `None` when the units no
/// longer count (nothing to write).
///
/// - fixed window: the window's count drops by `cost` (never below zero) if the call's window is
///   still the current one;
/// - sliding window counter: the count of the call's window drops by `cost` while that window is
///   the current or the previous one (where it still weighs);
/// - buckets and GCRA: the instant the bucket is empty moves back by `cost · T`, never before
///   now (a bucket never holds more than its capacity), and only while it is not empty and the
///   call's units may still be in it (less than a full bucket's drain time, `cap · T`, after
///   the call).
#[inline]
pub(crate) fn refund(alg: Algorithm, rate: Rate, now: u64, at: u64, cost: u64, v: &[Option<u64>]) -> Option<[u64; 3]> {
    let Rate { w, count, .. } = rate;
    let get = |i: usize| v.get(i).copied().flatten();
    let (idx, at_idx) = (rate.window_at(now).0, rate.window_at(at).0);
    match alg {
        Algorithm::FixedWindow => {
            let (i, c) = get(0).zip(get(1))?;
            (i == at_idx && at_idx == idx).then(|| [i, c.saturating_sub(cost), 0])
        }
        Algorithm::SlidingWindowCounter => {
            let (i, c) = get(0).zip(get(1))?;
            let p = get(2).unwrap_or(0);
            if i == at_idx && at_idx + 1 >= idx {
                Some([i, c.saturating_sub(cost), p])
            } else if i == at_idx + 1 {
                // Stored as the previous count of the window after the call's, whatever `now`
                // is (a refund at a pinned time before that window still finds it; later, the
                // count weighs nowhere and changing it is moot).
                Some([i, c, p.saturating_sub(cost)])
            } else {
                None
            }
        }
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra | Algorithm::SlidingWindow => {
            let (e, f) = get(0).zip(get(1))?;
            let n = u128::from(count);
            let empty_n = u128::from(e) * n + u128::from(f);
            let now_n = u128::from(now) * n;
            // A full bucket drains in cap · T: the call's units are gone by then, whatever
            // came after them.
            let drained = u128::from(now.saturating_sub(at)) * n >= u128::from(rate.cap) * u128::from(w);
            if empty_n <= now_n || drained {
                return None;
            }
            let back = empty_n.saturating_sub(u128::from(cost) * u128::from(w)).max(now_n);
            Some([(back / n) as u64, (back % n) as u64, 0])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_spaces_calls() {
        // 10 per second: emission interval 100ms, burst 10.
        let (w, count) = (1_000_000, 10);
        let mut state = vec![None, None];
        let now = 5_000_000_000_000_000;
        for i in 0..10 {
            let s = step(Algorithm::Gcra, Rate { w, count, cap: count, months: 0 }, now, 1, &state, false);
            assert!(s.allowed, "call {i} fits the burst");
            assert_eq!(s.left, 9 - i);
            state = vec![Some(s.state[0]), Some(s.state[1])];
        }
        let s = step(Algorithm::Gcra, Rate { w, count, cap: count, months: 0 }, now, 1, &state, false);
        assert!(!s.allowed);
        assert_eq!(s.wait, 100_000);
    }

    #[test]
    fn a_third_of_a_microsecond_is_waited_in_full() {
        // 3 per µs-second: T = 333 333 + 1/3 µs. After one call of a burst of 1, the next passes
        // only once the whole interval has drained: 333 334 µs, not 333 333.
        let (w, count) = (1_000_000, 3);
        let s = step(Algorithm::Gcra, Rate { w, count, cap: 1, months: 0 }, 7, 1, &[None, None], false);
        assert!(s.allowed);
        let v = [Some(s.state[0]), Some(s.state[1])];
        let s = step(Algorithm::Gcra, Rate { w, count, cap: 1, months: 0 }, 7, 1, &v, false);
        assert_eq!((s.allowed, s.wait), (false, 333_334));
        assert!(!step(Algorithm::Gcra, Rate { w, count, cap: 1, months: 0 }, 7 + 333_333, 1, &v, false).allowed);
        assert!(step(Algorithm::Gcra, Rate { w, count, cap: 1, months: 0 }, 7 + 333_334, 1, &v, false).allowed);
    }
}
