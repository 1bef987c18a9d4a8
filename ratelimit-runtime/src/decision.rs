//! What a store answers for one call.

use std::time::Duration;

/// The answer of a store for one call, over every limit of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether every rule had room (and the call was recorded in all of them).
    pub allowed: bool,
    /// Index of the limit (stacked attribute) that `rule` belongs to.
    pub limit: usize,
    /// Index of the rule within its limit (rules sorted by window, longest first): the rule that
    /// denied, or the tightest rule (least remaining) when allowed.
    pub rule: usize,
    /// When denied: how long until the call would fit (exact for the sliding window).
    pub retry_after: Duration,
    /// Units left in that rule after this call (0 when denied).
    pub remaining: u64,
    /// When allowed: how long until that rule's quota is whole again if no other call comes
    /// (for the sliding window, its full window: this call's units leave last). When denied:
    /// the retry-after.
    pub reset: Duration,
}

impl Decision {
    /// Builds a decision from the six integers of the script (1-based indexes, µs).
    pub(crate) fn from_script(v: [i64; 6]) -> Decision {
        let us = |x: i64| Duration::from_micros(u64::try_from(x).unwrap_or(0));
        Decision {
            allowed: v[0] == 1,
            limit: usize::try_from(v[1] - 1).unwrap_or(0),
            rule: usize::try_from(v[2] - 1).unwrap_or(0),
            retry_after: us(v[3]),
            remaining: u64::try_from(v[4]).unwrap_or(0),
            reset: us(v[5]),
        }
    }
}
