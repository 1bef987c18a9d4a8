//! Synced limits (`sync = …`): each process hands out a limit's units from a local reserve,
//! filled from the store in one batch when it runs out and kept at most the sync interval, so
//! that a hot key (a global limit, one big tenant) goes past what one store can decide. This is
//! their step of the decision: the synced limits take the call's units from their reserves
//! (asking the store where one is empty), then the other limits are decided by the store as a
//! set of their own; a later refusal gives the units back.

pub(crate) mod reserve;

use super::decide::{record_quota, Deciding, Phase, Step, SyncStep};
use super::keys::Keys;
use crate::error::StoreError;
use crate::metrics::Outcome;
use crate::model::decision::Decision;
use crate::model::refusal::Cause;
use crate::store::{Call, Pending};
use reserve::Take;
use std::time::Duration;

impl Deciding<'_, '_, '_> {
    /// The `sync` limits from the `pos`-th on take the cost from their reserves (asking the
    /// store where a reserve is empty), then the others are decided by the store.
    /// `keys` are the enforced set's.
    pub(super) fn sync_from(&mut self, pos: usize, keys: &[&[u8]]) -> Step {
        let set = self.enforced_set();
        let Some(synced) = set.synced.as_deref() else { return self.shadow() };
        let now_us = self.sync.now_us;
        for p in pos..synced.limits.len() {
            let Some(&(at, ref reserves)) = synced.limits.get(p) else { break };
            let key = keys.get(at).copied().unwrap_or_default();
            let (batch, fill) = match reserves.take(key, self.cost, now_us) {
                Take::Taken { remaining, rule } => {
                    record_quota(|| set, &Decision { limit: at, rule, remaining, ..Decision::admitted(now_us) });
                    continue;
                }
                Take::Refused { until_us, rule } => {
                    let wait = Duration::from_micros(until_us.saturating_sub(now_us));
                    let refused =
                        self.refusal(set.limit_type(at), set.policy_of(at, rule), wait, Cause::Exceeded, None);
                    self.limiter.metrics().local_denial();
                    self.sync.pos = p;
                    self.give_back_synced();
                    return self.done(Some(refused), Outcome::Denied);
                }
                Take::Fill { batch } => (batch, true),
                Take::Exact => (self.cost, false),
            };
            let pending = self.ask_one(at, batch, keys);
            self.sync = SyncStep { pos: p, batch, fill, now_us };
            self.phase = Phase::Sync;
            return self.pending(pending);
        }
        let taken = synced.limits.len();
        if synced.exact.limits.is_empty() {
            return self.shadow();
        }
        let pending = match Keys::of(&synced.exact, self.subjects) {
            Ok(keys) => {
                let call = Call {
                    limits: &synced.exact.limits,
                    subjects: keys.as_slice(),
                    cost: self.cost,
                    now_us: self.pinned,
                    shadow: 0,
                };
                self.limiter.store().decide(&call)
            }
            Err(_) => return self.shadow(),
        };
        self.sync.pos = taken;
        self.phase = Phase::Exact;
        self.pending(pending)
    }

    /// Asks the store for `cost` units of the enforced set's limit `at` alone (`keys`: the
    /// enforced set's).
    pub(super) fn ask_one(&self, at: usize, cost: u64, keys: &[&[u8]]) -> Pending {
        let set = self.enforced_set();
        let subjects = keys.get(at..=at).unwrap_or_default();
        let limits = set.limits.get(at..=at).unwrap_or_default();
        let call = Call { limits, subjects, cost, now_us: self.pinned, shadow: 0 };
        self.limiter.store().decide(&call)
    }

    /// The store's answer for a `sync` limit's batch (or for this call alone).
    pub(super) fn sync_answer(&mut self, answer: Result<Decision, StoreError>) -> Step {
        let set = self.enforced_set();
        let SyncStep { pos, batch, fill, now_us } = self.sync;
        let (Some(&(at, ref reserves)), Ok(keys)) =
            (set.synced.as_deref().and_then(|s| s.limits.get(pos)), Keys::of(set, self.subjects))
        else {
            return self.shadow();
        };
        let keys = keys.as_slice();
        let key = keys.get(at).copied().unwrap_or_default();
        match answer {
            Ok(d) if d.allowed => {
                if fill {
                    reserves.filled(key, batch, self.cost, d.remaining, d.rule, now_us);
                }
                record_quota(|| set, &Decision { limit: at, ..d });
                self.sync_from(pos + 1, keys)
            }
            Ok(_) if fill && batch > self.cost => {
                // No room for a batch: perhaps for this call alone. Smaller batches follow.
                reserves.refused(key, batch, self.cost, None);
                let pending = self.ask_one(at, self.cost, keys);
                self.sync = SyncStep { fill: false, batch: self.cost, ..self.sync };
                self.pending(pending)
            }
            Ok(d) => {
                let until = now_us.saturating_add(d.retry_after_us);
                if fill {
                    reserves.refused(key, batch, self.cost, Some((until, d.rule)));
                } else {
                    reserves.refuse_until(key, until, d.rule);
                }
                let refused =
                    self.refusal(set.limit_type(at), set.policy_of(at, d.rule), d.retry_after(), Cause::Exceeded, None);
                self.give_back_synced();
                self.done(Some(refused), Outcome::Denied)
            }
            Err(e) => {
                if fill {
                    reserves.failed(key);
                }
                self.give_back_synced();
                self.phase = Phase::Enforced;
                self.enforced_answer(Err(e))
            }
        }
    }

    /// Gives back the units the `sync` limits before the current one took: a later limit
    /// refused the call (all pass, or none counts), or the store failed.
    pub(super) fn give_back_synced(&mut self) {
        let upto = std::mem::take(&mut self.sync.pos);
        if upto == 0 {
            return;
        }
        let set = self.enforced_set();
        let (Some(synced), Ok(keys)) = (set.synced.as_deref(), Keys::of(set, self.subjects)) else { return };
        for (at, reserves) in synced.limits.iter().take(upto) {
            reserves.give_back(keys.as_slice().get(*at).copied().unwrap_or_default(), self.cost, self.sync.now_us);
        }
    }
}
