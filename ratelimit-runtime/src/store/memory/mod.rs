//! The embedded store: the same decisions as the Redis script, computed in process.
//!
//! Sharded maps behind mutexes; each log is a deque of (time, cumulative units) so a window's
//! count and the exact retry-after are binary searches. Idle logs are swept as the shard is used,
//! so memory is bounded by the subjects active within their longest window.

use super::peek_reset::Targets;
use super::Answer;
use super::{Call, Pending, Release, Store};
use crate::algorithm::Algorithm;
use crate::algorithm::{refund, step, Rate};
use crate::metrics::{self, StoreMetrics};
use crate::model::compiled::CompiledLimit;
use crate::model::decision::{Decision, Why};
use crate::model::policy::RuleStatus;
use crate::rt::clock::Clock;
use crate::rt::lock::lock;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod inline;
mod log;
mod one;

use inline::{Key, Values};
use log::Log;

const SHARDS: usize = 64;
/// Every this many decisions (per thread) the next shard in turn drops its expired states, so
/// every shard is swept while there is any traffic, whichever subjects it concerns.
const SWEEP_EVERY: u32 = 256;

/// The in-memory store: the default when no Redis is configured.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    /// `clock` itself when it is the CPU's counter (`MemoryStore::new`), read without a call
    /// through `dyn Clock`.
    counter: Option<&'static crate::rt::clock::CounterClock>,
}

/// Subjects are chosen by callers, so the hasher is seeded per process (foldhash: fast on
/// short keys, not predictable from outside). Every key starts with 8 bytes of its own seeded
/// hash, written once when the key is built: the table reads them back instead of hashing again.
#[derive(Default)]
struct Shard {
    states: HashTable<(Key, State)>,
}

/// The shard of a key's hash. A shard's table picks buckets by the hash's low bits and tags
/// them with its top 7: the shard comes from bits in between, so that the keys of one shard
/// still differ in both (taken from the top, they shared 6 of the 7 tag bits, and a lookup
/// compared every other key of a group).
#[inline]
fn shard_of(hash: u64) -> usize {
    (hash >> 32) as usize % SHARDS
}

/// The hash a key starts with (see `Shard`).
fn hash_of(key: &[u8]) -> u64 {
    let mut hash = [0; 8];
    if let Some(prefix) = key.get(..8) {
        hash.copy_from_slice(prefix);
    }
    u64::from_le_bytes(hash)
}

impl Shard {
    /// Drops expired states, and gives memory back once most of the map is empty.
    fn sweep(&mut self, now: u64) {
        self.states.retain(|(_, st)| !st.expired(now));
        if self.states.capacity() > 64 && self.states.len() < self.states.capacity() / 4 {
            self.states.shrink_to_fit(|(k, _)| k.hash());
        }
    }

    fn get(&self, key: &[u8]) -> Option<&State> {
        self.states.find(hash_of(key), |(k, _)| k.is(key)).map(|(_, st)| st)
    }

    #[inline(always)]
    fn get_mut(&mut self, key: &[u8]) -> Option<&mut State> {
        self.states.find_mut(hash_of(key), |(k, _)| k.is(key)).map(|(_, st)| st)
    }

    /// [`get_mut`](Self::get_mut) of a key of `len` bytes at the start of `padded` (zero after
    /// them).
    #[inline(always)]
    fn get_mut_padded(&mut self, padded: &[u8; inline::KEY_BYTES], len: usize) -> Option<&mut State> {
        let hash = hash_of(&padded[..]);
        self.states.find_mut(hash, |(k, _)| k.is_padded(padded, len)).map(|(_, st)| st)
    }

    fn get_or_insert(&mut self, key: &[u8], new: impl FnOnce() -> State) -> &mut State {
        let entry = self.states.entry(hash_of(key), |(k, _)| k.is(key), |(k, _)| k.hash());
        &mut entry.or_insert_with(|| (Key::from(key), new())).into_mut().1
    }

    /// Sets `key`'s state, replacing any.
    fn set(&mut self, key: &[u8], state: State) {
        match self.get_mut(key) {
            Some(st) => *st = state,
            None => self.insert(key, state),
        }
    }

    fn insert(&mut self, key: &[u8], state: State) {
        self.states.insert_unique(hash_of(key), (Key::from(key), state), |(k, _)| k.hash());
    }

    fn remove(&mut self, key: &[u8]) {
        if let Ok(entry) = self.states.find_entry(hash_of(key), |(k, _)| k.is(key)) {
            entry.remove();
        }
    }
}

/// One key's state: a log (sliding window), the stored values of an O(1) algorithm, a block
/// (a limit's penalty, under the limit's key and a marker byte), or the slots of a concurrency
/// limit.
enum State {
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
    fn expired(&self, now: u64) -> bool {
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
fn block_key(key: &[u8]) -> Vec<u8> {
    let mut block = Vec::with_capacity(key.len() + 1);
    block.extend_from_slice(key);
    block.push(0xff);
    block
}

/// How soon a refused call may try a full concurrency limit again: a slot frees when a call
/// ends, which no one can predict; its lease's end is only the latest it frees.
pub(crate) const CONCURRENCY_RETRY_US: u64 = 100_000;

/// An O(1) algorithm's values, `cells()` per rule, `None` where never written.
struct Cells {
    values: Values,
    expires_at: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// A store on the system clock (read through the CPU's time-stamp counter where the
    /// kernel trusts it: see `clock::fast_clock`).
    pub fn new() -> MemoryStore {
        match crate::rt::clock::counter_clock() {
            Some(counter) => MemoryStore { counter: Some(counter), ..MemoryStore::with_clock(Arc::new(*counter)) },
            None => MemoryStore::with_clock(crate::rt::clock::fast_clock()),
        }
    }

    /// Now on the store's clock, µs.
    #[inline]
    fn now_us(&self) -> u64 {
        match self.counter {
            Some(counter) => counter.read_us(),
            None => self.clock.now_us(),
        }
    }

    /// A store on the given clock (tests drive time by hand with [`ManualClock`](crate::rt::clock::ManualClock)).
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::default(),
            clock,
            counter: None,
        }
    }

    /// How many subjects hold state now (after dropping the expired ones).
    pub fn len(&self) -> usize {
        let now = self.now_us();
        self.shards
            .iter()
            .map(|s| {
                let mut shard = lock(s);
                shard.sweep(now);
                shard.states.len()
            })
            .sum()
    }

    /// Whether no subject holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides `call`, this thread's call number `tick` (see [`next_tick`]).
    #[inline]
    fn decide_now(&self, call: &Call<'_>, tick: u32) -> Decision {
        // Most calls have one limit: one key on the stack, one lookup, one pass (one.rs).
        if let Some((limit, subject)) = Self::one_limit(call) {
            return self.decide_one(call, limit, subject, tick);
        }
        self.decide_general(call, tick)
    }

    /// Any call: every key in a reused buffer, the shards locked in order, checked then recorded.
    fn decide_general(&self, call: &Call<'_>, tick: u32) -> Decision {
        thread_local! {
            /// Every key of a call, back to back: reused, so deciding allocates nothing.
            static KEYS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        KEYS.with(|cell| {
            let mut buf = cell.take();
            buf.clear();
            let mut spans = Vec::new();
            let mut inline = [(0usize, 0usize, 0usize); 4];
            let fits = call.limits.len() <= inline.len();
            for (i, (limit, subject)) in call.limits.iter().zip(call.subjects).enumerate() {
                let start = buf.len();
                buf.extend_from_slice(&[0; 8]);
                limit.write_memory_key(subject, &mut buf);
                let hash = self.key_hash(limit, subject);
                buf[start..start + 8].copy_from_slice(&hash.to_le_bytes());
                let span = (start, buf.len(), shard_of(hash));
                if fits {
                    inline[i] = span;
                } else {
                    spans.push(span);
                }
            }
            let spans = if fits { &inline[..call.limits.len()] } else { &spans[..] };
            let decision = self.decide_keys(call, &buf, spans, tick);
            cell.replace(buf);
            decision
        })
    }

    /// Decides with every key of the call at `spans` of `buf` (start, end, shard).
    fn decide_keys(&self, call: &Call<'_>, buf: &[u8], spans: &[(usize, usize, usize)], tick: u32) -> Decision {
        let (decision, now) = self.decide_locked(call, buf, spans);
        self.maybe_sweep(now, tick);
        decision
    }

    /// Sweeps one shard in turn every `SWEEP_EVERY` calls of this thread (`tick` is this call's
    /// number), unless it is busy.
    #[inline]
    fn maybe_sweep(&self, now: u64, tick: u32) {
        if tick.is_multiple_of(SWEEP_EVERY) {
            self.sweep_one((tick / SWEEP_EVERY) as usize % SHARDS, now);
        }
    }

    #[cold]
    #[inline(never)]
    fn sweep_one(&self, index: usize, now: u64) {
        if let Ok(mut shard) = self.shards[index].try_lock() {
            // A call's pinned time may run ahead of the clock (a replay, a test): sweeping by
            // it would drop states that calls at other pinned times still read. Sweeping
            // never runs ahead of the store's own clock.
            shard.sweep(now.min(self.now_us()));
        }
    }

    /// Decides under the shards' locks; the decision and its time.
    fn decide_locked(&self, call: &Call<'_>, buf: &[u8], spans: &[(usize, usize, usize)]) -> (Decision, u64) {
        let mut guards = Guards::lock(&self.shards, spans.iter().map(|s| s.2));
        // Read under the locks (see `decide_one`): a log's times never go back.
        let now = call.now_us.unwrap_or_else(|| self.now_us());

        let cost = call.cost;
        let mut d = Decision::admitted(now);
        let mut tightest: Option<u64> = None;
        // Limits with a penalty that refused the call as exceeded, with their refusing rule.
        let mut starts: Vec<(usize, usize)> = Vec::new();
        // The shadow limits, if any, come last: decided as a group of their own once the others
        // admitted the call (whose decision waits here meanwhile).
        let enforced = call.enforced();
        let mut kept: Option<Decision> = None;
        for (g, limit) in call.limits.iter().enumerate() {
            if g == enforced {
                if !d.allowed {
                    break;
                }
                kept = Some(std::mem::replace(&mut d, Decision::admitted(now)));
                tightest = None;
            }
            let (start, end, shard) = spans[g];
            check_limit(guards.get(shard), &buf[start..end], g, limit, now, cost, &mut d, &mut tightest, &mut starts);
        }
        // Which limits record the call: all of them, or the enforced ones alone when the shadow
        // limits would refuse it (their refusal then rides on the enforced limits' admission).
        let mut commit = call.limits.len();
        if let Some(admitted) = kept {
            if !d.allowed {
                start_blocks(&mut guards, call, buf, spans, starts.drain(..), now, &mut d);
                let wait = u64::try_from(d.retry_after.as_micros()).unwrap_or(u64::MAX);
                let (limit, rule) = (d.limit.saturating_sub(enforced), d.rule);
                d = admitted;
                d.refused_in_shadow(limit, rule, wait);
                commit = enforced;
            } else {
                d = admitted;
            }
        }
        if !d.allowed {
            start_blocks(&mut guards, call, buf, spans, starts.drain(..), now, &mut d);
            return (d, now);
        }
        if call.limits.iter().any(CompiledLimit::is_concurrency) {
            d.member = crate::store::redis::unique_member();
        }

        // Commit: every limit records the call.
        for (g, limit) in call.limits.iter().enumerate().take(commit) {
            let (start, end, shard) = spans[g];
            let state = guards.get(shard).get_or_insert(&buf[start..end], || State::Log(Log::default()));
            record(state, limit, now, cost, d.member);
        }
        (d, now)
    }

    /// Gives back what an admitted call took (see [`Store::release`]).
    fn release_now(&self, release: &Release<'_>) {
        let now = release.call.now_us.unwrap_or_else(|| self.now_us());
        let call = &release.call;
        for &i in release.indices {
            let (Some(limit), Some(subject)) = (call.limits.get(i), call.subjects.get(i)) else { continue };
            let (key, shard) = self.key_of(limit, subject);
            let mut shard = lock(&self.shards[shard]);
            let Some(state) = shard.get_mut(&key).filter(|st| !st.expired(now)) else { continue };
            match state {
                State::Slots(slots) => slots.retain(|&(_, member)| member != release.member),
                State::Log(log) => log.remove(release.at_us, call.cost),
                State::Cells(cells) => {
                    let k = limit.algorithm.cells();
                    if cells.values.len() != k * limit.rules.len() {
                        continue;
                    }
                    for (r, rule) in limit.rules.iter().enumerate() {
                        let rate = Rate { w: rule.window_us(), count: rule.count(), cap: limit.capacity(r) };
                        let values = &mut cells.values[r * k..(r + 1) * k];
                        if let Some(new) = refund(limit.algorithm, rate, now, release.at_us, call.cost, values) {
                            for (slot, v) in values.iter_mut().zip(new) {
                                *slot = Some(v);
                            }
                        }
                    }
                }
                State::Block { .. } => {}
            }
        }
    }
}

/// Checks limit `g` (its key `key` in `shard`) against what is stored at `now`, folding its
/// refusal or its room into `d` and `tightest`. A limit with a penalty that refused the call
/// itself (not a block already running) joins `starts`, with its refusing rule.
#[allow(clippy::too_many_arguments)]
fn check_limit(
    shard: &mut Shard,
    key: &[u8],
    g: usize,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    d: &mut Decision,
    tightest: &mut Option<u64>,
    starts: &mut Vec<(usize, usize)>,
) {
    if limit.is_concurrency() {
        let held: Vec<u64> = match shard.get(key).filter(|st| !st.expired(now)) {
            Some(State::Slots(slots)) => slots.iter().filter(|&&(end, _)| end > now).map(|&(end, _)| end).collect(),
            _ => Vec::new(),
        };
        if held.len() as u64 >= limit.concurrency {
            let first = held.iter().min().map_or(0, |&end| end - now);
            deny_why(d, g, 0, first.min(CONCURRENCY_RETRY_US), Why::Concurrency);
        }
        return;
    }
    if !limit.has_policy() {
        check_rules(shard.get_mut(key), g, limit, now, cost, d, tightest);
        return;
    }
    // A limit with a penalty is decided on its own, then merged, to know whether it refused
    // the call itself.
    let (mut own, mut own_tightest) = (Decision::admitted(now), None);
    let mut blocked = false;
    if limit.block_us > 0 {
        if let Some(&State::Block { until, rule }) = shard.get(&block_key(key)) {
            if until > now {
                blocked = true;
                deny_why(&mut own, g, rule, until - now, Why::Blocked);
            }
        }
    }
    check_rules(shard.get_mut(key), g, limit, now, cost, &mut own, &mut own_tightest);
    if !own.allowed && !blocked && limit.block_us > 0 {
        starts.push((g, own.rule));
    }
    (*d, *tightest) = merge((*d, *tightest), (own, own_tightest));
}

/// Checks the rules of limit `g` against its stored `state` (expired: nothing stored).
fn check_rules(
    state: Option<&mut State>,
    g: usize,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    d: &mut Decision,
    tightest: &mut Option<u64>,
) {
    let state = state.filter(|st| !st.expired(now));
    if limit.algorithm != Algorithm::SlidingWindow {
        let stored = match state {
            Some(State::Cells(c)) => Some(&c.values[..]),
            _ => None,
        };
        each_step(limit, stored, now, cost, |r, s| {
            if s.allowed {
                room(d, tightest, g, r, s.left, s.wait);
            } else {
                deny(d, g, r, s.wait);
            }
        });
        return;
    }
    let Some(State::Log(log)) = state else {
        // An empty log: every rule has `count` room.
        for (r, rule) in limit.rules.iter().enumerate() {
            sliding(d, tightest, g, r, rule.count(), 0, cost, rule.window_us(), |_| 0);
        }
        return;
    };
    check_log(log, g, limit, now, cost, d, tightest);
}

/// Checks the rules of sliding-window limit `g` against its `log` (trimmed to its longest
/// window first).
#[inline]
fn check_log(
    log: &mut Log,
    g: usize,
    limit: &CompiledLimit,
    now: u64,
    cost: u64,
    d: &mut Decision,
    tightest: &mut Option<u64>,
) {
    log.longest_us = limit.longest_us();
    log.trim(now);
    for (r, rule) in limit.rules.iter().enumerate() {
        let w = rule.window_us();
        // The longest window holds everything the trim left.
        let (start, before) = if r == 0 { (0, log.base()) } else { log.window_start(now, w) };
        let used = log.total() - before;
        // When the window's `need`th unit leaves it.
        let nth_wait = |need: u64| log.nth_time(start, before, need).map_or(w, |t| t + w - now);
        sliding(d, tightest, g, r, rule.count(), used, cost, w, nth_wait);
    }
}

/// Records an admitted call of `cost` units (its id `member`) in one limit's `state`.
fn record(state: &mut State, limit: &CompiledLimit, now: u64, cost: u64, member: [u8; 16]) {
    if limit.is_concurrency() {
        if !matches!(state, State::Slots(_)) {
            *state = State::Slots(Vec::new());
        }
        if let State::Slots(slots) = state {
            slots.retain(|&(end, _)| end > now);
            slots.push((now + limit.lease_us, member));
        }
    } else if limit.algorithm == Algorithm::SlidingWindow {
        if !matches!(state, State::Log(_)) || state.expired(now) {
            *state = State::Log(Log::default());
        }
        if let State::Log(log) = state {
            log.longest_us = limit.longest_us();
            if cost > 0 {
                let cum = log.total() + cost;
                log.push(now, cum);
            }
        }
    } else {
        let k = limit.algorithm.cells();
        let n = k * limit.rules.len();
        // Expired cells are cleared in place: no allocation when the shape still fits.
        match state {
            State::Cells(c) if c.values.len() == n => {
                if c.expires_at <= now {
                    c.values.fill(None);
                }
            }
            _ => *state = State::Cells(Cells { values: Values::new(n), expires_at: 0 }),
        }
        if let State::Cells(cells) = state {
            // The same pure steps as the check, now written in place.
            let mut new = [0u64; 3];
            let mut ttl: u64 = 0;
            for r in 0..limit.rules.len() {
                let s = step_rule(limit, r, Some(&cells.values), now, cost, false);
                new[..k].copy_from_slice(&s.state[..k]);
                for (j, v) in new[..k].iter().enumerate() {
                    cells.values[r * k + j] = Some(*v);
                }
                ttl = ttl.max(s.ttl);
            }
            cells.expires_at = now + ttl;
        }
    }
}

/// Starts the penalties of a refused call, `starts` (limit, refusing rule): each for its whole
/// length from now; the retry-after is the longest wait.
fn start_blocks(
    guards: &mut Guards<'_>,
    call: &Call<'_>,
    buf: &[u8],
    spans: &[(usize, usize, usize)],
    starts: impl Iterator<Item = (usize, usize)>,
    now: u64,
    d: &mut Decision,
) {
    for (g, rule) in starts {
        let (start, end, shard) = spans[g];
        let until = now + call.limits[g].block_us;
        guards.get(shard).set(&block_key(&buf[start..end]), State::Block { until, rule });
        deny_why(d, g, rule, call.limits[g].block_us, Why::Blocked);
    }
}

/// Two parts of one decision, `a` (the limits before) then `b` (one more limit), as one: a
/// refusal with the longest wait (the earlier on ties), else the tightest rule (the earlier on
/// ties), as deciding them in one pass would have.
fn merge(a: (Decision, Option<u64>), b: (Decision, Option<u64>)) -> (Decision, Option<u64>) {
    let ((da, ta), (db, tb)) = (a, b);
    match (da.allowed, db.allowed) {
        (false, false) if db.retry_after > da.retry_after => (db, tb),
        (false, _) => (da, ta),
        (true, false) => (db, tb),
        (true, true) => match (ta, tb) {
            (Some(x), Some(y)) if y >= x => (da, ta),
            (_, Some(_)) => (Decision { at_us: da.at_us, ..db }, tb),
            _ => (da, ta),
        },
    }
}

/// Peek and reset: the script's peek mode and a `DEL`, in process.
impl MemoryStore {
    /// The seeded hash of `limit`'s key for `subject`, which starts the key (and picks its
    /// shard): the limit's id and the subject hashed as they are, the key never built for it.
    #[inline]
    fn key_hash(&self, limit: &CompiledLimit, subject: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write_u64(limit.memory_id());
        h.write(subject);
        h.finish()
    }

    /// The key of `limit` for `subject` (its seeded hash first, as `decide_now` builds it) and
    /// its shard.
    fn key_of(&self, limit: &CompiledLimit, subject: &[u8]) -> (Vec<u8>, usize) {
        let mut key = vec![0; 8];
        limit.write_memory_key(subject, &mut key);
        let hash = self.key_hash(limit, subject);
        key[..8].copy_from_slice(&hash.to_le_bytes());
        (key, shard_of(hash))
    }

    fn peek_now(&self, targets: &Targets<'_>) -> Vec<RuleStatus> {
        let now = targets.now_us.unwrap_or_else(|| self.now_us());
        let mut out = Vec::new();
        for (index, limit, subject) in targets.present() {
            let (key, shard) = self.key_of(limit, subject);
            let shard = lock(&self.shards[shard]);
            let state = shard.get(&key).filter(|st| !st.expired(now));
            for (r, policy) in limit.policies().enumerate() {
                let (remaining, reset_us) = match state {
                    _ if limit.algorithm == Algorithm::SlidingWindow => {
                        let log = match state {
                            Some(State::Log(log)) => Some(log),
                            _ => None,
                        };
                        peek_log(log, policy.rule.window_us(), policy.rule.count(), now)
                    }
                    Some(State::Cells(c)) => peek_cells(limit, r, Some(&c.values), now),
                    _ => peek_cells(limit, r, None, now),
                };
                out.push(RuleStatus { limit: index, policy, remaining, reset: Duration::from_micros(reset_us) });
            }
        }
        out
    }

    fn reset_now(&self, targets: &Targets<'_>) {
        for (_, limit, subject) in targets.present() {
            let (key, shard) = self.key_of(limit, subject);
            let mut shard = lock(&self.shards[shard]);
            shard.remove(&key);
            if limit.block_us > 0 {
                shard.remove(&block_key(&key));
            }
        }
    }
}

/// A sliding-window rule's remaining units and reset (µs), read without trimming: what is in
/// the window, and when the newest unit leaves it.
fn peek_log(log: Option<&Log>, w: u64, count: u64, now: u64) -> (u64, u64) {
    let Some(log) = log else { return (count, 0) };
    let (_, before) = log.window_start(now, w);
    let used = log.total() - before;
    let reset = match log.back() {
        Some((t, _)) if used > 0 => (t + w).saturating_sub(now),
        _ => 0,
    };
    (count.saturating_sub(used), reset)
}

/// An O(1) rule's remaining units and reset (µs), as the script's peek mode: the step of a call
/// of cost 0.
fn peek_cells(limit: &CompiledLimit, r: usize, stored: Option<&[Option<u64>]>, now: u64) -> (u64, u64) {
    let s = step_rule(limit, r, stored, now, 0, true);
    (s.left, s.wait)
}

/// One rule of an O(1) limit, from its stored values (`None`: nothing stored).
fn step_rule(
    limit: &CompiledLimit,
    r: usize,
    stored: Option<&[Option<u64>]>,
    now: u64,
    cost: u64,
    peek: bool,
) -> crate::algorithm::Step {
    let k = limit.algorithm.cells();
    let rule = limit.rules[r];
    let none = [None; 3];
    let v = stored.filter(|s| s.len() == k * limit.rules.len()).map_or(&none[..k], |s| &s[r * k..(r + 1) * k]);
    step(limit.algorithm, Rate { w: rule.window_us(), count: rule.count(), cap: limit.capacity(r) }, now, cost, v, peek)
}

fn each_step(
    limit: &CompiledLimit,
    stored: Option<&[Option<u64>]>,
    now: u64,
    cost: u64,
    mut f: impl FnMut(usize, crate::algorithm::Step),
) {
    for r in 0..limit.rules.len() {
        f(r, step_rule(limit, r, stored, now, cost, false));
    }
}

/// The shards a call holds, locked in index order so two calls cannot deadlock. One shard (the
/// usual case) needs no allocation.
enum Guards<'a> {
    One(MutexGuard<'a, Shard>),
    Many(Vec<(usize, MutexGuard<'a, Shard>)>),
}

impl<'a> Guards<'a> {
    fn lock(shards: &'a [Mutex<Shard>], wanted: impl Iterator<Item = usize> + Clone) -> Guards<'a> {
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

    fn get(&mut self, index: usize) -> &mut Shard {
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

/// The script's `deny`: the denying rule with the longest wait wins.
fn deny(d: &mut Decision, limit: usize, rule: usize, wait_us: u64) {
    deny_why(d, limit, rule, wait_us, Why::Exceeded);
}

/// [`deny`], for a refusal other than by a rule.
fn deny_why(d: &mut Decision, limit: usize, rule: usize, wait_us: u64, why: Why) {
    let wait = Duration::from_micros(wait_us);
    if d.allowed || wait > d.retry_after {
        *d = Decision::refused(limit, rule, wait, d.at_us, why);
    }
}

/// The script's `room`: while allowed, the rule with the least remaining is the tightest.
fn room(d: &mut Decision, tightest: &mut Option<u64>, limit: usize, rule: usize, left: u64, reset_us: u64) {
    if d.allowed && tightest.is_none_or(|t| left < t) {
        *tightest = Some(left);
        *d = Decision {
            limit,
            rule,
            remaining: left,
            reset: Duration::from_micros(reset_us),
            ..Decision::admitted(d.at_us)
        };
    }
}

/// One sliding-window rule, as the script's `sw` branch: the waits are computed only when needed.
#[allow(clippy::too_many_arguments)]
fn sliding(
    d: &mut Decision,
    tightest: &mut Option<u64>,
    limit: usize,
    rule: usize,
    count: u64,
    used: u64,
    cost: u64,
    window_us: u64,
    nth_wait: impl Fn(u64) -> u64,
) {
    if used + cost > count {
        deny(d, limit, rule, if cost <= count { nth_wait(used + cost - count) } else { window_us });
    } else {
        // The quota is whole again when this call's own units leave the window.
        room(d, tightest, limit, rule, count - used - cost, window_us);
    }
}

/// This thread's next store call number. One count serves both the sweep (every
/// `SWEEP_EVERY` calls) and the timing sample (one call in `MEMORY_SAMPLE`): a second
/// thread-local counter would cost every call its own load and store.
#[inline(always)]
fn next_tick() -> u32 {
    thread_local! {
        static TICK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    TICK.with(|t| {
        let next = t.get().wrapping_add(1);
        t.set(next);
        next
    })
}

impl MemoryStore {
    /// [`decide_now`](Self::decide_now), timed for the store's duration histogram. Out of
    /// line, so that the untimed call keeps the store's path inlined.
    #[cold]
    #[inline(never)]
    fn decide_timed(&self, call: &Call<'_>, tick: u32) -> Decision {
        let started = Instant::now();
        let decision = self.decide_now(call, tick);
        metrics::MEMORY.duration(started.elapsed());
        decision
    }
}

impl Store for MemoryStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        let tick = next_tick();
        if StoreMetrics::sampled(tick) {
            return Pending::Ready(Ok(self.decide_timed(call, tick)));
        }
        Pending::Ready(Ok(self.decide_now(call, tick)))
    }

    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        Answer::Ready(Ok(self.peek_now(targets)))
    }

    fn reset(&self, targets: &Targets<'_>) -> Answer<()> {
        self.reset_now(targets);
        Answer::Ready(Ok(()))
    }

    fn release(&self, release: &Release<'_>) -> Answer<()> {
        self.release_now(release);
        Answer::Ready(Ok(()))
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }

    fn label(&self) -> &'static str {
        "memory"
    }

    fn now_us(&self) -> u64 {
        MemoryStore::now_us(self)
    }
}
