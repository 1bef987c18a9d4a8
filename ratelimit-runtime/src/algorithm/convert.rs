//! A bucket's level carried from the rule it was kept under to another one (a runtime override
//! set, changed or ended): the units in the bucket now stay the units in the bucket, so that a
//! raised limit admits at once and a lowered one refuses at once a subject already over it.
//! (The Lua part, bucket.lua, holds the same definition; see docs/design.md, "Runtime overrides".)

use super::Rate;

/// The stored state (e, f) of a bucket or GCRA kept under `from`, as `to` reads it at `now`:
/// the same units used, `None` when the bucket is empty (nothing to carry).
///
/// With E = e + f / n₀ the instant the bucket is empty, the units in it are
/// u = (E - now) · n₀ / w₀ (a fraction). Under `to` they are a span of u · w₁ / n₁ µs, so the
/// new instant, in units of 1/n₁ µs, is now · n₁ + ⌈(E - now) · n₀ · w₁ / w₀⌉: rounded up (a
/// conversion never frees a fraction of a unit), and at most `to`'s capacity plus its count,
/// the debt bound every bucket keeps (a subject far over a lowered limit is refused for at most
/// a window past full, and the stores' arithmetic stays within its bounds).
pub(crate) fn carry_level(from: Rate, to: Rate, now: u64, e: u64, f: u64) -> Option<[u64; 3]> {
    let (w0, n0) = (u128::from(from.w), u128::from(from.count));
    let (w1, n1) = (u128::from(to.w), u128::from(to.count));
    if w0 == 0 || n0 == 0 || n1 == 0 {
        return None;
    }
    // The level under `from`, in units of 1/n₀ µs: u · w₀.
    let level = (u128::from(e) * n0 + u128::from(f)).checked_sub(u128::from(now) * n0).filter(|l| *l > 0)?;
    // Clamped first, so that the product below stays small: u <= cap₁ + n₁.
    let most = (u128::from(to.cap) + n1) * w0;
    let level = level.min(most);
    let carried = (level * w1).div_ceil(w0);
    let empty = u128::from(now) * n1 + carried;
    Some([(empty / n1) as u64, (empty % n1) as u64, 0])
}

#[cfg(test)]
mod tests {
    use super::super::{step, Algorithm};
    use super::*;

    fn rate(w: u64, count: u64) -> Rate {
        Rate { w, count, cap: count, months: 0 }
    }

    /// Takes `n` units one by one under `r` at `now`; the state after.
    fn fill(r: Rate, now: u64, n: u64) -> [Option<u64>; 2] {
        let mut v = [None, None];
        for _ in 0..n {
            let s = step(Algorithm::Gcra, r, now, 1, &v, false);
            assert!(s.allowed);
            v = [Some(s.state[0]), Some(s.state[1])];
        }
        v
    }

    fn used(r: Rate, now: u64, v: [Option<u64>; 2]) -> u64 {
        r.cap - step(Algorithm::Gcra, r, now, 0, &v, true).left
    }

    #[test]
    fn a_raised_limit_admits_at_once_and_a_lowered_one_refuses() {
        let now = 1_700_000_000_000_000;
        let (code, raised, lowered) = (rate(10_000_000, 2), rate(10_000_000, 100), rate(10_000_000, 3));
        // At the code's limit: refused under it, 98 more under the raised rule at once.
        let v = fill(code, now, 2);
        assert!(!step(Algorithm::Gcra, code, now, 1, &v, false).allowed);
        let [e, f] = v.map(Option::unwrap);
        let c = carry_level(code, raised, now, e, f).unwrap();
        assert_eq!(used(raised, now, [Some(c[0]), Some(c[1])]), 2);
        // 5 used under the raised rule, then lowered to 3: refused at once.
        let v = fill(raised, now, 5);
        let [e, f] = v.map(Option::unwrap);
        let c = carry_level(raised, lowered, now, e, f).unwrap();
        assert!(!step(Algorithm::Gcra, lowered, now, 1, &[Some(c[0]), Some(c[1])], false).allowed);
        // Back to the code's rule: the 5 carried back, clamped to cap + count = 4.
        let c = carry_level(raised, code, now, e, f).unwrap();
        assert_eq!(c, [now + 20_000_000, 0, 0]);
    }

    #[test]
    fn fractions_round_up_and_an_empty_bucket_carries_nothing() {
        let now = 5_000_000;
        // One unit is one unit: 333 333 1/3 µs of 3 per second, 1 s of 7 per 7 s.
        let c = carry_level(rate(1_000_000, 3), rate(7_000_000, 7), now, now + 333_333, 1).unwrap();
        assert_eq!(c, [now + 1_000_000, 0, 0]);
        // 1/3 µs of 3 per second is a millionth of a unit: 1.5/7 µs of 7 per 1.5 s, rounded up
        // to 2/7 µs.
        let c = carry_level(rate(1_000_000, 3), rate(1_500_000, 7), now, now, 1).unwrap();
        assert_eq!(c, [now, 2, 0]);
        assert_eq!(carry_level(rate(1_000_000, 3), rate(1_000_000, 9), now, now - 5, 2), None);
        assert_eq!(carry_level(rate(1_000_000, 3), rate(1_000_000, 9), now, now, 0), None);
    }
}
