//! The decision of a plain limiter on the memory store (the default store, and most limiters):
//! no overrides file, tiers or shadow limits in force, no runtime overrides, no refusal cache,
//! no `sync` limits. Such a call needs nothing of the decision path but the store's answer, so
//! it asks the memory store directly, and builds the permit from the answer where it lies.
//!
//! It decides as the decision path does, with the same store call: the path's state machine,
//! the `Pending` wrapping and the moves of the decision between its steps cost a plain call more
//! than the store's decision itself. Anything else (a refusal, a missing subject, a cost above a
//! rule) goes on along the decision path, which answers it as it answers every call.

use super::decide::record_quota;
use super::permit::{Admitted, Permit};
use super::Limiter;
use crate::metrics::Outcome;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::refusal::RateLimited;
use crate::model::subject::Subject;
use crate::store::MemoryStore;
use std::time::Instant;

/// A plain call as [`Limiter::plain_call`] found it: the store, the limit, its subject and the
/// subject's key.
pub(crate) struct PlainCall<'l, 's> {
    memory: &'l MemoryStore,
    limit: &'l CompiledLimit,
    subject: &'s Subject<'s>,
    key: &'s [u8],
}

impl Limiter {
    /// The memory store, the limit, the subject and its key of a plain call (see the module's
    /// documentation) of `cost` units; `None` when the call is not such a call. The caller
    /// decides it with [`decide_plain`](Self::decide_plain). (Two steps, so that no decision or
    /// permit is returned wrapped: each wrapping moved one whole once more.) Calls of several
    /// limits go along the decision path: their keys, copied from step to step, cost more than
    /// it.
    #[inline(always)]
    pub(crate) fn plain_call<'s>(&self, subjects: &'s [Subject<'_>], cost: u64) -> Option<PlainCall<'_, 's>> {
        let set = self.own();
        // What never changes for a limiter is one bit, resolved with its switches; what
        // changes (an overrides file loaded, the call's cost and subject) is looked at here.
        if !self.switches().plain_on_memory() || cost > set.min_capacity || !self.unchanged() {
            return None;
        }
        let memory = self.memory_store()?;
        let limit = set.limits.first()?;
        let subject = subjects.get(set.subject_of(0))?;
        let key = subject.key_bytes()?;
        Some(PlainCall { memory, limit, subject, key })
    }

    /// Decides `plain`, the plain call of `subjects`, and counts it.
    #[inline(always)]
    pub(crate) fn decide_plain<'l>(
        &'l self,
        plain: PlainCall<'_, '_>,
        subjects: &[Subject<'_>],
        cost: u64,
        pinned: Option<u64>,
        started: Option<Instant>,
    ) -> Result<Permit<'l>, RateLimited> {
        let d = plain.memory.decide_one_limit(plain.limit, plain.key, cost, pinned);
        if !d.allowed {
            return self.refused_plain(subjects, cost, pinned, started, &d);
        }
        record_quota(|| self.own(), &d);
        self.metrics().report(Outcome::Allowed, started, subjects);
        Permit::plain(self, &Admitted::of(&d), cost, plain.subject, pinned.is_some())
    }

    /// A plain call refused by the store with `d`: named and counted as the decision path
    /// names and counts a refusal (it is that path's own code).
    #[cold]
    #[inline(never)]
    fn refused_plain<'l>(
        &'l self,
        subjects: &[Subject<'_>],
        cost: u64,
        pinned: Option<u64>,
        started: Option<Instant>,
        d: &Decision,
    ) -> Result<Permit<'l>, RateLimited> {
        let mut deciding = self.decide(subjects, cost, pinned, None);
        deciding.refuse(d);
        self.metrics().report(deciding.outcome(), started, subjects);
        deciding.decided()
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithm::Algorithm;
    use crate::limiter::decide::Step;
    use crate::model::refusal::RateLimited;
    use crate::rt::clock::ManualClock;
    use crate::store::MemoryStore;
    use crate::{Limit, LimitType, Limiter, Permit, Rule, Subject};
    use std::future::IntoFuture;
    use std::sync::Arc;
    use std::time::Duration;

    fn limiter(name: &str, alg: Algorithm, clock: &Arc<ManualClock>) -> Limiter {
        let rules = [Rule::new(Duration::from_secs(1), 3).unwrap(), Rule::new(Duration::from_secs(10), 7).unwrap()];
        let limit = Limit::new(LimitType::Key, rules).algorithm(alg);
        let limit = if alg.supports_burst() { limit.burst(4) } else { limit };
        Limiter::builder(name).limit(limit).store(Arc::new(MemoryStore::with_clock(clock.clone()))).build().unwrap()
    }

    /// Only a plain limiter's calls go straight to the memory store: a switch, a second limit,
    /// a `sync`, tier or shadow limit, a limit the store's one-limit path does not take, a cost
    /// above a rule or a missing subject sends the call along the decision path.
    #[test]
    fn only_plain_calls_go_straight_to_the_store() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000_000));
        let rule = || [Rule::new(Duration::from_secs(1), 3).unwrap()];
        let build = |name: &str, limits: Vec<Limit>, on: fn(crate::LimiterBuilder) -> crate::LimiterBuilder| {
            let mut b = Limiter::builder(name).store(Arc::new(MemoryStore::with_clock(clock.clone())));
            for l in limits {
                b = b.limit(l);
            }
            on(b).build().unwrap()
        };
        let key = || Limit::new(LimitType::Key, rule());
        let (one, two) = ([Subject::bytes(&b"a"[..])], [Subject::bytes(&b"a"[..]), Subject::bytes(&b"b"[..])]);
        let plain = build("plain::only", vec![key()], |b| b);
        assert!(plain.plain_call(&one, 1).is_some());
        assert!(plain.plain_call(&one, 4).is_none(), "a cost above the rule");
        assert!(plain.plain_call(&[Subject::missing()], 1).is_none(), "a missing subject");
        let five = (1..=5).map(|s| Rule::new(Duration::from_secs(s), 3 * s).unwrap());
        let gcra = |rules| Limit::new(LimitType::Key, rules).algorithm(Algorithm::Gcra);
        let not_plain = [
            build("plain::cache", vec![key()], |b| b.refusal_cache(true)),
            build("plain::overrides", vec![key()], |b| b.runtime_overrides(true)),
            build("plain::two", vec![key(), key()], |b| b),
            build("plain::shadow", vec![key().mode(crate::Mode::Shadow)], |b| b),
            build("plain::tier", vec![key().tier("gold", rule())], |b| b),
            build("plain::sync", vec![key().sync(Duration::from_millis(100))], |b| b),
            // Limits the memory store's one-limit path does not take.
            build("plain::block", vec![key().block(Duration::from_secs(60))], |b| b),
            build("plain::slots", vec![Limit::concurrency(LimitType::Key, 2)], |b| b),
            build("plain::five", vec![gcra(five.collect::<Vec<_>>())], |b| b),
        ];
        for limiter in &not_plain {
            assert!(limiter.plain_call(&two, 1).is_none(), "{limiter:?}");
        }
    }

    /// What a caller reads of a call's result.
    fn seen(r: &Result<Permit<'_>, RateLimited>) -> String {
        match r {
            Ok(p) => format!("ok {:?}", p.quota().map(|q| (q.remaining, q.reset, q.policy))),
            Err(e) => format!("refused {:?} {:?} {:?} {:?}", e.cause(), e.retry_after(), e.policy(), e.limit_type()),
        }
    }

    /// A plain call (one limit on the memory store, nothing else in force) is decided without
    /// the decision path: its permits, refusals and refunds are the path's, call by call, for
    /// every algorithm, blocking and awaited, on twin stores driven by twin clocks.
    #[test]
    fn a_plain_call_decides_as_the_decision_path() {
        let mut rng = fastrand::Rng::with_seed(0x5eed_0f91);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for alg in Algorithm::ALL {
            let (ca, cb) =
                (Arc::new(ManualClock::new(1_700_000_000_000_000)), Arc::new(ManualClock::new(1_700_000_000_000_000)));
            let (plain, path) = (limiter("plain::a", alg, &ca), limiter("plain::b", alg, &cb));
            let mut refused = 0;
            for call in 0..3000 {
                // One short subject in three, a key too long for the store's stack in one call
                // of ten (decided by its general path, as from the decision path).
                let name = vec![b'a' + rng.u8(..3); if rng.u8(..10) == 0 { 70 } else { 1 }];
                let subjects = [Subject::bytes(&name[..])];
                let cost = [0, 1, 1, 1, 2, 3][rng.usize(..6)];
                assert!(plain.plain_call(&subjects, cost).is_some(), "{alg:?}: a plain call");
                // Blocking, or awaited (the future's own plain path).
                let a = match call % 2 {
                    0 => plain.check(&subjects).cost(cost).blocking(),
                    _ => rt.block_on(plain.check(&subjects).cost(cost).into_future()),
                };
                let mut deciding = path.decide(&subjects, cost, None, None);
                assert!(matches!(deciding.start(), Step::Done), "the memory store answers at once");
                let b = deciding.decided();
                assert_eq!(seen(&a), seen(&b), "{alg:?} call {call}");
                refused += usize::from(a.is_err());
                if let (Ok(a), Ok(b)) = (a, b) {
                    if rng.u8(..5) == 0 {
                        a.refund().blocking().unwrap();
                        b.refund().blocking().unwrap();
                    }
                }
                let by = Duration::from_micros([0, 1, 999, 40_000, 333_333, 2_500_000][rng.usize(..6)]);
                ca.advance(by);
                cb.advance(by);
            }
            assert!(refused > 300, "{alg:?}: refusals were compared too ({refused})");
        }
    }
}
