//! The requests that read or forget counts: [`Peek`] and [`Reset`], each one store call.

use super::epoch_us;
use crate::error::StoreError;
use crate::limiter::answer::StoreFuture;
use crate::limiter::limit_set::LimitSet;
use crate::limiter::Limiter;
use crate::model::policy::RuleStatus;
use crate::model::subject::Subject;
use crate::store::{Answer, Store, Targets};
use std::future::IntoFuture;
use std::time::SystemTime;

/// Each rule's remaining quota and reset for some subjects, without consuming or recording
/// anything ([`Limiter::peek`]): `.await` it, or run it with [`blocking`](Self::blocking). One
/// round trip on Redis (one per slot on a cluster), exact on every algorithm. The statuses come
/// in limit order, rules in rule order (longest window first); a limit whose subject is missing
/// (or absent from the subjects) is left out. Store failures are returned as they are: the
/// failure policy is for calls, not for reads.
///
/// ```
/// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// let logins = Limiter::builder("login")
///     .limit(Limit::new(LimitType::Key, [Rule::new(Duration::from_secs(900), 5).unwrap()]))
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let alice = [Subject::bytes(&b"alice"[..])];
/// logins.check(&alice).blocking().unwrap();
/// let status = logins.peek(&alice).blocking().unwrap();
/// assert_eq!(status[0].remaining, 4);
/// assert_eq!(logins.peek(&alice).blocking().unwrap()[0].remaining, 4, "peeking consumes nothing");
/// ```
#[must_use = "a peek reads nothing until it is awaited or run with `.blocking()`"]
#[derive(Clone, Copy, Debug)]
pub struct Peek<'l, 's, 'a> {
    limiter: &'l Limiter,
    subjects: &'s [Subject<'a>],
    tier: Option<&'s str>,
    at: Option<u64>,
}

impl<'l, 's, 'a> Peek<'l, 's, 'a> {
    pub(in crate::limiter) fn new(limiter: &'l Limiter, subjects: &'s [Subject<'a>]) -> Peek<'l, 's, 'a> {
        Peek { limiter, subjects, tier: None, at: None }
    }

    /// Reads the rules of this tier (as [`Check::tier`](super::Check::tier)).
    pub fn tier(mut self, tier: impl Into<Option<&'s str>>) -> Self {
        self.tier = tier.into();
        self
    }

    /// Reads at the time `at` instead of the store's clock (as [`Check::at`](super::Check::at)).
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = Some(epoch_us(at));
        self
    }

    /// Reads, blocking the thread.
    pub fn blocking(self) -> Result<Vec<RuleStatus>, StoreError> {
        self.answer().finish_blocking()
    }

    /// The peek of the enforced limits in force (the statuses name each limit by its place
    /// among the limiter's limits, under the overrides file as without it).
    fn answer(&self) -> Answer<Vec<RuleStatus>> {
        let snapshot = self.limiter.snapshot_for(self.tier);
        let set = self.limiter.enforced(snapshot.as_deref());
        let index = set.index.clone();
        let renumber = move |mut statuses: Vec<RuleStatus>| {
            if let Some(index) = &index {
                for s in &mut statuses {
                    s.limit = index.get(s.limit).copied().unwrap_or(s.limit);
                }
            }
            statuses
        };
        match ask(self.limiter, set, self.subjects, self.at, |store, targets| store.peek(targets)) {
            Answer::Ready(r) => Answer::Ready(r.map(renumber)),
            Answer::Remote(fut) => Answer::Remote(Box::pin(async move { fut.await.map(renumber) })),
        }
    }
}

impl IntoFuture for Peek<'_, '_, '_> {
    type Output = Result<Vec<RuleStatus>, StoreError>;
    type IntoFuture = StoreFuture<Vec<RuleStatus>>;

    fn into_future(self) -> StoreFuture<Vec<RuleStatus>> {
        StoreFuture::of(self.answer())
    }
}

/// Forgets the counts of some subjects ([`Limiter::reset`]): the next call has the full quota,
/// as if the subject had never called, in every tier. A limit whose subject is missing
/// ([`Subject::missing`]) or absent from the subjects is left alone, so a login limited per IP
/// and per account can clear the account alone. One round trip on Redis (`DEL`; one per slot on
/// a cluster). `.await` it, or run it with [`blocking`](Self::blocking).
///
/// ```
/// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// let failures = Limiter::builder("login::failures")
///     .limit(Limit::new(LimitType::Key, [Rule::new(Duration::from_secs(900), 3).unwrap()]))
///     .store(Arc::new(MemoryStore::new()))
///     .build()
///     .unwrap();
/// let alice = [Subject::bytes(&b"alice"[..])];
/// for _ in 0..3 {
///     failures.check(&alice).blocking().unwrap();
/// }
/// assert!(failures.check(&alice).blocking().is_err());
/// // A successful login clears the failures.
/// failures.reset(&alice).blocking().unwrap();
/// assert!(failures.check(&alice).blocking().is_ok());
/// ```
#[must_use = "a reset forgets nothing until it is awaited or run with `.blocking()`"]
#[derive(Clone, Copy, Debug)]
pub struct Reset<'l, 's, 'a> {
    limiter: &'l Limiter,
    subjects: &'s [Subject<'a>],
}

impl<'l, 's, 'a> Reset<'l, 's, 'a> {
    pub(in crate::limiter) fn new(limiter: &'l Limiter, subjects: &'s [Subject<'a>]) -> Reset<'l, 's, 'a> {
        Reset { limiter, subjects }
    }

    /// Forgets, blocking the thread.
    pub fn blocking(self) -> Result<(), StoreError> {
        self.answer().finish_blocking()
    }

    fn answer(&self) -> Answer<()> {
        let (limiter, subjects) = (self.limiter, self.subjects);
        // Refusals this process cached for the limiter are forgotten with the counts. All of
        // the limiter's: a reset may name only some of a call's subjects (the account of a
        // login, not its IP), and the cache keys whole calls.
        limiter.forget_all_refusals();
        limiter.own().forget_reserves(subjects);
        let snapshot = limiter.snapshot();
        if let Some(snapshot) = &snapshot {
            snapshot.enforced.forget_reserves(subjects);
        }
        // Under the overrides file (or with tiers): the keys of every limit that counts,
        // enforced and shadow, in every tier (the subject may have called in any).
        let set = snapshot.as_ref().map_or(limiter.own(), |s| &s.counted);
        ask(limiter, set, subjects, None, |store, targets| store.reset(targets))
    }
}

impl IntoFuture for Reset<'_, '_, '_> {
    type Output = Result<(), StoreError>;
    type IntoFuture = StoreFuture<()>;

    fn into_future(self) -> StoreFuture<()> {
        StoreFuture::of(self.answer())
    }
}

/// Asks the store about the subjects of `set`'s limits: each limit's key bytes, `None` where the
/// subject is missing.
fn ask<T>(
    limiter: &Limiter,
    set: &LimitSet,
    subjects: &[Subject<'_>],
    now_us: Option<u64>,
    ask: impl FnOnce(&dyn Store, &Targets<'_>) -> Answer<T>,
) -> Answer<T> {
    let keys = set.targets(subjects);
    ask(limiter.store().as_ref(), &Targets { limits: &set.limits, subjects: &keys, now_us })
}
