//! The Redis-backed store, whatever its [`Link`] to the server: every decision is one `EVALSHA`
//! of a decision script (concurrent sliding-window or O(1) calls share one: `batch/`), peeks and
//! refunds are runs of the general script, a reset is one `DEL`. Every call goes through the
//! store's circuit breaker, within its timeout.

use super::batch::{prepare, Route};
use super::commands::{
    checked_command, del_command, general_command, peek_command, release_command, Decide, Del, LoadScripts, Peek, Run,
    ScriptOp,
};
use super::direct::DirectConfig;
use super::lanes::{Lanes, MakeLink};
use super::link::Link;
use super::overrides::{self, DecideChecked};
use super::probe;
use crate::error::StoreError;
use crate::model::policy::RuleStatus;
use crate::rt::clock::{Clock, SystemClock};
use crate::rt::io;
use crate::store::breaker::Breaker;
use crate::store::overrides::Known;
use crate::store::peek_reset::{read_statuses, shapes, Targets};
use crate::store::{
    unique_member, Answer, Call, IndexEntries, Internal, Operations, OverrideCheck, OverrideWrite, Pending, Release,
};
use std::sync::Arc;
use std::time::Duration;

/// A store on the Redis node that `link` reaches.
pub(crate) struct RedisBacked<L: Link> {
    /// The connections (the shared one, and one per calling runtime) and, on each, concurrent
    /// sliding-window or O(1) decisions coalesced into one script run.
    lanes: Arc<Lanes<L>>,
    /// The shared connection: what calls that need not be fast go on.
    link: L,
    timeout: Duration,
    /// For logs, without passwords.
    description: String,
    breaker: Arc<Breaker>,
    /// The runtime overrides this process met.
    known: Arc<Known>,
}

impl<L: Link> RedisBacked<L> {
    /// The store over `link`, described as `description` (no password), each call given up
    /// after `timeout`, all of them through `breaker`; `make`, if any, makes a link on the
    /// calling runtime (see lanes.rs). Starts its batching task, and the probe that connects
    /// and loads the scripts in the background, so that the first call does not pay for it,
    /// and says how it went.
    pub(crate) fn start(
        link: L,
        make: Option<MakeLink<L>>,
        direct: Option<DirectConfig>,
        description: String,
        timeout: Duration,
        breaker: Arc<Breaker>,
    ) -> Result<RedisBacked<L>, StoreError> {
        let lanes = Arc::new(Lanes::new(link.clone(), make, direct, timeout)?);
        let probe = link.clone();
        probe::spawn(description.clone(), probe::probe_timeout(timeout), async move { probe.send(&LoadScripts).await });
        Ok(RedisBacked { lanes, link, timeout, description, breaker, known: Arc::new(Known::new()) })
    }

    /// The per-call timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// For logs: the store and where it is, without passwords.
    pub(crate) fn describe(&self) -> String {
        self.description.clone()
    }
}

impl<L: Link> Operations for RedisBacked<L> {
    fn decide(&self, call: &Call<'_>) -> Pending {
        self.breaker.decide(|| {
            let member = unique_member();
            // A call a batch script can decide is coalesced with the calls concurrent with it,
            // but for one that finds nothing to join: that one goes as a batch of its own, from
            // its caller's task. The others go to the general script.
            let call = prepare(call, member, || general_command(call, 0..call.limits.len(), member, ScriptOp::Decide));
            let lanes = self.lanes.clone();
            io::timeout(self.timeout, async move {
                let lane = lanes.here();
                match lane.batcher.route(call) {
                    Route::Queued(batcher, call) => batcher.decide(call, member).await,
                    // The slot, if any, is given back when this future ends. A call that went
                    // alone goes on the lane's connection for lone calls, if it has one
                    // (direct/), written and read by its callers' own tasks.
                    Route::Direct(cmd, slot) => match (&lane.direct, slot) {
                        (Some(direct), Some(slot)) => {
                            let decision = direct.send(&Decide(cmd, member)).await;
                            drop(slot);
                            decision
                        }
                        (_, _slot) => lane.link.send(&Decide(cmd, member)).await,
                    },
                }
            })
        })
    }

    fn release(&self, release: &Release<'_>) -> Answer<()> {
        self.breaker.call(|| {
            let refund = Run(release_command(release, release.indices.iter().copied()));
            let lanes = self.lanes.clone();
            io::timeout(self.timeout, async move { lanes.here().link.send(&refund).await.map(drop) })
        })
    }

    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        let indices: Vec<usize> = targets.present().map(|(i, _, _)| i).collect();
        if indices.is_empty() {
            return Answer::Ready(Ok(Vec::new()));
        }
        self.breaker.call(|| {
            let peek = Peek(peek_command(targets, &indices));
            let shapes = shapes(targets, &indices);
            let link = self.link.clone();
            io::timeout(self.timeout, async move {
                let flat = link.send(&peek).await?;
                let mut out = Vec::new();
                read_statuses(&shapes, &flat, &mut out)?;
                Ok(out)
            })
        })
    }

    fn reset(&self, targets: &Targets<'_>) -> Answer<()> {
        let indices: Vec<usize> = targets.present().map(|(i, _, _)| i).collect();
        if indices.is_empty() {
            return Answer::Ready(Ok(()));
        }
        self.breaker.call(|| {
            let del = Del(del_command(targets, &indices));
            let link = self.link.clone();
            io::timeout(self.timeout, async move { link.send(&del).await })
        })
    }

    fn override_of(&self, key: &[u8], _: Internal) -> Option<Arc<[u8]>> {
        self.known.get(key)
    }

    fn decide_checked(&self, call: &Call<'_>, checks: &[OverrideCheck]) -> Pending {
        self.breaker.decide(|| {
            // Never coalesced: the batch scripts know nothing of overrides.
            let member = unique_member();
            let command = checked_command(call, checks, 0..call.limits.len(), member);
            let request = DecideChecked { command, member, known: self.known.clone() };
            let lanes = self.lanes.clone();
            io::timeout(self.timeout, async move { lanes.here().link.send(&request).await })
        })
    }

    fn write_override(&self, write: &OverrideWrite<'_>) -> Answer<()> {
        overrides::write(&self.link, &self.breaker, self.timeout, &self.known, write)
    }

    fn list_overrides(&self, index: &[u8], _: Internal) -> Answer<IndexEntries> {
        overrides::list(&self.link, &self.breaker, self.timeout, index)
    }

    fn label(&self, _: Internal) -> &'static str {
        self.breaker.metrics().label()
    }

    fn is_remote(&self, _: Internal) -> bool {
        true
    }

    fn now_us(&self, _: Internal) -> u64 {
        SystemClock.now_us()
    }
}

/// A public store that is a [`RedisBacked`] store ([`RedisStore`](super::RedisStore),
/// [`SentinelStore`](super::SentinelStore)): its operations are that store's.
pub(crate) trait OverRedis: Send + Sync + 'static {
    /// How the store reaches its server.
    type Link: Link;

    /// The store.
    fn backed(&self) -> &RedisBacked<Self::Link>;
}

impl<S: OverRedis> Operations for S {
    fn decide(&self, call: &Call<'_>) -> Pending {
        self.backed().decide(call)
    }
    fn release(&self, release: &Release<'_>) -> Answer<()> {
        self.backed().release(release)
    }
    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        self.backed().peek(targets)
    }
    fn reset(&self, targets: &Targets<'_>) -> Answer<()> {
        self.backed().reset(targets)
    }
    fn override_of(&self, key: &[u8], internal: Internal) -> Option<Arc<[u8]>> {
        self.backed().override_of(key, internal)
    }
    fn decide_checked(&self, call: &Call<'_>, checks: &[OverrideCheck]) -> Pending {
        self.backed().decide_checked(call, checks)
    }
    fn write_override(&self, write: &OverrideWrite<'_>) -> Answer<()> {
        self.backed().write_override(write)
    }
    fn list_overrides(&self, index: &[u8], internal: Internal) -> Answer<IndexEntries> {
        self.backed().list_overrides(index, internal)
    }
    fn label(&self, internal: Internal) -> &'static str {
        self.backed().label(internal)
    }
    fn is_remote(&self, internal: Internal) -> bool {
        self.backed().is_remote(internal)
    }
    fn now_us(&self, internal: Internal) -> u64 {
        self.backed().now_us(internal)
    }
}
