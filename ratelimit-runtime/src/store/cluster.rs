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

use super::redis::{command, eval, redact, unique_member, Mode, Script};
use super::{Call, Pending, Store};
use crate::key::cluster_slot;
use crate::{io, Decision, StoreError};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::Cmd;
use std::time::Duration;

/// A store on a Redis Cluster, reached through seed nodes. `MOVED`/`ASK`, failovers and node
/// restarts are followed by the connection; `NOSCRIPT` on a node that never saw the script
/// reloads it.
pub struct ClusterStore {
    conn: ClusterConnection,
    timeout: Duration,
    nodes: String,
}

impl ClusterStore {
    /// Connects in the background to the cluster behind `urls` (`redis://host:port`, any subset
    /// of its nodes). Every call gives up after `timeout`, and the failure policy applies.
    pub fn open(urls: &[String], timeout: Duration) -> Result<ClusterStore, StoreError> {
        if urls.is_empty() {
            return Err(StoreError::Unavailable("no Redis Cluster seed node given".to_owned()));
        }
        let client = ClusterClientBuilder::new(urls.to_vec())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            // The overall limit is ours (`io::timeout`), on the I/O runtime's timer.
            .overall_response_timeout(None)
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(100)
            .build()
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis Cluster nodes {urls:?}: {e}")))?;
        // Created inside the I/O runtime so that the connections and their refreshes live there.
        let _guard = io::handle()?.enter();
        let conn = client.get_pending_async_connection_with_config(ClusterConfig::default());
        let nodes = urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        Ok(ClusterStore { conn, timeout, nodes })
    }
}

/// One slot's share of a call: its decide and release commands, and which limits it holds.
struct SlotPart {
    limits: Vec<usize>,
    decide: (Cmd, &'static Script),
    release: (Cmd, &'static Script),
}

impl Store for ClusterStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        // Group the limits by slot, in the order they first appear.
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, limit) in call.limits.iter().enumerate() {
            let slot = cluster_slot(&limit.redis_key(call.subjects[i]));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, v)) => v.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        let member = unique_member();
        let parts: Vec<SlotPart> = groups
            .into_iter()
            .map(|(_, limits)| SlotPart {
                decide: command(call, limits.iter().copied(), &member, Mode::Decide),
                release: command(call, limits.iter().copied(), &member, Mode::Release),
                limits,
            })
            .collect();
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        Pending::Remote(Box::pin(async move { io::timeout(timeout, decide_by_slot(&mut conn, &parts)).await }))
    }

    fn describe(&self) -> String {
        format!("redis cluster ({})", self.nodes)
    }

    fn is_remote(&self) -> bool {
        true
    }
}

async fn decide_by_slot(conn: &mut ClusterConnection, parts: &[SlotPart]) -> Result<Decision, StoreError> {
    let mut tightest: Option<Decision> = None;
    for (done, part) in parts.iter().enumerate() {
        let outcome = eval(conn, &part.decide).await.map(|mut d| {
            // The script's indexes count within this slot's limits.
            d.limit = part.limits.get(d.limit).copied().unwrap_or(0);
            d
        });
        match outcome {
            Ok(d) if d.allowed => {
                if tightest.is_none_or(|t| d.remaining < t.remaining) {
                    tightest = Some(d);
                }
            }
            other => {
                for earlier in &parts[..done] {
                    if let Err(e) = eval(conn, &earlier.release).await {
                        tracing::warn!(error = %e, "ratelimit: could not release a unit admitted on another cluster slot");
                    }
                }
                return other;
            }
        }
    }
    tightest.ok_or_else(|| StoreError::Protocol("a call with no limits".to_owned()))
}
