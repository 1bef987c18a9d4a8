//! What a limiter's calls look at besides their limits (the subjects' runtime overrides, the
//! local refusal cache), resolved once per limiter and read as one byte per call: most
//! limiters have neither, and a call of such a "plain" limiter tests one bit for both. The same
//! byte says whether its calls can go straight to the memory store (see `plain.rs`): what that
//! takes besides the switches never changes for a limiter, so it is resolved with them.

use super::Limiter;
use crate::config;
use crate::store::{MemoryStore, INTERNAL};
use std::sync::atomic::{AtomicU8, Ordering};

/// A limiter's switches, as resolved ([`Limiter::switches`]).
#[derive(Clone, Copy)]
pub(crate) struct Switches(u8);

/// Calls decide with the subjects' runtime overrides.
const OVERRIDES: u8 = 1;
/// Calls look in (and fill) the local refusal cache.
const REFUSAL_CACHE: u8 = 2;
/// Resolved from the environment while there is no global configuration yet (it may still
/// say otherwise once it is set).
const PROVISIONAL: u8 = 4;
/// Resolved for good: given in code, or read from the global configuration.
const FOR_GOOD: u8 = 8;
/// Neither switch, one limit (that the memory store's one-limit path takes), no `sync` limit,
/// and the memory store: a call asks the store directly when its limits are in force as built
/// (see `plain.rs`).
const PLAIN_ON_MEMORY: u8 = 16;

impl Switches {
    /// Neither runtime overrides nor the refusal cache.
    #[inline]
    pub(crate) fn plain(self) -> bool {
        self.0 & (OVERRIDES | REFUSAL_CACHE) == 0
    }

    /// A limiter whose calls may go straight to the memory store (see [`PLAIN_ON_MEMORY`]).
    #[inline]
    pub(crate) fn plain_on_memory(self) -> bool {
        self.0 & PLAIN_ON_MEMORY != 0
    }

    #[inline]
    pub(crate) fn overrides(self) -> bool {
        self.0 & OVERRIDES != 0
    }

    #[inline]
    pub(crate) fn refusal_cache(self) -> bool {
        self.0 & REFUSAL_CACHE != 0
    }
}

/// The resolved switches of one limiter: 0 until its first call.
pub(super) struct Resolved(AtomicU8);

impl Resolved {
    pub(super) fn new() -> Resolved {
        Resolved(AtomicU8::new(0))
    }
}

impl Limiter {
    /// Whether calls decide with the subjects' runtime overrides (see
    /// [`LimiterBuilder::runtime_overrides`](super::LimiterBuilder::runtime_overrides)), and
    /// whether the local refusal cache answers for this limiter on its store. Resolved once:
    /// the answers change only when the global configuration is first set (until then the
    /// environment's switches stand in for it), and a limiter's store never.
    #[inline(always)]
    pub(crate) fn switches(&self) -> Switches {
        let s = self.inner.switches.0.load(Ordering::Relaxed);
        if s & FOR_GOOD != 0 || (s & PROVISIONAL != 0 && !config::global::is_set()) {
            return Switches(s);
        }
        self.resolve_switches()
    }

    #[cold]
    #[inline(never)]
    fn resolve_switches(&self) -> Switches {
        // Read first: a configuration set after this look is seen on a later call.
        let global = config::global::is_set();
        let store = self.store();
        let (overrides, cache) = (self.inner.runtime_overrides, self.inner.refusal_cache);
        let for_good = global || (overrides.is_some() && cache.is_some());
        let overrides = overrides.unwrap_or_else(config::global::runtime_overrides);
        let cache = cache
            .unwrap_or_else(|| config::global::refusal_cache_settings().0.unwrap_or_else(|| store.is_remote(INTERNAL)));
        let own = self.own();
        let plain = !overrides
            && !cache
            && matches!(&own.limits[..], [limit] if MemoryStore::takes_one(limit))
            && own.synced.is_none()
            && self.memory_store().is_some();
        let s = if overrides { OVERRIDES } else { 0 }
            | if cache { REFUSAL_CACHE } else { 0 }
            | if plain { PLAIN_ON_MEMORY } else { 0 }
            | if for_good { FOR_GOOD } else { PROVISIONAL };
        self.inner.switches.0.store(s, Ordering::Relaxed);
        Switches(s)
    }
}
