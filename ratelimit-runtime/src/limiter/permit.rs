//! [`Permit`]: an admitted call, and what it can give back. A refund returns its units (the
//! call should not count: `refund = on_ok` for logins); a settle makes its units what the call
//! really took, giving back or taking the difference; the end of a call frees the concurrency
//! slots it holds, also when the call panics or its future is dropped ([`Slots`]' `Drop`).

use super::keys::SubjectKeys;
use super::limit_set::LimitSet;
use super::rare::Empty;
use super::snapshot::Snapshot;
use super::Limiter;
use crate::model::decision::Decision;
use crate::model::member::Member;
use crate::model::policy::Headroom;
use crate::model::refusal::RateLimited;
use crate::model::subject::Subject;
use std::fmt;
use std::mem::{take, ManuallyDrop};
use std::sync::Arc;

mod settle;
mod slots;

pub use settle::Settle;
use slots::Slots;

/// An allowed call. Borrows its limiter, so that deciding allocates nothing.
///
/// Its units stay counted unless it is [refunded](Self::refund). When a limit of the limiter is a
/// concurrency limit (`concurrency = N`), the permit holds a slot of it until it is dropped.
///
/// Kept small (every allowed call returns one, and a large `Result` costs copies on every call):
/// what the store decided is kept only as far as a quota or a give-back reads it. What it may
/// own (a snapshot, keys on the heap, slots) is almost always nothing, and is dropped behind one
/// flag, `owns`: with a test per field its drop glue was a call on every permit (14
/// instructions of a plain call's 607).
pub struct Permit<'a> {
    limiter: &'a Limiter,
    /// The limits in force it was decided under, when not the limiter's own.
    snapshot: ManuallyDrop<Option<Arc<Snapshot>>>,
    cost: u64,
    /// What the store admitted it with (meaningful when `decided`).
    admitted: Admitted,
    /// The subjects of the enforced limits, as the store keyed them.
    keys: ManuallyDrop<SubjectKeys>,
    /// The concurrency slots it holds, freed when the permit goes (boxed: most limiters have
    /// none, and they should not make every permit larger).
    slots: ManuallyDrop<Option<Box<Slots>>>,
    /// `false` when the store failed and the policy let the call through (or the call was
    /// exempt): there is nothing to give back.
    decided: bool,
    /// Decided at a pinned time (`Check::at`): it gives back at that time too.
    pinned: bool,
    /// Decided in process memory while the store failed (`on_error = local`): given back there.
    local: bool,
    /// Whether `snapshot`, `keys` or `slots` may own something, to drop with the permit. Set
    /// where the permit is built; taking a field out leaves it empty, so it never goes stale
    /// the other way (a permit that owns nothing but says it may costs only the drop's call).
    owns: bool,
}

impl Drop for Permit<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.owns {
            self.free();
        }
    }
}

/// What of an allowed [`Decision`] a permit reads again: the tightest rule and its headroom (the
/// quota), and what finds the call's units in the store (its time and member).
#[derive(Clone, Copy)]
pub(crate) struct Admitted {
    /// The rule's limit in the high half, the rule in the low half: one word, built from two
    /// reads of the decision. (Two `u32` fields side by side were filled by one 16-byte read
    /// of the decision's `limit` and `rule`, which waited for the store's writes of them.)
    index: u64,
    remaining: u64,
    /// The reset, µs.
    reset_us: u64,
    at_us: u64,
    member: Member,
}

impl Admitted {
    const NONE: Admitted = Admitted { index: 0, remaining: 0, reset_us: 0, at_us: 0, member: Member::NONE };

    /// Taken from the store's answer where it lies (the decision under way keeps this, not the
    /// whole decision: one move of the decision fewer on its way to the permit).
    #[inline]
    pub(crate) fn of(d: &Decision) -> Admitted {
        Admitted {
            // An index fits in 32 bits: a limiter's limits and rules are built from vectors far
            // shorter than u32::MAX (a checked conversion cost every permit four instructions).
            index: (d.limit as u64) << 32 | (d.rule as u64 & u64::from(u32::MAX)),
            remaining: d.remaining,
            reset_us: d.reset_us,
            at_us: d.at_us,
            member: d.member,
        }
    }

    /// The allowed decision again, as far as the permit kept it.
    fn decision(&self) -> Decision {
        let index = |i: u64| usize::try_from(i & u64::from(u32::MAX)).unwrap_or(usize::MAX);
        Decision {
            limit: index(self.index >> 32),
            rule: index(self.index),
            remaining: self.remaining,
            reset_us: self.reset_us,
            member: self.member,
            ..Decision::admitted(self.at_us)
        }
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("limiter", &self.limiter.name())
            .field("decision", &self.decided.then(|| self.admitted.decision()))
            .field("cost", &self.cost)
            .field("holds_slots", &self.slots.is_some())
            .finish()
    }
}

impl<'a> Permit<'a> {
    /// The permit of a call allowed by `decision` (`None`: let through without one, nothing
    /// to give back) under `snapshot` (`None`: the limiter's own limits), as the call's result:
    /// built where the caller returns it (a permit returned, then wrapped in `Ok`, was built
    /// on the stack and copied, each 16 bytes read right after being written in pieces).
    #[inline(always)]
    pub(crate) fn new(
        limiter: &'a Limiter,
        decision: Option<&Admitted>,
        snapshot: Option<Arc<Snapshot>>,
        cost: u64,
        subjects: &[Subject<'_>],
        pinned: bool,
        local: bool,
    ) -> Result<Permit<'a>, RateLimited> {
        let Some(d) = decision else { return Permit::undecided(limiter, snapshot, cost, pinned, local) };
        let set = limiter.enforced(snapshot.as_deref());
        if set.has_concurrency {
            return Permit::holding_slots(limiter, d, snapshot, cost, subjects, pinned, local);
        }
        let keys = SubjectKeys::of(set, subjects);
        // The struct written out here, not through `assemble`: built there, the permit of a
        // call along the decision path was copied out whole once more.
        let owns = owns(&snapshot, &keys, &None);
        let (snapshot, keys, slots) = (ManuallyDrop::new(snapshot), ManuallyDrop::new(keys), ManuallyDrop::new(None));
        Ok(Permit { limiter, snapshot, cost, admitted: *d, keys, slots, decided: true, pinned, local, owns })
    }

    /// The permit of a plain call (see `plain.rs`) of `subject`, allowed by `d`: one limit of
    /// the limiter's own, and no concurrency slots. It knows its one key, where
    /// [`new`](Self::new) looks for the limits' subjects again.
    #[inline(always)]
    pub(crate) fn plain(
        limiter: &'a Limiter,
        d: &Admitted,
        cost: u64,
        subject: &Subject<'_>,
        pinned: bool,
    ) -> Result<Permit<'a>, RateLimited> {
        let keys = SubjectKeys::one(subject);
        let owns = owns(&None, &keys, &None);
        let (snapshot, keys, slots) = (ManuallyDrop::new(None), ManuallyDrop::new(keys), ManuallyDrop::new(None));
        Ok(Permit { limiter, snapshot, cost, admitted: *d, keys, slots, decided: true, pinned, local: false, owns })
    }

    /// The permit of a call that holds concurrency slots. Out of line (most limiters have
    /// none), so that the usual permit is built where it is returned.
    #[cold]
    #[inline(never)]
    fn holding_slots(
        limiter: &'a Limiter,
        d: &Admitted,
        snapshot: Option<Arc<Snapshot>>,
        cost: u64,
        subjects: &[Subject<'_>],
        pinned: bool,
        local: bool,
    ) -> Result<Permit<'a>, RateLimited> {
        let set = limiter.enforced(snapshot.as_deref());
        let keys = SubjectKeys::of(set, subjects);
        let slots = Some(Box::new(Slots {
            limiter: limiter.clone(),
            snapshot: snapshot.clone(),
            keys: keys.clone(),
            at_us: d.at_us,
            member: d.member,
            pinned,
            local,
            held: true,
        }));
        Ok(Permit::assemble(limiter, snapshot, cost, *d, keys, slots, true, pinned, local))
    }

    /// The permit of a call let through without a decision: nothing to give back. Out of
    /// line, so that an admitted call's permit is built where it is returned (a permit built
    /// on either path was assembled on the stack first and copied).
    #[cold]
    #[inline(never)]
    fn undecided(
        limiter: &'a Limiter,
        snapshot: Option<Arc<Snapshot>>,
        cost: u64,
        pinned: bool,
        local: bool,
    ) -> Result<Permit<'a>, RateLimited> {
        Ok(Permit::assemble(limiter, snapshot, cost, Admitted::NONE, SubjectKeys::EMPTY, None, false, pinned, local))
    }

    /// The permit of its parts (the rare permits: [`new`](Self::new) builds the usual one).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        limiter: &'a Limiter,
        snapshot: Option<Arc<Snapshot>>,
        cost: u64,
        admitted: Admitted,
        keys: SubjectKeys,
        slots: Option<Box<Slots>>,
        decided: bool,
        pinned: bool,
        local: bool,
    ) -> Permit<'a> {
        let owns = owns(&snapshot, &keys, &slots);
        let (snapshot, keys, slots) = (ManuallyDrop::new(snapshot), ManuallyDrop::new(keys), ManuallyDrop::new(slots));
        Permit { limiter, snapshot, cost, admitted, keys, slots, decided, pinned, local, owns }
    }

    /// Drops what the permit owns, leaving each field empty. Out of line: almost no permit
    /// owns anything.
    #[cold]
    #[inline(never)]
    fn free(&mut self) {
        drop(take(&mut *self.snapshot));
        drop(take(&mut *self.keys));
        drop(take(&mut *self.slots));
    }

    fn set(&self) -> &LimitSet {
        self.limiter.enforced(self.snapshot.as_deref())
    }

    /// The quota left, or `None` when the store failed and the policy let the call through (or
    /// the call was exempt, or only shadow limits decided it).
    pub fn quota(&self) -> Option<Headroom> {
        self.decided.then(|| self.set().quota(&self.admitted.decision()))?
    }

    /// Gives the call's units back, so that it does not count (a login that succeeded, a call
    /// that failed on the server's side): one store round trip, and its concurrency slots are
    /// freed with it. Only what still counts is given back (units that have left their window,
    /// or drained from their bucket, are not), and never below zero. Shadow limits keep
    /// counting the call. A permit decided at a pinned time ([`Check::at`](crate::request::Check::at))
    /// gives back at that time. Also forgets this process's cached refusals of the subjects,
    /// which the refund may have made wrong. `.await` it, or run it with
    /// [`blocking`](Settle::blocking).
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let logins = Limiter::builder("login")
    ///     .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 5).unwrap()]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// for _ in 0..100 {
    ///     // Correct passwords: refunded, never counted.
    ///     let permit = logins.check(&ip).await.unwrap();
    ///     permit.refund().await.unwrap();
    /// }
    /// let mut left = 0;
    /// while logins.check(&ip).await.is_ok() {
    ///     left += 1;
    /// }
    /// assert_eq!(left, 5);
    /// # }
    /// ```
    pub fn refund(self) -> Settle<'a> {
        self.settle(0)
    }

    /// Settles the call to the units it really took, `actual` (tokens generated, bytes sent),
    /// when its cost was an estimate: one store round trip, which also frees its concurrency
    /// slots. Fewer units than the cost give the difference back where it still counts, as a
    /// [refund](Self::refund) does (a refund settles to 0). More take the extra units even past
    /// the limit: that is debt, and later calls are refused, with an exact retry-after, until it
    /// has left. What a settled unit is in each algorithm is defined in docs/design.md. A permit
    /// dropped without settling keeps its cost. Shadow limits keep the cost. `.await` it, or run
    /// it with [`blocking`](Settle::blocking).
    ///
    /// ```
    /// use ratelimit_runtime::{Limit, LimitType, Limiter, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let tokens = Limiter::builder("complete")
    ///     .limit(Limit::new(LimitType::Key, [Rule::new(Duration::from_secs(60), 1000).unwrap()]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let user = [Subject::bytes(&b"alice"[..])];
    /// // Estimated at 100 tokens, the reply took 1500: 500 past the limit.
    /// let permit = tokens.check(&user).cost(100).await.unwrap();
    /// permit.settle(1500).await.unwrap();
    /// let refused = tokens.check(&user).cost(100).await.unwrap_err();
    /// assert!(refused.retry_after() > Duration::from_secs(59));
    /// # }
    /// ```
    pub fn settle(self, actual: u64) -> Settle<'a> {
        Settle { permit: self, actual: Some(actual) }
    }

    /// Ends the call: frees the concurrency slots it holds (one round trip, awaited: the next
    /// call of the subject finds the slot free), and keeps its units as they are.
    pub(crate) fn end(self) -> Settle<'a> {
        Settle { permit: self, actual: None }
    }
}

/// Whether a permit of these parts owns anything to drop (known `false` where the usual permit
/// is built: no test is left of it there).
#[inline(always)]
fn owns(snapshot: &Option<Arc<Snapshot>>, keys: &SubjectKeys, slots: &Option<Box<Slots>>) -> bool {
    snapshot.is_some() || !keys.holds_nothing() || slots.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every allowed call moves its permit out through a `Result` (and often further): a
    /// larger one costs a `memcpy` call per move.
    #[test]
    fn a_decision_is_small() {
        let size = std::mem::size_of::<Result<Permit<'static>, RateLimited>>();
        eprintln!("permit {} result {size}", std::mem::size_of::<Permit<'static>>());
        assert!(size <= 128, "Result<Permit, RateLimited> is {size} bytes");
    }
}
