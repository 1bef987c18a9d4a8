//! The Lua decision scripts, run with `EVALSHA` (loaded again on `NOSCRIPT`), and their packed
//! replies read back. Below every Redis-backed store (one server, its batches, Sentinel,
//! Cluster). Each script is checked in whole, as the server runs it (lua/decide*.lua), assembled
//! from the parts in lua/parts/ by a test (`assembly`), which fails when the two drift apart.

use super::error::redis_error;
use crate::error::StoreError;
use crate::model::decision::Decision;
use crate::model::member::Member;
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, ServerErrorKind};
use std::sync::OnceLock;

#[cfg(test)]
mod assembly;

/// A Lua script and its SHA-1 as `EVALSHA` names it (hashed once, on first use).
pub(crate) struct Script {
    code: &'static str,
    sha: OnceLock<String>,
}

impl Script {
    const fn new(code: &'static str) -> Script {
        Script { code, sha: OnceLock::new() }
    }

    /// The script's text.
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    pub(crate) fn sha(&self) -> &str {
        self.sha.get_or_init(|| redis::Script::new(self.code).get_hash().to_owned())
    }
}

/// The decision script: every algorithm, blocks, concurrency limits, and release and peek
/// modes (see `decide.lua`).
pub(crate) static GENERAL: Script = Script::new(include_str!("lua/decide.lua"));
/// The decisions of one or more calls whose limits are all sliding windows (no block, no
/// concurrency or shadow limit), one after another (see `decide_sw_batch.lua` and
/// store/redis/batch/).
pub(crate) static BATCH: Script = Script::new(include_str!("lua/decide_sw_batch.lua"));
/// The same for calls whose limits are all O(1) algorithms (see `decide_o1_batch.lua`).
pub(crate) static O1_BATCH: Script = Script::new(include_str!("lua/decide_o1_batch.lua"));

/// Runs the script with `EVALSHA`, loading it on `NOSCRIPT` (a restarted or new server), and
/// reads its packed reply (see [`unpack_reply`]); `member` is the call's id, which the decision
/// keeps for a refund.
pub(crate) async fn eval(
    conn: &mut impl ConnectionLike,
    command: &(Cmd, &Script),
    member: Member,
) -> Result<Decision, StoreError> {
    let answer: redis::Value = query_script(conn, command).await?;
    let mut decision = Decision::from_script(unpack_reply(&answer)?);
    if let Some((limit, rule, wait)) = shadow_refusal(&answer) {
        decision.refused_in_shadow(limit, rule, wait);
    }
    decision.member = member;
    Ok(decision)
}

/// As [`eval`], for a run in mode "o" (see override_check.lua): a reply listing overrides that
/// changed teaches them to `known` and is a decision refused with `Why::OverridesChanged`.
pub(crate) async fn eval_checked(
    conn: &mut impl ConnectionLike,
    command: &(Cmd, &Script),
    member: Member,
    known: &crate::store::overrides::Known,
) -> Result<Decision, StoreError> {
    let answer: redis::Value = query_script(conn, command).await?;
    if let redis::Value::Array(changed) = &answer {
        for pair in changed.chunks(2) {
            match pair {
                [redis::Value::BulkString(key), redis::Value::BulkString(value)] => known.learn(key, value),
                other => return Err(StoreError::Protocol(format!("unexpected overrides {other:?}"))),
            }
        }
        return Ok(Decision::refused(0, 0, 0, 0, crate::model::decision::Why::OverridesChanged));
    }
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
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            // On a cluster this reaches every primary (a promoted replica may never have seen it).
            load(conn, script).await?;
            cmd.query_async::<T>(conn).await
        }
        other => other,
    }
    .map_err(redis_error)
}

/// Loads the decision scripts: the first command also connects and authenticates. On a cluster
/// the connection sends `SCRIPT LOAD` to every primary.
pub(crate) async fn load_scripts(conn: &mut impl ConnectionLike) -> Result<(), StoreError> {
    for script in [&GENERAL, &BATCH, &O1_BATCH] {
        load(conn, script).await?;
    }
    Ok(())
}

/// `SCRIPT LOAD` of `script`.
async fn load(conn: &mut impl ConnectionLike, script: &Script) -> Result<(), StoreError> {
    redis::cmd("SCRIPT").arg("LOAD").arg(script.code()).query_async::<redis::Value>(conn).await.map_err(redis_error)?;
    Ok(())
}

/// The bytes of a decision's reply: `struct.pack('<dddddd', allowed, limit, rule, remaining,
/// reset_us, now)` from the batch scripts, and one more double, `why`, from decide.lua (three
/// more when the call's shadow limits would have refused it: their limit, rule and wait);
/// decide_sw_batch.lua's admission by one limit of one rule: `struct.pack('<ddd', -1 -
/// remaining, reset_us, now)`, the limit and rule being the first (negative first value: the
/// long form's is `allowed`, 0 or 1).
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
        (v[0], v[1], v[2], v[3]) = (1, 1, 1, (-1i64).saturating_sub(v[3]));
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

#[cfg(test)]
mod tests {
    #[test]
    fn scripts_are_whole_and_distinct() {
        let scripts = [&super::GENERAL, &super::BATCH, &super::O1_BATCH];
        for script in scripts {
            assert!(!script.code().lines().any(|l| l.trim_start().starts_with("--@")), "a part left unspliced");
            // One part reads the server's clock, once per run.
            assert_eq!(script.code().matches("redis.call('TIME')").count(), 1);
            assert_eq!(script.sha().len(), 40);
        }
        assert!(super::BATCH.code().contains("redis.call('ZADD', key, now_text, member)"));
        assert!(super::O1_BATCH.code().contains("local function muldiv"));
        let shas: std::collections::BTreeSet<&str> = scripts.iter().map(|s| s.sha()).collect();
        assert_eq!(shas.len(), 3);
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
        // An admission by one limit of one rule: -1 - remaining, reset and now alone.
        let short = super::unpack_reply(&packed(&[-42.0, 60e6, 9.0])).unwrap();
        assert_eq!(short, [1, 1, 1, 0, 41, 60_000_000, 9, 0]);
        assert!(super::unpack_reply(&redis::Value::BulkString(vec![0; 39])).is_err());
        assert!(super::unpack_reply(&redis::Value::BulkString(vec![0; 40])).is_err());
        // decide.lua's admission whose shadow limits would have refused: three more doubles.
        let shadowed = packed(&[1.0, 1.0, 1.0, 4.0, 60e6, 7.0, 0.0, 2.0, 1.0, 1500.7]);
        assert_eq!(super::unpack_reply(&shadowed).unwrap(), [1, 1, 1, 0, 4, 60_000_000, 7, 0]);
        assert_eq!(super::shadow_refusal(&shadowed), Some((1, 0, 1500)));
        assert_eq!(super::shadow_refusal(&packed(&[1.0, 2.0, 1.0, 4.0, 60e6, 7.0, 0.0])), None);
    }
}
