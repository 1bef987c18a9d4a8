//! One Redis server: every decision is one `EVALSHA` of a decision script (concurrent
//! sliding-window or O(1) calls share one: batch/), built by commands.rs.

pub(crate) mod batch;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod commands;
pub(crate) mod error;
pub(crate) mod probe;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod tls;

use super::breaker::{Breaker, MAX_PAUSE};
use super::peek_reset::{read_statuses, shapes, Targets};
use super::{unique_member, Answer, Call, Internal, Operations, Pending, Release, Store};
use crate::error::StoreError;
use crate::metrics;
use crate::model::policy::RuleStatus;
use crate::rt::clock::{Clock, SystemClock};
use crate::rt::io;
use batch::{Batcher, Route};
use commands::{del_command, general_command, peek_command, release_command, ScriptOp};
use error::redis_error;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use script::{eval, eval_raw, load_scripts, query_script};
use std::sync::Arc;
use std::time::Duration;
use tls::TlsConfig;

pub(crate) use commands::redact;

/// A store on one Redis server (or a primary behind a proxy), through a connection that
/// reconnects by itself.
pub struct RedisStore {
    conn: ConnectionManager,
    timeout: Duration,
    url: String,
    breaker: Arc<Breaker>,
    /// Concurrent sliding-window or O(1) decisions, coalesced into one script run
    /// (store/batch.rs).
    batcher: Arc<Batcher>,
}

impl RedisStore {
    /// Connects lazily to `url` (`redis://host:port/db`, `rediss://` for TLS verified against
    /// the platform's roots): Redis need not be up yet. Every call gives up after `timeout`,
    /// and the failure policy applies. A probe connects in the background and logs the outcome.
    pub fn open(url: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        RedisStore::open_with_tls(url, timeout, &TlsConfig::default())
    }

    /// As [`open`](Self::open), with a private CA and/or a client certificate for `rediss://`.
    pub fn open_with_tls(url: &str, timeout: Duration, tls: &TlsConfig) -> Result<RedisStore, StoreError> {
        let redacted = redact(url);
        let client = tls::client(url, tls, &redacted)?;
        let config = ConnectionManagerConfig::new()
            // The per-call timeout is ours (`io::timeout`): the client's own would use the timer
            // of whichever runtime polls the call.
            .set_response_timeout(None)
            .set_connection_timeout(Some(timeout))
            // Reconnection is driven by calls: a couple of quick tries each, never a long queue.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        // Created inside the I/O runtime so that the connection and its reconnections live there.
        let _guard = io::handle()?.enter();
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(redis_error)?;
        let breaker = Breaker::new(format!("redis ({redacted})"), &metrics::REDIS, MAX_PAUSE);
        let sender: batch::Sender = {
            let conn = conn.clone();
            Arc::new(move |command| {
                let mut conn = conn.clone();
                Box::pin(async move { query_script::<redis::Value>(&mut conn, &command).await })
            })
        };
        let batcher = Batcher::start(sender, timeout)?;
        let store = RedisStore { conn, timeout, url: redacted, breaker, batcher };
        // Connect now, in the background, so the first call does not pay for it, and say how
        // it went.
        let mut probe = store.conn.clone();
        probe::spawn(store.describe(), probe::probe_timeout(timeout), async move { load_scripts(&mut probe).await });
        Ok(store)
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        // The batching task sends what is queued, then ends.
        self.batcher.close();
    }
}

impl Operations for RedisStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        self.breaker.call(|| {
            let member = unique_member();
            // A call a batch script can decide is coalesced with the calls concurrent with it,
            // but for one that finds nothing to join: that one goes as a batch of its own, from
            // its caller's task. The others go to the general script.
            let route = self
                .batcher
                .route(call, &member, || general_command(call, 0..call.limits.len(), &member, ScriptOp::Decide));
            let mut conn = self.conn.clone();
            let timeout = self.timeout;
            async move {
                let decided = async move {
                    match route {
                        Route::Queued(batcher, call) => batcher.decide(call, member).await,
                        // The slot, if any, is given back when this future ends.
                        Route::Direct(cmd, _slot) => eval(&mut conn, &cmd, member).await,
                    }
                };
                metrics::REDIS.timed(io::timeout(timeout, decided)).await
            }
        })
    }

    fn release(&self, release: &Release<'_>) -> Answer<()> {
        self.breaker.call(|| {
            let cmd = release_command(release, release.indices.iter().copied());
            let mut conn = self.conn.clone();
            let timeout = self.timeout;
            async move {
                io::timeout(timeout, async { query_script::<redis::Value>(&mut conn, &cmd).await.map(drop) }).await
            }
        })
    }

    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        let indices: Vec<usize> = targets.present().map(|(i, _, _)| i).collect();
        if indices.is_empty() {
            return Answer::Ready(Ok(Vec::new()));
        }
        self.breaker.call(|| {
            let cmd = peek_command(targets, &indices);
            let shapes = shapes(targets, &indices);
            let mut conn = self.conn.clone();
            let timeout = self.timeout;
            async move {
                let flat = io::timeout(timeout, eval_raw(&mut conn, &cmd)).await?;
                let mut out = Vec::new();
                read_statuses(&shapes, &flat, &mut out)?;
                Ok(out)
            }
        })
    }

    fn reset(&self, targets: &Targets<'_>) -> Answer<()> {
        let indices: Vec<usize> = targets.present().map(|(i, _, _)| i).collect();
        if indices.is_empty() {
            return Answer::Ready(Ok(()));
        }
        self.breaker.call(|| {
            let cmd = del_command(targets, &indices);
            let mut conn = self.conn.clone();
            let timeout = self.timeout;
            async move {
                io::timeout(timeout, async { cmd.query_async::<i64>(&mut conn).await.map_err(redis_error) }).await?;
                Ok(())
            }
        })
    }

    fn label(&self, _: Internal) -> &'static str {
        "redis"
    }

    fn is_remote(&self, _: Internal) -> bool {
        true
    }

    fn now_us(&self, _: Internal) -> u64 {
        SystemClock.now_us()
    }
}

impl Store for RedisStore {
    fn describe(&self) -> String {
        format!("redis ({})", self.url)
    }
}
