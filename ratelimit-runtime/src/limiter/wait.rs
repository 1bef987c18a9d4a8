//! Waiting for room: a refused call sleeps for the retry-after the store returned,
//! plus a little jitter, and tries again, never sleeping past its `max_wait`.

use crate::error::{Cause, RateLimited};
use crate::limiter::permit::Permit;
use crate::limiter::Limiter;
use crate::model::subject::Subject;
use crate::rt::io;
use std::time::{Duration, Instant};

/// The most jitter added to a retry-after: enough to spread a fleet's retries, small next to
/// the windows rate limits use.
const JITTER_CAP: Duration = Duration::from_millis(20);

impl Limiter {
    /// As [`check`](Self::check), but a call refused for lack of room (not a store failure or
    /// a missing subject) sleeps until its retry-after, with a little jitter, and tries again,
    /// until it is admitted or until the next sleep would end past `max_wait` from now: then
    /// the refusal is returned at once, without sleeping. For workers that share one budget
    /// toward an outside API (one process, or many on one Redis). Sleeps on the library's
    /// timer: works from any async runtime.
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, store::MemoryStore, Rule, Subject};
    /// use std::{sync::Arc, time::{Duration, Instant}};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let api = Limiter::builder("partner_api")
    ///     .limit(LimitType::Global, [Rule::new(Duration::from_millis(100), 2).unwrap()])
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let start = Instant::now();
    /// for _ in 0..4 {
    ///     api.until_ready(&[Subject::global()], 1, Duration::from_secs(5)).await.unwrap();
    /// }
    /// assert!(start.elapsed() >= Duration::from_millis(100), "the third call waited for room");
    /// // A wait longer than allowed refuses at once.
    /// assert!(api.until_ready(&[Subject::global()], 1, Duration::from_millis(1)).await.is_err());
    /// # }
    /// ```
    pub async fn until_ready(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        max_wait: Duration,
    ) -> Result<Permit<'_>, RateLimited> {
        self.until_ready_in(subjects, cost, max_wait, None).await
    }

    /// [`until_ready`](Self::until_ready) for a caller in `tier` (see
    /// [`check_tier`](Self::check_tier)), or without one.
    pub(crate) async fn until_ready_in(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        max_wait: Duration,
        tier: Option<&str>,
    ) -> Result<Permit<'_>, RateLimited> {
        let start = Instant::now();
        loop {
            let refused = match self.check_pinned(subjects, cost, None, tier).await {
                Ok(permit) => return Ok(permit),
                Err(e) => e,
            };
            match next_sleep(&refused, start.elapsed(), max_wait) {
                Some(d) if io::sleep(d).await.is_ok() => {}
                _ => return Err(refused),
            }
        }
    }

    /// As [`until_ready`](Self::until_ready), blocking the thread while it waits: for plain
    /// `fn`s.
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, store::MemoryStore, Rule, Subject};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// let api = Limiter::builder("partner_api")
    ///     .limit(LimitType::Global, [Rule::new(Duration::from_millis(50), 1).unwrap()])
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// for _ in 0..3 {
    ///     api.until_ready_blocking(&[Subject::global()], 1, Duration::from_secs(5)).unwrap();
    /// }
    /// ```
    pub fn until_ready_blocking(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        max_wait: Duration,
    ) -> Result<Permit<'_>, RateLimited> {
        until_ready_with(self, subjects, cost, max_wait, None, Instant::now, std::thread::sleep)
    }

    /// [`until_ready_blocking`](Self::until_ready_blocking) for a caller in `tier`, or without
    /// one.
    pub(crate) fn until_ready_blocking_in(
        &self,
        subjects: &[Subject<'_>],
        cost: u64,
        max_wait: Duration,
        tier: Option<&str>,
    ) -> Result<Permit<'_>, RateLimited> {
        until_ready_with(self, subjects, cost, max_wait, tier, Instant::now, std::thread::sleep)
    }
}

/// The blocking loop, with time and sleep given: the unit tests drive a manual clock.
fn until_ready_with<'l>(
    limiter: &'l Limiter,
    subjects: &[Subject<'_>],
    cost: u64,
    max_wait: Duration,
    tier: Option<&str>,
    now: impl Fn() -> Instant,
    mut sleep: impl FnMut(Duration),
) -> Result<Permit<'l>, RateLimited> {
    let start = now();
    loop {
        let refused = match limiter.check_blocking_pinned(subjects, cost, None, tier) {
            Ok(permit) => return Ok(permit),
            Err(e) => e,
        };
        match next_sleep(&refused, now().saturating_duration_since(start), max_wait) {
            Some(d) => sleep(d),
            None => return Err(refused),
        }
    }
}

/// How long to sleep before trying a refused call again, or `None` to give up now: only a
/// refusal for lack of room is waited out, and only when its retry-after ends within
/// `max_wait` of the start. The sleep is the retry-after plus a little jitter (never past
/// `max_wait`), and at least 1ms so that a zero retry-after cannot spin.
fn next_sleep(refused: &RateLimited, elapsed: Duration, max_wait: Duration) -> Option<Duration> {
    if !matches!(refused.cause(), Cause::Exceeded | Cause::Concurrency) {
        return None;
    }
    let left = max_wait.checked_sub(elapsed)?;
    let retry = refused.retry_after().max(Duration::from_millis(1));
    if retry > left {
        return None;
    }
    Some((retry + jitter(retry)).min(left))
}

/// Up to a tenth of the retry-after, at most [`JITTER_CAP`]: random per call.
fn jitter(retry: Duration) -> Duration {
    let cap = (retry / 10).min(JITTER_CAP);
    let cap_us = u64::try_from(cap.as_micros()).unwrap_or(0);
    if cap_us == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(fastrand::u64(0..=cap_us))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::limit_type::LimitType;
    use crate::model::rule::Rule;
    use crate::rt::clock::ManualClock;
    use crate::store::memory::MemoryStore;
    use std::sync::Arc;

    fn exceeded(retry_after: Duration) -> RateLimited {
        RateLimited {
            limiter: Arc::from("t"),
            policy: None,
            policies: Arc::from(Vec::new()),
            retry_after,
            cause: Cause::Exceeded,
            limit_type: LimitType::Global,
            source: None,
        }
    }

    #[test]
    fn sleeps_the_retry_after_plus_a_little() {
        let s = next_sleep(&exceeded(Duration::from_millis(500)), Duration::ZERO, Duration::from_secs(1)).unwrap();
        assert!(s >= Duration::from_millis(500) && s <= Duration::from_millis(520), "{s:?}");
        // Never past max_wait.
        let s = next_sleep(&exceeded(Duration::from_millis(500)), Duration::from_millis(495), Duration::from_secs(1));
        assert!(s.unwrap() <= Duration::from_millis(505));
        // A retry-after beyond what is left: give up at once.
        assert_eq!(next_sleep(&exceeded(Duration::from_secs(2)), Duration::ZERO, Duration::from_secs(1)), None);
        assert_eq!(
            next_sleep(&exceeded(Duration::from_millis(1)), Duration::from_secs(2), Duration::from_secs(1)),
            None
        );
        // Other causes are not waited out.
        let mut down = exceeded(Duration::from_millis(1));
        down.cause = Cause::StoreUnavailable;
        assert_eq!(next_sleep(&down, Duration::ZERO, Duration::from_secs(1)), None);
    }

    #[test]
    fn jitter_spreads_and_stays_small() {
        let values: std::collections::HashSet<Duration> = (0..100).map(|_| jitter(Duration::from_secs(1))).collect();
        assert!(values.len() > 10, "jitter should vary: {values:?}");
        assert!(values.iter().all(|j| *j <= JITTER_CAP));
        assert_eq!(jitter(Duration::from_micros(5)), Duration::ZERO);
    }

    /// On a manual clock that the sleeps advance: waiting admits exactly `count` calls per
    /// window, and each wait is the retry-after (plus jitter).
    #[test]
    fn waiting_admits_exactly_the_rules_rate() {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let limiter = Limiter::builder("wait::manual")
            .limit(LimitType::Global, [Rule::from_millis(1_000, 5).unwrap()])
            .store(Arc::new(MemoryStore::with_clock(clock.clone())))
            .build()
            .unwrap();
        let origin = Instant::now();
        let elapsed = std::cell::Cell::new(Duration::ZERO);
        let mut admitted_at = Vec::new();
        for _ in 0..20 {
            let now = || origin + elapsed.get();
            let sleep = |d: Duration| {
                clock.advance(d);
                elapsed.set(elapsed.get() + d);
            };
            until_ready_with(&limiter, &[Subject::global()], 1, Duration::from_secs(2), None, now, sleep).unwrap();
            admitted_at.push(elapsed.get());
        }
        // 20 calls at 5 per second: the last needs three whole windows.
        let total = *admitted_at.last().unwrap();
        assert!(total >= Duration::from_secs(3) && total < Duration::from_millis(3_100), "{total:?}");
        // In any one-second window, at most 5 admissions.
        for (i, t) in admitted_at.iter().enumerate() {
            let within = admitted_at[i..].iter().filter(|u| **u < *t + Duration::from_secs(1)).count();
            assert!(within <= 5, "{within} admissions within 1s from {t:?}");
        }
    }

    #[test]
    fn a_wait_longer_than_max_wait_refuses_without_sleeping() {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let limiter = Limiter::builder("wait::too_long")
            .limit(LimitType::Global, [Rule::from_millis(60_000, 1).unwrap()])
            .store(Arc::new(MemoryStore::with_clock(clock)))
            .build()
            .unwrap();
        let g = [Subject::global()];
        limiter.check_blocking(&g, 1).unwrap();
        let mut slept = Vec::new();
        let e = until_ready_with(&limiter, &g, 1, Duration::from_secs(10), None, Instant::now, |d| slept.push(d))
            .unwrap_err();
        assert_eq!(e.cause(), Cause::Exceeded);
        assert!(slept.is_empty(), "refused at once, without sleeping: {slept:?}");
    }
}
