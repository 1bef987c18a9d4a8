//! Settling a call to more units than it was admitted with: the extra units' definition in each
//! O(1) algorithm, in exact integers (the Lua parts hold the same, and the reference model in
//! tests/support/definition.rs the plain statement). Fewer units than admitted are a refund of
//! the difference ([`refund`](super::refund)).
//!
//! Extra units are taken whatever the limit says (the call already ran): they are debt, which
//! refuses later calls until it has left. Debt is bounded so that the stores' arithmetic stays
//! exact: a rule never holds more than its capacity plus its count (a bucket drains its debt in
//! at most one window past full; a window counts at most twice its count).

use super::{Algorithm, Rate};

/// Takes `more` extra units (at least 1) for a call admitted at `at` (µs), at `now`, in one
/// rule of an O(1) algorithm with stored values `v`: the new values, or `None` when the call's
/// units no longer count (nothing to write).
///
/// - fixed window: the window's count grows by `more` (at most to twice the count) if the
///   call's window is still the current one;
/// - sliding window counter: the count of the call's window grows by `more` (at most to twice
///   the count) while that window is the current or the previous one;
/// - buckets and GCRA: the units are poured in now: the instant the bucket is empty, E (now when
///   it is empty or absent), moves to `max(E, now) + more · T`, at most `now + cap · T + w`.
#[inline]
pub(crate) fn charge(alg: Algorithm, rate: Rate, now: u64, at: u64, more: u64, v: &[Option<u64>]) -> Option<[u64; 3]> {
    let Rate { w, count, cap, .. } = rate;
    let get = |i: usize| v.get(i).copied().flatten();
    // Window indexes: of `w` µs, or of calendar months (fixed windows only).
    let (idx, at_idx) = (rate.window_at(now).0, rate.window_at(at).0);
    let most = count.saturating_mul(2);
    match alg {
        Algorithm::FixedWindow => {
            let (i, c) = get(0).zip(get(1))?;
            (i == at_idx && at_idx == idx).then(|| [i, c.saturating_add(more).min(most), 0])
        }
        Algorithm::SlidingWindowCounter => {
            let (i, c) = get(0).zip(get(1))?;
            let p = get(2).unwrap_or(0);
            if i == at_idx && at_idx + 1 >= idx {
                Some([i, c.saturating_add(more).min(most), p])
            } else if i == at_idx + 1 {
                Some([i, c, p.saturating_add(more).min(most)])
            } else {
                None
            }
        }
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra | Algorithm::SlidingWindow => {
            let (w, n) = (u128::from(w), u128::from(count));
            let now_n = u128::from(now) * n;
            let empty_n = get(0).zip(get(1)).map_or(0, |(e, f)| u128::from(e) * n + u128::from(f));
            let from = empty_n.max(now_n);
            // Past cap + count units the sum is clamped anyway: clamping `more` first keeps the
            // product small.
            let more = u128::from(more.min(cap.saturating_add(count)));
            let bound = now_n + u128::from(cap) * w + w * n;
            let new = (from + more * w).min(bound).max(empty_n);
            Some([(new / n) as u64, (new % n) as u64, 0])
        }
    }
}

/// When a bucket's new state (as [`charge`] leaves it) is empty again: its expiry, µs.
#[inline]
pub(crate) fn empty_at(state: [u64; 3]) -> u64 {
    state[0] + u64::from(state[1] != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debt_is_poured_in_now_and_bounded_by_a_window() {
        // 10 per second: T = 100 ms; capacity 10.
        let rate = Rate { w: 1_000_000, count: 10, cap: 10, months: 0 };
        let now = 50_000_000;
        // Absent: empty now; 3 units: empty 300 ms from now.
        assert_eq!(charge(Algorithm::Gcra, rate, now, now, 3, &[None, None]), Some([now + 300_000, 0, 0]));
        // A huge debt: at most cap · T + w = 2 s past now.
        assert_eq!(charge(Algorithm::Gcra, rate, now, now, u64::MAX, &[None, None]), Some([now + 2_000_000, 0, 0]));
        // A fixed window grows up to twice its count, only in the call's window.
        let v = [Some(now / 1_000_000), Some(7)];
        assert_eq!(charge(Algorithm::FixedWindow, rate, now, now, 100, &v), Some([50, 20, 0]));
        assert_eq!(charge(Algorithm::FixedWindow, rate, now + 1_000_000, now, 1, &v), None);
    }
}
