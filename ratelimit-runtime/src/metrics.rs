//! Metrics (spec §10), through the `metrics` crate facade: the application installs the
//! recorder. Beside the stores in the layering: stores report their calls here, the limiter
//! its decisions. Labels never hold a subject, so series are bounded by the number of limiters.
//!
//! (Contract for the features being built in parallel: these are the entry points; the bodies
//! are filled in by the metrics work.)
#![allow(dead_code)]

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

/// Counts one decision of `limiter`.
#[inline]
pub(crate) fn decision(limiter: &str, outcome: Outcome) {
    let _ = (limiter, outcome);
}

/// Counts a refusal answered by the local refusal cache, with no store call (besides its
/// `decision(limiter, Outcome::Denied)`).
#[inline]
pub(crate) fn local_denial(limiter: &str) {
    let _ = limiter;
}
