//! A sliding window's log in memory: one subject's admitted units, in time order.
//!
//! The exact sliding window must know when each unit leaves, so the log keeps an entry per
//! admission for the longest window. While every entry holds one unit (every admitted call cost
//! 1, the usual case) only the entries' times are kept, 8 bytes each: entry `i`'s cumulative
//! units are the log's base plus `i + 1`. The first admission of more units turns the log into
//! (time, cumulative units) pairs, 16 bytes each, until the log empties.

use std::collections::VecDeque;

/// One subject's log: admitted units in time order.
#[derive(Default)]
pub(super) struct Log {
    entries: Entries,
    /// Cumulative units of everything trimmed so far.
    base: u64,
    /// Longest window of the rules using this log: entries older than it are dropped.
    pub(super) longest_us: u64,
    /// Copies of the oldest entry's time and of the newest entry (meaningful while `entries`
    /// is not empty): a decision reads them here, not at both ends of a long deque's buffer
    /// (two cache misses per call).
    oldest_t: u64,
    newest: (u64, u64),
}

/// A log's entries, oldest first.
enum Entries {
    /// Times (µs) of entries of one unit each.
    Units(VecDeque<u64>),
    /// (time µs, cumulative units up to and including this entry).
    Weighted(VecDeque<(u64, u64)>),
}

impl Default for Entries {
    fn default() -> Self {
        Entries::Units(VecDeque::new())
    }
}

impl Entries {
    fn len(&self) -> usize {
        match self {
            Entries::Units(v) => v.len(),
            Entries::Weighted(v) => v.len(),
        }
    }

    fn time(&self, i: usize) -> Option<u64> {
        match self {
            Entries::Units(v) => v.get(i).copied(),
            Entries::Weighted(v) => v.get(i).map(|e| e.0),
        }
    }

    /// Cumulative units up to and including entry `i`, in a log whose trimmed units are `base`.
    fn cum(&self, i: usize, base: u64) -> Option<u64> {
        match self {
            Entries::Units(v) => (i < v.len()).then(|| base + i as u64 + 1),
            Entries::Weighted(v) => v.get(i).map(|e| e.1),
        }
    }

    /// Units of entry `i` alone.
    fn units(&self, i: usize, base: u64) -> u64 {
        let before = if i == 0 { Some(base) } else { self.cum(i - 1, base) };
        match (self.cum(i, base), before) {
            (Some(cum), Some(before)) => cum - before,
            _ => 0,
        }
    }

    /// The first index whose time fails `pred` (times never decrease).
    fn partition_time(&self, pred: impl Fn(u64) -> bool) -> usize {
        match self {
            Entries::Units(v) => v.partition_point(|&t| pred(t)),
            Entries::Weighted(v) => v.partition_point(|&(t, _)| pred(t)),
        }
    }

    /// The first index `i >= start` whose units from the window start (`before`: the cumulative
    /// units before entry `start`) reach `need` (at least 1); the length when none does.
    fn first_reaching(&self, start: usize, before: u64, need: u64, base: u64) -> usize {
        match self {
            // Entry `i` holds cumulative units `base + i + 1`, and `before` is `base + start`.
            Entries::Units(v) => {
                let i = (before - base).saturating_add(need.saturating_sub(1));
                usize::try_from(i).map_or(v.len(), |i| i.min(v.len()))
            }
            Entries::Weighted(v) => {
                let (mut lo, mut hi) = (start, v.len());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if v[mid].1 - before < need {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }

    /// Removes the oldest entry; its cumulative units.
    fn pop_front(&mut self, base: u64) -> Option<u64> {
        match self {
            Entries::Units(v) => v.pop_front().map(|_| base + 1),
            Entries::Weighted(v) => v.pop_front().map(|e| e.1),
        }
    }

    /// Appends an entry of time `t` and cumulative units `cum` (times never decrease).
    fn push(&mut self, t: u64, cum: u64, base: u64) {
        if let Entries::Weighted(v) = self {
            if v.is_empty() {
                *self = Entries::default();
            }
        }
        let len = self.len() as u64;
        match self {
            Entries::Units(v) if cum == base + len + 1 => {
                v.push_back(t);
                if let Some(entry) = v.back() {
                    prefetch_line_after(entry);
                }
            }
            Entries::Units(v) => {
                let mut pairs: VecDeque<(u64, u64)> = v.iter().zip(1..).map(|(&t, i)| (t, base + i)).collect();
                pairs.push_back((t, cum));
                *self = Entries::Weighted(pairs);
            }
            Entries::Weighted(v) => {
                v.push_back((t, cum));
                if let Some(entry) = v.back() {
                    prefetch_line_after(entry);
                }
            }
        }
    }

    /// Inserts an entry of time `t` and cumulative units `cum` (`units` of its own) before entry
    /// `i`, whose cumulative units, and those of every later entry, grow by `units`.
    fn insert(&mut self, i: usize, t: u64, cum: u64, units: u64, base: u64) {
        if let Entries::Units(v) = self {
            *self = Entries::Weighted(v.iter().zip(1..).map(|(&t, k)| (t, base + k)).collect());
        }
        if let Entries::Weighted(v) = self {
            for entry in v.range_mut(i..) {
                entry.1 += units;
            }
            v.insert(i, (t, cum));
        }
    }

    /// Takes `cut` (at least 1) of entry `i`'s `units` (a refund), removing the entry when it has
    /// none left.
    fn take(&mut self, i: usize, cut: u64, units: u64) {
        match self {
            // An entry of one unit loses it whole; later entries' cumulative units drop by one as
            // their index does.
            Entries::Units(v) => {
                v.remove(i);
            }
            Entries::Weighted(v) => {
                for entry in v.range_mut(i..) {
                    entry.1 -= cut;
                }
                if cut == units {
                    v.remove(i);
                }
            }
        }
    }
}

impl Log {
    /// Drops the entries that left the longest window.
    pub(super) fn trim(&mut self, now: u64) {
        let cutoff = now.saturating_sub(self.longest_us);
        if self.entries.len() == 0 || self.oldest_t > cutoff {
            return;
        }
        while let Some(t) = self.entries.time(0) {
            if t > cutoff {
                self.oldest_t = t;
                break;
            }
            match self.entries.pop_front(self.base) {
                Some(cum) => self.base = cum,
                None => break,
            }
        }
    }

    /// Records an admitted call of `cost` units at `now` (the newest time; a call of cost 0
    /// leaves nothing to record).
    #[inline(always)]
    pub(super) fn admit(&mut self, now: u64, cost: u64) {
        if cost > 0 {
            self.push(now, self.total() + cost);
        }
    }

    /// Appends an entry (times never decrease).
    pub(super) fn push(&mut self, t: u64, cum: u64) {
        if self.entries.len() == 0 {
            self.oldest_t = t;
        }
        self.entries.push(t, cum, self.base);
        self.newest = (t, cum);
    }

    /// The newest entry.
    pub(super) fn back(&self) -> Option<(u64, u64)> {
        (self.entries.len() != 0).then_some(self.newest)
    }

    /// The newest entry's time (0 when empty).
    pub(super) fn newest_time(&self) -> u64 {
        self.back().map_or(0, |e| e.0)
    }

    /// Cumulative units of the whole log.
    pub(super) fn total(&self) -> u64 {
        self.back().map_or(self.base, |e| e.1)
    }

    /// Cumulative units of everything trimmed: those before the first entry.
    pub(super) fn base(&self) -> u64 {
        self.base
    }

    /// Index of the first entry inside a window of `w` µs ending at `now`, and the cumulative
    /// units before it.
    pub(super) fn window_start(&self, now: u64, w: u64) -> (usize, u64) {
        let cutoff = now.saturating_sub(w);
        let i = self.entries.partition_time(|t| t <= cutoff);
        let before = if i == 0 { self.base } else { self.entries.cum(i - 1, self.base).unwrap_or(self.base) };
        (i, before)
    }

    /// The time of the first entry `i >= start` whose units from the window start (`before`)
    /// reach `need`: when the `need`th unit of the window was admitted.
    pub(super) fn nth_time(&self, start: usize, before: u64, need: u64) -> Option<u64> {
        self.entries.time(self.entries.first_reaching(start, before, need, self.base))
    }

    pub(super) fn expired(&self, now: u64) -> bool {
        self.back().is_none_or(|(t, _)| t + self.longest_us <= now)
    }

    /// Removes up to `cost` units admitted at `at` (a refund): calls admitted at the same µs are
    /// alike, so any of that instant's units are the call's. Nothing once they have left.
    pub(super) fn remove(&mut self, at: u64, cost: u64) {
        let lo = self.entries.partition_time(|t| t < at);
        let hi = self.entries.partition_time(|t| t <= at);
        let (mut left, mut j) = (cost, hi);
        while left > 0 && j > lo {
            j -= 1;
            let units = self.entries.units(j, self.base);
            let cut = units.min(left);
            self.entries.take(j, cut, units);
            left -= cut;
        }
        let last = self.entries.len().checked_sub(1);
        let newest = last.and_then(|i| Some((self.entries.time(i)?, self.entries.cum(i, self.base)?)));
        if let (Some(oldest), Some(newest)) = (self.entries.time(0), newest) {
            self.oldest_t = oldest;
            self.newest = newest;
        }
    }

    /// Adds `units` (at least 1) admitted at `at` (a call settled to more than it took): after
    /// the entries of that instant, as an admission then would have put them.
    pub(super) fn add(&mut self, at: u64, units: u64) {
        if units == 0 {
            return;
        }
        let i = self.entries.partition_time(|t| t <= at);
        if i == self.entries.len() {
            return self.push(at, self.total() + units);
        }
        let before = if i == 0 { self.base } else { self.entries.cum(i - 1, self.base).unwrap_or(self.base) };
        self.entries.insert(i, at, before + units, units, self.base);
        if let Some(t) = self.entries.time(0) {
            self.oldest_t = t;
        }
        self.newest.1 += units;
    }
}

/// Asks the CPU to load the cache line after `entry`'s, where this log's next entries go.
///
/// Why: a subject's log grows into memory no one has touched, one new cache line every few
/// entries, and that write must reach the cache before the shard's lock can be released (the
/// release is a locked instruction, which waits for every earlier store): a miss to memory,
/// about a third of an in-memory sliding-window decision under load. Loaded now, the line is in
/// the cache when the subject's next call writes it.
#[inline(always)]
fn prefetch_line_after<T>(entry: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let next = (entry as *const T).cast::<i8>().wrapping_add(64);
        // SAFETY: a prefetch is only a hint: it never faults and changes nothing the program
        // can observe, whatever the address (`next` may lie past the buffer). SSE, which the
        // instruction needs, is part of every x86_64 target.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(next) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = entry;
}

#[cfg(test)]
mod tests {
    use super::Log;

    /// The same admissions and refunds through a log that stays in units and one made of pairs
    /// from its first entry (a 2-unit entry refunded down to 1) read alike everywhere.
    #[test]
    fn units_and_pairs_read_alike() {
        let (mut units, mut pairs) =
            (Log { longest_us: 100, ..Log::default() }, Log { longest_us: 100, ..Log::default() });
        pairs.push(1, 2);
        pairs.remove(1, 1);
        units.push(1, 1);
        for t in [5, 5, 9, 20, 20, 20, 31, 50] {
            for log in [&mut units, &mut pairs] {
                let cum = log.total() + 1;
                log.push(t, cum);
            }
        }
        for log in [&mut units, &mut pairs] {
            log.remove(20, 2);
            log.trim(106);
        }
        assert!(matches!(units.entries, super::Entries::Units(_)));
        assert!(matches!(pairs.entries, super::Entries::Weighted(_)));
        for log in [&units, &pairs] {
            assert_eq!((log.base(), log.total(), log.back()), (3, 7, Some((50, 7))));
            assert_eq!(log.window_start(106, 100), (0, 3));
            assert_eq!(log.window_start(125, 100), (2, 5));
            assert_eq!(log.nth_time(0, 3, 1), Some(9));
            assert_eq!(log.nth_time(0, 3, 3), Some(31));
            assert_eq!(log.nth_time(2, 5, 2), Some(50));
            assert_eq!(log.nth_time(2, 5, 3), None);
        }
    }
}
