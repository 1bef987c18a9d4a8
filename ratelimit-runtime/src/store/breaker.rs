//! The circuit breaker of a remote store: after a few consecutive failures to reach it, the
//! store is not called for a pause, and calls get the failure policy at once instead of each
//! waiting for the timeout.
//!
//! - **Closed** (normal): every call goes to the store. A timeout or a connection error counts
//!   one failure; anything the store answers (a decision, a script error) clears the count.
//!   Errors that no pause would fix (authentication, scripts, misconfiguration) are not outages
//!   and never open it: the store answered them at once.
//! - **Open**: after [`THRESHOLD`] failures in a row the store is not called for a pause of
//!   1 s, doubled each time the store still fails, up to a maximum (30 s; less for Sentinel,
//!   whose failovers take a second or two). Calls fail at once with [`StoreError::CircuitOpen`].
//! - **Trial**: when the pause is over, one call (only one) goes to the store. If it is
//!   answered the breaker closes; if it fails the breaker opens again with the next pause.
//!
//! Opening and closing are logged once each (warn, info) and shown by the gauge
//! `ratelimit_store_circuit_open{store}`. The breaker holds the store's metrics, and records
//! there the duration and error of each decision it lets through. The state is a few atomics: a closed breaker costs a
//! call two loads before and two after (no clock read, no write while nothing fails), and one
//! reference count for the call's future to report back.

use super::Answer;
use crate::error::{ErrorSource, StoreError};
use crate::metrics::StoreMetrics;
use crate::rt::lock;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Consecutive failures that open the breaker.
pub(crate) const THRESHOLD: u32 = 3;
/// The first pause.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause of a single Redis or a cluster.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(30);

/// The breaker of one store.
pub(crate) struct Breaker {
    /// The store, for logs (no password: a store's `describe`).
    store: String,
    metrics: StoreMetrics,
    max_pause_us: u64,
    /// Failures in a row while closed.
    failures: AtomicU32,
    /// 0 while closed; else the instant (µs on [`now_us`]'s clock, never 0) from which one
    /// trial call may go to the store.
    open_until: AtomicU64,
    /// Pauses in a row: the next one lasts `FIRST_PAUSE << level`, up to the maximum.
    level: AtomicU32,
    /// A trial call is under way.
    trial: AtomicBool,
    /// Why it opened (the last failure): the source of the errors it answers while open, so
    /// that they say what is wrong with the store (a refused certificate, a hung server).
    last: RwLock<Option<ErrorSource>>,
}

/// What the breaker lets a call do.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    /// Closed: call the store.
    Call,
    /// The pause is over and this call is the trial.
    Trial,
    /// Open: fail at once, the pause ending in this long.
    Refuse(Duration),
}

/// µs since the first call on a monotonic clock, from 1 (0 means "closed").
fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX).saturating_add(1)
}

fn is_outage(e: &StoreError) -> bool {
    matches!(e, StoreError::Timeout { .. } | StoreError::Connection { .. })
}

impl Breaker {
    /// The breaker of the store described as `store` (for logs), whose metrics are `metrics`,
    /// pausing at most `max_pause`.
    pub(crate) fn new(store: String, metrics: StoreMetrics, max_pause: Duration) -> Arc<Breaker> {
        Arc::new(Breaker {
            store,
            metrics,
            max_pause_us: u64::try_from(max_pause.as_micros()).unwrap_or(u64::MAX),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            level: AtomicU32::new(0),
            trial: AtomicBool::new(false),
            last: RwLock::new(None),
        })
    }

    /// The store's metrics.
    pub(crate) fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }

    /// Runs one store call through the breaker: `call` makes the call's future (with its
    /// timeout) only when the store is to be called; otherwise the answer is
    /// [`StoreError::CircuitOpen`] at once.
    #[inline]
    pub(crate) fn call<T, F>(self: &Arc<Self>, call: impl FnOnce() -> F) -> Answer<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run(call, false)
    }

    /// [`call`](Self::call) for a decision: its duration, and its error by kind, recorded in
    /// the store's metrics (a call the open breaker answers is neither timed nor counted).
    #[inline]
    pub(crate) fn decide<T, F>(self: &Arc<Self>, call: impl FnOnce() -> F) -> Answer<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.run(call, true)
    }

    #[inline]
    fn run<T, F>(self: &Arc<Self>, call: impl FnOnce() -> F, timed: bool) -> Answer<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let trial = match self.admit() {
            Admit::Call => false,
            Admit::Trial => true,
            Admit::Refuse(retry_in) => {
                let source = lock::read(&self.last).clone();
                return Answer::Ready(Err(StoreError::CircuitOpen { retry_in, source }));
            }
        };
        // Boxed where it is made: a store call's future is several kilobytes (the connection's
        // own future inside), and each layer around it (the metrics' timer, this block, the
        // box the answer holds) moved it whole again when it was held by value.
        let fut = Box::pin(call());
        let mut report = Report { breaker: self.clone(), trial };
        Answer::Remote(Box::pin(async move {
            let result = if timed { report.breaker.metrics.timed(fut).await } else { fut.await };
            report.done(&result);
            result
        }))
    }

    #[inline]
    fn admit(&self) -> Admit {
        // Closed: the one load of the hot path.
        if self.open_until.load(Ordering::Acquire) == 0 {
            return Admit::Call;
        }
        self.admit_open(now_us())
    }

    #[cold]
    fn admit_open(&self, now: u64) -> Admit {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Admit::Call;
        }
        if now < until {
            return Admit::Refuse(Duration::from_micros(until - now));
        }
        match self.trial.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Admit::Trial,
            // Another call is the trial: this one waits for its outcome like the others.
            Err(_) => Admit::Refuse(Duration::ZERO),
        }
    }

    /// Takes a store call's outcome into account.
    #[inline]
    fn record(&self, failed: Option<&StoreError>, trial: bool, now: u64) {
        match failed {
            Some(e) if is_outage(e) => self.failure(e, trial, now),
            _ => {
                // The store answered: write only if something was counted.
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
                if self.open_until.load(Ordering::Acquire) != 0 {
                    self.close();
                }
            }
        }
    }

    #[cold]
    fn failure(&self, e: &StoreError, trial: bool, now: u64) {
        if trial {
            *lock::write(&self.last) = Some(Arc::new(e.clone()));
            // The store still fails: a longer pause.
            let level = self.level.fetch_add(1, Ordering::AcqRel).saturating_add(1);
            let pause = self.pause(level);
            self.open_until.store(now.saturating_add(pause), Ordering::Release);
            self.trial.store(false, Ordering::Release);
            tracing::debug!(store = %self.store, error = %e, pause_ms = pause / 1000, "ratelimit: the trial call failed; the circuit stays open");
            return;
        }
        let failures = self.failures.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        if failures < THRESHOLD {
            return;
        }
        // Calls sent before the breaker opened may still fail after: only the first opens it
        // (with the first pause: closing set the level back to 0).
        let pause = self.pause(0);
        // Set before it opens, so that no call answered by the open breaker misses it.
        *lock::write(&self.last) = Some(Arc::new(e.clone()));
        if self.open_until.compare_exchange(0, now.saturating_add(pause), Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.metrics.circuit(true);
            tracing::warn!(
                store = %self.store,
                error = %e,
                failures,
                pause_ms = pause / 1000,
                "ratelimit: the store keeps failing; circuit open: calls get the failure policy without calling it, one trial call after each pause"
            );
        }
    }

    #[cold]
    fn close(&self) {
        let until = self.open_until.swap(0, Ordering::AcqRel);
        self.failures.store(0, Ordering::Relaxed);
        self.trial.store(false, Ordering::Release);
        if until != 0 {
            self.level.store(0, Ordering::Release);
            self.metrics.circuit(false);
            tracing::info!(store = %self.store, "ratelimit: the store answers again; circuit closed");
        }
    }

    /// Closes the breaker at once (Sentinel names a new primary: the pause was for the old one).
    pub(crate) fn reset(&self) {
        if self.open_until.load(Ordering::Acquire) != 0 {
            self.close();
        }
    }

    /// The pause after `level` pauses in a row, in µs.
    fn pause(&self, level: u32) -> u64 {
        let first = u64::try_from(FIRST_PAUSE.as_micros()).unwrap_or(u64::MAX);
        first.checked_shl(level.min(32)).unwrap_or(u64::MAX).min(self.max_pause_us)
    }

    /// Whether the breaker is open (tests).
    #[cfg(test)]
    fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }
}

/// Reports a call's outcome to its breaker; a trial call dropped before its outcome (its caller
/// gave up) frees the trial for the next call.
struct Report {
    breaker: Arc<Breaker>,
    trial: bool,
}

impl Report {
    fn done<T>(&mut self, result: &Result<T, StoreError>) {
        self.breaker.record(result.as_ref().err(), self.trial, now_us());
        self.trial = false;
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if self.trial {
            self.breaker.trial.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn breaker(max: Duration) -> Arc<Breaker> {
        Breaker::new("test".to_owned(), StoreMetrics::new("redis"), max)
    }

    fn timeout() -> StoreError {
        StoreError::Timeout { after: None, source: None }
    }

    fn admit_at(b: &Breaker, now: u64) -> Admit {
        if b.open_until.load(Ordering::Acquire) == 0 {
            return Admit::Call;
        }
        b.admit_open(now)
    }

    #[test]
    fn opens_after_three_failures_in_a_row_and_pauses_longer_while_failing() {
        let b = breaker(MAX_PAUSE);
        let t = 10 * S;
        b.record(Some(&timeout()), false, t);
        b.record(Some(&timeout()), false, t);
        b.record(None, false, t);
        b.record(Some(&timeout()), false, t);
        b.record(Some(&timeout()), false, t);
        assert!(!b.is_open(), "an answer in between starts the count again");
        b.record(Some(&timeout()), false, t);
        assert!(b.is_open());
        assert_eq!(admit_at(&b, t + S - 1), Admit::Refuse(Duration::from_micros(1)));
        // The pause is over: one trial, the others still refused.
        assert_eq!(admit_at(&b, t + S), Admit::Trial);
        assert_eq!(admit_at(&b, t + S), Admit::Refuse(Duration::ZERO));
        // Failures of calls sent before the breaker opened change nothing.
        b.record(Some(&timeout()), false, t + S);
        // The trial fails: 2 s, then 4, 8, 16, 30, 30.
        let mut now = t + S;
        for pause in [2, 4, 8, 16, 30, 30] {
            b.record(Some(&timeout()), true, now);
            assert_eq!(admit_at(&b, now + pause * S - 1), Admit::Refuse(Duration::from_micros(1)), "{pause}");
            now += pause * S;
            assert_eq!(admit_at(&b, now), Admit::Trial);
        }
        // The trial is answered: closed, and the next outage starts from 1 s again.
        b.record(None, true, now);
        assert!(!b.is_open());
        assert_eq!(admit_at(&b, now), Admit::Call);
        for _ in 0..3 {
            b.record(Some(&timeout()), false, now);
        }
        assert_eq!(admit_at(&b, now + S), Admit::Trial);
    }

    #[test]
    fn answers_that_are_errors_are_not_outages() {
        let b = breaker(MAX_PAUSE);
        let script = StoreError::Script { context: "ERR".to_owned(), source: None };
        for _ in 0..10 {
            b.record(Some(&script), false, S);
            b.record(Some(&StoreError::misconfigured("bad")), false, S);
        }
        assert!(!b.is_open());
        let refused = StoreError::Connection { context: "refused".to_owned(), source: None };
        for _ in 0..3 {
            b.record(Some(&refused), false, S);
        }
        assert!(b.is_open());
        // A trial answered with a script error: the store is up.
        assert_eq!(admit_at(&b, 2 * S), Admit::Trial);
        b.record(Some(&script), true, 2 * S);
        assert!(!b.is_open());
    }

    #[test]
    fn the_pause_is_capped_and_a_reset_closes() {
        let b = breaker(Duration::from_secs(2));
        for _ in 0..3 {
            b.record(Some(&timeout()), false, S);
        }
        let mut now = S;
        for pause in [1, 2, 2, 2] {
            now += pause * S;
            assert_eq!(admit_at(&b, now), Admit::Trial, "{pause}");
            b.record(Some(&timeout()), true, now);
        }
        b.reset();
        assert_eq!(b.admit(), Admit::Call);
    }

    #[test]
    fn the_open_breaker_says_why() {
        let b = breaker(MAX_PAUSE);
        let refused =
            StoreError::Connection { context: "invalid peer certificate: UnknownIssuer".to_owned(), source: None };
        for _ in 0..3 {
            b.record(Some(&refused), false, now_us());
        }
        let Answer::Ready(Err(e)) = b.call(|| async { Ok(()) }) else { panic!("the store was called") };
        assert!(matches!(e, StoreError::CircuitOpen { .. }), "{e:?}");
        assert!(
            e.to_string().ends_with(
                "(circuit open): cannot reach the rate-limit store: invalid peer certificate: UnknownIssuer"
            ),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn a_dropped_trial_frees_the_trial() {
        let b = breaker(MAX_PAUSE);
        for _ in 0..3 {
            b.record(Some(&timeout()), false, S);
        }
        assert_eq!(admit_at(&b, 3 * S), Admit::Trial);
        drop(Report { breaker: b.clone(), trial: true });
        assert_eq!(admit_at(&b, 3 * S), Admit::Trial, "the next call is the trial");
    }
}
