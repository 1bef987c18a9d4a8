//! [`Permit`]: an admitted call, and what it can give back. A refund returns its units (the
//! call should not count: `refund = on_ok` for logins); the end of a call frees the concurrency
//! slots it holds, also when the call panics or its future is dropped ([`Slots`]' `Drop`).

use crate::decision::Decision;
use crate::error::StoreError;
use crate::io;
use crate::limit_set::{Keys, LimitSet};
use crate::limiter::Limiter;
use crate::policy::Headroom;
use crate::snapshot::Snapshot;
use crate::store::{Answer, Call, Release, Store};
use crate::subject::Subject;
use std::fmt;
use std::sync::Arc;

/// An allowed call. Borrows its limiter, so that deciding allocates nothing.
///
/// Its units stay counted unless it is [refunded](Self::refund). When a limit of the limiter is a
/// concurrency limit (`concurrency = N`), the permit holds a slot of it until it is dropped.
pub struct Permit<'a> {
    limiter: &'a Limiter,
    /// `None` when the store failed and the policy let the call through (or the call was
    /// exempt): there is nothing to give back.
    decision: Option<Decision>,
    /// The limits in force it was decided under, when not the limiter's own.
    snapshot: Option<Arc<Snapshot>>,
    cost: u64,
    /// Decided at a pinned time (`check_at`): it gives back at that time too.
    pinned: bool,
    /// The subjects of the enforced limits, as the store keyed them.
    keys: SubjectKeys,
    /// The concurrency slots it holds, freed when the permit goes.
    slots: Option<Slots>,
    /// Decided in process memory while the store failed (`on_error = local`): given back there.
    local: bool,
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("limiter", &self.limiter.name())
            .field("decision", &self.decision)
            .field("cost", &self.cost)
            .field("holds_slots", &self.slots.is_some())
            .finish()
    }
}

impl<'a> Permit<'a> {
    #[inline]
    pub(crate) fn new(
        limiter: &'a Limiter,
        decision: Option<Decision>,
        snapshot: Option<Arc<Snapshot>>,
        cost: u64,
        subjects: &[Subject<'_>],
        pinned: bool,
        local: bool,
    ) -> Permit<'a> {
        let Some(d) = decision else {
            return Permit {
                limiter,
                decision,
                snapshot,
                cost,
                pinned,
                keys: SubjectKeys::of(&[]),
                slots: None,
                local,
            };
        };
        let set = match &snapshot {
            Some(s) => &s.enforced,
            None => limiter.own(),
        };
        let keys = Keys::of(set, subjects).map_or_else(|_| SubjectKeys::of(&[]), |k| SubjectKeys::of(k.as_slice()));
        let concurrency = set.limits.iter().any(|l| l.is_concurrency());
        let mut permit = Permit { limiter, decision, snapshot, cost, pinned, keys, slots: None, local };
        if concurrency {
            permit.slots = Some(Slots {
                limiter: limiter.clone(),
                snapshot: permit.snapshot.clone(),
                keys: permit.keys.clone(),
                at_us: d.at_us,
                member: d.member,
                pinned,
                local,
                held: true,
            });
        }
        permit
    }

    fn set(&self) -> &LimitSet {
        match &self.snapshot {
            Some(s) => &s.enforced,
            None => self.limiter.own(),
        }
    }

    /// The quota left, or `None` when the store failed and the policy let the call through (or
    /// the call was exempt, or only shadow limits decided it).
    pub fn quota(&self) -> Option<Headroom> {
        self.decision.and_then(|d| self.set().quota(&d))
    }

    /// Gives the call's units back, so that it does not count (a login that succeeded, a call
    /// that failed on the server's side): one store round trip, and its concurrency slots are
    /// freed with it. Only what still counts is given back (units that have left their window,
    /// or drained from their bucket, are not), and never below zero. Shadow limits keep
    /// counting the call. A permit decided at a pinned time (`check_at`) gives back at that
    /// time. Also forgets this process's cached refusals of the subjects, which
    /// the refund may have made wrong.
    ///
    /// ```
    /// use ratelimit_runtime::{Limiter, LimitType, Rule, Subject, store::MemoryStore};
    /// use std::{sync::Arc, time::Duration};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let logins = Limiter::builder("login")
    ///     .limit(LimitType::Ip, [Rule::new(Duration::from_secs(60), 5).unwrap()])
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// for _ in 0..100 {
    ///     // Correct passwords: refunded, never counted.
    ///     let permit = logins.check(&ip, 1).await.unwrap();
    ///     permit.refund().await.unwrap();
    /// }
    /// let mut left = 0;
    /// while logins.check(&ip, 1).await.is_ok() {
    ///     left += 1;
    /// }
    /// assert_eq!(left, 5);
    /// # }
    /// ```
    pub async fn refund(mut self) -> Result<(), StoreError> {
        let answer = self.give_back(true);
        answer.finish().await
    }

    /// As [`refund`](Self::refund), blocking the thread: for plain `fn`s.
    pub fn refund_blocking(mut self) -> Result<(), StoreError> {
        self.give_back(true).finish_blocking()
    }

    /// Frees the concurrency slots the call holds (one round trip, awaited: the next call of
    /// the subject finds the slot free).
    pub(crate) async fn end(mut self) -> Result<(), StoreError> {
        self.give_back(false).finish().await
    }

    /// As [`end`](Self::end), blocking.
    pub(crate) fn end_blocking(mut self) -> Result<(), StoreError> {
        self.give_back(false).finish_blocking()
    }

    /// The store call that gives back the units (`refund`) and frees the slots.
    fn give_back(&mut self, refund: bool) -> Answer<()> {
        let Some(d) = self.decision else { return Answer::Ready(Ok(())) };
        let slots = self.slots.take().map(Slots::disarm);
        let set = self.set();
        let indices: Vec<usize> = (0..set.limits.len())
            .filter(|&i| if set.limits[i].is_concurrency() { slots.is_some() } else { refund })
            .collect();
        if indices.is_empty() || self.keys.len() != set.limits.len() {
            return Answer::Ready(Ok(()));
        }
        let subjects = self.keys.slices();
        if refund {
            set.forget_keys(self.limiter.store(), &subjects);
            // The response's `RateLimit` field tells what is left after the refund.
            if let (Some(ctx), Some(mut quota)) = (crate::context::current(), set.quota(&d)) {
                let capacity = set.limits.get(d.limit).map_or(0, |l| l.capacity(d.rule));
                quota.remaining = quota.remaining.saturating_add(self.cost).min(capacity);
                ctx.record_quota(quota);
            }
        }
        let release = Release {
            call: Call {
                limits: &set.limits,
                subjects: &subjects,
                cost: self.cost,
                now_us: self.pinned.then_some(d.at_us),
            },
            indices: &indices,
            at_us: d.at_us,
            member: d.member,
        };
        release_store(self.limiter, self.local).release(&release)
    }
}

/// The concurrency slots a permit holds: owned (a `Limiter` is a handle), so that dropping it
/// can free them from anywhere.
struct Slots {
    limiter: Limiter,
    snapshot: Option<Arc<Snapshot>>,
    keys: SubjectKeys,
    at_us: u64,
    member: [u8; 16],
    pinned: bool,
    /// Taken in process memory while the store failed: freed there.
    local: bool,
    /// Still to be freed by `Drop`.
    held: bool,
}

/// Where a permit's units and slots are given back: the store that admitted it.
fn release_store(limiter: &Limiter, local: bool) -> &dyn Store {
    if local {
        limiter.local_store()
    } else {
        &**limiter.store()
    }
}

impl Slots {
    /// The permit frees the slots itself: nothing left for `Drop`.
    fn disarm(mut self) {
        self.held = false;
    }
}

/// A permit dropped without ending (the call panicked, or its future was dropped): the slots
/// are freed in the background. In memory that is done at once; for a remote store the release
/// runs on the library's I/O runtime, which works from async code and plain threads alike and
/// never blocks the dropping thread (the store's timeout bounds it; if it fails, the lease
/// frees the slots).
impl Drop for Slots {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let set = match &self.snapshot {
            Some(s) => &s.enforced,
            None => self.limiter.own(),
        };
        let indices: Vec<usize> = (0..set.limits.len()).filter(|&i| set.limits[i].is_concurrency()).collect();
        if self.keys.len() != set.limits.len() {
            return;
        }
        let subjects = self.keys.slices();
        let release = Release {
            call: Call { limits: &set.limits, subjects: &subjects, cost: 1, now_us: self.pinned.then_some(self.at_us) },
            indices: &indices,
            at_us: self.at_us,
            member: self.member,
        };
        match release_store(&self.limiter, self.local).release(&release) {
            Answer::Ready(Err(e)) => tracing::warn!(error = %e, "ratelimit: could not free a concurrency slot"),
            Answer::Ready(Ok(())) => {}
            Answer::Remote(fut) => match io::handle() {
                Ok(handle) => {
                    handle.spawn(async move {
                        if let Err(e) = fut.await {
                            tracing::warn!(error = %e, "ratelimit: could not free a concurrency slot; its lease will");
                        }
                    });
                }
                Err(e) => tracing::warn!(error = %e, "ratelimit: could not free a concurrency slot; its lease will"),
            },
        }
    }
}

/// A call's subject keys, owned: inline for the usual few short ones (an IP, a user id), so
/// that a permit costs no allocation.
#[derive(Clone)]
struct SubjectKeys {
    /// Where each key ends in the bytes.
    ends: Vec<usize>,
    inline_ends: [u8; 4],
    count: usize,
    inline: [u8; 64],
    heap: Vec<u8>,
}

impl SubjectKeys {
    fn of(keys: &[&[u8]]) -> SubjectKeys {
        let mut out =
            SubjectKeys { ends: Vec::new(), inline_ends: [0; 4], count: keys.len(), inline: [0; 64], heap: Vec::new() };
        let total: usize = keys.iter().map(|k| k.len()).sum();
        if keys.len() <= out.inline_ends.len() && total <= out.inline.len() {
            let mut at = 0;
            for (i, k) in keys.iter().enumerate() {
                out.inline[at..at + k.len()].copy_from_slice(k);
                at += k.len();
                out.inline_ends[i] = at as u8;
            }
        } else {
            for k in keys {
                out.heap.extend_from_slice(k);
                out.ends.push(out.heap.len());
            }
        }
        out
    }

    fn len(&self) -> usize {
        self.count
    }

    fn slices(&self) -> Vec<&[u8]> {
        let (bytes, ends): (&[u8], Vec<usize>) = if self.ends.is_empty() && self.heap.is_empty() {
            (&self.inline, self.inline_ends[..self.count].iter().map(|&e| usize::from(e)).collect())
        } else {
            (&self.heap, self.ends.clone())
        };
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let key = &bytes[start..end];
                start = end;
                key
            })
            .collect()
    }
}
