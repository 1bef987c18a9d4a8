//! One Redis server: every decision is one `EVALSHA` of the decision script.

use super::{Call, Pending, Store};
use crate::{io, Algorithm, Decision, StoreError};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, ServerErrorKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// A Lua script, assembled once from its template and the shared fragments, and its SHA-1 as
/// `EVALSHA` names it.
pub(crate) struct Script {
    template: &'static str,
    assembled: OnceLock<(String, String)>,
}

/// The fragments both scripts share: each `--@name` line of a template becomes lua/name.lua.
const FRAGMENTS: [(&str, &str); 3] = [
    ("--@preamble", include_str!("lua/preamble.lua")),
    ("--@sliding_check", include_str!("lua/sliding_check.lua")),
    ("--@sliding_commit", include_str!("lua/sliding_commit.lua")),
];

impl Script {
    const fn new(template: &'static str) -> Script {
        Script { template, assembled: OnceLock::new() }
    }

    fn assembled(&self) -> &(String, String) {
        self.assembled.get_or_init(|| {
            // Line by line: only a line that is exactly a marker is replaced (the comments that
            // mention markers are left alone).
            let mut code = String::with_capacity(self.template.len() * 2);
            for line in self.template.lines() {
                match FRAGMENTS.iter().find(|(marker, _)| line.trim() == *marker) {
                    Some((_, fragment)) => code.push_str(fragment),
                    None => {
                        code.push_str(line);
                        code.push('\n');
                    }
                }
            }
            let sha = redis::Script::new(&code).get_hash().to_owned();
            (code, sha)
        })
    }

    /// The script's text.
    pub(crate) fn code(&self) -> &str {
        &self.assembled().0
    }

    pub(crate) fn sha(&self) -> &str {
        &self.assembled().1
    }
}

/// The decision script: every algorithm, and release mode (see `decide.lua`).
pub(crate) static GENERAL: Script = Script::new(include_str!("decide.lua"));
/// The same decision when every limit is a sliding window (see `decide_sw.lua`).
pub(crate) static SLIDING: Script = Script::new(include_str!("decide_sw.lua"));
/// The same decision when every limit is an O(1) algorithm (see `decide_o1.lua`).
pub(crate) static O1: Script = Script::new(include_str!("decide_o1.lua"));

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
}

impl RedisStore {
    /// Connects lazily to `url` (`redis://host:port/db`): Redis need not be up yet. Every call
    /// gives up after `timeout`, and the failure policy applies.
    pub fn open(url: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL {:?}: {e}", redact(url))))?;
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
        let conn =
            ConnectionManager::new_lazy_with_config(client, config).map_err(|e| StoreError::Redis(e.to_string()))?;
        let store = RedisStore { conn, timeout, url: redact(url) };
        // Connect now, in the background, so the first call does not pay for it.
        let mut warm = store.conn.clone();
        io::handle()?.spawn(async move {
            let _ = redis::cmd("PING").query_async::<()>(&mut warm).await;
        });
        Ok(store)
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The script's mode: decide, or give back what a decision with the same member admitted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Decide,
    /// Used by the cluster store.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Release,
}

/// The `EVALSHA` of the decision script for the limits `indices` of `call`, and that script.
pub(crate) fn command(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: &[u8],
    mode: Mode,
) -> (Cmd, &'static Script) {
    let all_sliding = indices.clone().all(|i| call.limits[i].algorithm == Algorithm::SlidingWindow);
    let all_o1 = indices.clone().all(|i| call.limits[i].algorithm != Algorithm::SlidingWindow);
    let script = match mode {
        Mode::Decide if all_sliding => &SLIDING,
        Mode::Decide if all_o1 => &O1,
        _ => &GENERAL,
    };
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha()).arg(indices.clone().count());
    for i in indices.clone() {
        cmd.arg(call.limits[i].redis_key(call.subjects[i]));
    }
    cmd.arg(call.now_us.unwrap_or(0)).arg(call.cost).arg(member).arg(match mode {
        Mode::Decide => "d",
        Mode::Release => "r",
    });
    for i in indices {
        for a in &call.limits[i].script_args {
            cmd.arg(a.as_slice());
        }
    }
    (cmd, script)
}

/// Runs the script with `EVALSHA`, loading it on `NOSCRIPT` (a restarted or new server).
pub(crate) async fn eval(
    conn: &mut impl ConnectionLike,
    (cmd, script): &(Cmd, &Script),
) -> Result<Decision, StoreError> {
    let answer = match cmd.query_async::<Vec<i64>>(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            // On a cluster this reaches every primary (a promoted replica may never have seen it).
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.code())
                .query_async::<redis::Value>(conn)
                .await
                .map_err(redis_error)?;
            cmd.query_async::<Vec<i64>>(conn).await
        }
        other => other,
    }
    .map_err(redis_error)?;
    let v: [i64; 6] =
        answer.try_into().map_err(|v: Vec<i64>| StoreError::Protocol(format!("{} values instead of 6", v.len())))?;
    Ok(Decision::from_script(v))
}

pub(crate) fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError::Redis(e.to_string())
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
        let cmd = command(call, 0..call.limits.len(), &unique_member(), Mode::Decide);
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        Pending::Remote(Box::pin(async move { io::timeout(timeout, eval(&mut conn, &cmd)).await }))
    }

    fn describe(&self) -> String {
        format!("redis ({})", self.url)
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
    fn scripts_are_assembled_whole() {
        for script in [&super::GENERAL, &super::SLIDING] {
            let markers = script.code().lines().filter(|l| l.trim_start().starts_with("--@")).count();
            assert_eq!(markers, 0, "a fragment marker was left unreplaced");
            assert!(script.code().contains("redis.call('ZADD', key, now, member)"));
            assert_eq!(script.sha().len(), 40);
        }
        assert_ne!(super::GENERAL.sha(), super::SLIDING.sha());
        assert!(!super::O1.code().contains("--@"), "the O(1) script has no fragments");
        assert_ne!(super::O1.sha(), super::GENERAL.sha());
    }

    #[test]
    fn members_are_unique() {
        let a = super::unique_member();
        let b = super::unique_member();
        assert_ne!(a, b);
    }
}
