//! The embedded store: the same decisions as the Redis script, computed in process.
//!
//! Sharded maps behind mutexes; each log is a deque of (time, cumulative units) so a window's
//! count and the exact retry-after are binary searches. Idle logs are swept as the shard is used,
//! so memory is bounded by the subjects active within their longest window.

use super::peek_reset::Targets;
use super::{Answer, Call, Internal, Operations, Pending, Release, Store};
use crate::algorithm::Algorithm;
use crate::metrics::{StoreMetrics, MEMORY_SAMPLE};
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::policy::RuleStatus;
use crate::rt::clock::Clock;
use foldhash::fast::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod bound;
mod carry;
mod check;
mod general;
mod inline;
mod log;
mod one;
mod overrides;
mod release;
mod shard;

pub use bound::DEFAULT_MAX_KEYS;
use check::{peek_cells, peek_log};
use shard::{block_key, shard_of, Locked, State};

/// Every this many decisions (per thread) the next shard in turn drops its expired states, so
/// every shard is swept while there is any traffic, whichever subjects it concerns.
const SWEEP_EVERY: u32 = 256;

/// Of every [`MEMORY_SAMPLE`] decisions of a thread, the first two are its rare ones: the one
/// whose duration the metrics sample, and the one that may sweep (see [`SWEEP_EVERY`]). One test
/// sends both out of line; the other calls test nothing else. One period for both, so that
/// every call sent out of line has something to do there.
const _: () = assert!(SWEEP_EVERY == MEMORY_SAMPLE);

/// The in-memory store: the default when no Redis is configured.
///
/// It holds at most [`max_keys`](MemoryStore::max_keys) keys (a subject's state under one
/// limit, or its penalty): when full, a new subject makes room by forgetting one not used
/// lately (the oldest not used since it was placed, a second chance), as nginx's `limit_req`
/// zones do. A forgotten subject starts afresh when it calls
/// again: under a flood of new subjects, the bound keeps the process alive and the subjects
/// that keep calling keep their counts.
pub struct MemoryStore {
    shards: Box<[Locked]>,
    /// `shards.len() - 1` (a power of two less one): picks a key's shard.
    mask: usize,
    max_keys: usize,
    /// Evictions not yet in a warning (see `warn_evicting`).
    unlogged: AtomicU64,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    /// `clock` itself when it is the CPU's counter (`MemoryStore::new`), read without a call
    /// through `dyn Clock`.
    counter: Option<&'static crate::rt::clock::CounterClock>,
    /// Its duration histogram, one decision in [`MEMORY_SAMPLE`](crate::metrics::MEMORY_SAMPLE)
    /// timed.
    metrics: StoreMetrics,
    /// Its runtime overrides.
    overrides: overrides::Overrides,
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
            Some(counter) => {
                let mut store = MemoryStore::with_clock(Arc::new(*counter));
                store.counter = Some(counter);
                store
            }
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
            shards: Box::new([]),
            mask: 0,
            max_keys: 0,
            unlogged: AtomicU64::new(0),
            hasher: RandomState::default(),
            clock,
            counter: None,
            metrics: StoreMetrics::new("memory"),
            overrides: overrides::Overrides::default(),
        }
        .max_keys(DEFAULT_MAX_KEYS)
    }

    /// How many subjects hold state now (after dropping the expired ones).
    pub fn len(&self) -> usize {
        let now = self.now_us();
        self.shards
            .iter()
            .map(|s| {
                let mut shard = s.lock();
                shard.sweep(now);
                shard.len()
            })
            .sum()
    }

    /// Whether no subject holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides `call`.
    #[inline]
    fn decide_now(&self, call: &Call<'_>) -> Decision {
        // Most calls have one limit: one key on the stack, one lookup, one pass (one.rs).
        if let Some((limit, subject)) = Self::one_limit(call) {
            return self.decide_one(limit, subject, call.cost, call.now_us);
        }
        self.decide_general(call)
    }

    /// Decides one of a thread's rare calls, numbered `tick` (see [`next_tick`]): timed for the
    /// metrics' sample, then, every `SWEEP_EVERY` calls, one shard in turn swept (unless it is
    /// busy) at the decision's time.
    #[cold]
    #[inline(never)]
    fn decide_rare(&self, call: &Call<'_>, tick: u32) -> Decision {
        let decision = match StoreMetrics::sampled(tick) {
            true => self.decide_timed(call),
            false => self.decide_now(call),
        };
        if tick.is_multiple_of(SWEEP_EVERY) {
            self.sweep_one((tick / SWEEP_EVERY) as usize & self.mask, decision.at_us);
        }
        decision
    }

    #[cold]
    #[inline(never)]
    fn sweep_one(&self, index: usize, now: u64) {
        if let Some(mut shard) = self.shards[index].try_lock() {
            // A call's pinned time may run ahead of the clock (a replay, a test): sweeping by
            // it would drop states that calls at other pinned times still read. Sweeping
            // never runs ahead of the store's own clock.
            shard.sweep_idle(now.min(self.now_us()));
            self.report(&mut shard);
        }
    }

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
        (key, shard_of(hash, self.mask))
    }

    /// The script's peek mode, in process.
    fn peek_now(&self, targets: &Targets<'_>) -> Vec<RuleStatus> {
        let now = targets.now_us.unwrap_or_else(|| self.now_us());
        let mut out = Vec::new();
        for (index, limit, subject) in targets.present() {
            let (key, shard) = self.key_of(limit, subject);
            let shard = self.shards[shard].lock();
            let state = shard.read(&key).filter(|st| !st.expired(now));
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

    /// A `DEL` of the targets' keys and blocks, in process.
    fn reset_now(&self, targets: &Targets<'_>) {
        for (_, limit, subject) in targets.present() {
            let (key, shard) = self.key_of(limit, subject);
            let mut shard = self.shards[shard].lock();
            shard.remove(&key);
            if limit.block_us > 0 {
                shard.remove(&block_key(&key));
            }
        }
    }

    /// [`decide_now`](Self::decide_now), timed for the store's duration histogram.
    fn decide_timed(&self, call: &Call<'_>) -> Decision {
        let started = Instant::now();
        let decision = self.decide_now(call);
        self.metrics.duration(started.elapsed());
        decision
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

/// This thread's next store call number (see [`next_tick`]) when it is one of its rare calls
/// ([`MemoryStore::decide_rare`]), else `None`.
#[inline(always)]
fn rare_tick() -> Option<u32> {
    let tick = next_tick();
    (tick % MEMORY_SAMPLE <= 1).then_some(tick)
}

impl MemoryStore {
    /// Decides a call of `limit` alone for `subject` (a limit the one-limit path
    /// [takes](Self::takes_one)), of `cost` units at `pinned` (µs since the epoch, or the
    /// store's time): what [`Operations::decide`] answers, without the wrapping a remote
    /// store's answer needs or a `Call` built for it (a limiter's plain call, see
    /// `limiter/plain.rs`: building one, and testing again what the limiter knows of its limit,
    /// cost that call 26 instructions of 591). A key too long for the stack goes the general
    /// way, as it would from `decide_now`.
    #[inline(always)]
    pub(crate) fn decide_one_limit(
        &self,
        limit: &CompiledLimit,
        subject: &[u8],
        cost: u64,
        pinned: Option<u64>,
    ) -> Decision {
        let tick = rare_tick();
        if tick.is_none() && Self::fits_one(subject) {
            return self.decide_one(limit, subject, cost, pinned);
        }
        self.decide_one_limit_cold(limit, subject, cost, pinned, tick)
    }

    /// [`decide_one_limit`](Self::decide_one_limit) of a rare call or a long key, with the
    /// `Call` the other paths take.
    #[cold]
    #[inline(never)]
    fn decide_one_limit_cold(
        &self,
        limit: &CompiledLimit,
        subject: &[u8],
        cost: u64,
        pinned: Option<u64>,
        tick: Option<u32>,
    ) -> Decision {
        let subjects = [subject];
        let call = Call { limits: std::slice::from_ref(limit), subjects: &subjects, cost, now_us: pinned, shadow: 0 };
        match tick {
            Some(tick) => self.decide_rare(&call, tick),
            None => self.decide_now(&call),
        }
    }
}

impl Operations for MemoryStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        Pending::Ready(Ok(match rare_tick() {
            None => self.decide_now(call),
            Some(tick) => self.decide_rare(call, tick),
        }))
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

    fn override_of(&self, key: &[u8], _: Internal) -> Option<Arc<[u8]>> {
        self.overrides.get(key, self.now_us())
    }

    /// The limiter read the overrides in force here ([`override_of`](Self::override_of)): no
    /// check to make.
    fn decide_checked(&self, call: &Call<'_>, _checks: &[super::OverrideCheck]) -> Pending {
        self.decide(call)
    }

    fn write_override(&self, write: &super::OverrideWrite<'_>) -> Answer<()> {
        Answer::Ready(self.overrides.write(write, self.now_us()))
    }

    fn list_overrides(&self, index: &[u8], _: Internal) -> Answer<super::IndexEntries> {
        Answer::Ready(Ok(self.overrides.list(index, self.now_us())))
    }

    fn label(&self, _: Internal) -> &'static str {
        self.metrics.label()
    }

    /// Decisions are made in process.
    fn is_remote(&self, _: Internal) -> bool {
        false
    }

    /// The store's own clock: the one its refusals were decided by.
    fn now_us(&self, _: Internal) -> u64 {
        MemoryStore::now_us(self)
    }
}

impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory".to_owned()
    }
}
