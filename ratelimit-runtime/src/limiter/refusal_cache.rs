//! The local refusal cache: when the store refuses a call with retry-after `r`, the
//! same limiter refuses the same subjects at the same or a higher cost in this process until `r`
//! has passed, without a store call.
//!
//! Exact: a refusal of the sliding window, the buckets and GCRA stays one until its retry-after
//! whatever other callers do (they can only use more), and a cached refusal records nothing, as
//! the store's refusal would not. The one exception is a Redis Cluster: a call refused in one slot
//! gives back the units it took in the others (see `store/redis/cluster/slots.rs`), and that give-back can
//! make room, before a cached refusal's retry-after, for a subject the cache keeps refusing (at
//! most until that retry-after).
//!
//! Per process, bounded (LRU per shard, `hashlink`), sharded so that concurrent callers rarely meet on a
//! lock. Keys are the limiter's identity, the store's identity and the raw subject bytes: no
//! text is formatted, and a lookup allocates nothing (the entry keeps its key's bytes and is
//! compared against the call's subjects in place).

use crate::model::decision::Decision;
use crate::rt::hash::Prehashed;
use hashlink::LruCache;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

const SHARDS: usize = 64;

/// A time in µs, and whether it was pinned by the caller.
pub(crate) type At = (u64, bool);

/// A refusal remembered: until when (µs, on the clock the call was decided by), for which cost
/// and up, and which limit and rule refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// When the store said the call would fit (what the remaining retry-after counts down to).
    pub(crate) until_us: u64,
    /// When the cache stops answering: `until_us`, or a little before (see the limiter).
    pub(crate) lapse_us: u64,
    pub(crate) cost: u64,
    pub(crate) limit: usize,
    pub(crate) rule: usize,
    /// Decided at a pinned time (`Check::at`): answers only calls at pinned times, never calls on
    /// the clock (the two time lines need not meet).
    pub(crate) pinned: bool,
}

impl Refusal {
    /// The refusal a store's `decision`, decided at `at_us`, leaves standing (`None` when it
    /// admits nothing later calls could be answered with). `sliding`: the refusing limit is a
    /// sliding window, whose wait is exact; the O(1) algorithms compute theirs in floating
    /// point, rounded up to the µs, and redone later from the stored state it can come out a µs
    /// or two shorter: the cache stops answering that much early (the store decides those µs).
    pub(crate) fn of(decision: &Decision, sliding: bool, at_us: u64, cost: u64, pinned: bool) -> Option<Refusal> {
        if decision.allowed || decision.retry_after_us == 0 {
            return None;
        }
        let slack = if sliding { 0 } else { FLOAT_SLACK_US };
        let retry_us = decision.retry_after_us;
        let until_us = at_us.saturating_add(retry_us);
        Some(Refusal {
            until_us,
            lapse_us: until_us.saturating_sub(slack),
            cost,
            limit: decision.limit,
            rule: decision.rule,
            pinned,
        })
    }
}

/// How early a cached refusal of an O(1) algorithm lapses (see [`Refusal::of`]).
const FLOAT_SLACK_US: u64 = 2;

/// The identity of one limiter on one store: what a cache key starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    pub(crate) limiter: u64,
    pub(crate) store: usize,
}

/// A fresh identity for a set of limits (never reused in the process).
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One refusal with the key it stands for (the map is keyed by the key's hash alone, so that a
/// lookup allocates nothing; the entry is compared against the call's subjects in place).
struct Entry {
    owner: Owner,
    /// The subjects, each as a 4-byte little-endian length and its bytes.
    subjects: Box<[u8]>,
    refusal: Refusal,
}

impl Entry {
    fn new(owner: Owner, subjects: &[&[u8]], refusal: Refusal) -> Entry {
        let mut bytes = Vec::with_capacity(subjects.iter().map(|s| s.len() + 4).sum());
        for s in subjects {
            bytes.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
            bytes.extend_from_slice(s);
        }
        Entry { owner, subjects: bytes.into(), refusal }
    }

    fn matches(&self, owner: Owner, subjects: &[&[u8]]) -> bool {
        if self.owner != owner {
            return false;
        }
        let mut rest: &[u8] = &self.subjects;
        for s in subjects {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else { return false };
            let len = u32::from_le_bytes(*len) as usize;
            if len != s.len() || tail.len() < len || &tail[..len] != *s {
                return false;
            }
            rest = &tail[len..];
        }
        rest.is_empty()
    }
}

/// One shard: hash of (owner, subjects) → entry, least recently used first out. A collision of
/// two live keys keeps the newer one.
type Shard = LruCache<u64, Entry, Prehashed>;

fn get(shard: &mut Shard, hash: u64, owner: Owner, subjects: &[&[u8]], cost: u64, now: At) -> Option<Refusal> {
    let (now_us, pinned) = now;
    let entry = shard.get(&hash)?;
    if !entry.matches(owner, subjects) {
        return None;
    }
    let refusal = entry.refusal;
    if now_us >= refusal.lapse_us {
        shard.remove(&hash);
        return None;
    }
    if cost < refusal.cost || pinned != refusal.pinned {
        return None;
    }
    Some(refusal)
}

/// A bounded, sharded refusal cache.
pub(crate) struct RefusalCache {
    shards: Box<[Mutex<Shard>]>,
    seed: foldhash::fast::RandomState,
}

impl RefusalCache {
    /// A cache of at most `size` entries (at least one: the configuration refuses 0). The
    /// entries are split over the shards exactly, so that the size a user sets is the size
    /// they get: fewer shards than entries, the first `size % shards` holding one more.
    pub(crate) fn new(size: usize) -> RefusalCache {
        let size = size.max(1);
        let shards = size.min(SHARDS);
        let capacity = |i: usize| size / shards + usize::from(i < size % shards);
        RefusalCache {
            shards: (0..shards).map(|i| Mutex::new(LruCache::with_hasher(capacity(i), Prehashed))).collect(),
            // Seeded per process: callers choose subjects, and must not choose collisions.
            seed: foldhash::fast::RandomState::default(),
        }
    }

    fn hash(&self, owner: Owner, subjects: &[&[u8]]) -> u64 {
        let mut h = self.seed.build_hasher();
        h.write_u64(owner.limiter);
        h.write_usize(owner.store);
        for s in subjects {
            h.write_usize(s.len());
            h.write(s);
        }
        h.finish()
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        // Middle bits choose the shard: the map uses the low bits for buckets, the top ones for tags.
        let i = (hash >> 32) as usize % self.shards.len();
        crate::rt::lock::lock(&self.shards[i])
    }

    /// The refusal still standing at `now` for these subjects at this cost, if any.
    pub(crate) fn get(&self, owner: Owner, subjects: &[&[u8]], cost: u64, now: At) -> Option<Refusal> {
        let hash = self.hash(owner, subjects);
        get(&mut self.shard(hash), hash, owner, subjects, cost, now)
    }

    /// Remembers a refusal of these subjects.
    pub(crate) fn insert(&self, owner: Owner, subjects: &[&[u8]], refusal: Refusal) {
        let hash = self.hash(owner, subjects);
        self.shard(hash).insert(hash, Entry::new(owner, subjects, refusal));
    }

    /// Forgets the refusal of these subjects (after a reset of their counts).
    pub(crate) fn forget(&self, owner: Owner, subjects: &[&[u8]]) {
        let hash = self.hash(owner, subjects);
        let mut shard = self.shard(hash);
        if shard.peek(&hash).is_some_and(|e| e.matches(owner, subjects)) {
            shard.remove(&hash);
        }
    }

    /// Forgets every refusal of one owner (a reset of subjects the cache cannot enumerate).
    pub(crate) fn forget_owner(&self, limiter: u64) {
        for shard in self.shards.iter() {
            let mut shard = crate::rt::lock::lock(shard);
            shard.retain(|_, e| e.owner.limiter != limiter);
        }
    }

    /// Entries held (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |s| s.len())).sum()
    }
}

/// The process's cache, sized on first use by the global configuration.
pub(crate) fn global() -> &'static RefusalCache {
    static CACHE: OnceLock<RefusalCache> = OnceLock::new();
    CACHE.get_or_init(|| RefusalCache::new(crate::config::global::refusal_cache_settings().1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Owner = Owner { limiter: 1, store: 7 };
    const B: Owner = Owner { limiter: 2, store: 7 };

    fn refusal(until_us: u64, cost: u64) -> Refusal {
        Refusal { until_us, lapse_us: until_us, cost, limit: 0, rule: 0, pinned: false }
    }

    #[test]
    fn answers_until_the_retry_after_and_only_at_the_same_or_higher_cost() {
        let cache = RefusalCache::new(100);
        let s: &[&[u8]] = &[b"alice", b""];
        cache.insert(A, s, refusal(1_000, 2));
        assert_eq!(cache.get(A, s, 2, (999, false)), Some(refusal(1_000, 2)));
        assert_eq!(cache.get(A, s, 5, (999, false)), Some(refusal(1_000, 2)));
        assert_eq!(cache.get(A, s, 1, (999, false)), None, "a smaller cost may fit");
        assert_eq!(cache.get(B, s, 2, (999, false)), None, "another limiter");
        assert_eq!(cache.get(A, &[b"alice"], 2, (999, false)), None);
        assert_eq!(cache.get(A, &[b"alic", b"e"], 2, (999, false)), None, "subject boundaries count");
        assert_eq!(cache.get(A, s, 2, (1_000, false)), None, "expired exactly at the retry-after");
        assert_eq!(cache.len(), 0, "an expired entry is dropped");
    }

    #[test]
    fn forgets_on_request() {
        let cache = RefusalCache::new(100);
        cache.insert(A, &[b"x"], refusal(10, 1));
        cache.insert(B, &[b"x"], refusal(10, 1));
        cache.forget(A, &[b"x"]);
        assert_eq!(cache.get(A, &[b"x"], 1, (0, false)), None);
        assert!(cache.get(B, &[b"x"], 1, (0, false)).is_some());
        cache.forget_owner(2);
        assert_eq!(cache.get(B, &[b"x"], 1, (0, false)), None);
    }

    #[test]
    fn stays_bounded_and_evicts_the_least_recently_used() {
        let cache = RefusalCache::new(SHARDS * 4);
        for i in 0u32..10_000 {
            cache.insert(A, &[&i.to_le_bytes()], refusal(u64::MAX, 1));
        }
        assert!(cache.len() <= SHARDS * 4, "{} entries", cache.len());
        // Within one shard: the entry read last survives the next insertions.
        let mut shard = Shard::with_hasher(2, Prehashed);
        let s: [&[u8]; 3] = [b"a", b"b", b"c"];
        shard.insert(1, Entry::new(A, &s[..1], refusal(9, 1)));
        shard.insert(2, Entry::new(A, &s[1..2], refusal(9, 1)));
        assert!(get(&mut shard, 1, A, &s[..1], 1, (0, false)).is_some());
        shard.insert(3, Entry::new(A, &s[2..3], refusal(9, 1)));
        assert!(get(&mut shard, 1, A, &s[..1], 1, (0, false)).is_some(), "recently used: kept");
        assert!(get(&mut shard, 2, A, &s[1..2], 1, (0, false)).is_none(), "least recently used: evicted");
        assert!(get(&mut shard, 3, A, &s[2..3], 1, (0, false)).is_some());
    }

    /// The size set is the size held: 1 holds one refusal, and sizes that are no multiple of the
    /// shard count hold exactly that many once full.
    #[test]
    fn holds_exactly_the_size_set() {
        for size in [1, 2, 63, 64, 65, 100, 1000] {
            let cache = RefusalCache::new(size);
            for i in 0u32..20_000 {
                cache.insert(A, &[&i.to_le_bytes()], refusal(u64::MAX, 1));
            }
            assert_eq!(cache.len(), size, "size {size}");
        }
    }
}
