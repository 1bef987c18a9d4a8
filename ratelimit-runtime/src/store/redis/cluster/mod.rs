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

mod slots;

use slots::{by_slot, decide_by_slot, shadow_by_slot, slot_parts, slot_parts_by};

use super::commands::{checked_command, del_command, peek_command, redact, release_command};
use super::error::redis_error;
use super::overrides;
use super::script::{eval, eval_raw, load_scripts, Script};
use super::tls::{is_tls_url, TlsConfig};
use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::model::decision::Decision;
use crate::model::member::Member;
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
            let parts = slot_parts_by(call, 0..call.limits.len(), member, |limits| {
                checked_command(call, checks, limits.iter().copied(), member)
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
        let all = slot_parts(call, 0..call.limits.len(), member);
        // Every limit in one slot (or no shadow limit): one round, the script deciding the
        // shadow limits with the others.
        let (parts, shadow) = if all.len() == 1 || enforced == call.limits.len() {
            (all, Vec::new())
        } else {
            (slot_parts(call, 0..enforced, member), slot_parts(call, enforced..call.limits.len(), member))
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
                    eval(&mut conn, cmd, Member::NONE).await?;
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
