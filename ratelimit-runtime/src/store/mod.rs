//! Stores: where the counts live. The algorithm (the script and its in-memory twin) decides; the
//! store only holds state and runs the decision atomically.
//!
//! [`Store`] is not an extension point: it is sealed by its supertrait, `Operations`, which no
//! user can name, and is implemented by this crate's stores only.

pub(crate) mod breaker;
pub(crate) mod memory;
mod operations;
pub(crate) mod overrides;
pub(crate) mod peek_reset;
pub(crate) mod redis;
mod unavailable;

pub use crate::error::StoreError;
pub use crate::model::key::{DEFAULT_PREFIX, MAX_PREFIX_LEN};
pub(crate) use crate::model::member::unique_member;
pub use memory::{MemoryStore, DEFAULT_MAX_KEYS};
pub(crate) use operations::{Answer, Call, Internal, Operations, Pending, Release, RemoteDecision, INTERNAL};
pub(crate) use overrides::{IndexEntries, OverrideCheck, OverrideWrite};
pub(crate) use peek_reset::Targets;
#[cfg(feature = "cluster")]
pub use redis::cluster::ClusterStore;
pub use redis::sentinel::{SentinelSpec, SentinelStore};
pub use redis::tls::TlsConfig;
pub use redis::RedisStore;
use std::sync::Arc;
pub(crate) use unavailable::Unavailable;

/// A place where counts live: [`MemoryStore`], [`RedisStore`], [`SentinelStore`] or
/// `ClusterStore` (feature `cluster`). Implemented by these stores only: what a store does for
/// a limiter is the library's own, out of users' reach (they hand a store to a limiter or a
/// [`Config`](crate::Config), which call it).
pub trait Store: Operations + std::any::Any + Send + Sync + 'static {
    /// A short description for logs, never holding a password: `memory`,
    /// `redis (redis://127.0.0.1:6379)`.
    fn describe(&self) -> String;
}

/// A shared handle to a store.
pub type StoreHandle = Arc<dyn Store>;

/// The memory store behind `store`, if that is what it is: found once, by the limiter and the
/// global configuration, so that their plain calls reach it without a virtual call.
pub(crate) fn memory_of(store: &StoreHandle) -> Option<Arc<MemoryStore>> {
    let any: Arc<dyn std::any::Any + Send + Sync> = store.clone();
    any.downcast::<MemoryStore>().ok()
}

#[cfg(test)]
mod tests {
    use super::{Answer, Call, Internal, MemoryStore, Operations, Pending, Release, Store, Targets, INTERNAL};
    use crate::model::policy::RuleStatus;
    use crate::rt::clock::{Clock, ManualClock, SystemClock};
    use crate::{Limit, LimitType, Limiter, Mode, Rule, Subject};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// The in-memory store, with its decisions counted.
    struct Counted {
        store: MemoryStore,
        decides: AtomicUsize,
    }

    impl Operations for Counted {
        fn decide(&self, call: &Call<'_>) -> Pending {
            self.decides.fetch_add(1, Ordering::Relaxed);
            self.store.decide(call)
        }
        fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
            self.store.peek(targets)
        }
        fn override_of(&self, key: &[u8], internal: Internal) -> Option<Arc<[u8]>> {
            self.store.override_of(key, internal)
        }
        fn decide_checked(&self, call: &Call<'_>, checks: &[super::OverrideCheck]) -> Pending {
            self.decides.fetch_add(1, Ordering::Relaxed);
            self.store.decide_checked(call, checks)
        }
        fn write_override(&self, write: &super::OverrideWrite<'_>) -> Answer<()> {
            self.store.write_override(write)
        }
        fn list_overrides(&self, index: &[u8], internal: Internal) -> Answer<super::IndexEntries> {
            self.store.list_overrides(index, internal)
        }
        fn release(&self, release: &Release<'_>) -> Answer<()> {
            self.store.release(release)
        }
        fn reset(&self, targets: &Targets<'_>) -> Answer<()> {
            self.store.reset(targets)
        }
        fn label(&self, internal: Internal) -> &'static str {
            self.store.label(internal)
        }
        fn is_remote(&self, internal: Internal) -> bool {
            self.store.is_remote(internal)
        }
        fn now_us(&self, internal: Internal) -> u64 {
            Operations::now_us(&self.store, internal)
        }
    }

    impl Store for Counted {
        fn describe(&self) -> String {
            "counted memory".to_owned()
        }
    }

    /// Each store says what it is: its metrics label, whether it is remote (the refusal cache
    /// is on by default for those: Sentinel's included), and the clock its refusals are timed by.
    #[test]
    fn each_store_states_what_it_is() {
        let t = Duration::from_millis(100);
        let nowhere = "redis://127.0.0.1:1";
        let stores: Vec<(Box<dyn Store>, &str, bool)> = vec![
            (Box::new(MemoryStore::new()), "memory", false),
            (Box::new(super::RedisStore::open(nowhere, t).unwrap()), "redis", true),
            (
                Box::new(super::SentinelStore::open(&super::SentinelSpec::new([nowhere], "m"), t).unwrap()),
                "sentinel",
                true,
            ),
            #[cfg(feature = "cluster")]
            (Box::new(super::ClusterStore::open(&[nowhere.to_owned()], t).unwrap()), "cluster", true),
            (Box::new(super::Unavailable::new(crate::error::StoreError::misconfigured("bad"))), "unavailable", false),
        ];
        for (store, label, remote) in &stores {
            assert_eq!((store.label(INTERNAL), store.is_remote(INTERNAL)), (*label, *remote), "{label}");
            if *label != "memory" {
                let system = SystemClock.now_us();
                assert!(store.now_us(INTERNAL).abs_diff(system) < 1_000_000, "{label}: the system clock");
            }
        }
        let manual = Arc::new(ManualClock::new(42));
        assert_eq!(MemoryStore::with_clock(manual).now_us(INTERNAL), 42, "memory: the store's own clock");
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
