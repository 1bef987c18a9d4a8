//! Peek and reset: read a subject's quota without consuming it, and forget a subject's counts
//! (failed logins after a successful one). Both act on the limits in force (as a decision
//! does), and finish a remote store's answer as decisions do: awaited, or blocked on.

use crate::error::StoreError;
use crate::limiter::limit_set::LimitSet;
use crate::limiter::Limiter;
use crate::model::policy::RuleStatus;
use crate::model::subject::Subject;
use crate::store::{Answer, Targets};
use std::time::SystemTime;

impl Limiter {
    /// Each rule's remaining quota and reset for `subjects` (one per limit, as for
    /// [`check`](Self::check)), without consuming or recording anything. One round trip on
    /// Redis (one per slot on a cluster), exact on every algorithm. The statuses come in limit
    /// order, rules in rule order (longest window first); a limit whose subject is missing
    /// (or absent from `subjects`) is left out. Store failures are returned as they are: the
    /// failure policy is for calls, not for reads.
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, store::MemoryStore, Rule, Subject};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let logins = Limiter::builder("login")
    ///     .limit(LimitType::Key, [Rule::new(Duration::from_secs(900), 5).unwrap()])
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let alice = [Subject::bytes(&b"alice"[..])];
    /// logins.check_blocking(&alice, 1).unwrap();
    /// let status = logins.peek_blocking(&alice).unwrap();
    /// assert_eq!(status[0].remaining, 4);
    /// assert_eq!(logins.peek_blocking(&alice).unwrap()[0].remaining, 4, "peeking consumes nothing");
    /// ```
    pub async fn peek(&self, subjects: &[Subject<'_>]) -> Result<Vec<RuleStatus>, StoreError> {
        self.peek_answer(subjects, None).finish().await
    }

    /// As [`peek`](Self::peek), at the time `at` instead of the store's clock, as
    /// [`check_at`](Self::check_at).
    pub async fn peek_at(&self, subjects: &[Subject<'_>], at: SystemTime) -> Result<Vec<RuleStatus>, StoreError> {
        self.peek_answer(subjects, Some(crate::limiter::epoch_us(at))).finish().await
    }

    /// As [`peek`](Self::peek), blocking the thread.
    pub fn peek_blocking(&self, subjects: &[Subject<'_>]) -> Result<Vec<RuleStatus>, StoreError> {
        self.peek_answer(subjects, None).finish_blocking()
    }

    /// Forgets the counts of `subjects` (one per limit, as for [`check`](Self::check)): the
    /// next call has the full quota, as if the subject had never called. A limit whose subject
    /// is missing ([`Subject::missing`]) or absent from `subjects` is left alone, so a login
    /// limited per IP and per account can clear the account alone. One round trip on Redis
    /// (`DEL`; one per slot on a cluster).
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, store::MemoryStore, Rule, Subject};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let failures = Limiter::builder("login::failures")
    ///     .limit(LimitType::Key, [Rule::new(Duration::from_secs(900), 3).unwrap()])
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let alice = [Subject::bytes(&b"alice"[..])];
    /// for _ in 0..3 {
    ///     failures.check_blocking(&alice, 1).unwrap();
    /// }
    /// assert!(failures.check_blocking(&alice, 1).is_err());
    /// // A successful login clears the failures.
    /// failures.reset_blocking(&alice).unwrap();
    /// assert!(failures.check_blocking(&alice, 1).is_ok());
    /// ```
    pub async fn reset(&self, subjects: &[Subject<'_>]) -> Result<(), StoreError> {
        self.reset_answer(subjects).finish().await
    }

    /// As [`reset`](Self::reset), blocking the thread.
    pub fn reset_blocking(&self, subjects: &[Subject<'_>]) -> Result<(), StoreError> {
        self.reset_answer(subjects).finish_blocking()
    }

    fn reset_answer(&self, subjects: &[Subject<'_>]) -> Answer<()> {
        // Refusals this process cached for the limiter are forgotten with the counts. All of
        // the limiter's: a reset may name only some of a call's subjects (the account of a
        // login, not its IP), and the cache keys whole calls.
        self.forget_all_refusals();
        self.own().forget_reserves(subjects);
        if let Some(snapshot) = self.snapshot() {
            snapshot.enforced.forget_reserves(subjects);
        }
        match self.snapshot() {
            None => self.ask(self.own(), subjects, None, |store, targets| store.reset(targets)),
            // Under the overrides file (or with tiers): the keys of every limit that counts,
            // enforced and shadow, in every tier (the subject may have called in any).
            Some(snapshot) => self.ask(&snapshot.counted, subjects, None, |store, targets| store.reset(targets)),
        }
    }

    /// The peek of the enforced limits in force (the statuses name each limit by its place
    /// among the limiter's limits, under the overrides file as without it).
    fn peek_answer(&self, subjects: &[Subject<'_>], now_us: Option<u64>) -> Answer<Vec<RuleStatus>> {
        let snapshot = self.snapshot();
        let set = snapshot.as_ref().map_or(self.own(), |s| &s.enforced);
        let index = set.index.clone();
        let renumber = move |mut statuses: Vec<RuleStatus>| {
            if let Some(index) = &index {
                for s in &mut statuses {
                    s.limit = index.get(s.limit).copied().unwrap_or(s.limit);
                }
            }
            statuses
        };
        match self.ask(set, subjects, now_us, |store, targets| store.peek(targets)) {
            Answer::Ready(r) => Answer::Ready(r.map(renumber)),
            Answer::Remote(fut) => Answer::Remote(Box::pin(async move { fut.await.map(renumber) })),
        }
    }

    /// Asks the store about the subjects of `set`'s limits: each limit's key bytes, `None`
    /// where the subject is missing.
    fn ask<T>(
        &self,
        set: &LimitSet,
        subjects: &[Subject<'_>],
        now_us: Option<u64>,
        ask: impl FnOnce(&dyn crate::store::Store, &Targets<'_>) -> Answer<T>,
    ) -> Answer<T> {
        let keys = set.targets(subjects);
        ask(self.store().as_ref(), &Targets { limits: &set.limits, subjects: &keys, now_us })
    }
}
