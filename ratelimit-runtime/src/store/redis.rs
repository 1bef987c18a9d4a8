//! One Redis server: every decision is one `EVALSHA` of the decision script.

use super::batch::{self, Batcher};
use super::breaker::{Breaker, MAX_PAUSE};
use super::peek_reset::{read_statuses, shapes, Targets};
use super::tls::TlsConfig;
use super::Answer;
use super::{Call, Pending, Release, Store};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::io;
use crate::metrics;
use crate::status::RuleStatus;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind as ErrorKind_, ServerErrorKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A Lua script, assembled once from its template and the shared fragments, and its SHA-1 as
/// `EVALSHA` names it.
pub(crate) struct Script {
    template: &'static str,
    assembled: OnceLock<(String, String)>,
}

/// The fragments the scripts share: each `--@name` line of a template (or of a fragment) becomes
/// lua/name.lua.
const FRAGMENTS: [(&str, &str); 14] = [
    ("--@preamble", include_str!("lua/preamble.lua")),
    ("--@server_time", include_str!("lua/server_time.lua")),
    ("--@decision", include_str!("lua/decision.lua")),
    ("--@exact", include_str!("lua/exact.lua")),
    ("--@sliding_check", include_str!("lua/sliding_check.lua")),
    ("--@sliding_commit", include_str!("lua/sliding_commit.lua")),
    ("--@o1_limit", include_str!("lua/o1_limit.lua")),
    ("--@bucket", include_str!("lua/bucket.lua")),
    ("--@fixed_window", include_str!("lua/fixed_window.lua")),
    ("--@window_counter", include_str!("lua/window_counter.lua")),
    ("--@concurrency", include_str!("lua/concurrency.lua")),
    ("--@block_check", include_str!("lua/block_check.lua")),
    ("--@block_merge", include_str!("lua/block_merge.lua")),
    ("--@block_start", include_str!("lua/block_start.lua")),
];

/// Appends `template` to `code` with its markers replaced, line by line: only a line that is
/// exactly a marker is replaced (the comments that mention markers are left alone).
fn splice(template: &str, code: &mut String) {
    for line in template.lines() {
        match FRAGMENTS.iter().find(|(marker, _)| line.trim() == *marker) {
            Some((_, fragment)) => splice(fragment, code),
            None => {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
}

impl Script {
    const fn new(template: &'static str) -> Script {
        Script { template, assembled: OnceLock::new() }
    }

    fn assembled(&self) -> &(String, String) {
        self.assembled.get_or_init(|| {
            let mut code = String::with_capacity(self.template.len() * 4);
            splice(self.template, &mut code);
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

/// The decision script: every algorithm, blocks, concurrency limits, and release and peek
/// modes (see `decide.lua`).
pub(crate) static GENERAL: Script = Script::new(include_str!("decide.lua"));
/// The same decision when every limit is a sliding window (see `decide_sw.lua`).
pub(crate) static SLIDING: Script = Script::new(include_str!("decide_sw.lua"));
/// The same decision when every limit is an O(1) algorithm (see `decide_o1.lua`).
pub(crate) static O1: Script = Script::new(include_str!("decide_o1.lua"));
/// Several calls' [`SLIDING`] decisions in one run, one after another (see `decide_sw_batch.lua`
/// and store/batch.rs).
pub(crate) static BATCH: Script = Script::new(include_str!("decide_sw_batch.lua"));

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
    /// Concurrent sliding-window decisions, coalesced into one script run (store/batch.rs).
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
        let client = super::tls::client(url, tls, &redacted)?;
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
        let batcher = Batcher::start(conn.clone(), timeout);
        let store = RedisStore { conn, timeout, url: redacted, breaker, batcher };
        // Connect now, in the background, so the first call does not pay for it, and say how
        // it went.
        let mut probe = store.conn.clone();
        super::probe::spawn(store.describe(), super::probe::probe_timeout(timeout), async move {
            load_scripts(&mut probe).await
        });
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

/// The `EVALSHA` of the decision script for the limits `indices` of `call`, and that script.
pub(crate) fn command(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: &[u8],
    mode: ScriptOp,
) -> (Cmd, &'static Script) {
    let all_sliding = indices.clone().all(|i| call.limits[i].algorithm == Algorithm::SlidingWindow);
    let all_o1 = indices.clone().all(|i| call.limits[i].algorithm != Algorithm::SlidingWindow);
    // Blocks, concurrency limits and shadow limits (the call's last `call.shadow`) are the
    // general script's alone.
    let enforced = call.enforced();
    let shadow = indices.clone().filter(|&i| i >= enforced).count();
    let policy = shadow > 0 || indices.clone().any(|i| call.limits[i].has_policy());
    let script = match mode {
        ScriptOp::Decide if all_sliding && !policy => &SLIDING,
        ScriptOp::Decide if all_o1 && !policy => &O1,
        _ => &GENERAL,
    };
    if std::ptr::eq(script, &SLIDING) {
        return (sliding_command(call, indices, member), script);
    }
    let general = std::ptr::eq(script, &GENERAL);
    // Sized once: growing the command's buffers argument by argument cost more than building it.
    // Eight fixed arguments (EVALSHA, SHA, key count, now, cost, member, mode, admitted), ~80
    // bytes.
    let (mut args, mut bytes) = (8, 90);
    for i in indices.clone() {
        let limit = &call.limits[i];
        args += 1 + limit.script_args.len() + 3;
        bytes += 24
            + call.subjects[i].len() * 3
            + limit.redis_key_len()
            + limit.script_args.iter().map(Vec::len).sum::<usize>();
    }
    let mut cmd = Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA").arg(script.sha()).arg(indices.clone().count());
    for i in indices.clone() {
        cmd.arg(KeyArg { limit: &call.limits[i], subject: call.subjects[i] });
    }
    cmd.arg(call.now_us.unwrap_or(0)).arg(call.cost);
    // Every argument costs the server about 600 instructions to receive: decide_o1.lua takes
    // neither the member nor the mode; only decide.lua takes the admission time and each
    // limit's block, concurrency and lease.
    if general {
        cmd.arg(member);
        match mode {
            ScriptOp::Decide => cmd.arg("d").arg(shadow),
            ScriptOp::Release(at) => cmd.arg("r").arg(at),
            ScriptOp::Peek => cmd.arg("p").arg(0),
        };
    }
    for i in indices {
        let limit = &call.limits[i];
        if general {
            for a in &limit.policy_args {
                cmd.arg(a.as_slice());
            }
        }
        for a in &limit.script_args {
            cmd.arg(a.as_slice());
        }
    }
    (cmd, script)
}

/// decide_sw.lua's `EVALSHA`: the keys, the member, and every number packed in one argument (see
/// the script): the server neither receives an argument per number nor converts its text.
fn sliding_command(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone, member: &[u8]) -> Cmd {
    let (mut keys, mut bytes) = (0, 90 + member.len());
    for i in indices.clone() {
        let limit = &call.limits[i];
        keys += 1;
        bytes += 24 + call.subjects[i].len() * 3 + limit.redis_key_len() + 8 + 16 * limit.rules.len();
    }
    let mut cmd = Cmd::with_capacity(5 + keys, bytes);
    cmd.arg("EVALSHA").arg(SLIDING.sha()).arg(keys);
    for i in indices.clone() {
        cmd.arg(KeyArg { limit: &call.limits[i], subject: call.subjects[i] });
    }
    cmd.arg(member).arg(SlidingNumbers { call, indices, several: keys > 1 });
    cmd
}

/// decide_sw.lua's numbers as one argument of little-endian doubles, written straight into the
/// command's buffer: now (0: the server's TIME), cost, then per limit its rule count (only when
/// there are several limits) and (window µs, count) per rule. Every value is below 2^53 but a
/// cost or pinned time past it, which becomes the double its text would have (both round to
/// nearest).
struct SlidingNumbers<'a, 'c, I> {
    call: &'a Call<'c>,
    indices: I,
    several: bool,
}

impl<I: Iterator<Item = usize> + Clone> redis::ToRedisArgs for SlidingNumbers<'_, '_, I> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut w = out.writer_for_next_arg();
        // Writing to the command's buffer cannot fail.
        let mut put = |x: u64| {
            let _ = w.write_all(&(x as f64).to_le_bytes());
        };
        put(self.call.now_us.unwrap_or(0));
        put(self.call.cost);
        for i in self.indices.clone() {
            let rules = &self.call.limits[i].rules;
            if self.several {
                put(rules.len() as u64);
            }
            for rule in rules {
                put(rule.window_us());
                put(rule.count());
            }
        }
    }
}

/// The `EVALSHA` that gives back what `release` names (see [`Store::release`]).
pub(crate) fn release_command(release: &Release<'_>) -> (Cmd, &'static Script) {
    command(&release.call, release.indices.iter().copied(), &release.member, ScriptOp::Release(release.at_us))
}

/// A limit's key for one subject as a command argument, written straight into the command's
/// buffer (no key `Vec` per call).
struct KeyArg<'a> {
    limit: &'a crate::limit::Limit,
    subject: &'a [u8],
}

impl redis::ToRedisArgs for KeyArg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        // Writing to the command's buffer cannot fail.
        let _ = self.limit.write_redis_key(self.subject, &mut out.writer_for_next_arg());
    }
}

/// Runs the script with `EVALSHA`, loading it on `NOSCRIPT` (a restarted or new server), and
/// reads its packed reply (see [`unpack_reply`]); `member` is the call's id, which the decision
/// keeps for a refund.
pub(crate) async fn eval(
    conn: &mut impl ConnectionLike,
    command: &(Cmd, &Script),
    member: [u8; 16],
) -> Result<Decision, StoreError> {
    let answer: redis::Value = query_script(conn, command).await?;
    let mut decision = Decision::from_script(unpack_reply(&answer)?);
    if let Some((limit, rule, wait)) = shadow_refusal(&answer) {
        decision.refused_in_shadow(limit, rule, wait);
    }
    decision.member = member;
    Ok(decision)
}

/// As [`eval`], the script's integers as they come (a peek answers two per rule).
pub(crate) async fn eval_raw(conn: &mut impl ConnectionLike, command: &(Cmd, &Script)) -> Result<Vec<i64>, StoreError> {
    query_script(conn, command).await
}

/// The `EVALSHA`, and on `NOSCRIPT` a `SCRIPT LOAD` and the `EVALSHA` again. (Errors are counted
/// by `StoreMetrics::timed`, from their variant.)
pub(crate) async fn query_script<T: redis::FromRedisValue>(
    conn: &mut impl ConnectionLike,
    (cmd, script): &(Cmd, &Script),
) -> Result<T, StoreError> {
    match cmd.query_async::<T>(conn).await {
        Err(e) if e.kind() == ErrorKind_::Server(ServerErrorKind::NoScript) => {
            // On a cluster this reaches every primary (a promoted replica may never have seen it).
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.code())
                .query_async::<redis::Value>(conn)
                .await
                .map_err(redis_error)?;
            cmd.query_async::<T>(conn).await
        }
        other => other,
    }
    .map_err(redis_error)
}

/// The peek of the targets' limits `indices` (all in one slot on a cluster): the command, and
/// the limits to read its answer with.
pub(crate) fn peek_command(targets: &Targets<'_>, indices: &[usize]) -> (Cmd, &'static Script) {
    let subjects: Vec<&[u8]> = targets.subjects.iter().map(|s| s.unwrap_or(&[])).collect();
    let call = Call { limits: targets.limits, subjects: &subjects, cost: 0, now_us: targets.now_us, shadow: 0 };
    command(&call, indices.iter().copied(), &[], ScriptOp::Peek)
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

/// Loads the decision scripts: the first command also connects and authenticates. On a cluster
/// the connection sends `SCRIPT LOAD` to every primary.
pub(crate) async fn load_scripts(conn: &mut impl ConnectionLike) -> Result<(), StoreError> {
    for script in [&GENERAL, &SLIDING, &O1, &BATCH] {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.code())
            .query_async::<redis::Value>(conn)
            .await
            .map_err(redis_error)?;
    }
    Ok(())
}

/// The bytes of a decision's reply: `struct.pack('<dddddd', allowed, limit, rule, remaining,
/// reset_us, now)` from decide_sw.lua and decide_o1.lua, and one more double, `why`, from
/// decide.lua (three more when the call's shadow limits would have refused it: their limit,
/// rule and wait); decide_sw.lua's admission by one limit of one rule: `struct.pack('<ddd',
/// remaining, reset_us, now)`, the limit and rule being the first.
pub(crate) const REPLY_LEN: usize = 48;
const REPLY_WHY_LEN: usize = 56;
const REPLY_SHADOW_LEN: usize = 80;
pub(crate) const REPLY_ADMITTED_LEN: usize = 24;

/// The decision script's reply as `Decision::from_script` takes it: {allowed, limit, rule,
/// retry_after_us, remaining, reset_us, now, why}. The script packs its doubles into one bulk
/// string, which redis-rs parses for a fraction of what an array of integers cost it (each
/// element is a value of its own); a refusal's retry-after is its reset, an admission's is 0.
/// Each double becomes an integer as Redis converts a Lua number in an integer reply: truncated
/// toward zero.
fn unpack_reply(answer: &redis::Value) -> Result<[i64; 8], StoreError> {
    match answer {
        redis::Value::BulkString(bytes)
            if bytes.len() == REPLY_LEN
                || bytes.len() == REPLY_WHY_LEN
                || bytes.len() == REPLY_SHADOW_LEN
                || bytes.len() == REPLY_ADMITTED_LEN =>
        {
            Ok(unpack(bytes))
        }
        other => Err(StoreError::Protocol(format!("unexpected reply {other:?}"))),
    }
}

/// One packed reply of [`REPLY_LEN`], [`REPLY_WHY_LEN`] or [`REPLY_ADMITTED_LEN`] bytes (the
/// caller checked the length), as [`unpack_reply`] answers it.
pub(crate) fn unpack(bytes: &[u8]) -> [i64; 8] {
    let mut v = [0i64; 7];
    // The short admission carries the last three values of the long reply (and no `why`).
    let short = bytes.len() == REPLY_ADMITTED_LEN;
    let first = if short { 3 } else { 0 };
    for (slot, chunk) in v[first..].iter_mut().zip(bytes.chunks_exact(8)) {
        // `as` truncates toward zero (and saturates), as Redis's conversion does.
        *slot = double(chunk) as i64;
    }
    if short {
        (v[0], v[1], v[2]) = (1, 1, 1);
    }
    let [allowed, limit, rule, remaining, reset, now, why] = v;
    let retry = if allowed == 1 { 0 } else { reset };
    [allowed, limit, rule, retry, remaining, reset, now, why]
}

/// The little-endian double in the first 8 bytes of `chunk` (0 if it is shorter).
pub(crate) fn double(chunk: &[u8]) -> f64 {
    let mut bytes = [0u8; 8];
    if let Some(first) = chunk.get(..8) {
        bytes.copy_from_slice(first);
    }
    f64::from_le_bytes(bytes)
}

/// The refusal of the call's shadow limits that decide.lua's longer reply carries after `why`:
/// their limit and rule (0-based here), and the wait (µs).
fn shadow_refusal(answer: &redis::Value) -> Option<(usize, usize, u64)> {
    let redis::Value::BulkString(bytes) = answer else { return None };
    let tail = bytes.get(REPLY_WHY_LEN..).filter(|t| t.len() == REPLY_SHADOW_LEN - REPLY_WHY_LEN)?;
    let mut v = [0u64; 3];
    for (slot, chunk) in v.iter_mut().zip(tail.chunks_exact(8)) {
        // Truncated toward zero (and saturated at 0), as `unpack_reply` reads its doubles.
        *slot = double(chunk) as u64;
    }
    let index = |x: u64| usize::try_from(x.saturating_sub(1)).unwrap_or(usize::MAX);
    Some((index(v[0]), index(v[1]), v[2]))
}

/// A Redis error as what happened, classified by its kind and code (never its text), the error
/// itself as the source.
pub(crate) fn redis_error(e: redis::RedisError) -> StoreError {
    let kind = e.kind();
    // Redis answers a client that skipped AUTH with `NOAUTH`, or, for a long command, with
    // "Protocol error: unauthenticated multibulk length" before closing the connection.
    let unauthenticated = kind == ErrorKind_::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.contains("unauthenticated"));
    let auth = unauthenticated
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || matches!(kind, ErrorKind_::AuthenticationFailed | ErrorKind_::Server(ServerErrorKind::NoPerm));
    let timeout = e.is_timeout();
    // A server error of a code the client does not know (`WRONGTYPE`, `OOM`, `BUSY`) is the
    // server refusing to run the script.
    let script = matches!(
        kind,
        ErrorKind_::Server(ServerErrorKind::NoScript | ServerErrorKind::ResponseError | ServerErrorKind::ExecAbort)
            | ErrorKind_::Extension
            | ErrorKind_::UnexpectedReturnType
            | ErrorKind_::Parse
    );
    let connection = matches!(
        kind,
        ErrorKind_::Io
            | ErrorKind_::ClusterConnectionNotFound
            | ErrorKind_::MasterNameNotFoundBySentinel
            | ErrorKind_::NoValidReplicasFoundBySentinel
            | ErrorKind_::Server(
                ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ReadOnly,
            )
    ) || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_io_error();
    let misconfigured = matches!(kind, ErrorKind_::InvalidClientConfig);
    let (context, source) = (String::new(), Some(Arc::new(e) as crate::error::ErrorSource));
    if timeout {
        StoreError::Timeout { after: None, source }
    } else if auth {
        StoreError::Auth { context, source }
    } else if script {
        StoreError::Script { context, source }
    } else if connection {
        StoreError::Connection { context, source }
    } else if misconfigured {
        StoreError::Misconfigured { context, source }
    } else {
        StoreError::Other { context, source }
    }
}

/// The URL without its password, for logs.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// How a decision goes to the server.
enum Route {
    /// In the store's next batch.
    Batched(Arc<Batcher>, batch::Encoded),
    /// As an `EVALSHA` of its own (holding a batch slot when it could have been batched).
    Direct(ConnectionManager, (Cmd, &'static Script), Option<batch::Slot>),
}

impl Store for RedisStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        self.breaker.call(|| {
            let member = unique_member();
            // Sliding windows alone (decide_sw.lua's calls) are coalesced with the calls
            // concurrent with them, but for a call that finds nothing to join; the others go
            // as they are.
            let batchable = batch::batchable(call);
            let alone = if batchable { self.batcher.alone() } else { None };
            let route = if batchable && alone.is_none() {
                Route::Batched(self.batcher.clone(), batch::encode(call, &member))
            } else {
                let cmd = command(call, 0..call.limits.len(), &member, ScriptOp::Decide);
                Route::Direct(self.conn.clone(), cmd, alone)
            };
            let timeout = self.timeout;
            async move {
                let decided = async move {
                    match route {
                        Route::Batched(batcher, call) => {
                            let mut decision = Decision::from_script(batcher.decide(call).await?);
                            decision.member = member;
                            Ok(decision)
                        }
                        // The slot, if any, is given back when this future ends.
                        Route::Direct(mut conn, cmd, _slot) => eval(&mut conn, &cmd, member).await,
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
    fn scripts_are_assembled_whole() {
        for script in [&super::GENERAL, &super::SLIDING, &super::BATCH] {
            let markers = script.code().lines().filter(|l| l.trim_start().starts_with("--@")).count();
            assert_eq!(markers, 0, "a fragment marker was left unreplaced");
            assert!(script.code().contains("redis.call('ZADD', key, now_text, member)"));
            assert_eq!(script.sha().len(), 40);
        }
        assert_ne!(super::GENERAL.sha(), super::SLIDING.sha());
        assert_ne!(super::SLIDING.sha(), super::BATCH.sha());
        assert_eq!(super::BATCH.code().matches("redis.call('TIME')").count(), 1);
        assert!(!super::O1.code().lines().any(|l| l.trim_start().starts_with("--@")), "a marker left in decide_o1");
        assert!(super::O1.code().contains("local function muldiv"));
        assert_ne!(super::O1.sha(), super::GENERAL.sha());
    }

    #[test]
    fn error_kinds_come_from_the_error_kind_not_its_text() {
        use super::ErrorKind_;
        use crate::metrics::ErrorKind;
        use std::io;
        let error_kind = |e: redis::RedisError| ErrorKind::of(&super::redis_error(e));
        let io_err = |k: io::ErrorKind| redis::RedisError::from(io::Error::new(k, "secret-host:6379"));
        assert_eq!(error_kind(io_err(io::ErrorKind::ConnectionRefused)), ErrorKind::Connection);
        assert_eq!(error_kind(io_err(io::ErrorKind::ConnectionReset)), ErrorKind::Connection);
        assert_eq!(error_kind(io_err(io::ErrorKind::TimedOut)), ErrorKind::Timeout);
        let of = |k: ErrorKind_| error_kind(redis::RedisError::from((k, "timeout auth script")));
        assert_eq!(of(ErrorKind_::AuthenticationFailed), ErrorKind::Auth);
        assert_eq!(of(ErrorKind_::UnexpectedReturnType), ErrorKind::Script);
        assert_eq!(of(ErrorKind_::ClusterConnectionNotFound), ErrorKind::Connection);
        assert_eq!(of(ErrorKind_::InvalidClientConfig), ErrorKind::Other);
    }

    #[test]
    fn replies_unpack_as_redis_converts_integers() {
        let packed = |v: &[f64]| redis::Value::BulkString(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        // Admitted: the tightest rule's remaining and reset, no retry-after.
        let admitted = super::unpack_reply(&packed(&[1.0, 2.0, 1.0, 9_007_199_254_740_991.0, 60e6, 7.0])).unwrap();
        assert_eq!(admitted, [1, 2, 1, 0, 9_007_199_254_740_991, 60_000_000, 7, 0]);
        // Refused: the retry-after is the reset; fractions truncate toward zero.
        let refused = super::unpack_reply(&packed(&[0.0, 1.0, 3.0, 0.0, 1234.9, 8.0, 2.0])).unwrap();
        assert_eq!(refused, [0, 1, 3, 1234, 0, 1234, 8, 2]);
        assert!(super::unpack_reply(&redis::Value::Array(vec![redis::Value::Int(1)])).is_err());
        // decide_sw.lua's admission by one limit of one rule: remaining, reset and now alone.
        let short = super::unpack_reply(&packed(&[41.0, 60e6, 9.0])).unwrap();
        assert_eq!(short, [1, 1, 1, 0, 41, 60_000_000, 9, 0]);
        assert!(super::unpack_reply(&redis::Value::BulkString(vec![0; 39])).is_err());
        assert!(super::unpack_reply(&redis::Value::BulkString(vec![0; 40])).is_err());
        // decide.lua's admission whose shadow limits would have refused: three more doubles.
        let shadowed = packed(&[1.0, 1.0, 1.0, 4.0, 60e6, 7.0, 0.0, 2.0, 1.0, 1500.7]);
        assert_eq!(super::unpack_reply(&shadowed).unwrap(), [1, 1, 1, 0, 4, 60_000_000, 7, 0]);
        assert_eq!(super::shadow_refusal(&shadowed), Some((1, 0, 1500)));
        assert_eq!(super::shadow_refusal(&packed(&[1.0, 2.0, 1.0, 4.0, 60e6, 7.0, 0.0])), None);
    }

    #[test]
    fn members_are_unique() {
        let a = super::unique_member();
        let b = super::unique_member();
        assert_ne!(a, b);
    }
}
