//! The rules in force, as headers and errors name them: [`Policy`] and the [`Headroom`] an allowed
//! call leaves.

use crate::model::limit_type::LimitType;
use crate::model::rule::Rule;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One rule of one limit, as headers name it: `ip-20s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// What the limit counts per.
    pub limit_type: LimitType,
    /// The rule.
    pub rule: Rule,
}

impl Policy {
    /// The policy's name in `RateLimit-Policy` / `RateLimit` headers: `<type>-<window>`.
    pub fn name(&self) -> String {
        self.to_string()
    }
}

/// The name, as [`Policy::name`] gives it.
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.limit_type, self.rule.window_display())
    }
}

/// The quota left after an allowed call, for `RateLimit` headers.
#[derive(Clone, Debug)]
pub struct Headroom {
    /// The tightest rule (least remaining).
    pub policy: Policy,
    /// Units left in it.
    pub remaining: u64,
    /// How long until its quota is whole again if no other call comes.
    pub reset: Duration,
    /// Every rule of the limiter.
    pub policies: Arc<[Policy]>,
}

/// One rule of one limit, as it stands for the subject peeked at: what
/// [`Limiter::peek`](crate::Limiter::peek) reads, without consuming anything.
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
