//! The commands every Redis-backed store sends (one server, Sentinel, Cluster): the general
//! decision script's `EVALSHA` in its three modes, and the `DEL` of a reset. Each takes the limits
//! it covers by index, so that a cluster can send one command per slot. Then the requests a store
//! sends through its link: a command, and how its reply is read.

use super::error::redis_error;
use super::link::Request;
use super::script::{eval, eval_raw, load_scripts, query_script, Script, GENERAL};
use crate::error::StoreError;
use crate::model::compiled::CompiledLimit;
use crate::model::decision::Decision;
use crate::model::member::Member;
use crate::store::{Call, Release, Targets};
use redis::aio::ConnectionLike;
use redis::Cmd;

/// What a run of the decision script does: decide, give back what a decision with the same member
/// admitted, or read without writing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptOp {
    Decide,
    /// Decide once the runtime overrides are checked (see [`checked_command`]).
    Checked,
    /// Settles what a decision with the same member admitted at this time (µs; 0: now) to the
    /// given units (0: gives it all back).
    Release(u64, u64),
    /// Read every rule at cost 0 and write nothing (`Limiter::peek`).
    Peek,
}

/// The general script's `EVALSHA` for the limits `indices` of `call` in `mode`.
pub(crate) fn general_command(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: Member,
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
        args += 1 + limit.block_slot_args.len() + limit.script_args.len() + 3;
        bytes += 24
            + call.subjects[i].len() * 3
            + limit.redis_key_len()
            + limit.block_slot_args.iter().chain(&limit.script_args).map(Vec::len).sum::<usize>();
    }
    let mut cmd = Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA").arg(GENERAL.sha()).arg(indices.clone().count());
    for i in indices.clone() {
        cmd.arg(KeyArg { limit: &call.limits[i], subject: call.subjects[i] });
    }
    cmd.arg(call.now_us.unwrap_or(0)).arg(call.cost).arg(&member.bytes()[..]);
    match mode {
        ScriptOp::Decide => cmd.arg("d").arg(shadow),
        ScriptOp::Checked => cmd.arg("o").arg(shadow),
        // A refund is "r"; a settle to `actual` units is "s<actual>" (one argument: the
        // script's fixed arguments stay five).
        ScriptOp::Release(at, 0) => cmd.arg("r").arg(at),
        ScriptOp::Release(at, actual) => cmd.arg(format!("s{actual}")).arg(at),
        ScriptOp::Peek => cmd.arg("p").arg(0),
    };
    for i in indices {
        let limit = &call.limits[i];
        for a in limit.block_slot_args.iter().chain(&limit.script_args) {
            cmd.arg(a.as_slice());
        }
    }
    (cmd, &GENERAL)
}

/// The general script's `EVALSHA` deciding the limits `indices` of `call` once their runtime
/// overrides are checked (see override_check.lua): after the limits' arguments, each one's
/// override key ('' for none to check), the text it is decided with ('' for none) and the rules
/// of the limit it overrides ('' for none).
pub(crate) fn checked_command(
    call: &Call<'_>,
    checks: &[crate::store::OverrideCheck],
    indices: impl Iterator<Item = usize> + Clone,
    member: Member,
) -> (Cmd, &'static Script) {
    let (mut cmd, script) = general_command(call, indices.clone(), member, ScriptOp::Checked);
    for i in indices {
        match checks.get(i) {
            Some(check) => cmd.arg(&check.key[..]).arg(check.expected.as_deref().unwrap_or(&[])),
            None => cmd.arg("").arg(""),
        };
        // A bucket's state kept under the limit an override overrides is carried from its rules.
        match &call.limits[i].overrides {
            Some(rules) => {
                let text: Vec<String> = rules.iter().map(|r| format!("{}:{}", r.window_us(), r.count())).collect();
                cmd.arg(text.join(","))
            }
            None => cmd.arg(""),
        };
    }
    (cmd, script)
}

/// The `EVALSHA` that gives back what `release` names, for its limits `indices` (all of
/// `release.indices`, or one slot's share of them on a cluster).
pub(crate) fn release_command(
    release: &Release<'_>,
    indices: impl Iterator<Item = usize> + Clone,
) -> (Cmd, &'static Script) {
    general_command(&release.call, indices, release.member, ScriptOp::Release(release.at_us, release.actual))
}

/// A limit's key for one subject as a command argument, written straight into the command's
/// buffer (no key `Vec` per call).
struct KeyArg<'a> {
    limit: &'a CompiledLimit,
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
    general_command(&call, indices.iter().copied(), Member::NONE, ScriptOp::Peek)
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

/// A decision script's run, its reply read as the decision of the call whose member it holds.
pub(crate) struct Decide(pub(crate) (Cmd, &'static Script), pub(crate) Member);

impl Request for Decide {
    type Reply = Decision;

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<Decision, StoreError> {
        eval(conn, &self.0, self.1).await
    }
}

/// A script's run whose reply is taken as it comes: a batch (split by its batcher), a refund.
pub(crate) struct Run(pub(crate) (Cmd, &'static Script));

impl Request for Run {
    type Reply = redis::Value;

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<redis::Value, StoreError> {
        query_script(conn, &self.0).await
    }
}

/// A peek: the script's integers, two per rule.
pub(crate) struct Peek(pub(crate) (Cmd, &'static Script));

impl Request for Peek {
    type Reply = Vec<i64>;

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<Vec<i64>, StoreError> {
        eval_raw(conn, &self.0).await
    }
}

/// A reset's `DEL` (how many keys it removed does not matter).
pub(crate) struct Del(pub(crate) Cmd);

impl Request for Del {
    type Reply = ();

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), StoreError> {
        self.0.query_async::<i64>(conn).await.map(drop).map_err(redis_error)
    }
}

/// The loading of every decision script: the startup probe's (the first command also connects
/// and authenticates).
pub(crate) struct LoadScripts;

impl Request for LoadScripts {
    type Reply = ();

    async fn send_on<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), StoreError> {
        load_scripts(conn).await
    }
}

/// The URL without its password, for logs.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_passwords() {
        assert_eq!(super::redact("redis://user:secret@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(super::redact("redis://host:6379"), "redis://host:6379");
    }
}
