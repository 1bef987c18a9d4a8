//! The in-memory store's path for any call (several limits, a shadow group, penalties): every
//! key built in a reused buffer, the shards locked in order, every limit checked, then recorded.

use super::check::{check_limit, record, start_blocks};
use super::log::Log;
use super::shard::{shard_of, Guards, State};
use super::MemoryStore;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::store::unique_member;
use crate::store::Call;

impl MemoryStore {
    /// Any call: every key in a reused buffer, the shards locked in order, checked then recorded.
    pub(super) fn decide_general(&self, call: &Call<'_>, tick: u32) -> Decision {
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
            let decision = self.decide_keys(call, &buf, spans, tick);
            cell.replace(buf);
            decision
        })
    }

    /// Decides with every key of the call at `spans` of `buf` (start, end, shard).
    fn decide_keys(&self, call: &Call<'_>, buf: &[u8], spans: &[(usize, usize, usize)], tick: u32) -> Decision {
        let (decision, now) = self.decide_locked(call, buf, spans);
        self.maybe_sweep(now, tick);
        decision
    }

    /// Decides under the shards' locks; the decision and its time.
    fn decide_locked(&self, call: &Call<'_>, buf: &[u8], spans: &[(usize, usize, usize)]) -> (Decision, u64) {
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
        for (g, limit) in call.limits.iter().enumerate() {
            if g == enforced {
                if !d.allowed {
                    break;
                }
                kept = Some(std::mem::replace(&mut d, Decision::admitted(now)));
                tightest = None;
            }
            let (start, end, shard) = spans[g];
            check_limit(guards.get(shard), &buf[start..end], g, limit, now, cost, &mut d, &mut tightest, &mut starts);
        }
        // Which limits record the call: all of them, or the enforced ones alone when the shadow
        // limits would refuse it (their refusal then rides on the enforced limits' admission).
        let mut commit = call.limits.len();
        if let Some(admitted) = kept {
            if !d.allowed {
                start_blocks(&mut guards, call, buf, spans, starts.drain(..), now, &mut d);
                let wait = u64::try_from(d.retry_after.as_micros()).unwrap_or(u64::MAX);
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
            return (d, now);
        }
        if call.limits.iter().any(CompiledLimit::is_concurrency) {
            d.member = unique_member();
        }

        // Commit: every limit records the call.
        for (g, limit) in call.limits.iter().enumerate().take(commit) {
            let (start, end, shard) = spans[g];
            let state = guards.get(shard).get_or_insert(&buf[start..end], now, || State::Log(Log::default()));
            record(state, limit, now, cost, d.member);
        }
        (d, now)
    }
}
