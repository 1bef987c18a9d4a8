//! The local reserves of `sync` limits (hot keys): units a process took from the store in one
//! batch and hands out without asking it, for at most one interval.
//!
//! A batch is an ordinary decision of the store with the batch as its cost, so every algorithm
//! counts it exactly as it counts a call; what is approximate is only *when* the units are
//! spent: up to one interval after the store counted them. Each process holds at most one live
//! reserve per key, of at most `cap` units (what the tightest rule earns in one interval), and a reserve lives at most one interval.
//! So over any span, admissions exceed what the exact algorithm allows by at most the units P
//! processes can hold at its start: `P × cap` (see docs/design.md). Units a reserve did not hand
//! out before it expired stay counted (they are not given back): the other error, refusing a
//! little early, is bounded the same way.

use crate::rt::lock::lock;
use hashlink::LruCache;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

/// Reserves kept per shard, least recently used forgotten first: keys of many subjects come
/// and go, a flood of new ones must not grow the process, and a forgotten reserve costs only
/// its units (they stay counted in the store: the subject is refused a little early at most).
const PER_SHARD: usize = 8192;
const SHARDS: usize = 8;
/// The most reserves one `sync` limit keeps (65 536, as docs/configuration.md states).
#[cfg(test)]
const MAX_RESERVES: usize = PER_SHARD * SHARDS;

type Shard = LruCache<Vec<u8>, Reserve>;
/// How long a fill may be on its way before another call may start one (µs): a caller that
/// dropped its future mid-fill never reports, and the key must not stay in exact mode for it.
/// Longer than any store timeout worth having.
const FILL_LIMIT_US: u64 = 2_000_000;

/// One key's reserve.
#[derive(Debug, Default)]
struct Reserve {
    /// Units left to hand out.
    units: u64,
    /// Until when (µs) the units may be handed out.
    until_us: u64,
    /// Until when (µs) the store refused even a single call: refused here without asking.
    refused_until_us: u64,
    /// The size of the next batch (grows while reserves run out within their interval).
    batch: u64,
    /// Units handed out from the current reserve (the demand, to size the next batch).
    used: u64,
    /// Until when (µs) a batch is on its way: other calls meanwhile go to the store one by one,
    /// so that a process never holds two batches of one key (0: none is).
    asking_until_us: u64,
    /// The store's remaining quota after the last batch plus the batch, for headers, and the
    /// rule it was of (the tightest).
    remaining: u64,
    rule: usize,
}

/// What a call gets from a key's reserve.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Taken from the reserve: no store call. `remaining` is the store's count after the last
    /// batch, less what this process handed out since (an estimate for headers).
    Taken { remaining: u64, rule: usize },
    /// Refused until then (µs) by that rule: the store refused this much not long ago.
    Refused { until_us: u64, rule: usize },
    /// Ask the store for a batch of this many units (at least the call's cost); report the
    /// answer with [`Reserves::filled`] or [`Reserves::failed`].
    Fill { batch: u64 },
    /// Another call is filling the reserve: decide this one in the store, exactly.
    Exact,
}

/// The reserves of one `sync` limit, by subject key.
#[derive(Debug)]
pub(crate) struct Reserves {
    shards: [Mutex<Shard>; SHARDS],
    /// Picks a key's shard (keyed, as the maps inside are: subjects are chosen by clients).
    spread: RandomState,
    interval_us: u64,
    cap: u64,
}

impl Reserves {
    /// Reserves lasting `interval_us`, of at most `cap` units each (at least 1).
    pub(crate) fn new(interval_us: u64, cap: u64) -> Reserves {
        Reserves {
            shards: std::array::from_fn(|_| Mutex::new(LruCache::new(PER_SHARD))),
            spread: RandomState::new(),
            interval_us,
            cap: cap.max(1),
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        &self.shards[(self.spread.hash_one(key) % SHARDS as u64) as usize]
    }

    /// Takes `cost` units for `key` at `now_us`, or says what to do instead.
    pub(crate) fn take(&self, key: &[u8], cost: u64, now_us: u64) -> Take {
        let mut map = lock(self.shard(key));
        let Some(r) = entry(&mut map, key) else { return Take::Exact };
        if now_us < r.refused_until_us {
            return Take::Refused { until_us: r.refused_until_us, rule: r.rule };
        }
        if now_us < r.until_us && r.units >= cost {
            r.units -= cost;
            r.used += cost;
            return Take::Taken { remaining: r.remaining.saturating_sub(r.used), rule: r.rule };
        }
        if r.asking_until_us > now_us {
            return Take::Exact;
        }
        // The next batch follows the demand: twice the last one when it ran out within its
        // interval, what was used when it expired with units left.
        r.batch = if r.batch == 0 {
            cost
        } else if now_us < r.until_us {
            r.batch.saturating_mul(2)
        } else {
            r.used
        };
        r.batch = r.batch.clamp(1, self.cap).max(cost);
        r.asking_until_us = now_us.saturating_add(FILL_LIMIT_US);
        Take::Fill { batch: r.batch }
    }

    /// The store admitted a batch of `batch` units at `now_us` (the call that asked takes `cost`
    /// of them), leaving `remaining` in its tightest rule, `rule`. The units left before are
    /// dropped: one live reserve per key and process.
    pub(crate) fn filled(&self, key: &[u8], batch: u64, cost: u64, remaining: u64, rule: usize, now_us: u64) {
        let mut map = lock(self.shard(key));
        let Some(r) = entry(&mut map, key) else { return };
        r.asking_until_us = 0;
        r.units = batch.saturating_sub(cost);
        r.used = cost;
        r.until_us = now_us.saturating_add(self.interval_us);
        r.remaining = remaining.saturating_add(batch);
        r.rule = rule;
    }

    /// The store refused the batch (`batch` units): a smaller one is asked next, and when it
    /// refused the call's own cost, the key is refused here until then (µs) by that rule.
    pub(crate) fn refused(&self, key: &[u8], batch: u64, cost: u64, until: Option<(u64, usize)>) {
        let mut map = lock(self.shard(key));
        let Some(r) = entry(&mut map, key) else { return };
        r.asking_until_us = 0;
        r.units = 0;
        r.batch = cost.max(batch / 2);
        if let Some((until_us, rule)) = until {
            r.refused_until_us = until_us;
            r.rule = rule;
        }
    }

    /// The store refused a call asked alone (while another filled the reserve): the key is
    /// refused here until then (µs) by that rule.
    pub(crate) fn refuse_until(&self, key: &[u8], until_us: u64, rule: usize) {
        let mut map = lock(self.shard(key));
        let Some(r) = entry(&mut map, key) else { return };
        r.refused_until_us = r.refused_until_us.max(until_us);
        r.rule = rule;
    }

    /// The store did not answer: nothing was reserved.
    pub(crate) fn failed(&self, key: &[u8]) {
        if let Some(r) = lock(self.shard(key)).get_mut(key) {
            r.asking_until_us = 0;
        }
    }

    /// Gives back `cost` units taken by a call another limit refused (all limits pass, or none
    /// counts), if the reserve they came from still lives.
    pub(crate) fn give_back(&self, key: &[u8], cost: u64, now_us: u64) {
        if let Some(r) = lock(self.shard(key)).get_mut(key) {
            if now_us < r.until_us {
                r.units = r.units.saturating_add(cost);
                r.used = r.used.saturating_sub(cost);
            }
        }
    }

    /// Forgets `key`'s reserve (a reset of its counts).
    pub(crate) fn forget(&self, key: &[u8]) {
        lock(self.shard(key)).remove(key);
    }
}

/// `key`'s reserve, made the shard's most recently used (a new one, if none: the key is copied
/// only then, so a hot key's calls find it without copying it).
fn entry<'a>(map: &'a mut Shard, key: &[u8]) -> Option<&'a mut Reserve> {
    if !map.contains_key(key) {
        map.insert(key.to_vec(), Reserve::default());
    }
    map.get_mut(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_keys_keeps_at_most_the_bound_and_the_hot_key() {
        let r = Reserves::new(1_000_000, 8);
        assert_eq!(r.take(b"hot", 1, 0), Take::Fill { batch: 1 });
        r.filled(b"hot", 8, 1, 100, 0, 0);
        for i in 0..(MAX_RESERVES as u64 * 2) {
            let _ = r.take(&i.to_le_bytes(), 1, 1);
            if i % 1000 == 0 {
                // The hot key keeps calling: its reserve is never the one forgotten (a new one
                // would ask for a batch of 1, not the doubled one).
                match r.take(b"hot", 1, 1) {
                    Take::Taken { .. } => {}
                    Take::Fill { batch } => {
                        assert!(batch > 1, "the hot reserve was forgotten");
                        r.filled(b"hot", batch, 1, 100, 0, 1);
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        let held: usize = r.shards.iter().map(|s| lock(s).len()).sum();
        assert!(held <= MAX_RESERVES, "{held} reserves held");
        assert!(lock(r.shard(b"hot")).contains_key(&b"hot"[..]));
    }

    #[test]
    fn batches_follow_the_demand_within_the_cap() {
        let r = Reserves::new(1_000, 8);
        assert_eq!(r.take(b"k", 1, 0), Take::Fill { batch: 1 });
        // While a batch is asked for, other calls go to the store one by one.
        assert_eq!(r.take(b"k", 1, 0), Take::Exact);
        r.filled(b"k", 1, 1, 99, 0, 0);
        // Ran out within the interval: the next batch doubles, up to the cap.
        assert_eq!(r.take(b"k", 1, 10), Take::Fill { batch: 2 });
        r.filled(b"k", 2, 1, 97, 0, 10);
        assert_eq!(r.take(b"k", 1, 20), Take::Taken { remaining: 97, rule: 0 });
        for want in [4, 8, 8] {
            assert_eq!(r.take(b"k", 1, 30), Take::Fill { batch: want });
            r.filled(b"k", want, want, 0, 0, 30);
        }
        // Expired with units left: the next batch is what was used.
        r.filled(b"k", 8, 1, 50, 0, 40);
        assert_eq!(r.take(b"k", 1, 50), Take::Taken { remaining: 56, rule: 0 });
        assert_eq!(r.take(b"k", 1, 2_000), Take::Fill { batch: 2 });
        // A cost above the cap is asked as one batch of that cost.
        r.failed(b"k");
        assert_eq!(r.take(b"k", 20, 2_000), Take::Fill { batch: 20 });
    }

    #[test]
    fn a_fill_that_never_reports_stops_holding_the_key_in_exact_mode() {
        // The caller that asked dropped its future: no `filled`, `refused` or `failed` comes.
        let r = Reserves::new(1_000, 8);
        assert_eq!(r.take(b"k", 1, 0), Take::Fill { batch: 1 });
        assert_eq!(r.take(b"k", 1, FILL_LIMIT_US - 1), Take::Exact);
        assert_eq!(r.take(b"k", 1, FILL_LIMIT_US), Take::Fill { batch: 1 });
    }

    #[test]
    fn a_refusal_of_the_cost_itself_is_kept_until_its_end() {
        let r = Reserves::new(1_000, 8);
        assert_eq!(r.take(b"k", 1, 0), Take::Fill { batch: 1 });
        r.refused(b"k", 1, 1, Some((500, 0)));
        assert_eq!(r.take(b"k", 1, 499), Take::Refused { until_us: 500, rule: 0 });
        assert_eq!(r.take(b"k", 1, 500), Take::Fill { batch: 1 });
    }

    #[test]
    fn given_back_units_return_to_a_live_reserve_only() {
        let r = Reserves::new(1_000, 8);
        r.take(b"k", 1, 0);
        r.filled(b"k", 4, 1, 10, 0, 0);
        assert_eq!(r.take(b"k", 3, 1), Take::Taken { remaining: 10, rule: 0 });
        r.give_back(b"k", 3, 2);
        assert_eq!(r.take(b"k", 3, 3), Take::Taken { remaining: 10, rule: 0 });
        r.give_back(b"k", 3, 5_000);
        assert!(matches!(r.take(b"k", 3, 5_001), Take::Fill { .. }));
    }
}
