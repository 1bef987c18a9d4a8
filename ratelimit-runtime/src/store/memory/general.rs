//! The in-memory store's path for any call (several limits, a shadow group, penalties): every
//! key built in a reused buffer, the shards locked in order, every limit checked, then recorded.

use super::check::{check_limit, record, start_blocks, Stepped};
use super::log::Log;
use super::shard::{shard_of, Guards, State};
use super::MemoryStore;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::store::unique_member;
use crate::store::Call;

impl MemoryStore {
    /// Any call: every key in a reused buffer, the shards locked in order, checked then recorded.
    pub(super) fn decide_general(&self, call: &Call<'_>) -> Decision {
        thread_local! {
            /// Every key of a call, back to back: reused, so deciding allocates nothing.
            static KEYS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        KEYS.with(|cell| {
            let mut buf = cell.take();
            buf.clear();
            let mut spans = Vec::new();
            let mut inline = [(0usize, 0usize, 0usize); 4];
            let fits = call.limits.len() <= inline.len();
            for (i, (limit, subject)) in call.limits.iter().zip(call.subjects).enumerate() {
                let start = buf.len();
                buf.extend_from_slice(&[0; 8]);
                limit.write_memory_key(subject, &mut buf);
                let hash = self.key_hash(limit, subject);
                buf[start..start + 8].copy_from_slice(&hash.to_le_bytes());
                let span = (start, buf.len(), shard_of(hash, self.mask));
                if fits {
                    inline[i] = span;
                } else {
                    spans.push(span);
                }
            }
            let spans = if fits { &inline[..call.limits.len()] } else { &spans[..] };
            let decision = self.decide_locked(call, &buf, spans);
            cell.replace(buf);
            decision
        })
    }

    /// Decides under the shards' locks.
    fn decide_locked(&self, call: &Call<'_>, buf: &[u8], spans: &[(usize, usize, usize)]) -> Decision {
        let mut guards = Guards::lock(&self.shards, spans.iter().map(|s| s.2));
        // Read under the locks (see `decide_one`): a log's times never go back.
        let now = call.now_us.unwrap_or_else(|| self.now_us());

        let cost = call.cost;
        let mut d = Decision::admitted(now);
        let mut tightest: Option<u64> = None;
        // Limits with a penalty that refused the call as exceeded, with their refusing rule.
        let mut starts: Vec<(usize, usize)> = Vec::new();
        // The shadow limits, if any, come last: decided as a group of their own once the others
        // admitted the call (whose decision waits here meanwhile).
        let enforced = call.enforced();
        let mut kept: Option<Decision> = None;
        // What the checks of the first few limits stepped, for the record (see `Stepped`).
        let mut stepped: [Option<Stepped>; 4] = [None; 4];
        for (g, limit) in call.limits.iter().enumerate() {
            if g == enforced {
                if !d.allowed {
                    break;
                }
                kept = Some(std::mem::replace(&mut d, Decision::admitted(now)));
                tightest = None;
            }
            let (start, end, shard) = spans[g];
            let s = check_limit(
                guards.get(shard),
                &buf[start..end],
                g,
                limit,
                now,
                cost,
                &mut d,
                &mut tightest,
                &mut starts,
            );
            if let Some(slot) = stepped.get_mut(g) {
                *slot = s;
            }
        }
        // Which limits record the call: all of them, or the enforced ones alone when the shadow
        // limits would refuse it (their refusal then rides on the enforced limits' admission).
        let mut commit = call.limits.len();
        if let Some(admitted) = kept {
            if !d.allowed {
                start_blocks(&mut guards, call, buf, spans, starts.drain(..), now, &mut d);
                let wait = d.retry_after_us;
                let (limit, rule) = (d.limit.saturating_sub(enforced), d.rule);
                d = admitted;
                d.refused_in_shadow(limit, rule, wait);
                commit = enforced;
            } else {
                d = admitted;
            }
        }
        if !d.allowed {
            start_blocks(&mut guards, call, buf, spans, starts.drain(..), now, &mut d);
            return d;
        }
        if call.limits.iter().any(CompiledLimit::is_concurrency) {
            d.member = unique_member();
        }

        // Two limits of one identity share a key: the second records on top of the first, so it
        // steps again rather than write what its check stepped (rare: a stack repeating a limit).
        let shared = call
            .limits
            .iter()
            .enumerate()
            .any(|(i, a)| call.limits[..i].iter().any(|b| b.memory_id() == a.memory_id()));
        if shared {
            stepped = [None; 4];
        }
        // Commit: every limit records the call.
        for (g, limit) in call.limits.iter().enumerate().take(commit) {
            let (start, end, shard) = spans[g];
            let state = guards.get(shard).get_or_insert(&buf[start..end], now, || State::Log(Log::default()));
            record(state, limit, now, cost, d.member, stepped.get(g).and_then(Option::as_ref));
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::model::limit::Limit;
    use crate::model::limit_type::LimitType;
    use crate::model::rule::Rule;
    use crate::rt::clock::ManualClock;
    use std::sync::Arc;

    /// Two limits of one identity in one call share their key: each checks the state as it was,
    /// and each records the call, the second on top of the first (the check's steps are not
    /// reused for it). Four units a second, two taken per call: two calls pass, not four.
    #[test]
    fn a_repeated_limit_records_twice() {
        let compile = || {
            let spec = Limit::new(LimitType::User, [Rule::from_millis(1000, 4).expect("rule")])
                .algorithm(Algorithm::Gcra)
                .prefix("t:");
            CompiledLimit::compile("general::repeated", spec, 0).expect("limit")
        };
        let limits = [compile(), compile()];
        assert_eq!(limits[0].memory_id(), limits[1].memory_id(), "one identity, one key");
        let store = MemoryStore::with_clock(Arc::new(ManualClock::new(1_700_000_000_000_000)));
        let subjects: [&[u8]; 2] = [b"alice", b"alice"];
        let call = Call { limits: &limits, subjects: &subjects, cost: 1, now_us: None, shadow: 0 };
        let passed = (0..4).filter(|_| store.decide_general(&call).allowed).count();
        assert_eq!(passed, 2);
    }
}
