//! Where the in-memory store keeps its states: [`SHARDS`] hash tables behind mutexes, each
//! key's [`State`], and the shards one call holds locked ([`Guards`]).

use super::inline::{self, Key, Values};
use super::log::Log;
use crate::rt::lock::lock;
use hashbrown::HashTable;
use std::sync::{Mutex, MutexGuard};

/// How many shards a store has.
pub(super) const SHARDS: usize = 64;

/// Subjects are chosen by callers, so the hasher is seeded per process (foldhash: fast on
/// short keys, not predictable from outside). Every key starts with 8 bytes of its own seeded
/// hash, written once when the key is built: the table reads them back instead of hashing again.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) states: HashTable<(Key, State)>,
}

/// The shard of a key's hash. A shard's table picks buckets by the hash's low bits and tags
/// them with its top 7: the shard comes from bits in between, so that the keys of one shard
/// still differ in both (taken from the top, they shared 6 of the 7 tag bits, and a lookup
/// compared every other key of a group).
#[inline]
pub(super) fn shard_of(hash: u64) -> usize {
    (hash >> 32) as usize % SHARDS
}

/// The hash a key starts with (see `Shard`).
#[inline]
pub(super) fn hash_of(key: &[u8]) -> u64 {
    let mut hash = [0; 8];
    if let Some(prefix) = key.get(..8) {
        hash.copy_from_slice(prefix);
    }
    u64::from_le_bytes(hash)
}

impl Shard {
    /// Drops expired states, and gives memory back once most of the map is empty.
    pub(super) fn sweep(&mut self, now: u64) {
        self.states.retain(|(_, st)| !st.expired(now));
        if self.states.capacity() > 64 && self.states.len() < self.states.capacity() / 4 {
            self.states.shrink_to_fit(|(k, _)| k.hash());
        }
    }

    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Option<&State> {
        self.states.find(hash_of(key), |(k, _)| k.is(key)).map(|(_, st)| st)
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, key: &[u8]) -> Option<&mut State> {
        self.states.find_mut(hash_of(key), |(k, _)| k.is(key)).map(|(_, st)| st)
    }

    /// [`get_mut`](Self::get_mut) of a key of `len` bytes at the start of `padded` (zero after
    /// them).
    #[inline(always)]
    pub(super) fn get_mut_padded(&mut self, padded: &[u8; inline::KEY_BYTES], len: usize) -> Option<&mut State> {
        let hash = hash_of(&padded[..]);
        self.states.find_mut(hash, |(k, _)| k.is_padded(padded, len)).map(|(_, st)| st)
    }

    #[inline]
    pub(super) fn get_or_insert(&mut self, key: &[u8], new: impl FnOnce() -> State) -> &mut State {
        let entry = self.states.entry(hash_of(key), |(k, _)| k.is(key), |(k, _)| k.hash());
        &mut entry.or_insert_with(|| (Key::from(key), new())).into_mut().1
    }

    /// Sets `key`'s state, replacing any.
    pub(super) fn set(&mut self, key: &[u8], state: State) {
        match self.get_mut(key) {
            Some(st) => *st = state,
            None => self.insert(key, state),
        }
    }

    pub(super) fn insert(&mut self, key: &[u8], state: State) {
        self.states.insert_unique(hash_of(key), (Key::from(key), state), |(k, _)| k.hash());
    }

    pub(super) fn remove(&mut self, key: &[u8]) {
        if let Ok(entry) = self.states.find_entry(hash_of(key), |(k, _)| k.is(key)) {
            entry.remove();
        }
    }
}

/// One key's state: a log (sliding window), the stored values of an O(1) algorithm, a block
/// (a limit's penalty, under the limit's key and a marker byte), or the slots of a concurrency
/// limit.
pub(super) enum State {
    Log(Log),
    Cells(Cells),
    /// Refused until this instant (µs), as rule `rule` refused the call that started it.
    Block {
        until: u64,
        rule: usize,
    },
    /// (end of lease µs, member) of each call in flight.
    Slots(Vec<(u64, [u8; 16])>),
}

impl State {
    #[inline]
    pub(super) fn expired(&self, now: u64) -> bool {
        match self {
            State::Log(log) => log.expired(now),
            State::Cells(cells) => cells.expires_at <= now,
            State::Block { until, .. } => *until <= now,
            State::Slots(slots) => slots.iter().all(|&(end, _)| end <= now),
        }
    }
}

/// The key of a limit's block: the limit's key and a byte no key ends with otherwise (its
/// first 8 bytes, the hash, stay: same shard, same bucket).
pub(super) fn block_key(key: &[u8]) -> Vec<u8> {
    let mut block = Vec::with_capacity(key.len() + 1);
    block.extend_from_slice(key);
    block.push(0xff);
    block
}

/// An O(1) algorithm's values, `cells()` per rule, `None` where never written.
pub(super) struct Cells {
    pub(super) values: Values,
    pub(super) expires_at: u64,
}

/// The shards a call holds, locked in index order so two calls cannot deadlock. One shard (the
/// usual case) needs no allocation.
pub(super) enum Guards<'a> {
    One(MutexGuard<'a, Shard>),
    Many(Vec<(usize, MutexGuard<'a, Shard>)>),
}

impl<'a> Guards<'a> {
    pub(super) fn lock(shards: &'a [Mutex<Shard>], wanted: impl Iterator<Item = usize> + Clone) -> Guards<'a> {
        let mut it = wanted.clone();
        let first = it.next().unwrap_or(0);
        if it.all(|s| s == first) {
            return Guards::One(lock(&shards[first]));
        }
        let mut order: Vec<usize> = wanted.collect();
        order.sort_unstable();
        order.dedup();
        Guards::Many(order.into_iter().map(|i| (i, lock(&shards[i]))).collect())
    }

    pub(super) fn get(&mut self, index: usize) -> &mut Shard {
        match self {
            Guards::One(g) => g,
            Guards::Many(v) => {
                // Every shard of the call was locked, so the search finds it.
                let at = v.partition_point(|(i, _)| *i < index);
                &mut v[at].1
            }
        }
    }
}
