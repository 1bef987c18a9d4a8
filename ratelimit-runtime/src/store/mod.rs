//! Stores: where the counts live. The algorithm (the script and its in-memory twin) decides; the
//! store only holds state and runs the decision atomically.

// `Call`, `Answer` and `Targets` are the library's own: `Store` is sealed, so no one outside
// implements its methods or has a `Call` to pass them.
#![allow(private_interfaces)]

pub(crate) mod breaker;
pub(crate) mod memory;
pub(crate) mod peek_reset;
pub(crate) mod redis;

pub use crate::error::ErrorSource;
pub use crate::error::StoreError;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
pub use crate::model::key::{DEFAULT_PREFIX, MAX_PREFIX_LEN};
pub use memory::MemoryStore;
pub(crate) use peek_reset::Targets;
#[cfg(feature = "cluster")]
pub use redis::cluster::ClusterStore;
pub use redis::sentinel::{SentinelSpec, SentinelStore};
pub use redis::tls::TlsConfig;
pub use redis::RedisStore;
use std::sync::Arc;

pub(crate) use crate::rt::io::RemoteAnswer;

/// What a store answers ([`Store::decide`], [`Store::peek`], [`Store::reset`]): at once (in
/// memory), or a future for the I/O runtime (with the store's timeout applied inside), which
/// async callers await and blocking callers block on.
pub(crate) enum Answer<T> {
    /// Already answered.
    Ready(Result<T, StoreError>),
    /// To be run on the I/O runtime.
    Remote(RemoteAnswer<T>),
}

impl<T: Send + 'static> Answer<T> {
    /// The answer, blocking the thread until it comes.
    pub(crate) fn finish_blocking(self) -> Result<T, StoreError> {
        match self {
            Answer::Ready(r) => r,
            Answer::Remote(fut) => crate::rt::io::block_on(fut),
        }
    }
}

/// A decision still travelling to a remote store.
pub(crate) type RemoteDecision = RemoteAnswer<Decision>;

/// What [`Store::decide`] answers.
pub(crate) type Pending = Answer<Decision>;

/// One call to decide: every limit of the call with its subject, and the cost.
pub(crate) struct Call<'a> {
    pub(crate) limits: &'a [CompiledLimit],
    /// One subject (key bytes, empty for global) per limit.
    pub(crate) subjects: &'a [&'a [u8]],
    pub(crate) cost: u64,
    /// Pinned time in µs since the Unix epoch (tests and platforms without `TIME`).
    pub(crate) now_us: Option<u64>,
    /// How many of the limits, at the end, are shadow limits (0: none). The others decide the
    /// call all or nothing; if they admit it, the shadow limits are decided as a group in the
    /// same atomic step: recorded in all of them if all have room, else in none, the decision
    /// (an admission) then carrying their refusal ([`Decision::shadow_refusal`]). If the others
    /// refuse, the shadow limits are neither decided nor counted.
    pub(crate) shadow: usize,
}

impl Call<'_> {
    /// How many limits decide the call (the ones before the shadow limits).
    #[inline]
    pub(crate) fn enforced(&self) -> usize {
        self.limits.len().saturating_sub(self.shadow)
    }
}

/// What a call admitted and now gives back ([`Store::release`]): a refund of its units, and/or
/// the concurrency slots it held.
pub(crate) struct Release<'a> {
    /// The call's limits and subjects, as decided, and its cost.
    pub(crate) call: Call<'a>,
    /// Which of the call's limits give back (a refund: the rate limits; the end of a call: the
    /// concurrency limits; both at once when a refunded call ends).
    pub(crate) indices: &'a [usize],
    /// When the call was admitted (µs, the store's clock): the window its units count in.
    pub(crate) at_us: u64,
    /// The call's id in the store (its sliding-window entries and slots).
    pub(crate) member: [u8; 16],
}

mod sealed {
    pub trait Sealed {}
}

/// A place where counts live: [`MemoryStore`],
/// [`RedisStore`], [`SentinelStore`] or `ClusterStore` (feature `cluster`).
/// Sealed: the decision semantics are the library's.
pub trait Store: sealed::Sealed + Send + Sync + 'static {
    /// Decides `call` atomically: every rule of every limit passes and the call is recorded in
    /// all of them, or nothing is recorded.
    fn decide(&self, call: &Call<'_>) -> Pending;

    /// Each rule's remaining quota and reset for the targets' subjects, recording nothing
    /// (one round trip; per slot on a cluster). In limit order, rules in rule order.
    fn peek(&self, _targets: &Targets<'_>) -> Answer<Vec<crate::model::policy::RuleStatus>> {
        peek_reset::unsupported("peek")
    }

    /// Gives back what an admitted call took from the limits `release.indices` (one round trip;
    /// per slot on a cluster): its units, where they still count (a refund), and its
    /// concurrency slots. Never below zero, never twice for one call.
    fn release(&self, _release: &Release<'_>) -> Answer<()> {
        peek_reset::unsupported("release")
    }

    /// Forgets the targets' subjects' counts (one round trip; per slot on a cluster).
    fn reset(&self, _targets: &Targets<'_>) -> Answer<()> {
        peek_reset::unsupported("reset")
    }

    /// A short description for logs: `memory`, `redis://127.0.0.1:6379`.
    fn describe(&self) -> String;

    /// The `store` label of its metrics: `memory`, `redis`, `cluster`, `sentinel`,
    /// `unavailable`. Never holds an address or a password.
    fn label(&self) -> &'static str {
        "other"
    }

    /// Whether decisions travel over the network: the local refusal cache is on by default
    /// for such stores.
    fn is_remote(&self) -> bool {
        false
    }

    /// Now, in µs, on the clock the local refusal cache times this store's refusals by: the
    /// store's own clock in memory, the system clock for remote stores (a refusal is timed from
    /// before the call left, so it never outlives the server's retry-after).
    fn now_us(&self) -> u64 {
        crate::rt::clock::Clock::now_us(&crate::rt::clock::SystemClock)
    }
}

impl sealed::Sealed for memory::MemoryStore {}
impl sealed::Sealed for redis::RedisStore {}
impl sealed::Sealed for redis::sentinel::SentinelStore {}
impl sealed::Sealed for Unavailable {}
#[cfg(feature = "cluster")]
impl sealed::Sealed for redis::cluster::ClusterStore {}

/// A shared handle to a store.
pub type StoreHandle = Arc<dyn Store>;

/// A store that could not be built (for example a malformed `REDIS_URL`): every call fails with
/// the reason, so the failure policy applies instead of a silent fallback to memory.
pub(crate) struct Unavailable(pub(crate) StoreError);

impl Unavailable {
    fn error(&self) -> StoreError {
        self.0.clone()
    }
}

impl Store for Unavailable {
    fn decide(&self, _call: &Call<'_>) -> Pending {
        let error = self.error();
        crate::metrics::UNAVAILABLE.error(crate::metrics::ErrorKind::of(&error));
        Pending::Ready(Err(error))
    }
    fn peek(&self, _targets: &Targets<'_>) -> Answer<Vec<crate::model::policy::RuleStatus>> {
        Answer::Ready(Err(self.error()))
    }
    fn reset(&self, _targets: &Targets<'_>) -> Answer<()> {
        Answer::Ready(Err(self.error()))
    }
    fn release(&self, _release: &Release<'_>) -> Answer<()> {
        Answer::Ready(Err(self.error()))
    }
    fn describe(&self) -> String {
        format!("unavailable ({})", self.0)
    }
    fn label(&self) -> &'static str {
        "unavailable"
    }
}

#[cfg(test)]
mod tests {
    use super::{Call, MemoryStore, Pending, Store, Targets};
    use crate::{Limit, LimitType, Limiter, Mode, Rule, Subject};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// The in-memory store, with its decisions counted.
    struct Counted {
        store: MemoryStore,
        decides: AtomicUsize,
    }

    impl super::sealed::Sealed for Counted {}

    impl Store for Counted {
        fn decide(&self, call: &Call<'_>) -> Pending {
            self.decides.fetch_add(1, Ordering::Relaxed);
            self.store.decide(call)
        }
        fn peek(&self, targets: &Targets<'_>) -> super::Answer<Vec<crate::model::policy::RuleStatus>> {
            self.store.peek(targets)
        }
        fn describe(&self) -> String {
            "counted memory".to_owned()
        }
    }

    fn rule(count: u64) -> Rule {
        Rule::new(Duration::from_secs(60), count).unwrap()
    }

    /// An enforced limit and a shadow one: one store call per decision; the shadow limit counts
    /// what it admitted, records nothing when it would refuse (the call passes), and is not
    /// decided when the enforced limit refuses.
    #[test]
    fn shadow_limits_ride_in_the_enforced_limits_call() {
        let counted = Arc::new(Counted { store: MemoryStore::new(), decides: AtomicUsize::new(0) });
        let limiter = Limiter::builder("store::shadow_in_one_call")
            .limit(Limit::new(LimitType::Key, [rule(5)]))
            .limit(Limit::new(LimitType::Global, [rule(4)]).mode(Mode::Shadow))
            .store(counted.clone())
            .build()
            .unwrap();
        let subjects = [Subject::bytes(&b"alice"[..]), Subject::global()];
        let mut outcomes = Vec::new();
        // Costs 1, 1 (shadow: 2 of 4), 3 (enforced: 5 of 5; shadow would hold 5: refuses and
        // records nothing), 1 (enforced refuses: shadow untouched).
        for (n, cost) in [1, 1, 3, 1].into_iter().enumerate() {
            outcomes.push(limiter.check(&subjects).cost(cost).blocking().is_ok());
            assert_eq!(counted.decides.load(Ordering::Relaxed), n + 1, "one store call per decision");
        }
        assert_eq!(outcomes, [true, true, true, false]);
        // The shadow limit's count, read by a limiter of the same identity that enforces it.
        let twin = Limiter::builder("store::shadow_in_one_call")
            .limit(Limit::new(LimitType::Global, [rule(4)]))
            .store(counted.clone())
            .build()
            .unwrap();
        let status = twin.peek(&[Subject::global()]).blocking().unwrap();
        assert_eq!(status.iter().map(|s| s.remaining).collect::<Vec<_>>(), [2], "2 of 4 counted");
        // The enforced limit's quota is the permit's, not the shadow limit's.
        let other = [Subject::bytes(&b"bob"[..]), Subject::global()];
        let permit = limiter.check(&other).blocking().unwrap();
        assert_eq!(permit.quota().map(|q| q.remaining), Some(4));
    }
}
