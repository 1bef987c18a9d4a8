//! The requests a limiter answers, each described once and run either way: `.await` it (from
//! any async runtime), or [`blocking`](Check::blocking) (from any thread, no runtime needed).
//! [`Check`] decides a call (with its cost, tier, pinned time and wait), [`Peek`] reads the
//! quotas, [`Reset`] forgets the counts. Every decision goes through the one decision path
//! (`Limiter::decide`); awaiting and blocking differ only in how a store's answer is waited for.

pub use super::answer::StoreFuture;
use super::decide::Step;
use super::limit_set::LimitSet;
use super::permit::Permit;
use super::wait;
use super::Limiter;
use crate::error::StoreError;
use crate::metrics;
use crate::model::policy::RuleStatus;
use crate::model::refusal::RateLimited;
use crate::model::subject::Subject;
use crate::rt::io;
use crate::store::{Answer, Store, Targets};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// µs since the Unix epoch of a pinned time (0 before the epoch).
fn epoch_us(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A call to decide ([`Limiter::check`]): `.await` it, or run it with
/// [`blocking`](Self::blocking). Options may be given in any order, and all work either way.
#[must_use = "a check decides nothing until it is awaited or run with `.blocking()`"]
#[derive(Clone, Copy, Debug)]
pub struct Check<'l, 's, 'a> {
    pub(super) limiter: &'l Limiter,
    pub(super) subjects: &'s [Subject<'a>],
    pub(super) cost: u64,
    pub(super) tier: Option<&'s str>,
    /// The time pinned by the caller (µs since the Unix epoch).
    pub(super) at: Option<u64>,
    pub(super) wait: Option<Duration>,
}

impl<'l, 's, 'a> Check<'l, 's, 'a> {
    #[inline]
    pub(super) fn new(limiter: &'l Limiter, subjects: &'s [Subject<'a>]) -> Check<'l, 's, 'a> {
        Check { limiter, subjects, cost: 1, tier: None, at: None, wait: None }
    }

    /// The units this call consumes (default 1). A cost above a rule's capacity is refused at
    /// once with [`Cause::CostTooHigh`](crate::Cause::CostTooHigh).
    #[inline]
    pub fn cost(mut self, units: u64) -> Self {
        self.cost = units;
        self
    }

    /// The caller's tier (e.g. the user's plan; `None`: no tier): decided by the tier's rules
    /// where code ([`Limit::tier`](crate::Limit::tier), [`Config::tier`](crate::Config::tier))
    /// or the overrides file gives them, else by the limits' own. Any text may be passed: a tier
    /// nobody configured is decided as a call without a tier, and leaves no trace.
    #[inline]
    pub fn tier(mut self, tier: impl Into<Option<&'s str>>) -> Self {
        self.tier = tier.into();
        self
    }

    /// Decides at the time `at` instead of the store's clock: deterministic tests, and platforms
    /// that forbid `TIME` in scripts. With [`wait`](Self::wait), each retry is decided at `at`
    /// plus the time waited so far.
    #[inline]
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = Some(epoch_us(at));
        self
    }

    /// Waits for room instead of refusing: a call refused for lack of room (not a store failure
    /// or a missing subject) sleeps until its retry-after, with a little jitter, and tries
    /// again, until it is admitted or until the next sleep would end past `max` from the first
    /// try: then the refusal is returned at once, without sleeping. For workers that share one
    /// budget toward an outside API (one process, or many on one Redis). Awaited, it sleeps on
    /// the library's timer (any async runtime); blocking, it blocks the thread.
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::{Duration, Instant}};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let api = Limiter::builder("partner_api")
    ///     .limit(Limit::new(LimitType::Global, [Rule::new(Duration::from_millis(100), 2).unwrap()]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let start = Instant::now();
    /// for _ in 0..4 {
    ///     api.check(&[Subject::global()]).wait(Duration::from_secs(5)).await.unwrap();
    /// }
    /// assert!(start.elapsed() >= Duration::from_millis(100), "the third call waited for room");
    /// // A wait longer than allowed refuses at once.
    /// assert!(api.check(&[Subject::global()]).wait(Duration::from_millis(1)).blocking().is_err());
    /// # }
    /// ```
    #[inline]
    pub fn wait(mut self, max: Duration) -> Self {
        self.wait = Some(max);
        self
    }

    /// Decides the call, blocking the thread while a remote store answers (and while it waits,
    /// with [`wait`](Self::wait)): for plain `fn`s. Needs no async runtime of the caller's.
    #[inline]
    pub fn blocking(self) -> Result<Permit<'l>, RateLimited> {
        match self.wait {
            None => self.once_blocking(self.at),
            Some(_) => self.wait_blocking(Instant::now, std::thread::sleep),
        }
    }

    /// Decides the call, sleeping out refusals for lack of room as [`wait`](Self::wait) says,
    /// on the time and sleep given (tests drive a manual clock). Each try is a decision of its
    /// own, at the pinned time (if any) plus the time waited.
    pub(super) fn wait_blocking(
        &self,
        now: impl Fn() -> Instant,
        sleep: impl FnMut(Duration),
    ) -> Result<Permit<'l>, RateLimited> {
        let max = self.wait.unwrap_or(Duration::ZERO);
        wait::blocking(max, now, sleep, |waited| {
            let waited = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
            self.once_blocking(self.at.map(|at| at.saturating_add(waited)))
        })
    }

    /// One decision at `pinned` (µs since the epoch, or the store's time), blocking.
    #[inline]
    pub(super) fn once_blocking(&self, pinned: Option<u64>) -> Result<Permit<'l>, RateLimited> {
        let started = metrics::start_timer();
        let mut deciding = self.limiter.decide(self.subjects, self.cost, pinned, self.tier);
        let mut step = deciding.start();
        while let Step::Store(answer) = step {
            step = deciding.answer(io::block_on(answer));
        }
        self.limiter.metrics().report(deciding.outcome(), started, self.subjects);
        deciding.decided()
    }
}

impl<'l, 's, 'a> IntoFuture for Check<'l, 's, 'a> {
    type Output = Result<Permit<'l>, RateLimited>;
    type IntoFuture = CheckFuture<'l, 's, 'a>;

    #[inline]
    fn into_future(self) -> CheckFuture<'l, 's, 'a> {
        CheckFuture { check: self, under_way: None, sleep: None, since: None }
    }
}

/// A [`Check`] being awaited.
#[must_use = "futures do nothing unless awaited"]
pub struct CheckFuture<'l, 's, 'a> {
    check: Check<'l, 's, 'a>,
    /// The decision waiting for a remote store's answer, with its start for the metrics.
    under_way:
        Option<(super::decide::Deciding<'l, 's, 'a>, Option<Instant>, io::Remote<crate::model::decision::Decision>)>,
    /// The sleep before the next try, when waiting for room.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the first try started (what a wait is measured from).
    since: Option<Instant>,
}

impl<'l> Future for CheckFuture<'l, '_, '_> {
    type Output = Result<Permit<'l>, RateLimited>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if let Some(sleep) = &mut this.sleep {
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
            }
            let (mut deciding, started, step) = match this.under_way.take() {
                Some((mut deciding, started, mut remote)) => match Pin::new(&mut remote).poll(cx) {
                    Poll::Pending => {
                        this.under_way = Some((deciding, started, remote));
                        return Poll::Pending;
                    }
                    Poll::Ready(answer) => {
                        let step = deciding.answer(answer);
                        (deciding, started, step)
                    }
                },
                None => {
                    let check = &this.check;
                    let pinned = match (check.at, this.since) {
                        (Some(at), Some(since)) => Some(at.saturating_add(elapsed_us(since))),
                        (at, _) => at,
                    };
                    this.since.get_or_insert_with(Instant::now);
                    let started = metrics::start_timer();
                    let mut deciding = check.limiter.decide(check.subjects, check.cost, pinned, check.tier);
                    let step = deciding.start();
                    (deciding, started, step)
                }
            };
            if let Step::Store(answer) = step {
                this.under_way = Some((deciding, started, io::Remote::new(answer)));
                continue;
            }
            let check = &this.check;
            check.limiter.metrics().report(deciding.outcome(), started, check.subjects);
            let refused = match deciding.decided() {
                Ok(permit) => return Poll::Ready(Ok(permit)),
                Err(refused) => refused,
            };
            let since = this.since.map_or(Duration::ZERO, |s| s.elapsed());
            match check.wait.and_then(|max| wait::next_sleep(&refused, since, max)).map(io::sleep) {
                Some(Ok(sleep)) => this.sleep = Some(sleep),
                _ => return Poll::Ready(Err(refused)),
            }
        }
    }
}

/// µs since `since`.
fn elapsed_us(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

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
    pub(super) fn new(limiter: &'l Limiter, subjects: &'s [Subject<'a>]) -> Peek<'l, 's, 'a> {
        Peek { limiter, subjects, tier: None, at: None }
    }

    /// Reads the rules of this tier (as [`Check::tier`]).
    pub fn tier(mut self, tier: impl Into<Option<&'s str>>) -> Self {
        self.tier = tier.into();
        self
    }

    /// Reads at the time `at` instead of the store's clock (as [`Check::at`]).
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
    pub(super) fn new(limiter: &'l Limiter, subjects: &'s [Subject<'a>]) -> Reset<'l, 's, 'a> {
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
