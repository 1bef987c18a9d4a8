//! The counting algorithms (spec §6), and the in-memory twin of the script's O(1) steps.
//!
//! Each algorithm is one branch of the decision script (`store/decide.lua`); the functions here
//! repeat its arithmetic operation for operation in `f64` (Lua's only number type), so the
//! in-memory store decides exactly as Redis does. The differential tests hold them to that.

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
            Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::LeakyBucket => 2,
            Algorithm::Gcra => 1,
        }
    }
}

/// The outcome of one rule of an O(1) algorithm (the script's `STEP` functions).
pub(crate) struct Step {
    /// Units left after this call; negative when the rule denies.
    pub left: f64,
    /// When denied, the wait; else the reset.
    pub wait: f64,
    /// The rule's new stored values (written only if the whole call is allowed).
    pub state: [f64; 3],
    /// How long the new state matters, in µs.
    pub ttl: f64,
}

/// One rule of an O(1) algorithm: `v` holds its stored values (`None` when absent). Inlined, so
/// that a caller with a constant `alg` keeps only its branch.
#[inline]
pub(crate) fn step(alg: Algorithm, now: f64, cost: f64, w: f64, count: f64, cap: f64, v: &[Option<f64>]) -> Step {
    let get = |i: usize| v.get(i).copied().flatten();
    match alg {
        Algorithm::FixedWindow => {
            let idx = (now / w).floor();
            let used = if get(0) == Some(idx) { get(1).unwrap_or(0.0) } else { 0.0 };
            let left = count - used - cost;
            let mut wait = (idx + 1.0) * w - now;
            if left < 0.0 && cost > count {
                wait = w;
            }
            Step { left, wait, state: [idx, used + cost, 0.0], ttl: (idx + 1.0) * w - now }
        }
        Algorithm::SlidingWindowCounter => {
            let idx = (now / w).floor();
            let (mut cur, mut prev) = (0.0, 0.0);
            match get(0) {
                Some(i) if i == idx => (cur, prev) = (get(1).unwrap_or(0.0), get(2).unwrap_or(0.0)),
                Some(i) if i == idx - 1.0 => prev = get(1).unwrap_or(0.0),
                _ => {}
            }
            let elapsed = now - idx * w;
            let est = prev * (w - elapsed) / w + cur;
            let left = (count - est - cost).floor();
            let mut wait = idx * w + w - now;
            if count - est - cost < 0.0 {
                wait = if cost > count {
                    w
                } else if cur + cost > count {
                    idx * w + w + (w * (1.0 - (count - cost) / (cur + 0.0))).ceil() - now
                } else {
                    idx * w + (w * (1.0 - (count - cost - cur) / prev)).ceil() - now
                };
            }
            Step { left, wait, state: [idx, cur + cost, prev], ttl: idx * w + 2.0 * w - now }
        }
        Algorithm::TokenBucket => {
            let tokens = match (get(0), get(1)) {
                (Some(t), Some(s)) => cap.min(t + (now - s) * count / w),
                _ => cap,
            };
            let left = tokens - cost;
            let wait = if left < 0.0 {
                if cost > cap {
                    w
                } else {
                    ((cost - tokens) * w / count).ceil()
                }
            } else {
                ((cap - left) * w / count).ceil()
            };
            Step { left: left.floor(), wait, state: [left, now, 0.0], ttl: ((cap - left) * w / count).ceil() }
        }
        Algorithm::LeakyBucket => {
            let level = match (get(0), get(1)) {
                (Some(l), Some(s)) => (l - (now - s) * count / w).max(0.0),
                _ => 0.0,
            };
            let left = cap - level - cost;
            let wait = if left < 0.0 {
                if cost > cap {
                    w
                } else {
                    ((level + cost - cap) * w / count).ceil()
                }
            } else {
                ((level + cost) * w / count).ceil()
            };
            Step { left: left.floor(), wait, state: [level + cost, now, 0.0], ttl: ((level + cost) * w / count).ceil() }
        }
        Algorithm::Gcra | Algorithm::SlidingWindow => {
            let t = w / count;
            let tat = get(0).map_or(now, |a| a.max(now));
            let new_tat = tat + cost * t;
            let tau = cap * t;
            let left = ((tau - (new_tat - now)) / t).floor();
            let wait = if new_tat - now > tau {
                if cost > cap {
                    w
                } else {
                    (new_tat - tau - now).ceil()
                }
            } else {
                (new_tat - now).ceil()
            };
            Step { left, wait, state: [new_tat, 0.0, 0.0], ttl: new_tat - now }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_spaces_calls() {
        // 10 per second: emission interval 100ms, burst 10.
        let (w, count) = (1e6, 10.0);
        let mut state = vec![None];
        let now = 5e15;
        for i in 0..10 {
            let s = step(Algorithm::Gcra, now, 1.0, w, count, count, &state);
            assert!(s.left >= 0.0, "call {i} fits the burst");
            state = vec![Some(s.state[0])];
        }
        let s = step(Algorithm::Gcra, now, 1.0, w, count, count, &state);
        assert!(s.left < 0.0);
        assert_eq!(s.wait, 100_000.0);
    }
}
