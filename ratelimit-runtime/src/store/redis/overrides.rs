//! Runtime overrides on Redis (one server, Sentinel, Cluster): the requests that set, clear and
//! list them, and the decision that checks them in its script run (see override_check.lua).
//! An override's key and the limiter's index live in different slots on a Cluster: each
//! command goes by its own key.

use super::error::redis_error;
use super::link::{Link, Request};
use super::script::{eval_checked, Script};
use crate::error::StoreError;
use crate::model::decision::Decision;
use crate::model::member::Member;
use crate::model::overriding::{index_entry_ended, index_value};
use crate::rt::io;
use crate::store::breaker::Breaker;
use crate::store::overrides::{IndexEntries, Known, OverrideWrite};
use crate::store::Answer;
use redis::aio::ConnectionLike;
use redis::Cmd;
use std::sync::Arc;
use std::time::Duration;

/// A decision whose script checks the runtime overrides first; what it learns goes to `known`.
pub(crate) struct DecideChecked {
    pub(crate) command: (Cmd, &'static Script),
    pub(crate) member: Member,
    pub(crate) known: Arc<Known>,
}

impl Request for DecideChecked {
    type Reply = Decision;

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<Decision, StoreError> {
        eval_checked(conn, &self.command, self.member, &self.known).await
    }
}

/// A set or a clear of one override, owned (a request outlives its caller's borrow).
pub(crate) struct WriteOverride {
    key: Vec<u8>,
    index: Vec<u8>,
    field: Vec<u8>,
    rules: Option<Vec<u8>>,
    ttl_ms: u64,
}

impl WriteOverride {
    pub(crate) fn of(write: &OverrideWrite<'_>) -> WriteOverride {
        WriteOverride {
            key: write.key.to_vec(),
            index: write.index.to_vec(),
            field: write.field.to_vec(),
            rules: write.rules.map(<[u8]>::to_vec),
            ttl_ms: write.ttl_ms,
        }
    }

    /// What this process learns of its own write.
    pub(crate) fn teach(&self, known: &Known) {
        known.learn(&self.key, self.rules.as_deref().unwrap_or(&[]));
    }
}

impl Request for WriteOverride {
    type Reply = ();

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), StoreError> {
        let Some(rules) = &self.rules else {
            // Cleared: the key first, so that no process decides with it once this returns.
            redis::cmd("DEL").arg(&self.key).query_async::<i64>(conn).await.map_err(redis_error)?;
            return redis::cmd("HDEL")
                .arg(&self.index)
                .arg(&self.field)
                .query_async::<i64>(conn)
                .await
                .map(drop)
                .map_err(redis_error);
        };
        let mut set = redis::cmd("SET");
        set.arg(&self.key).arg(rules);
        if self.ttl_ms > 0 {
            set.arg("PX").arg(self.ttl_ms);
        }
        set.query_async::<()>(conn).await.map_err(redis_error)?;
        // The end as the server keeps it (its clock), for listings.
        let expires_ms = if self.ttl_ms > 0 {
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&self.key).query_async(conn).await.map_err(redis_error)?;
            // -2: already gone (a TTL shorter than the round trip); listed as ended.
            u64::try_from(at).unwrap_or(1)
        } else {
            0
        };
        redis::cmd("HSET")
            .arg(&self.index)
            .arg(&self.field)
            .arg(index_value(expires_ms, rules))
            .query_async::<i64>(conn)
            .await
            .map(drop)
            .map_err(redis_error)
    }
}

/// A listing of one limiter's index: its entries still in force, on the server's clock; the
/// ended ones are removed from it on the way.
pub(crate) struct ListOverrides(pub(crate) Vec<u8>);

impl Request for ListOverrides {
    type Reply = IndexEntries;

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<IndexEntries, StoreError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.map_err(redis_error)?;
        let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
        let all: Vec<(Vec<u8>, Vec<u8>)> =
            redis::cmd("HGETALL").arg(&self.0).query_async(conn).await.map_err(redis_error)?;
        let (ended, entries): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, v)| index_entry_ended(v, now_ms));
        if !ended.is_empty() {
            let mut hdel = redis::cmd("HDEL");
            hdel.arg(&self.0);
            for (field, _) in &ended {
                hdel.arg(field);
            }
            hdel.query_async::<i64>(conn).await.map_err(redis_error)?;
        }
        Ok(IndexEntries { entries, now_ms })
    }
}

/// Sets or clears an override through `link` (one server, Sentinel's primary, a cluster),
/// within `timeout`, through `breaker`; this process learns it at once.
pub(crate) fn write(
    link: &impl Link,
    breaker: &Arc<Breaker>,
    timeout: Duration,
    known: &Arc<Known>,
    write: &OverrideWrite<'_>,
) -> Answer<()> {
    breaker.call(|| {
        let request = WriteOverride::of(write);
        let (link, known) = (link.clone(), known.clone());
        io::timeout(timeout, async move {
            link.send(&request).await?;
            request.teach(&known);
            Ok(())
        })
    })
}

/// Lists a limiter's index through `link`, as [`write`] writes.
pub(crate) fn list(link: &impl Link, breaker: &Arc<Breaker>, timeout: Duration, index: &[u8]) -> Answer<IndexEntries> {
    breaker.call(|| {
        let request = ListOverrides(index.to_vec());
        let link = link.clone();
        io::timeout(timeout, async move { link.send(&request).await })
    })
}
