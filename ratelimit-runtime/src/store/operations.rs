//! What the limiter asks of a store ([`Operations`]) and what it hands over: the call to decide
//! ([`Call`]), what an admitted call gives back ([`Release`]), and the answer ([`Answer`]).
//!
//! The items are `pub` inside this private module: `Operations` is a supertrait of the public
//! `Store`, so its methods' types must be nameable as far as it is, while no user can name or
//! implement any of them. Its methods are reachable through any `dyn Store`, so each takes
//! something only this crate can make: its call, or [`INTERNAL`].

use super::overrides::{IndexEntries, OverrideCheck, OverrideWrite};
use super::peek_reset::Targets;
use crate::error::StoreError;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::member::Member;
use crate::model::policy::RuleStatus;

/// Everything a store does for the limiter. No method has a default: each store states each
/// answer, what it decides as well as whether it is remote and which clock times its refusals.
pub trait Operations {
    /// Decides `call` atomically: every rule of every limit passes and the call is recorded in
    /// all of them, or nothing is recorded.
    fn decide(&self, call: &Call<'_>) -> Pending;

    /// Each rule's remaining quota and reset for the targets' subjects, recording nothing
    /// (one round trip; per slot on a cluster). In limit order, rules in rule order.
    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>>;

    /// Settles what an admitted call took from the limits `release.indices` (one round trip;
    /// per slot on a cluster): gives back its units beyond `release.actual`, where they still
    /// count (a refund settles to 0), or takes the extra units past the limit; and frees its
    /// concurrency slots. Never below zero, never twice for one call.
    fn release(&self, release: &Release<'_>) -> Answer<()>;

    /// Forgets the targets' subjects' counts (one round trip; per slot on a cluster).
    fn reset(&self, targets: &Targets<'_>) -> Answer<()>;

    /// The runtime override of `key` this process decides with: in memory, the one in force
    /// (its TTL on the store's clock); for a remote store, the last one this process met.
    fn override_of(&self, key: &[u8], _: Internal) -> Option<std::sync::Arc<[u8]>>;

    /// Decides `call` as [`decide`](Self::decide) does, in the same atomic step checking that
    /// each limit's override is the one `checks` names (one check per limit). If one is not,
    /// nothing is recorded: the decision is refused with `Why::OverridesChanged`, and the
    /// store has learnt the overrides in force ([`override_of`](Self::override_of)).
    fn decide_checked(&self, call: &Call<'_>, checks: &[OverrideCheck]) -> Pending;

    /// Sets or clears one subject's runtime override, and its entry in the limiter's index.
    fn write_override(&self, write: &OverrideWrite<'_>) -> Answer<()>;

    /// A limiter's index of runtime overrides, with the store's time.
    fn list_overrides(&self, index: &[u8], _: Internal) -> Answer<IndexEntries>;

    /// The `store` label of its metrics: `memory`, `redis`, `cluster`, `sentinel`,
    /// `unavailable`. Never holds an address or a password.
    fn label(&self, _: Internal) -> &'static str;

    /// Whether decisions travel over the network: the local refusal cache is on by default for
    /// such stores.
    fn is_remote(&self, _: Internal) -> bool;

    /// Now, in µs, on the clock the local refusal cache times this store's refusals by: the
    /// store's own clock in memory, the system clock for remote stores (a refusal is timed from
    /// before the call left, so it never outlives the server's retry-after).
    fn now_us(&self, _: Internal) -> u64;
}

/// What only this crate can make ([`INTERNAL`]): the operations that take no call ask for one,
/// so that no user calls them through a `dyn Store`.
#[derive(Clone, Copy)]
pub struct Internal(());

/// The one [`Internal`].
pub(crate) const INTERNAL: Internal = Internal(());

pub use crate::rt::io::RemoteAnswer;

/// What a store answers ([`Operations::decide`], [`Operations::peek`], …): at once (in
/// memory), or a future for the I/O runtime (with the store's timeout applied inside), which
/// async callers await and blocking callers block on.
pub enum Answer<T> {
    /// Already answered.
    Ready(Result<T, StoreError>),
    /// To be run on the I/O runtime.
    Remote(RemoteAnswer<T>),
}

impl<T: Send + 'static> Answer<T> {
    /// The answer, blocking the thread until it comes.
    pub(crate) fn finish_blocking(self) -> Result<T, StoreError> {
        match self {
            Answer::Ready(r) => r,
            Answer::Remote(fut) => crate::rt::io::block_on(fut),
        }
    }
}

/// A decision still travelling to a remote store.
pub type RemoteDecision = RemoteAnswer<Decision>;

/// What [`Operations::decide`] answers.
pub type Pending = Answer<Decision>;

/// One call to decide: every limit of the call with its subject, and the cost.
pub struct Call<'a> {
    pub(crate) limits: &'a [CompiledLimit],
    /// One subject (key bytes, empty for global) per limit.
    pub(crate) subjects: &'a [&'a [u8]],
    pub(crate) cost: u64,
    /// Pinned time in µs since the Unix epoch (tests and platforms without `TIME`).
    pub(crate) now_us: Option<u64>,
    /// How many of the limits, at the end, are shadow limits (0: none). The others decide the
    /// call all or nothing; if they admit it, the shadow limits are decided as a group in the
    /// same atomic step: recorded in all of them if all have room, else in none, the decision
    /// (an admission) then carrying their refusal ([`Decision::shadow_refusal`]). If the others
    /// refuse, the shadow limits are neither decided nor counted.
    pub(crate) shadow: usize,
}

impl Call<'_> {
    /// How many limits decide the call (the ones before the shadow limits).
    #[inline]
    pub(crate) fn enforced(&self) -> usize {
        self.limits.len().saturating_sub(self.shadow)
    }
}

/// What a call admitted and now gives back ([`Operations::release`]): a refund of its units,
/// and/or the concurrency slots it held.
pub struct Release<'a> {
    /// The call's limits and subjects, as decided, and its cost.
    pub(crate) call: Call<'a>,
    /// Which of the call's limits give back (a refund: the rate limits; the end of a call: the
    /// concurrency limits; both at once when a refunded call ends).
    pub(crate) indices: &'a [usize],
    /// When the call was admitted (µs, the store's clock): the window its units count in.
    pub(crate) at_us: u64,
    /// The call's id in the store (its sliding-window entries and slots).
    pub(crate) member: Member,
    /// The units the call comes to (a settle; 0: a refund): fewer than its cost give the
    /// difference back where it still counts, more take the extra past the limit (debt).
    pub(crate) actual: u64,
}

impl Release<'_> {
    /// The units given back (the cost less the actual units), and the extra units taken (the
    /// actual units less the cost): one of them is 0.
    pub(crate) fn settled(&self) -> (u64, u64) {
        (self.call.cost.saturating_sub(self.actual), self.actual.saturating_sub(self.call.cost))
    }
}
