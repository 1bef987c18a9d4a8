//! Where the in-memory store keeps its states: up to [`MAX_SHARDS`] hash tables behind mutexes,
//! each key's [`State`], and the shards one call holds locked ([`Guards`]).
//!
//! Each shard holds at most its share of the store's bound on keys, in the order they were
//! placed, with a bit that says whether each was used since (a second chance, as CLOCK gives
//! it): a full shard looks at its oldest key, sends it to the back with its bit cleared if it was
//! used, and forgets the first one that was not. A use writes only the key's own entry (a move to
//! the back wrote the list's links in three other entries, lines every thread of the shard
//! shares). Keys are spread over the shards by a seeded hash, so a flood of new subjects fills
//! every shard alike and evicts each shard's coldest keys, never a subject that keeps calling.

use super::inline::{self, Key, Values};
use super::log::Log;
use crate::model::member::Member;
use crate::rt::hash::Prehashed;
use crossbeam_utils::CachePadded;
use hashlink::linked_hash_map::RawEntryMut;
use hashlink::LinkedHashMap;
use parking_lot::{Mutex, MutexGuard};
use std::hash::{Hash, Hasher};

/// A shard behind its lock, on cache lines no other shard writes: every call writes its
/// shard's lock, and a neighbour's lock on the same line would bounce it between two threads
/// deciding for unrelated keys.
pub(super) type Locked = CachePadded<Mutex<Shard>>;

/// The most shards a store has (fewer when its bound is small: see `split`).
pub(super) const MAX_SHARDS: usize = 64;

/// Subjects are chosen by callers, so the hasher is seeded per process (foldhash: fast on
/// short keys, not predictable from outside). Every key starts with 8 bytes of its own seeded
/// hash, written once when the key is built: the table reads them back instead of hashing again.
pub(super) struct Shard {
    /// Oldest placed first: a new key goes to the back, and so does a used key that reaches
    /// the front when room is made (see `make_room`).
    states: LinkedHashMap<Key, Entry, Prehashed>,
    /// The most keys this shard holds.
    capacity: usize,
    /// Live keys forgotten to make room since the store last read it (see `take_evictions`).
    evicted: u64,
    /// The key count the store last reported for this shard (its gauge is a sum of shards).
    pub(super) reported: usize,
}

/// The shard of a key's hash among `mask + 1` (a power of two). A shard's table picks buckets
/// by the hash's low bits and tags them with its top 7: the shard comes from bits in between,
/// so that the keys of one shard still differ in both.
#[inline]
pub(super) fn shard_of(hash: u64, mask: usize) -> usize {
    (hash >> 32) as usize & mask
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

/// How long after a state expired the periodic sweep still keeps it (µs). A bucket that drains
/// between a subject's calls expires between every two of them: dropped at once, each such call
/// found nothing and inserted its key again, where a kept state is written in place. The bound on
/// keys holds as before (a full shard still forgets its least recently used key), and expired
/// states count as nothing whether kept or not.
const SWEEP_GRACE_US: u64 = 1_000_000;

/// Keys a shard holds at least, when the bound allows: its least recently used key is then
/// colder than a thousand others, whichever shard a flood fills first.
const MIN_PER_SHARD: usize = 1024;

/// How a store of at most `max_keys` keys is split: a power of two of shards, fewer for a small
/// bound (one below `2 × MIN_PER_SHARD`: exactly least recently used first), and the keys of
/// shard `i`, so that the shards hold exactly `max_keys` together.
pub(super) fn split(max_keys: usize) -> (usize, impl Fn(usize) -> usize) {
    let max_keys = max_keys.max(1);
    let wanted = (max_keys / MIN_PER_SHARD).clamp(1, MAX_SHARDS);
    let shards = 1 << wanted.ilog2();
    (shards, move |i: usize| max_keys / shards + usize::from(i < max_keys % shards))
}

impl Shard {
    pub(super) fn new(capacity: usize) -> Shard {
        Shard { states: LinkedHashMap::with_hasher(Prehashed), capacity: capacity.max(1), evicted: 0, reported: 0 }
    }

    pub(super) fn len(&self) -> usize {
        self.states.len()
    }

    /// Live keys forgotten to make room since the last call.
    pub(super) fn take_evictions(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    /// The periodic sweep: drops the states expired for [`SWEEP_GRACE_US`] by `now`.
    pub(super) fn sweep_idle(&mut self, now: u64) {
        self.sweep(now.saturating_sub(SWEEP_GRACE_US));
    }

    /// Drops expired states, and gives memory back once most of the map is empty.
    pub(super) fn sweep(&mut self, now: u64) {
        self.states.retain(|_, e| !e.state.expired(now));
        if self.states.capacity() > 64 && self.states.len() < self.states.capacity() / 4 {
            self.states.shrink_to_fit();
        }
    }

    /// `key`'s state without marking it used (a peek reads, it does not call).
    #[inline]
    pub(super) fn read(&self, key: &[u8]) -> Option<&State> {
        self.states.raw_entry().from_hash(hash_of(key), |k| k.is(key)).map(|(_, e)| &e.state)
    }

    /// `key`'s state, marked used.
    #[inline(always)]
    pub(super) fn get_mut(&mut self, key: &[u8]) -> Option<&mut State> {
        match self.states.raw_entry_mut().from_hash(hash_of(key), |k| k.is(key)) {
            RawEntryMut::Occupied(entry) => Some(entry.into_mut().used()),
            RawEntryMut::Vacant(_) => None,
        }
    }

    /// [`get_mut`](Self::get_mut) of the key `words` holds.
    #[inline(always)]
    pub(super) fn get_mut_words(&mut self, words: &inline::KeyWords) -> Option<&mut State> {
        match self.states.raw_entry_mut().from_hash(words.hash(), |k| k.is_words(words)) {
            RawEntryMut::Occupied(entry) => Some(entry.into_mut().used()),
            RawEntryMut::Vacant(_) => None,
        }
    }

    /// `key`'s state (marked used), or `new()` stored for it at `now` at the back, not yet
    /// used (room made as `make_room` makes it).
    #[inline]
    pub(super) fn get_or_insert(&mut self, key: &[u8], now: u64, new: impl FnOnce() -> State) -> &mut State {
        let hash = hash_of(key);
        if self.states.len() >= self.capacity && self.read(key).is_none() {
            self.make_room(now);
        }
        match self.states.raw_entry_mut().from_hash(hash, |k| k.is(key)) {
            RawEntryMut::Occupied(entry) => entry.into_mut().used(),
            RawEntryMut::Vacant(entry) => {
                &mut entry
                    .insert_with_hasher(hash, Key::from(key), Entry { state: new(), used: false }, Key::hash)
                    .1
                    .state
            }
        }
    }

    /// Sets `key`'s state at `now`, replacing any (room made as `make_room` makes it).
    pub(super) fn set(&mut self, key: &[u8], state: State, now: u64) {
        // The placeholder is replaced at once: no one reads it.
        *self.get_or_insert(key, now, || State::Block { until: 0, rule: 0 }) = state;
    }

    /// A full shard forgets its oldest key not used since it was placed: a used one met on the
    /// way goes to the back, its bit cleared (a second chance). Counted when the forgotten key
    /// still held a live state at `now` (the bound, not time, ended it). Each pass over a used
    /// key was paid for by the use that set its bit, so room costs O(1) a call on average.
    #[cold]
    fn make_room(&mut self, now: u64) {
        while let Some((front, entry)) = self.states.front() {
            let (hash, used, at) = (front.hash(), entry.used, std::ptr::from_ref(front));
            // The front key itself, found by its address (no key compared).
            let RawEntryMut::Occupied(mut found) = self.states.raw_entry_mut().from_hash(hash, |k| std::ptr::eq(k, at))
            else {
                return;
            };
            if !used {
                if !found.remove().state.expired(now) {
                    self.evicted += 1;
                }
                return;
            }
            found.get_mut().used = false;
            found.to_back();
        }
    }

    pub(super) fn remove(&mut self, key: &[u8]) {
        if let RawEntryMut::Occupied(entry) = self.states.raw_entry_mut().from_hash(hash_of(key), |k| k.is(key)) {
            entry.remove();
        }
    }
}

/// A key's state, and whether it was used since it was placed at the back of its shard.
pub(super) struct Entry {
    state: State,
    used: bool,
}

impl Entry {
    /// Its state, marked used. Written only when not yet marked: a line written by one core
    /// must be fetched back by the next core that reads it.
    #[inline(always)]
    fn used(&mut self) -> &mut State {
        if !self.used {
            self.used = true;
        }
        &mut self.state
    }
}

/// A key hashes as the seeded hash it starts with (the table rehashes by it when it grows).
impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(Key::hash(self));
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.is(other.bytes())
    }
}

impl Eq for Key {}

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
    Slots(Vec<(u64, Member)>),
}

impl State {
    /// This key's log, started afresh unless it holds a live one: an expired log holds nothing
    /// any window counts, and a key of another kind is not a log's.
    #[inline(always)]
    pub(super) fn live_log(&mut self, now: u64) -> &mut Log {
        if !matches!(self, State::Log(_)) || self.expired(now) {
            *self = State::Log(Log::default());
        }
        match self {
            State::Log(log) => log,
            _ => unreachable!("the state was just made a log"),
        }
    }

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
    /// The rules a bucket's values were kept under when a runtime override wrote them (`None`:
    /// the key's own rules, the usual case; see `carry`).
    pub(super) kept: Option<Box<Kept>>,
}

/// The rules of a runtime override (one pointer in `Cells`: overrides are rare).
#[derive(PartialEq)]
pub(super) struct Kept(pub(super) Vec<crate::model::rule::Rule>);

/// The shards a call holds, locked in index order so two calls cannot deadlock. One shard (the
/// usual case) or a few (a call of up to four limits) need no allocation: a vector of guards
/// was a `malloc` and a `free` on every call of two stacked limits.
pub(super) enum Guards<'a> {
    One(MutexGuard<'a, Shard>),
    /// In index order; the first `None` ends them.
    Few([Option<(usize, MutexGuard<'a, Shard>)>; FEW]),
    Many(Vec<(usize, MutexGuard<'a, Shard>)>),
}

/// The most shards a call holds without allocating.
const FEW: usize = 4;

impl<'a> Guards<'a> {
    pub(super) fn lock(shards: &'a [Locked], wanted: impl Iterator<Item = usize> + Clone) -> Guards<'a> {
        let mut it = wanted.clone();
        let first = it.next().unwrap_or(0);
        if it.all(|s| s == first) {
            return Guards::One(shards[first].lock());
        }
        let (mut few, mut n) = ([0usize; FEW], 0);
        for s in wanted.clone() {
            if n == FEW {
                n += 1;
                break;
            }
            few[n] = s;
            n += 1;
        }
        if n <= FEW {
            let order = &mut few[..n];
            order.sort_unstable();
            let mut guards = [None, None, None, None];
            let mut last = None;
            for (slot, &i) in guards.iter_mut().zip(order.iter().filter(|&&i| last.replace(i) != Some(i))) {
                *slot = Some((i, shards[i].lock()));
            }
            return Guards::Few(guards);
        }
        let mut order: Vec<usize> = wanted.collect();
        order.sort_unstable();
        order.dedup();
        Guards::Many(order.into_iter().map(|i| (i, shards[i].lock())).collect())
    }

    pub(super) fn get(&mut self, index: usize) -> &mut Shard {
        match self {
            Guards::One(g) => g,
            Guards::Few(guards) => {
                // Every shard of the call was locked, so the search finds it.
                let at = guards.iter().position(|g| g.as_ref().is_some_and(|(i, _)| *i == index));
                match &mut guards[at.unwrap_or(FEW)] {
                    Some((_, g)) => g,
                    None => unreachable!("shard {index} was locked for the call"),
                }
            }
            Guards::Many(v) => {
                // Every shard of the call was locked, so the search finds it.
                let at = v.partition_point(|(i, _)| *i < index);
                &mut v[at].1
            }
        }
    }
}
