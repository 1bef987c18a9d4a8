//! The store's bound on keys: how it is set, and what it reports while it holds.
//! (Where room is made, a key not used lately first, is the shard's job: `shard.rs`.)

use super::shard::{self, Locked, Shard};
use super::MemoryStore;
use crate::rt::throttle::Throttle;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The keys a store holds unless told otherwise ([`MemoryStore::max_keys`]): about 60 MB of
/// states at the most, which a small container can spare, and more subjects than most services
/// see active within their longest window.
pub const DEFAULT_MAX_KEYS: usize = 250_000;

impl MemoryStore {
    /// This store, holding at most `keys` keys (at least 1; [`DEFAULT_MAX_KEYS`] unless set).
    /// Set it before the store decides: the states held so far are dropped.
    ///
    /// ```
    /// use ratelimit_runtime::store::MemoryStore;
    /// // A process that can spare about 2.5 MB for rate-limit state.
    /// let store = MemoryStore::new().max_keys(10_000);
    /// ```
    #[must_use]
    pub fn max_keys(mut self, keys: usize) -> MemoryStore {
        let (shards, capacity) = shard::split(keys);
        self.shards = (0..shards).map(|i| Locked::new(Mutex::new(Shard::new(capacity(i))))).collect();
        self.mask = shards - 1;
        self.max_keys = keys.max(1);
        self
    }

    /// Reports `shard`'s keys and evictions since it was last swept: the gauge is a sum of
    /// shards, kept current while there is traffic at no cost to the calls that find their key.
    pub(super) fn report(&self, shard: &mut Shard) {
        let len = shard.len();
        let delta = len as f64 - shard.reported as f64;
        shard.reported = len;
        let evicted = shard.take_evictions();
        self.metrics.memory_keys(delta, evicted);
        if evicted > 0 {
            self.warn_evicting(evicted);
        }
    }

    /// Warns, at most once a minute, that live subjects are being forgotten to make room.
    #[cold]
    fn warn_evicting(&self, evicted: u64) {
        static WARNING: Throttle = Throttle::new(Duration::from_secs(60));
        let unlogged = self.unlogged.fetch_add(evicted, Ordering::Relaxed) + evicted;
        if WARNING.admit(Instant::now()).is_some() {
            let evicted = self.unlogged.swap(0, Ordering::Relaxed).max(unlogged);
            tracing::warn!(
                evicted,
                max_keys = self.max_keys,
                "memory store full: forgetting subjects not used lately to make room \
                 (the bound is too small for the subjects in use, or this is a flood of new ones)"
            );
        }
    }
}

impl Drop for MemoryStore {
    /// Takes this store's keys out of the gauge, which sums every store's.
    fn drop(&mut self) {
        let reported: usize = self.shards.iter_mut().map(|s| s.get_mut().reported).sum();
        self.metrics.memory_keys(-(reported as f64), 0);
    }
}
