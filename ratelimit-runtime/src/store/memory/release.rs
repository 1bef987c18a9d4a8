//! What an admitted call gives back or settles in memory: its units (a refund or a settle,
//! by the algorithms' definitions in `algorithm/`) and its concurrency slots.

use super::carry::{carry, kept_of};
use super::inline::Values;
use super::log::Log;
use super::shard::{Cells, State};
use super::MemoryStore;
use crate::algorithm::{charge, empty_at, refund, Algorithm};
use crate::store::Release;

impl MemoryStore {
    /// Settles what an admitted call took (see [`Operations::release`]).
    pub(super) fn release_now(&self, release: &Release<'_>) {
        let now = release.call.now_us.unwrap_or_else(|| self.now_us());
        let call = &release.call;
        let (back, more) = release.settled();
        for &i in release.indices {
            let (Some(limit), Some(subject)) = (call.limits.get(i), call.subjects.get(i)) else { continue };
            let (key, shard) = self.key_of(limit, subject);
            let mut shard = self.shards[shard].lock();
            // Extra units count even where the state is empty or gone: poured into a bucket,
            // or recorded in a log whose longest window still holds the call's time.
            let sliding = limit.algorithm == Algorithm::SlidingWindow;
            let pours = more > 0
                && !limit.is_concurrency()
                && (limit.algorithm.supports_burst()
                    || (sliding && release.at_us.saturating_add(limit.longest_us()) > now));
            if pours {
                let n = limit.algorithm.cells() * limit.rules.len();
                let fresh = || {
                    if sliding {
                        let mut log = Log::default();
                        log.longest_us = limit.longest_us();
                        State::Log(log)
                    } else {
                        State::Cells(Cells { values: Values::new(n), expires_at: 0, kept: kept_of(limit) })
                    }
                };
                let state = shard.get_or_insert(&key, now, fresh);
                match state {
                    State::Cells(c) if !sliding && c.values.len() == n => {
                        if c.expires_at <= now {
                            c.values.fill(None);
                        }
                    }
                    State::Log(log) if sliding && !log.expired(now) => {}
                    _ => *state = fresh(),
                }
            }
            let Some(state) = shard.get_mut(&key).filter(|st| !st.expired(now) || pours) else { continue };
            match state {
                State::Slots(slots) => slots.retain(|&(_, member)| member != release.member),
                State::Log(log) if back > 0 => log.remove(release.at_us, back),
                // Units admitted before the longest window count nowhere.
                State::Log(log) if release.at_us.saturating_add(log.longest_us) > now => {
                    // All leave together: past the largest count, more of them refuse nothing more.
                    let most = limit.rules.iter().map(|r| r.count()).max().unwrap_or(0);
                    log.add(release.at_us, more.min(most.saturating_add(1)));
                }
                State::Log(_) => {}
                State::Cells(cells) => {
                    // Given back (or taken) in the units of the rules the call was decided by.
                    carry(cells, limit, now);
                    let k = limit.algorithm.cells();
                    if cells.values.len() != k * limit.rules.len() {
                        continue;
                    }
                    for (r, rule) in limit.rules.iter().enumerate() {
                        let rate = rule.rate(limit.capacity(r));
                        let values = &mut cells.values[r * k..(r + 1) * k];
                        let at = release.at_us;
                        let new = if back > 0 {
                            refund(limit.algorithm, rate, now, at, back, values)
                        } else {
                            charge(limit.algorithm, rate, now, at, more, values)
                        };
                        if let Some(new) = new {
                            for (slot, v) in values.iter_mut().zip(new) {
                                *slot = Some(v);
                            }
                            if pours {
                                cells.expires_at = cells.expires_at.max(empty_at(new));
                            }
                        }
                    }
                }
                State::Block { .. } => {}
            }
        }
    }
}
