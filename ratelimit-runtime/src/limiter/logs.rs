//! What decisions log, each at most once per 10 s with the number of events held back since:
//! an outage, or a shadow limit refusing every call, must not turn into one line per request.

use crate::error::StoreError;
use crate::metrics::{LimiterMetrics, Outcome};
use crate::model::policy::Policy;
use crate::rt::throttle::Throttle;
use std::time::{Duration, Instant};

/// A failed store call under the fail-open policy.
pub(crate) fn store_failure(limiter: &str, error: &StoreError) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        tracing::warn!(limiter, error = %error, suppressed, "rate-limit store failed; letting calls through (fail open)");
    }
}

/// A failed store call under the fail-closed policy: the calls are refused (503), and an
/// operator must learn why from the log as under the other policies.
pub(crate) fn refusing_calls(limiter: &str, error: &StoreError) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        tracing::warn!(limiter, error = %error, suppressed, "rate-limit store failed; refusing calls (fail closed)");
    }
}

/// A failed store call under the `local` policy.
pub(crate) fn local_decisions(limiter: &str, error: &StoreError) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        tracing::warn!(limiter, error = %error, suppressed, "rate-limit store failed; deciding in process memory (on_error = local)");
    }
}

/// A call a shadow limit would have refused: counted, and logged.
pub(crate) fn shadow_refusal(metrics: &LimiterMetrics, limiter: &str, policy: Option<Policy>, retry_after: Duration) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    metrics.decision(Outcome::ShadowDenied);
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        let rule = policy.map_or_else(|| "subject missing".to_owned(), |p| format!("{}, {}", p.limit_type, p.rule));
        tracing::info!(
            limiter,
            rule = %rule,
            retry_after_ms = retry_after.as_millis() as u64,
            suppressed,
            "ratelimit: shadow mode: a call would have been refused; letting it through"
        );
    }
}
