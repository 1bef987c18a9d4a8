//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade: the application installs
//! the recorder, before the first rate-limited call (a limiter takes its handles when it is
//! built; without a recorder they are no-ops). Labels never hold a subject, so series are
//! bounded by the number of limiters.
//!
//! - `ratelimit_decisions_total{limiter, outcome}` (counter)
//! - `ratelimit_local_denials_total{limiter}` (counter): refusals that needed no store call
//! - `ratelimit_store_duration_seconds{store}` (histogram): one store call, timeout included;
//!   in memory, one call in 64 per thread is timed (reading the clock costs as much as a
//!   decision)
//! - `ratelimit_store_errors_total{store, kind}` (counter), kind one of `timeout`,
//!   `connection`, `auth`, `script`, `other`
//! - `ratelimit_store_circuit_open{store}` (gauge): how many stores of this kind have their
//!   circuit breaker open (0 or 1 with one store)
//!
//! Under a recorder, the two counts per limiter are kept per thread and handed to the recorder
//! every [`FLUSH_EVERY`], or at once by [`flush`]: call it before rendering a scrape.
//!
//! ```
//! // In a `/metrics` handler, before rendering the recorder's text:
//! ratelimit_runtime::metrics::flush();
//! ```

// Inside the crate: beside the stores in the layering (stores report their calls here, the
// limiter its decisions). The hot path allocates nothing: a limiter builds its handles once, in
// `LimiterMetrics::new`; a store's handles are built on its first call (`StoreMetrics`).

use crate::error::StoreError;
use crate::model::subject::Subject;
use metrics::{Counter, Gauge, Histogram};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tally::{Tally, COUNTS};

/// `ratelimit_decisions_total{limiter, outcome}`.
pub(crate) const DECISIONS: &str = "ratelimit_decisions_total";
/// `ratelimit_local_denials_total{limiter}`.
pub(crate) const LOCAL_DENIALS: &str = "ratelimit_local_denials_total";
/// `ratelimit_override_decisions_total{limiter}`: decisions made under a subject's runtime
/// override (also counted in `ratelimit_decisions_total`).
pub(crate) const OVERRIDE_DECISIONS: &str = "ratelimit_override_decisions_total";
/// `ratelimit_store_duration_seconds{store}`.
pub(crate) const STORE_DURATION: &str = "ratelimit_store_duration_seconds";
/// `ratelimit_store_errors_total{store, kind}`.
pub(crate) const STORE_ERRORS: &str = "ratelimit_store_errors_total";
/// `ratelimit_store_circuit_open{store}`.
pub(crate) const CIRCUIT_OPEN: &str = "ratelimit_store_circuit_open";
/// Keys held by the in-memory stores of the process (gauge).
pub(crate) const MEMORY_KEYS: &str = "ratelimit_memory_keys";
/// Live keys the in-memory stores forgot to stay within their bound.
pub(crate) const MEMORY_EVICTIONS: &str = "ratelimit_memory_evictions_total";

/// One in-memory store call in this many is timed: the store's sweep period, so that the two
/// rare calls of each period are the sample and the sweep (with one in 64 timed, the calls sent
/// out of line every 64th that did neither cost a plain call 4 instructions of 565).
pub(crate) const MEMORY_SAMPLE: u32 = 256;

/// What became of one call, as `ratelimit_decisions_total{outcome}` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every rule had room.
    Allowed,
    /// A rule had no room (by the store, or by the local refusal cache).
    Denied,
    /// A shadow-mode limit would have refused; the call went through.
    ShadowDenied,
    /// The subject is exempt: not counted, never refused.
    Exempt,
    /// The store failed and the policy let the call through.
    FailedOpen,
    /// The store failed and the policy refused the call.
    FailedClosed,
    /// The identity a limit counts per was missing.
    SubjectMissing,
}

impl Outcome {
    const ALL: [Outcome; 7] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::ShadowDenied,
        Outcome::Exempt,
        Outcome::FailedOpen,
        Outcome::FailedClosed,
        Outcome::SubjectMissing,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Exempt => "exempt",
            Outcome::FailedOpen => "failed_open",
            Outcome::FailedClosed => "failed_closed",
            Outcome::SubjectMissing => "subject_missing",
        }
    }
}

/// What kind of store failure, as `ratelimit_store_errors_total{kind}` names it. Classified from
/// the error's kind, never from its text, and the label carries no part of the message (which
/// may name a host or a user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// No answer within the timeout.
    Timeout,
    /// Could not connect, or the connection broke (refused, reset, cluster or primary down).
    Connection,
    /// Authentication failed (`NOAUTH`, `WRONGPASS`, missing ACL permission).
    Auth,
    /// The script failed or answered something unexpected.
    Script,
    /// Anything else.
    Other,
}

impl ErrorKind {
    const ALL: [ErrorKind; 5] =
        [ErrorKind::Timeout, ErrorKind::Connection, ErrorKind::Auth, ErrorKind::Script, ErrorKind::Other];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Auth => "auth",
            ErrorKind::Script => "script",
            ErrorKind::Other => "other",
        }
    }

    /// The kind of a store error: its variant, never its text.
    pub(crate) fn of(error: &StoreError) -> ErrorKind {
        match error {
            StoreError::Timeout { .. } => ErrorKind::Timeout,
            // Never counted (no call was made); an outage when it is.
            StoreError::Connection { .. } | StoreError::CircuitOpen { .. } => ErrorKind::Connection,
            StoreError::Auth { .. } => ErrorKind::Auth,
            StoreError::Script { .. } | StoreError::Protocol(_) => ErrorKind::Script,
            StoreError::Misconfigured { .. } | StoreError::Other { .. } => ErrorKind::Other,
        }
    }
}

/// A limiter's handles, built once with the limiter.
pub(crate) struct LimiterMetrics {
    name: Arc<str>,
    counts: Counts,
    log_subjects: bool,
    /// Decisions under a runtime override: few, counted straight into the recorder's counter.
    overridden: Counter,
}

/// Where a limiter's decisions are counted: `decisions` by outcome, then `local_denials`.
enum Counts {
    /// Straight into the recorder's counters: the no-op ones when no recorder is installed.
    Direct([Counter; COUNTS]),
    /// Per thread, flushed to the recorder's counters (see [`tally`]).
    Tally(Arc<Tally>),
}

/// Where `local_denials` sits among a limiter's counts, after the outcomes.
const LOCAL_DENIALS_AT: usize = Outcome::ALL.len();
const _: () = assert!(LOCAL_DENIALS_AT + 1 == COUNTS);

impl LimiterMetrics {
    /// The handles of the limiter `name`; `log_subjects` adds the subjects to its debug events.
    pub(crate) fn new(name: Arc<str>, log_subjects: bool) -> LimiterMetrics {
        describe();
        let counters: [Counter; COUNTS] = std::array::from_fn(|i| match Outcome::ALL.get(i) {
            Some(o) => metrics::counter!(DECISIONS, "limiter" => name.clone(), "outcome" => o.label()),
            None => metrics::counter!(LOCAL_DENIALS, "limiter" => name.clone()),
        });
        let counts = if recorder_installed() { Counts::Tally(Tally::new(counters)) } else { Counts::Direct(counters) };
        let overridden = metrics::counter!(OVERRIDE_DECISIONS, "limiter" => name.clone());
        LimiterMetrics { name, counts, log_subjects, overridden }
    }

    #[inline]
    fn add(&self, i: usize) {
        match &self.counts {
            Counts::Tally(tally) => tally.add(i),
            // `i` is always below `COUNTS`; `get` keeps even a slip from panicking.
            Counts::Direct(counters) => {
                if let Some(counter) = counters.get(i) {
                    counter.increment(1);
                }
            }
        }
    }

    /// Counts one decision.
    #[inline]
    pub(crate) fn decision(&self, outcome: Outcome) {
        self.add(outcome as usize);
    }

    /// Counts a decision made under a subject's runtime override.
    #[inline]
    pub(crate) fn override_decision(&self) {
        self.overridden.increment(1);
    }

    /// Counts a refusal answered with no store call (besides its `decision(Outcome::Denied)`).
    #[inline]
    pub(crate) fn local_denial(&self) {
        self.add(LOCAL_DENIALS_AT);
    }

    /// Counts one decision and, when `started` (debug events are wanted: see [`start_timer`]),
    /// logs it at debug level: limiter, outcome, latency, and the subjects only if the limiter
    /// was built with `log_subjects(true)`.
    #[inline]
    pub(crate) fn report(&self, outcome: Outcome, started: Option<Instant>, subjects: &[Subject<'_>]) {
        // The benchmark harness builds a twin without any instrumentation, to measure what the
        // instrumentation costs when no recorder and no subscriber listen.
        if cfg!(ratelimit_no_instrumentation) {
            return;
        }
        self.decision(outcome);
        if let Some(started) = started {
            self.log(outcome, Some(started.elapsed()), subjects);
        }
    }

    #[cold]
    #[inline(never)]
    fn log(&self, outcome: Outcome, latency: Option<Duration>, subjects: &[Subject<'_>]) {
        let latency_us = latency.map(|d| d.as_micros() as u64);
        let limiter: &str = &self.name;
        if self.log_subjects {
            tracing::debug!(limiter, outcome = outcome.label(), latency_us, ?subjects, "ratelimit decision");
        } else {
            tracing::debug!(limiter, outcome = outcome.label(), latency_us, "ratelimit decision");
        }
    }
}

/// Whether the application installed a recorder (globally, or for this thread). The facade does
/// not say; its no-op recorder is a zero-sized type, while a recorder that keeps metrics holds
/// state. A zero-sized recorder of the application's own (a forwarder to a static) is counted
/// straight into its handles: exact, only without the per-thread tally.
fn recorder_installed() -> bool {
    metrics::with_recorder(|r| std::mem::size_of_val(r) != 0)
}

/// The `# HELP` texts, given to the recorder once (by the first limiter built after it).
fn describe() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(DECISIONS, "Rate-limit decisions, by limiter and outcome.");
        metrics::describe_counter!(LOCAL_DENIALS, "Refusals answered without a store call, by limiter.");
        metrics::describe_counter!(
            OVERRIDE_DECISIONS,
            "Decisions made under a subject's runtime override, by limiter."
        );
        metrics::describe_histogram!(
            STORE_DURATION,
            metrics::Unit::Seconds,
            "Duration of one rate-limit store call, timeout included (memory: 1 call in 64)."
        );
        metrics::describe_counter!(STORE_ERRORS, "Failed rate-limit store calls, by store and kind.");
        metrics::describe_gauge!(
            CIRCUIT_OPEN,
            "Rate-limit stores whose circuit breaker is open (not called for a pause), by store."
        );
        metrics::describe_gauge!(MEMORY_KEYS, "Keys (a subject under one limit) held by the in-memory stores.");
        metrics::describe_counter!(
            MEMORY_EVICTIONS,
            "Live keys the in-memory stores forgot, not used lately, to stay within their bound."
        );
    });
}

/// Starts timing a decision for the debug log, only when debug events are wanted (the one
/// check of the subscriber per decision).
#[inline]
pub(crate) fn start_timer() -> Option<Instant> {
    if !cfg!(ratelimit_no_instrumentation) && tracing::enabled!(tracing::Level::DEBUG) {
        start_timer_cold()
    } else {
        None
    }
}

#[cold]
#[inline(never)]
fn start_timer_cold() -> Option<Instant> {
    Some(Instant::now())
}

/// A store's handles, held by the store and built on its first call (a store built before the
/// application installs its recorder still reports to it). Stores of one kind share their
/// series: the label is all that tells them apart.
pub(crate) struct StoreMetrics {
    label: &'static str,
    handles: OnceLock<StoreHandles>,
}

struct StoreHandles {
    duration: Histogram,
    errors: [Counter; ErrorKind::ALL.len()],
    /// `None` in memory: it has no breaker, and a series of it would read as one that never opens.
    circuit: Option<Gauge>,
    /// In memory only: its keys, and the live ones it forgot to make room.
    memory: Option<(Gauge, Counter)>,
}

impl StoreMetrics {
    /// The handles of a store labelled `label` (`memory`, `redis`, `cluster`, `sentinel`,
    /// `unavailable`).
    pub(crate) fn new(label: &'static str) -> StoreMetrics {
        StoreMetrics { label, handles: OnceLock::new() }
    }

    /// The `store` label.
    pub(crate) fn label(&self) -> &'static str {
        self.label
    }

    fn handles(&self) -> &StoreHandles {
        self.handles.get_or_init(|| {
            // Shown from the first call, so that a dashboard sees 0 before any outage. A remote
            // store's breaker opens only after failed calls, which came here first. Added to, not
            // set: another store of the same kind may have its breaker open.
            let circuit = (self.label != "memory").then(|| {
                let gauge = metrics::gauge!(CIRCUIT_OPEN, "store" => self.label);
                gauge.increment(0.0);
                gauge
            });
            StoreHandles {
                duration: metrics::histogram!(STORE_DURATION, "store" => self.label),
                errors: ErrorKind::ALL
                    .map(|k| metrics::counter!(STORE_ERRORS, "store" => self.label, "kind" => k.label())),
                circuit,
                memory: (self.label == "memory")
                    .then(|| (metrics::gauge!(MEMORY_KEYS), metrics::counter!(MEMORY_EVICTIONS))),
            }
        })
    }

    /// An in-memory store's keys changed by `delta` since it last said, and it forgot
    /// `evicted` live ones to make room.
    pub(crate) fn memory_keys(&self, delta: f64, evicted: u64) {
        let Some((keys, evictions)) = &self.handles().memory else { return };
        keys.increment(delta);
        evictions.increment(evicted);
    }

    /// The store's breaker opened (`true`) or closed.
    #[cold]
    pub(crate) fn circuit(&self, open: bool) {
        let Some(gauge) = &self.handles().circuit else { return };
        if open {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }

    /// Records how long one store call took.
    #[inline]
    pub(crate) fn duration(&self, elapsed: Duration) {
        self.handles().duration.record(elapsed.as_secs_f64());
    }

    /// Counts one failed store call.
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.handles().errors[kind as usize].increment(1);
    }

    /// Runs one remote store call: records its duration, and counts its error by its kind.
    pub(crate) async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = call.await;
        self.duration(started.elapsed());
        if let Err(e) = &result {
            self.error(ErrorKind::of(e));
        }
        result
    }

    /// Whether the in-memory call numbered `tick` (the store's per-thread call count) should be
    /// timed: one in [`MEMORY_SAMPLE`], from the first (so that the series shows up at once).
    /// The store counts its calls anyway (to sweep), and asks only on its rare calls (one of
    /// these tests covers both), so sampling costs the usual call nothing.
    #[inline(always)]
    pub(crate) fn sampled(tick: u32) -> bool {
        !cfg!(ratelimit_no_instrumentation) && tick % MEMORY_SAMPLE == 1
    }
}

mod tally;
pub use tally::{flush, FLUSH_EVERY};

#[cfg(test)]
mod tests;
