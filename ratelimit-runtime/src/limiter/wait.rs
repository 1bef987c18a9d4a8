//! Waiting for room (a check's `wait`): a refused call sleeps for the retry-after the store returned,
//! plus a little jitter, and tries again, never sleeping past its `max_wait`.

use crate::model::refusal::{Cause, RateLimited};
use std::time::{Duration, Instant};

/// The most jitter added to a retry-after: enough to spread a fleet's retries, small next to
/// the windows rate limits use.
const JITTER_CAP: Duration = Duration::from_millis(20);

/// The blocking waiting loop: `try_once` decides the call (given the time waited so far), and a
/// refusal is slept out as [`next_sleep`] says. Time and sleep are given, so that tests drive a
/// manual clock.
pub(super) fn blocking<P>(
    max_wait: Duration,
    now: impl Fn() -> Instant,
    mut sleep: impl FnMut(Duration),
    mut try_once: impl FnMut(Duration) -> Result<P, RateLimited>,
) -> Result<P, RateLimited> {
    let start = now();
    loop {
        let refused = match try_once(now().saturating_duration_since(start)) {
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
pub(super) fn next_sleep(refused: &RateLimited, elapsed: Duration, max_wait: Duration) -> Option<Duration> {
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
    use crate::limiter::Limiter;
    use crate::model::limit::Limit;
    use crate::model::limit_type::LimitType;
    use crate::model::rule::Rule;
    use crate::model::subject::Subject;
    use crate::rt::clock::ManualClock;
    use crate::store::memory::MemoryStore;
    use std::sync::Arc;
    use std::time::Instant;

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
            .limit(Limit::new(LimitType::Global, [Rule::from_millis(1_000, 5).unwrap()]))
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
            let global = [Subject::global()];
            limiter.check(&global).wait(Duration::from_secs(2)).wait_blocking(now, sleep).unwrap();
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
            .limit(Limit::new(LimitType::Global, [Rule::from_millis(60_000, 1).unwrap()]))
            .store(Arc::new(MemoryStore::with_clock(clock)))
            .build()
            .unwrap();
        let g = [Subject::global()];
        limiter.check(&g).blocking().unwrap();
        let mut slept = Vec::new();
        let e =
            limiter.check(&g).wait(Duration::from_secs(10)).wait_blocking(Instant::now, |d| slept.push(d)).unwrap_err();
        assert_eq!(e.cause(), Cause::Exceeded);
        assert!(slept.is_empty(), "refused at once, without sleeping: {slept:?}");
    }
}
