//! The requests a limiter answers, each described once and run either way: `.await` it (from
//! any async runtime), or [`blocking`](Check::blocking) (from any thread, no runtime needed).
//! [`Check`] decides a call (with its cost, tier, pinned time and wait), [`Peek`] reads the
//! quotas, [`Reset`] forgets the counts. Every decision goes through the one decision path
//! (`Limiter::decide`); awaiting and blocking differ only in how a store's answer is waited for.

mod peek_reset;

pub use super::answer::StoreFuture;
use super::decide::Step;
use super::permit::Permit;
use super::wait;
use super::Limiter;
use crate::metrics;
use crate::model::refusal::RateLimited;
use crate::model::subject::Subject;
use crate::rt::io;
pub use peek_reset::{Peek, Reset};
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

    /// One decision at `pinned` (µs since the epoch, or the store's time), blocking. Inlined
    /// where it is called: left a call, its permit was written to a slot of its own and copied
    /// out again, and a plain call paid a frame more (32 instructions of 665).
    #[inline(always)]
    pub(super) fn once_blocking(&self, pinned: Option<u64>) -> Result<Permit<'l>, RateLimited> {
        let started = metrics::start_timer();
        match self.limiter.plain_call(self.subjects, self.cost) {
            Some(plain) => self.limiter.decide_plain(plain, self.subjects, self.cost, pinned, started),
            None => self.along_the_path(pinned, started),
        }
    }

    /// One decision along the decision path, blocking on the store's answers. Out of line: a
    /// plain call never comes here.
    #[inline(never)]
    fn along_the_path(&self, pinned: Option<u64>, started: Option<Instant>) -> Result<Permit<'l>, RateLimited> {
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
                    if let Some(plain) = check.limiter.plain_call(check.subjects, check.cost) {
                        let (limiter, subjects, cost) = (check.limiter, check.subjects, check.cost);
                        match limiter.decide_plain(plain, subjects, cost, pinned, started) {
                            Ok(permit) => return Poll::Ready(Ok(permit)),
                            Err(refused) => match this.sleep_before_next_try(refused) {
                                Some(refused) => return Poll::Ready(Err(refused)),
                                None => continue,
                            },
                        }
                    }
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
            match deciding.decided() {
                Ok(permit) => return Poll::Ready(Ok(permit)),
                Err(refused) => {
                    if let Some(refused) = this.sleep_before_next_try(refused) {
                        return Poll::Ready(Err(refused));
                    }
                }
            }
        }
    }
}

impl CheckFuture<'_, '_, '_> {
    /// After a refusal: the sleep before the next try when the call waits for room (and its
    /// wait allows one more), else the refusal to return.
    fn sleep_before_next_try(&mut self, refused: RateLimited) -> Option<RateLimited> {
        let since = self.since.map_or(Duration::ZERO, |s| s.elapsed());
        match self.check.wait.and_then(|max| wait::next_sleep(&refused, since, max)).map(io::sleep) {
            Some(Ok(sleep)) => {
                self.sleep = Some(sleep);
                None
            }
            _ => Some(refused),
        }
    }
}

/// µs since `since`.
fn elapsed_us(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}
