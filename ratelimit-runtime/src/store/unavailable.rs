//! The store that stands in for one that could not be built.

use super::peek_reset::Targets;
use super::{Answer, Call, Internal, Operations, Pending, Release, Store};
use crate::error::StoreError;
use crate::metrics::{ErrorKind, StoreMetrics};
use crate::model::policy::RuleStatus;
use crate::rt::clock::{Clock, SystemClock};

/// A store that could not be built (for example a malformed `REDIS_URL`): every call fails with
/// the reason, so the failure policy applies instead of a silent fallback to memory.
pub(crate) struct Unavailable {
    error: StoreError,
    metrics: StoreMetrics,
}

impl Unavailable {
    /// The store whose construction failed with `error`.
    pub(crate) fn new(error: StoreError) -> Unavailable {
        Unavailable { error, metrics: StoreMetrics::new("unavailable") }
    }
}

impl Operations for Unavailable {
    fn decide(&self, _call: &Call<'_>) -> Pending {
        // Counted as the failed store call a decision is; peeks, refunds and resets are not.
        self.metrics.error(ErrorKind::of(&self.error));
        Pending::Ready(Err(self.error.clone()))
    }
    fn peek(&self, _targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        Answer::Ready(Err(self.error.clone()))
    }
    fn override_of(&self, _key: &[u8], _: Internal) -> Option<std::sync::Arc<[u8]>> {
        None
    }
    fn decide_checked(&self, call: &Call<'_>, _checks: &[super::OverrideCheck]) -> Pending {
        self.decide(call)
    }
    fn write_override(&self, _write: &super::OverrideWrite<'_>) -> Answer<()> {
        Answer::Ready(Err(self.error.clone()))
    }
    fn list_overrides(&self, _index: &[u8], _: Internal) -> Answer<super::IndexEntries> {
        Answer::Ready(Err(self.error.clone()))
    }
    fn release(&self, _release: &Release<'_>) -> Answer<()> {
        Answer::Ready(Err(self.error.clone()))
    }
    fn reset(&self, _targets: &Targets<'_>) -> Answer<()> {
        Answer::Ready(Err(self.error.clone()))
    }
    fn label(&self, _: Internal) -> &'static str {
        self.metrics.label()
    }
    /// Nothing travels: it never decides, so it has no refusal to cache.
    fn is_remote(&self, _: Internal) -> bool {
        false
    }
    fn now_us(&self, _: Internal) -> u64 {
        SystemClock.now_us()
    }
}

impl Store for Unavailable {
    fn describe(&self) -> String {
        format!("unavailable ({})", self.error)
    }
}
