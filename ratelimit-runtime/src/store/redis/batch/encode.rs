//! A call encoded for a batch script, and the batch's command and reply: both batch scripts take
//! every number of a batch packed in one argument, and answer one packed reply per call.

use super::super::script::{double, unpack, Script, BATCH, O1_BATCH, REPLY_ADMITTED_LEN, REPLY_LEN};
use crate::algorithm::Algorithm;
use crate::error::StoreError;
use crate::model::member::Member;
use crate::store::Call;
use redis::Cmd;

/// Which batch script decides a call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// Every limit a sliding window: decide_sw_batch.lua.
    Sliding,
    /// Every limit an O(1) algorithm: decide_o1_batch.lua.
    O1,
}

impl Kind {
    pub(super) fn script(self) -> &'static Script {
        match self {
            Kind::Sliding => &BATCH,
            Kind::O1 => &O1_BATCH,
        }
    }
}

/// A call, encoded for its batch script (it no longer borrows the caller's limits).
pub(crate) struct Encoded {
    pub(super) kind: Kind,
    /// The call's numbers as its script reads them, packed, then its keys, each after its length
    /// (8 bytes, native order). [`Kind::Sliding`]: member, now, cost, key count, then per key its
    /// rule count and rules. [`Kind::O1`]: cost, key count m (or -1 - m, then the call's time,
    /// when it has one), then per key its algorithm, rule count, burst and rules.
    buf: Vec<u8>,
    /// Where the numbers end and the keys start.
    nums: usize,
    keys: usize,
    /// [`Kind::O1`]: the call's own time (µs), when it gives one: a batch of several such calls
    /// answers without it (see [`split`]).
    pub(super) now: Option<u64>,
}

/// Which batch script can decide the limits `indices` of `call`, if one can: every limit a
/// sliding window, or none, with no block, no concurrency limit and no shadow limit (those are
/// decide.lua's).
pub(crate) fn batchable(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone) -> Option<Kind> {
    // Shadow limits (the call's last `call.shadow`) are decided as a group after the others.
    let enforced = call.enforced();
    if indices.clone().any(|i| i >= enforced || call.limits[i].has_block_or_slots()) {
        return None;
    }
    let sliding = |i: usize| call.limits[i].algorithm == Algorithm::SlidingWindow;
    if indices.clone().all(sliding) {
        Some(Kind::Sliding)
    } else if !indices.clone().any(sliding) {
        Some(Kind::O1)
    } else {
        None
    }
}

/// The limits `indices` of `call`, with its member, as an entry of a `kind` batch.
pub(crate) fn encode(
    call: &Call<'_>,
    indices: impl Iterator<Item = usize> + Clone,
    member: Member,
    kind: Kind,
) -> Encoded {
    match kind {
        Kind::Sliding => encode_sliding(call, indices, member),
        Kind::O1 => encode_o1(call, indices),
    }
}

/// A sliding-window call: little-endian doubles, as decide_sw_batch.lua reads them (every value
/// below 2^53 but a cost or pinned time past it, which becomes the double its text would have).
fn encode_sliding(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone, member: Member) -> Encoded {
    let (mut nums, mut bytes, mut keys) = (16 + 3 * 8, 0, 0);
    for i in indices.clone() {
        let limit = &call.limits[i];
        nums += 8 + 16 * limit.rules.len();
        bytes += 8 + limit.redis_key_len() + call.subjects[i].len() * 3 + 24;
        keys += 1;
    }
    let mut buf = Vec::with_capacity(nums + bytes);
    let put = |buf: &mut Vec<u8>, x: u64| buf.extend_from_slice(&(x as f64).to_le_bytes());
    buf.extend_from_slice(&member.bytes());
    put(&mut buf, call.now_us.unwrap_or(0));
    put(&mut buf, call.cost);
    put(&mut buf, keys as u64);
    for i in indices.clone() {
        let limit = &call.limits[i];
        put(&mut buf, limit.rules.len() as u64);
        for rule in &limit.rules {
            put(&mut buf, rule.window_us());
            put(&mut buf, rule.count());
        }
    }
    let nums = buf.len();
    put_keys(call, indices, &mut buf);
    Encoded { kind: Kind::Sliding, buf, nums, keys, now: None }
}

/// An O(1) call: little-endian doubles, as decide_o1_batch.lua reads them (cost, key count m,
/// or -1 - m followed by the call's time when the caller gives one (else the script reads the
/// server's, and a call sends and the server unpacks a number less), then per limit its
/// algorithm, rule count, burst and rules, a window in calendar months as minus its months; no
/// member: nothing is logged by member). The values are those of the limit's text arguments to
/// decide.lua (`CompiledLimit::script_args`), each the double its text would have become in the
/// script.
fn encode_o1(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone) -> Encoded {
    let (mut nums, mut bytes, mut keys) = (3 * 8, 0, 0);
    for i in indices.clone() {
        let limit = &call.limits[i];
        nums += 3 * 8 + 16 * limit.rules.len();
        bytes += 8 + limit.redis_key_len() + call.subjects[i].len() * 3 + 24;
        keys += 1;
    }
    let mut buf = Vec::with_capacity(nums + bytes);
    let put = |buf: &mut Vec<u8>, x: f64| buf.extend_from_slice(&x.to_le_bytes());
    put(&mut buf, call.cost as f64);
    // A time of 0 is the server's, as for decide.lua.
    let now = call.now_us.filter(|&now| now != 0);
    match now {
        Some(now) => {
            put(&mut buf, -1.0 - keys as f64);
            put(&mut buf, now as f64);
        }
        None => put(&mut buf, keys as f64),
    }
    for i in indices.clone() {
        let limit = &call.limits[i];
        // The script decides the three buckets alike (one admission rule).
        let algorithm = match limit.algorithm {
            Algorithm::FixedWindow => 1.0,
            Algorithm::SlidingWindowCounter => 2.0,
            _ => 3.0,
        };
        put(&mut buf, algorithm);
        put(&mut buf, limit.rules.len() as f64);
        put(&mut buf, limit.burst.unwrap_or(0) as f64);
        for rule in &limit.rules {
            let window = match rule.months() {
                Some(months) => -f64::from(months),
                None => rule.window_us() as f64,
            };
            put(&mut buf, window);
            put(&mut buf, rule.count() as f64);
        }
    }
    let nums = buf.len();
    put_keys(call, indices, &mut buf);
    Encoded { kind: Kind::O1, buf, nums, keys, now }
}

/// The keys of the limits `indices` of `call`, each after its length.
fn put_keys(call: &Call<'_>, indices: impl Iterator<Item = usize>, buf: &mut Vec<u8>) {
    for i in indices {
        let (limit, subject) = (&call.limits[i], call.subjects[i]);
        let at = buf.len();
        buf.extend_from_slice(&0usize.to_ne_bytes());
        // Writing to a Vec cannot fail.
        let _ = limit.write_redis_key(subject, &mut *buf);
        let len = buf.len() - at - 8;
        buf[at..at + 8].copy_from_slice(&len.to_ne_bytes());
    }
}

/// The `count` byte strings at the start of `bytes`, each after its length (8 bytes, native
/// order).
fn items(bytes: &[u8], count: usize) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    (0..count).map(move |_| {
        let (len, tail) = rest.split_at(8);
        let mut n = [0u8; 8];
        n.copy_from_slice(len);
        let (item, tail) = tail.split_at(usize::from_ne_bytes(n));
        rest = tail;
        item
    })
}

impl Encoded {
    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        items(&self.buf[self.nums..], self.keys)
    }
}

/// The `EVALSHA` that decides `call` alone: a batch of one.
pub(crate) fn one_command(call: &Encoded) -> (Cmd, &'static Script) {
    (command(std::iter::once(call), call.kind), call.kind.script())
}

/// The batch script's `EVALSHA` for `calls` (of one kind): every call's keys, then one argument
/// of every number (see the scripts).
pub(super) fn command<'a>(calls: impl Iterator<Item = &'a Encoded> + Clone, kind: Kind) -> Cmd {
    let (mut keys, mut bytes) = (0, 0);
    for call in calls.clone() {
        keys += call.keys;
        bytes += call.buf.len() + 16;
    }
    let mut cmd = Cmd::with_capacity(5 + keys, 80 + bytes);
    cmd.arg("EVALSHA").arg(kind.script().sha()).arg(keys);
    for call in calls.clone() {
        for key in call.keys() {
            cmd.arg(key);
        }
    }
    cmd.arg(Numbers(calls));
    cmd
}

/// The batch's numbers: the call count, then each call's.
struct Numbers<I>(I);

impl<'a, I: Iterator<Item = &'a Encoded> + Clone> redis::ToRedisArgs for Numbers<I> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut w = out.writer_for_next_arg();
        // Writing to the command's buffer cannot fail.
        let _ = w.write_all(&(self.0.clone().count() as f64).to_le_bytes());
        for call in self.0.clone() {
            let _ = w.write_all(&call.buf[..call.nums]);
        }
    }
}

/// The batch's reply, one packed reply per call in call order: 48 bytes, or 24 for an admission
/// reported by the first limit's first rule, whose first value is `-1 - remaining` (negative,
/// where the long form's is `allowed`, 0 or 1). An O(1) batch of several calls answers each
/// without its last value, the call's time, and then the server's time once (0 if no call took
/// it): a call's time is its own (`times`, in call order, one per call) or the server's.
pub(super) fn split(answer: &redis::Value, kind: Kind, times: &[Option<u64>]) -> Result<Vec<[i64; 8]>, StoreError> {
    let calls = times.len();
    let unexpected = || StoreError::Protocol(format!("unexpected batch reply for {calls} calls: {answer:?}"));
    let redis::Value::BulkString(bytes) = answer else { return Err(unexpected()) };
    // How much of each reply is there: all of it, or all but the time.
    let (mut rest, cut, server) = if kind == Kind::O1 && calls > 1 {
        let Some(at) = bytes.len().checked_sub(8) else { return Err(unexpected()) };
        (&bytes[..at], 8, double(&bytes[at..]))
    } else {
        (&bytes[..], 0, 0.0)
    };
    let mut replies = Vec::with_capacity(calls);
    let mut full = [0u8; REPLY_LEN];
    while !rest.is_empty() {
        let short = double(rest) < 0.0;
        let len = if short { REPLY_ADMITTED_LEN } else { REPLY_LEN } - cut;
        let Some(one) = rest.get(..len) else { return Err(unexpected()) };
        if cut == 0 {
            replies.push(unpack(one));
        } else {
            // The reply as a lone call's, its time put back (the double the script would have
            // answered: the one it was sent, or the server's).
            let now = match times.get(replies.len()) {
                Some(Some(own)) => *own as f64,
                Some(None) if server > 0.0 => server,
                _ => return Err(unexpected()),
            };
            full[..len].copy_from_slice(one);
            full[len..len + 8].copy_from_slice(&now.to_le_bytes());
            replies.push(unpack(&full[..len + 8]));
        }
        rest = &rest[len..];
    }
    if replies.len() != calls {
        return Err(unexpected());
    }
    Ok(replies)
}

#[cfg(test)]
mod tests {
    use super::{split, Kind};

    #[test]
    fn batch_replies_split_by_their_first_value() {
        let packed = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut bytes = packed(&[-42.0, 60e6, 9.0]);
        bytes.extend(packed(&[0.0, 1.0, 1.0, 0.0, 1234.0, 9.0]));
        bytes.extend(packed(&[1.0, 2.0, 1.0, 5.0, 30e6, 9.0]));
        bytes.extend(packed(&[-1.0, 10.0, 9.0]));
        let answer = redis::Value::BulkString(bytes);
        let replies = split(&answer, Kind::Sliding, &[None; 4]).unwrap();
        assert_eq!(replies[0], [1, 1, 1, 0, 41, 60_000_000, 9, 0]);
        assert_eq!(replies[1], [0, 1, 1, 1234, 0, 1234, 9, 0]);
        assert_eq!(replies[2], [1, 2, 1, 0, 5, 30_000_000, 9, 0]);
        assert_eq!(replies[3], [1, 1, 1, 0, 0, 10, 9, 0]);
        assert!(split(&answer, Kind::Sliding, &[None; 3]).is_err(), "a count that does not match");
        let redis::Value::BulkString(mut cut) = answer else { unreachable!() };
        cut.truncate(cut.len() - 8);
        assert!(split(&redis::Value::BulkString(cut), Kind::Sliding, &[None; 4]).is_err(), "a reply cut short");
        assert!(split(&redis::Value::Int(1), Kind::Sliding, &[None]).is_err());
    }

    #[test]
    fn o1_batch_replies_take_their_time_from_the_call_or_the_batch() {
        let packed = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // Three calls: the server's time, their own (5), the server's; then the server's time.
        let mut bytes = packed(&[-42.0, 60e6]);
        bytes.extend(packed(&[0.0, 1.0, 1.0, 0.0, 1234.0]));
        bytes.extend(packed(&[1.0, 2.0, 1.0, 5.0, 30e6]));
        bytes.extend(packed(&[9.0]));
        let answer = redis::Value::BulkString(bytes.clone());
        let replies = split(&answer, Kind::O1, &[None, Some(5), None]).unwrap();
        assert_eq!(replies[0], [1, 1, 1, 0, 41, 60_000_000, 9, 0]);
        assert_eq!(replies[1], [0, 1, 1, 1234, 0, 1234, 5, 0]);
        assert_eq!(replies[2], [1, 2, 1, 0, 5, 30_000_000, 9, 0]);
        // A lone call answers as decide_sw_batch.lua does, its time included.
        let lone = redis::Value::BulkString(packed(&[-1.0, 10.0, 9.0]));
        assert_eq!(split(&lone, Kind::O1, &[Some(9)]).unwrap()[0], [1, 1, 1, 0, 0, 10, 9, 0]);
        // No server time for a call that took it; a reply cut short.
        let none = bytes.len() - 8;
        bytes[none..].copy_from_slice(&0f64.to_le_bytes());
        assert!(split(&redis::Value::BulkString(bytes.clone()), Kind::O1, &[None, Some(5), None]).is_err());
        bytes.truncate(none - 8);
        assert!(split(&redis::Value::BulkString(bytes), Kind::O1, &[Some(1), Some(5), Some(1)]).is_err());
    }
}
