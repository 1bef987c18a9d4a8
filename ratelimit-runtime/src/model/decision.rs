//! What a store answers for one call.

use super::member::Member;
use std::time::Duration;

/// Why a store refused a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Why {
    /// A rule had no room.
    #[default]
    Exceeded,
    /// The subject is blocked by a limit's penalty (`block`): refused until the block ends.
    Blocked,
    /// A concurrency limit's slots are all held.
    Concurrency,
    /// Nothing was decided: a runtime override is not the one the call was sent with (the
    /// store has learnt the one in force; decide again).
    OverridesChanged,
}

/// The answer of a store for one call, over every limit of the call.
///
/// Laid out in order and aligned to 16 bytes: a decision is moved on its way from the store to
/// the permit, and a read spanning two writes still in flight waits for both to land. So
/// `limit` and `rule`, which an admission of one limit leaves zero, share an aligned piece
/// written whole, and no two fields an admission sets (`remaining`, `reset_us`, `at_us`) lie side
/// by side as they do in the permit: the compiler moved such a pair in one 16-byte read, which
/// waited for both writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Decision {
    /// Whether every rule had room (and the call was recorded in all of them).
    pub allowed: bool,
    /// Why it was refused (meaningless when allowed).
    pub(crate) why: Why,
    /// Whether the call's shadow limits, decided with it (see `Call::shadow`), would have
    /// refused it: then nothing was recorded in them, and `shadow_limit` (among the shadow
    /// limits), `shadow_rule` and `shadow_wait_us` name the refusal. Small fields in the padding
    /// after `why`: a decision is no larger for them.
    pub(crate) shadow_refused: bool,
    pub(crate) shadow_rule: u16,
    pub(crate) shadow_limit: u16,
    /// When denied: how long until the call would fit, µs (exact for the sliding window).
    pub retry_after_us: u64,
    /// Index of the limit (stacked attribute) that `rule` belongs to.
    pub limit: usize,
    /// Index of the rule within its limit (rules sorted by window, longest first): the rule that
    /// denied, or the tightest rule (least remaining) when allowed.
    pub rule: usize,
    /// Units left in that rule after this call (0 when denied).
    pub remaining: u64,
    /// The call's unique id in the store (its sliding-window entries and concurrency slots),
    /// [`Member::NONE`] when the store keeps none.
    pub(crate) member: Member,
    /// When allowed: how long until that rule's quota is whole again if no other call comes,
    /// µs (for the sliding window, its full window: this call's units leave last). When denied:
    /// the retry-after. (Whole µs, as every store counts: a `Duration` here cost every allowed
    /// call a conversion each way.)
    pub reset_us: u64,
    /// The shadow refusal's retry-after, µs (see `shadow_refused`).
    pub(crate) shadow_wait_us: u64,
    /// When the store decided, in µs since the Unix epoch on the store's clock: a refund finds
    /// the call's units by it (the window they were counted in).
    pub(crate) at_us: u64,
}

impl Decision {
    /// An admission with nothing to report yet (the stores fill in the tightest rule).
    pub(crate) const fn admitted(at_us: u64) -> Decision {
        Decision {
            allowed: true,
            limit: 0,
            rule: 0,
            retry_after_us: 0,
            remaining: 0,
            reset_us: 0,
            at_us,
            member: Member::NONE,
            why: Why::Exceeded,
            shadow_refused: false,
            shadow_rule: 0,
            shadow_limit: 0,
            shadow_wait_us: 0,
        }
    }

    /// A refusal by rule `rule` of limit `limit` for `wait_us` µs.
    pub(crate) const fn refused(limit: usize, rule: usize, wait_us: u64, at_us: u64, why: Why) -> Decision {
        Decision {
            allowed: false,
            limit,
            rule,
            retry_after_us: wait_us,
            remaining: 0,
            reset_us: wait_us,
            at_us,
            member: Member::NONE,
            why,
            shadow_refused: false,
            shadow_rule: 0,
            shadow_limit: 0,
            shadow_wait_us: 0,
        }
    }

    /// Builds a decision from the integers of the script (1-based indexes, µs): allowed, limit,
    /// rule, retry-after, remaining, reset, now, and why (0 exceeded, 1 blocked, 2 concurrency).
    pub(crate) fn from_script(v: [i64; 8]) -> Decision {
        let us = |x: i64| u64::try_from(x).unwrap_or(0);
        Decision {
            allowed: v[0] == 1,
            limit: usize::try_from(v[1] - 1).unwrap_or(0),
            rule: usize::try_from(v[2] - 1).unwrap_or(0),
            retry_after_us: us(v[3]),
            remaining: u64::try_from(v[4]).unwrap_or(0),
            reset_us: us(v[5]),
            at_us: u64::try_from(v[6]).unwrap_or(0),
            member: Member::NONE,
            why: match v[7] {
                1 => Why::Blocked,
                2 => Why::Concurrency,
                _ => Why::Exceeded,
            },
            shadow_refused: false,
            shadow_rule: 0,
            shadow_limit: 0,
            shadow_wait_us: 0,
        }
    }

    /// Notes that the shadow limits would have refused the call: by rule `rule` of their limit
    /// `limit` (among the shadow limits), for `wait_us`. (Beyond `u16::MAX` limits or rules an
    /// index names nothing: no rule in the log line.)
    pub(crate) fn refused_in_shadow(&mut self, limit: usize, rule: usize, wait_us: u64) {
        self.shadow_refused = true;
        self.shadow_limit = u16::try_from(limit).unwrap_or(u16::MAX);
        self.shadow_rule = u16::try_from(rule).unwrap_or(u16::MAX);
        self.shadow_wait_us = wait_us;
    }

    /// The retry-after of a refusal.
    #[inline]
    pub(crate) const fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_us)
    }

    /// The shadow limits' refusal, if they would have refused: their limit (among the shadow
    /// limits), rule and retry-after.
    #[inline]
    pub(crate) fn shadow_refusal(&self) -> Option<(usize, usize, Duration)> {
        self.shadow_refused.then(|| {
            (usize::from(self.shadow_limit), usize::from(self.shadow_rule), Duration::from_micros(self.shadow_wait_us))
        })
    }
}

#[cfg(test)]
mod tests {
    /// The shadow refusal's fields fill padding: a decision is no larger for them (80 bytes
    /// before them, on 64-bit targets).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_decision_stays_small() {
        assert_eq!(std::mem::size_of::<super::Decision>(), 80);
    }
}
