//! One Redis server: every decision is one `EVALSHA` of a decision script (concurrent
//! sliding-window or O(1) calls share one: store/batch.rs); the commands that build them.

pub(crate) mod batch;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod error;
pub(crate) mod probe;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod tls;

use super::breaker::{Breaker, MAX_PAUSE};
use super::peek_reset::{read_statuses, shapes, Targets};
use super::Answer;
use super::{Call, Pending, Release, Store};
use crate::error::StoreError;
use crate::metrics;
use crate::model::policy::RuleStatus;
use crate::rt::io;
use batch::{Batcher, Route};
use error::redis_error;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Cmd;
use script::{eval, eval_raw, load_scripts, query_script, Script, GENERAL};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tls::TlsConfig;

/// A member no other call, in this process or any other, will use: a random per-process UUID
/// with a per-call counter folded into its low half. 16 raw bytes keep the ZSET small.
pub(crate) fn unique_member() -> [u8; 16] {
    static PROCESS: OnceLock<u128> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = *PROCESS.get_or_init(|| uuid::Uuid::new_v4().as_u128());
    (base ^ u128::from(COUNTER.fetch_add(1, Ordering::Relaxed))).to_be_bytes()
}

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

/// What a run of the decision script does: decide, give back what a decision with the same member
/// admitted, or read without writing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptOp {
    Decide,
    /// Gives back what a decision with the same member admitted at this time (µs; 0: now).
    Release(u64),
    /// Read every rule at cost 0 and write nothing (`Limiter::peek`).
    Peek,
}

/// The general script's `EVALSHA` for the limits `indices` of `call` in `mode`.
pub(crate) fn general_command(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: &[u8; 16],
    mode: ScriptOp,
) -> (Cmd, &'static Script) {
    let enforced = call.enforced();
    let shadow = indices.clone().filter(|&i| i >= enforced).count();
    // Sized once: growing the command's buffers argument by argument cost more than building it.
    // Eight fixed arguments (EVALSHA, SHA, key count, now, cost, member, mode, admitted), ~80
    // bytes.
    let (mut args, mut bytes) = (8, 90);
    for i in indices.clone() {
        let limit = &call.limits[i];
        args += 1 + limit.policy_args.len() + limit.script_args.len() + 3;
        bytes += 24
            + call.subjects[i].len() * 3
            + limit.redis_key_len()
            + limit.policy_args.iter().chain(&limit.script_args).map(Vec::len).sum::<usize>();
    }
    let mut cmd = Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA").arg(GENERAL.sha()).arg(indices.clone().count());
    for i in indices.clone() {
        cmd.arg(KeyArg { limit: &call.limits[i], subject: call.subjects[i] });
    }
    cmd.arg(call.now_us.unwrap_or(0)).arg(call.cost).arg(&member[..]);
    match mode {
        ScriptOp::Decide => cmd.arg("d").arg(shadow),
        ScriptOp::Release(at) => cmd.arg("r").arg(at),
        ScriptOp::Peek => cmd.arg("p").arg(0),
    };
    for i in indices {
        let limit = &call.limits[i];
        for a in limit.policy_args.iter().chain(&limit.script_args) {
            cmd.arg(a.as_slice());
        }
    }
    (cmd, &GENERAL)
}

/// The `EVALSHA` that gives back what `release` names (see [`Store::release`]).
pub(crate) fn release_command(release: &Release<'_>) -> (Cmd, &'static Script) {
    general_command(&release.call, release.indices.iter().copied(), &release.member, ScriptOp::Release(release.at_us))
}

/// A limit's key for one subject as a command argument, written straight into the command's
/// buffer (no key `Vec` per call).
struct KeyArg<'a> {
    limit: &'a crate::model::compiled::CompiledLimit,
    subject: &'a [u8],
}

impl redis::ToRedisArgs for KeyArg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        // Writing to the command's buffer cannot fail.
        let _ = self.limit.write_redis_key(self.subject, &mut out.writer_for_next_arg());
    }
}

/// The peek of the targets' limits `indices` (all in one slot on a cluster): the command, and
/// the limits to read its answer with.
pub(crate) fn peek_command(targets: &Targets<'_>, indices: &[usize]) -> (Cmd, &'static Script) {
    let subjects: Vec<&[u8]> = targets.subjects.iter().map(|s| s.unwrap_or(&[])).collect();
    let call = Call { limits: targets.limits, subjects: &subjects, cost: 0, now_us: targets.now_us, shadow: 0 };
    // A peek gives back nothing by member: any will do.
    general_command(&call, indices.iter().copied(), &[0; 16], ScriptOp::Peek)
}

/// `DEL` of the targets' keys for the limits `indices`, with their blocks.
pub(crate) fn del_command(targets: &Targets<'_>, indices: &[usize]) -> Cmd {
    let mut cmd = redis::cmd("DEL");
    for &i in indices {
        if let Some(subject) = targets.subjects[i] {
            let key = targets.limits[i].redis_key(subject);
            if targets.limits[i].block_us > 0 {
                cmd.arg([&key[..], b":blk"].concat());
            }
            cmd.arg(key);
        }
    }
    cmd
}

/// The URL without its password, for logs.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

impl Store for RedisStore {
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
            let cmd = release_command(release);
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

    fn describe(&self) -> String {
        format!("redis ({})", self.url)
    }

    fn label(&self) -> &'static str {
        "redis"
    }

    fn is_remote(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(super::redact("redis://user:secret@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(super::redact("redis://host:6379"), "redis://host:6379");
    }

    #[test]
    fn members_are_unique() {
        let a = super::unique_member();
        let b = super::unique_member();
        assert_ne!(a, b);
    }
}
