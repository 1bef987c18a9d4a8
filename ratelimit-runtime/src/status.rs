//! What [`Limiter::peek`](crate::Limiter::peek) reads: one rule's remaining quota and reset for
//! one subject, without consuming anything.

pub use crate::policy::{Headroom, Policy};
use std::time::Duration;

/// One rule of one limit, as it stands for the subject peeked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleStatus {
    /// Index of the limit (stacked attribute, or builder `limit` call) the rule belongs to.
    pub limit: usize,
    /// The rule.
    pub policy: Policy,
    /// Units a call could take now under this rule alone.
    pub remaining: u64,
    /// How long until the rule's quota is whole again if no call comes (zero: it is whole).
    pub reset: Duration,
}
