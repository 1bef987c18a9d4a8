//! A Redis Cluster: each slot's share of a decision is one atomic script.
//!
//! All keys of one (limiter, type, subject) share a hash tag, so each limit lives in one slot;
//! limits of different subjects (an `Ip` stacked with a `User`) usually do not. Such a call is
//! decided slot by slot, in limit order. When a slot denies (or fails), the slots that already
//! admitted the call are sent the same script in release mode with the same member, which
//! removes exactly what they recorded: a denied call records nothing. The residual window: for
//! the moment between an earlier slot's admission and its release, a concurrent call on that
//! subject sees the unit and may be denied by it. A release that itself fails (the node died in
//! between) leaves the unit counted until its window passes: an over-count, never an under-count.
//!
//! Shadow limits (the call's last `Call::shadow`): when every limit of the call lives in one
//! slot, one script decides them with the others, as on one server. Otherwise they are decided
//! once the others admitted the call, slot by slot in the same way (a slot that refuses, or
//! fails, has the shadow slots before it give the call back): a second round of scripts, still
//! within the one store call. Their refusal rides on the admission; their failure is logged and
//! never refuses.

use super::batch;
use super::commands::{checked_command, del_command, general_command, peek_command, redact, release_command, ScriptOp};
use super::error::redis_error;
use super::overrides;
use super::script::{eval, eval_checked, eval_raw, load_scripts, Script};
use super::tls::{is_tls_url, TlsConfig};
use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::key::cluster_slot;
use crate::model::policy::RuleStatus;
use crate::rt::clock::{Clock, SystemClock};
use crate::rt::io;
use crate::store::breaker::{Breaker, MAX_PAUSE};
use crate::store::overrides::Known;
use crate::store::peek_reset::{read_statuses, shapes, Shapes, Targets};
use crate::store::{
    unique_member, Answer, Call, IndexEntries, Internal, Operations, OverrideCheck, OverrideWrite, Pending, Release,
    Store,
};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::Cmd;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A store on a Redis Cluster, reached through seed nodes. `MOVED`/`ASK`, failovers and node
/// restarts are followed by the connection; `NOSCRIPT` on a node that never saw the script
/// reloads it.
pub struct ClusterStore {
    conn: ClusterConnection,
    timeout: Duration,
    nodes: String,
    /// One breaker for the whole cluster (see `docs/failure.md`): the cluster client routes
    /// each slot to its node out of our sight.
    breaker: Arc<Breaker>,
    /// The runtime overrides this process met.
    known: Arc<Known>,
}

impl ClusterStore {
    /// Connects in the background to the cluster behind `urls` (`redis://host:port`, any subset
    /// of its nodes). Every call gives up after `timeout`, and the failure policy applies.
    pub fn open(urls: &[String], timeout: Duration) -> Result<ClusterStore, StoreError> {
        ClusterStore::open_with_tls(urls, timeout, &TlsConfig::default())
    }

    /// As [`open`](Self::open), with a private CA and/or a client certificate for `rediss://`
    /// seeds.
    pub fn open_with_tls(urls: &[String], timeout: Duration, tls: &TlsConfig) -> Result<ClusterStore, StoreError> {
        if urls.is_empty() {
            return Err(StoreError::misconfigured("no Redis Cluster seed node given"));
        }
        let nodes = urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        let builder = ClusterClientBuilder::new(urls.to_vec());
        let builder = if urls.iter().any(|u| is_tls_url(u)) { with_tls(builder, tls, &nodes)? } else { builder };
        let client = builder
            .connection_timeout(timeout)
            .response_timeout(timeout)
            // The overall limit is ours (`io::timeout`), on the I/O runtime's timer.
            .overall_response_timeout(None)
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(100)
            .build()
            .map_err(|e| StoreError::misconfigured_by(format!("invalid Redis Cluster nodes {nodes:?}"), e))?;
        // Created inside the I/O runtime so that the connections and their refreshes live there.
        let _guard = io::handle()?.enter();
        let conn = client.get_pending_async_connection_with_config(ClusterConfig::default());
        let breaker = Breaker::new(format!("redis cluster ({nodes})"), StoreMetrics::new("cluster"), MAX_PAUSE);
        let store = ClusterStore { conn, timeout, nodes, breaker, known: Arc::new(Known::new()) };
        let mut probe = store.conn.clone();
        // The cluster client hides why no node could be reached ("No connections found"): on
        // failure the probe asks the first seed alone, for its own words (a certificate, AUTH).
        let first_seed = super::tls::client(&urls[0], tls, &redact(&urls[0])).ok();
        super::probe::spawn(store.describe(), super::probe::probe_timeout(timeout), async move {
            match load_scripts(&mut probe).await {
                Ok(()) => Ok(()),
                Err(e) => Err(match first_seed {
                    Some(seed) => super::probe::explain_with_seed(e, seed).await,
                    None => e,
                }),
            }
        });
        Ok(store)
    }
}

/// The seeds' certificates (`rediss://`).
#[cfg(feature = "tls")]
fn with_tls(builder: ClusterClientBuilder, tls: &TlsConfig, _nodes: &str) -> Result<ClusterClientBuilder, StoreError> {
    super::tls::install_provider();
    Ok(match super::tls::certificates(tls)? {
        Some(certs) => builder.certs(certs),
        None => builder,
    })
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: ClusterClientBuilder, _: &TlsConfig, nodes: &str) -> Result<ClusterClientBuilder, StoreError> {
    Err(StoreError::misconfigured(format!("{nodes}: rediss:// needs the `tls` feature of ratelimit (on by default)")))
}

/// One slot's share of a call: its decide and release commands, and which limits it holds.
struct SlotPart {
    limits: Vec<usize>,
    decide: (Cmd, &'static Script),
    release: (Cmd, &'static Script),
}

impl Operations for ClusterStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        self.breaker.decide(|| self.decide_call(call))
    }

    fn release(&self, release: &Release<'_>) -> Answer<()> {
        self.breaker.call(|| self.release_call(release))
    }

    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        self.breaker.call(|| self.peek_call(targets))
    }

    fn reset(&self, targets: &Targets<'_>) -> Answer<()> {
        self.breaker.call(|| self.reset_call(targets))
    }

    fn override_of(&self, key: &[u8], _: Internal) -> Option<Arc<[u8]>> {
        self.known.get(key)
    }

    fn decide_checked(&self, call: &Call<'_>, checks: &[OverrideCheck]) -> Pending {
        self.breaker.decide(|| {
            let member = unique_member();
            // Each slot's script checks the overrides of its own limits (same hash tag).
            let parts = slot_parts_by(call, 0..call.limits.len(), &member, |limits| {
                checked_command(call, checks, limits.iter().copied(), &member)
            });
            let (mut conn, known) = (self.conn.clone(), self.known.clone());
            io::timeout(self.timeout, async move {
                if parts.is_empty() {
                    return Ok(Decision::admitted(0));
                }
                decide_by_slot(&mut conn, &parts, member, Some(&known)).await
            })
        })
    }

    fn write_override(&self, write: &OverrideWrite<'_>) -> Answer<()> {
        overrides::write(&self.conn, &self.breaker, self.timeout, &self.known, write)
    }

    fn list_overrides(&self, index: &[u8], _: Internal) -> Answer<IndexEntries> {
        overrides::list(&self.conn, &self.breaker, self.timeout, index)
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

impl Store for ClusterStore {
    fn describe(&self) -> String {
        format!("redis cluster ({})", self.nodes)
    }
}

impl ClusterStore {
    fn decide_call(&self, call: &Call<'_>) -> impl Future<Output = Result<Decision, StoreError>> + Send + 'static {
        let member = unique_member();
        let enforced = call.enforced();
        let all = slot_parts(call, 0..call.limits.len(), &member);
        // Every limit in one slot (or no shadow limit): one round, the script deciding the
        // shadow limits with the others.
        let (parts, shadow) = if all.len() == 1 || enforced == call.limits.len() {
            (all, Vec::new())
        } else {
            (slot_parts(call, 0..enforced, &member), slot_parts(call, enforced..call.limits.len(), &member))
        };
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        io::timeout(timeout, async move {
            let mut d = if parts.is_empty() {
                Decision::admitted(0)
            } else {
                decide_by_slot(&mut conn, &parts, member, None).await?
            };
            if d.allowed && !shadow.is_empty() {
                shadow_by_slot(&mut conn, &shadow, member, enforced, &mut d).await;
            }
            Ok(d)
        })
    }

    fn release_call(&self, release: &Release<'_>) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        // One script per slot. The call was admitted at the time of the slot that answered
        // first: another node's clock may differ by its skew, which near a window's end can
        // make a refund of a fixed window or a window counter a no-op there (an over-count).
        let call = &release.call;
        let cmds: Vec<(Cmd, &'static Script)> =
            by_slot(release.indices.iter().map(|&i| (i, &call.limits[i], call.subjects[i])))
                .into_iter()
                .map(|indices| release_command(release, indices.into_iter()))
                .collect();
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        async move {
            io::timeout(timeout, async {
                for cmd in &cmds {
                    eval(&mut conn, cmd, [0; 16]).await?;
                }
                Ok(())
            })
            .await
        }
    }

    fn peek_call(
        &self,
        targets: &Targets<'_>,
    ) -> impl Future<Output = Result<Vec<RuleStatus>, StoreError>> + Send + 'static {
        // One script per slot: each reads its limits atomically; nothing is written anywhere.
        let parts: Vec<((Cmd, &'static Script), Shapes)> = by_slot(targets.present())
            .into_iter()
            .map(|indices| (peek_command(targets, &indices), shapes(targets, &indices)))
            .collect();
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        async move {
            io::timeout(timeout, async {
                let mut out = Vec::new();
                for (cmd, shapes) in &parts {
                    let flat = eval_raw(&mut conn, cmd).await?;
                    read_statuses(shapes, &flat, &mut out)?;
                }
                // Slot order is not limit order.
                out.sort_by_key(|s| s.limit);
                Ok(out)
            })
            .await
        }
    }

    fn reset_call(&self, targets: &Targets<'_>) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        // One `DEL` per slot (a multi-key command may not span slots).
        let dels: Vec<Cmd> =
            by_slot(targets.present()).into_iter().map(|indices| del_command(targets, &indices)).collect();
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        async move {
            io::timeout(timeout, async {
                for del in &dels {
                    del.query_async::<i64>(&mut conn).await.map_err(redis_error)?;
                }
                Ok(())
            })
            .await
        }
    }
}

/// The `EVALSHA` that decides the limits `indices` of `call` (one slot's) alone, and its script:
/// a batch script's batch of one when one can decide them, else the general script.
fn decide_command(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: &[u8; 16],
) -> (Cmd, &'static Script) {
    match batch::batchable(call, indices.clone()) {
        Some(kind) => batch::one_command(&batch::encode(call, indices, member, kind)),
        None => general_command(call, indices, member, ScriptOp::Decide),
    }
}

/// The limits `indices` of `call` grouped by the slot of their key, in the order the slots first
/// appear, each group with its decide and release commands.
fn slot_parts(call: &Call<'_>, indices: std::ops::Range<usize>, member: &[u8; 16]) -> Vec<SlotPart> {
    slot_parts_by(call, indices, member, |limits| decide_command(call, limits.iter().copied(), member))
}

/// As [`slot_parts`], each group's decision made by `decide`.
fn slot_parts_by(
    call: &Call<'_>,
    indices: std::ops::Range<usize>,
    member: &[u8; 16],
    decide: impl Fn(&[usize]) -> (Cmd, &'static Script),
) -> Vec<SlotPart> {
    by_slot(indices.map(|i| (i, &call.limits[i], call.subjects[i])))
        .into_iter()
        .map(|limits| SlotPart {
            decide: decide(&limits),
            // Given back at once: the units are in the window of "now".
            release: general_command(call, limits.iter().copied(), member, ScriptOp::Release(0, 0)),
            limits,
        })
        .collect()
}

/// The shadow limits of a call the others admitted (`d`), slot by slot: each slot's script
/// decides its share as a shadow group (recording nothing if it would refuse). A slot that would
/// refuse, or fails, has the slots before it give the call back; a refusal is noted on `d`
/// (the limit among the call's shadow limits, which start at `enforced`), a failure logged.
async fn shadow_by_slot(
    conn: &mut ClusterConnection,
    parts: &[SlotPart],
    member: [u8; 16],
    enforced: usize,
    d: &mut Decision,
) {
    for (done, part) in parts.iter().enumerate() {
        let refusal = match eval(conn, &part.decide, member).await {
            Ok(answer) => match answer.shadow_refusal() {
                None => continue,
                Some((limit, rule, wait)) => {
                    // The script's index counts within this slot's limits.
                    let limit = part.limits.get(limit).map_or(0, |i| i - enforced);
                    Some((limit, rule, u64::try_from(wait.as_micros()).unwrap_or(u64::MAX)))
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "ratelimit: could not decide the shadow limits on a cluster slot");
                None
            }
        };
        for earlier in &parts[..done] {
            if let Err(e) = eval(conn, &earlier.release, member).await {
                tracing::warn!(error = %e, "ratelimit: could not release a unit admitted on another cluster slot");
            }
        }
        if let Some((limit, rule, wait)) = refusal {
            d.refused_in_shadow(limit, rule, wait);
        }
        return;
    }
}

/// The limits (index, limit, subject) grouped by the slot of their key, in the order the slots
/// first appear: a script, or a `DEL`, may not span slots.
fn by_slot<'a>(limits: impl Iterator<Item = (usize, &'a CompiledLimit, &'a [u8])>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, limit, subject) in limits {
        let slot = cluster_slot(&limit.redis_key(subject));
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, v)) => v.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, v)| v).collect()
}

/// Decides slot by slot (see the module's documentation); with `known`, each slot's script
/// checks its limits' runtime overrides, and a slot whose overrides changed refuses the call
/// as a slot that denies it does.
async fn decide_by_slot(
    conn: &mut ClusterConnection,
    parts: &[SlotPart],
    member: [u8; 16],
    known: Option<&Known>,
) -> Result<Decision, StoreError> {
    let mut tightest: Option<Decision> = None;
    // The time of the first slot's decision: what a refund finds the call's windows by.
    let mut first_at = None;
    for (done, part) in parts.iter().enumerate() {
        let decided = match known {
            Some(known) => eval_checked(conn, &part.decide, member, known).await,
            None => eval(conn, &part.decide, member).await,
        };
        let outcome = decided.map(|mut d| {
            // The script's indexes count within this slot's limits.
            d.limit = part.limits.get(d.limit).copied().unwrap_or(0);
            d
        });
        match outcome {
            Ok(d) if d.allowed => {
                let at = *first_at.get_or_insert(d.at_us);
                if tightest.is_none_or(|t| d.remaining < t.remaining) {
                    tightest = Some(Decision { at_us: at, ..d });
                }
            }
            other => {
                for earlier in &parts[..done] {
                    if let Err(e) = eval(conn, &earlier.release, member).await {
                        tracing::warn!(error = %e, "ratelimit: could not release a unit admitted on another cluster slot");
                    }
                }
                return other;
            }
        }
    }
    tightest.ok_or_else(|| StoreError::Protocol("a call with no limits".to_owned()))
}
