//! Concurrent decisions on one Redis server ([`RedisStore`](super::RedisStore), or the primary of
//! a [`SentinelStore`](super::SentinelStore)), coalesced: the calls queue,
//! and one task on the I/O runtime sends what is queued as one run of a batch script, which
//! decides them one after another: decide_sw_batch.lua for sliding windows, decide_o1_batch.lua
//! for O(1) algorithms (a batch holds calls of one kind). The same scripts decide a lone call,
//! as a batch of one ([`one_command`]), on any Redis-backed store.
//!
//! Under load Redis is the bottleneck (one core), so throughput is the server's work per
//! decision; a run costs the server, whatever it decides, its dispatch and arguments, its reply
//! and `TIME` (the time must be the server's): a batch pays them once for all its calls. The
//! batching is natural: nothing waits for a batch to fill. While fewer than [`IN_FLIGHT`]
//! batches are under way, everything queued (up to [`MAX_CALLS`]) goes at once. A call that
//! finds nothing queued and nothing under way goes alone, as a batch of one sent from the
//! caller's own task (no hop through the sending task, so a lone caller's latency is that of a
//! call without batching); the others queue, and the busier the connection, the larger its
//! batches. Calls of the other kind queued between two runs of one kind split a batch: it
//! takes the longest run of one kind at the head of the queue, which keeps the calls' order.

use super::script::{double, unpack, Script, BATCH, O1_BATCH, REPLY_ADMITTED_LEN, REPLY_LEN};
use crate::algorithm::Algorithm;
use crate::error::StoreError;
use crate::model::decision::Decision;
use crate::rt::io;
use crate::store::Call;
use redis::Cmd;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// Batches under way at once on one connection. One would leave Redis idle while a batch's reply
/// travels back and the next is sent; two keep it busy; more only make each batch smaller (2
/// and 4 cost the server the same per decision under callgrind, 42 400 and 42 900 instructions
/// at 64 callers: BENCHMARKS.md, "Coalesced decisions").
const IN_FLIGHT: usize = 2;

/// The most calls one batch decides: Redis runs nothing else while a script runs, so a batch
/// must stay short (64 one-rule decisions take the server about 1 ms).
const MAX_CALLS: usize = 64;

/// One call's reply, as `Decision::from_script` takes it.
type Reply = Result<[i64; 8], StoreError>;

/// How a batch reaches the server: one `EVALSHA` of a batch script (loaded again on
/// `NOSCRIPT`), sent as the store sends its commands (its connection, and whatever it does when
/// the node is gone), answered with the script's reply.
pub(crate) type Sender = Arc<
    dyn Fn(Arc<(Cmd, &'static Script)>) -> Pin<Box<dyn Future<Output = Result<redis::Value, StoreError>> + Send>>
        + Send
        + Sync,
>;

/// How a decision goes: queued with the calls concurrent with it, or as a command of its own
/// sent from its caller's task, either a batch of one (it found nothing to join; it holds a slot
/// among the batches in flight while it runs) or the general script's.
pub(crate) enum Route {
    Queued(Arc<Batcher>, Encoded),
    Direct((Cmd, &'static Script), Option<Slot>),
}

/// Which batch script decides a call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// Every limit a sliding window: decide_sw_batch.lua.
    Sliding,
    /// Every limit an O(1) algorithm: decide_o1_batch.lua.
    O1,
}

impl Kind {
    fn script(self) -> &'static Script {
        match self {
            Kind::Sliding => &BATCH,
            Kind::O1 => &O1_BATCH,
        }
    }
}

/// A call, encoded for its batch script (it no longer borrows the caller's limits).
pub(crate) struct Encoded {
    kind: Kind,
    /// The call's arguments, then its keys, each key after its length (8 bytes, native order).
    /// [`Kind::Sliding`]: the numbers as decide_sw_batch.lua reads them, packed (member, now,
    /// cost, key count, then per key its rule count and rules). [`Kind::O1`]: `args` arguments
    /// of decide_o1_batch.lua, each after its length as the keys are.
    buf: Vec<u8>,
    /// Where the arguments end and the keys start.
    nums: usize,
    /// [`Kind::O1`]: how many arguments.
    args: usize,
    keys: usize,
}

struct Entry {
    call: Encoded,
    reply: oneshot::Sender<Reply>,
}

/// Which batch script can decide the limits `indices` of `call`, if one can: every limit a
/// sliding window, or none, with no block, no concurrency limit and no shadow limit (those are
/// decide.lua's).
pub(crate) fn batchable(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone) -> Option<Kind> {
    // Shadow limits (the call's last `call.shadow`) are decided as a group after the others.
    let enforced = call.enforced();
    if indices.clone().any(|i| i >= enforced || call.limits[i].has_policy()) {
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
    member: &[u8; 16],
    kind: Kind,
) -> Encoded {
    match kind {
        Kind::Sliding => encode_sliding(call, indices, member),
        Kind::O1 => encode_o1(call, indices),
    }
}

/// A sliding-window call: little-endian doubles, as decide_sw_batch.lua reads them (every value
/// below 2^53 but a cost or pinned time past it, which becomes the double its text would have).
fn encode_sliding(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone, member: &[u8; 16]) -> Encoded {
    let (mut nums, mut bytes, mut keys) = (16 + 3 * 8, 0, 0);
    for i in indices.clone() {
        let limit = &call.limits[i];
        nums += 8 + 16 * limit.rules.len();
        bytes += 8 + limit.redis_key_len() + call.subjects[i].len() * 3 + 24;
        keys += 1;
    }
    let mut buf = Vec::with_capacity(nums + bytes);
    let put = |buf: &mut Vec<u8>, x: u64| buf.extend_from_slice(&(x as f64).to_le_bytes());
    buf.extend_from_slice(member);
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
    Encoded { kind: Kind::Sliding, buf, nums, args: 0, keys }
}

/// An O(1) call: decide_o1_batch.lua's arguments as text (now, cost, key count, then its
/// limits'; the member is not the script's: nothing is logged by member).
fn encode_o1(call: &Call<'_>, indices: impl Iterator<Item = usize> + Clone) -> Encoded {
    let (mut bytes, mut args, mut keys) = (3 * 28, 3, 0);
    for i in indices.clone() {
        let limit = &call.limits[i];
        args += limit.script_args.len();
        bytes += limit.script_args.iter().map(|a| 8 + a.len()).sum::<usize>();
        bytes += 8 + limit.redis_key_len() + call.subjects[i].len() * 3 + 24;
        keys += 1;
    }
    let mut buf = Vec::with_capacity(bytes);
    let put = |buf: &mut Vec<u8>, arg: &[u8]| {
        buf.extend_from_slice(&arg.len().to_ne_bytes());
        buf.extend_from_slice(arg);
    };
    // In decimal, as redis-rs writes an integer argument (with the same crate).
    let mut text = itoa::Buffer::new();
    put(&mut buf, text.format(call.now_us.unwrap_or(0)).as_bytes());
    put(&mut buf, text.format(call.cost).as_bytes());
    put(&mut buf, text.format(keys).as_bytes());
    for i in indices.clone() {
        for a in &call.limits[i].script_args {
            put(&mut buf, a);
        }
    }
    let nums = buf.len();
    put_keys(call, indices, &mut buf);
    Encoded { kind: Kind::O1, buf, nums, args, keys }
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

    /// [`Kind::O1`]: the arguments.
    fn args(&self) -> impl Iterator<Item = &[u8]> {
        items(&self.buf[..self.nums], self.args)
    }
}

/// The queue of one store's calls and the task that sends them.
pub(crate) struct Batcher {
    state: Mutex<State>,
    /// Wakes the sending task: a call was queued, a batch slot freed with calls queued, or the
    /// store was dropped.
    ready: Notify,
    /// Batches (or lone calls) under way at most: [`IN_FLIGHT`].
    in_flight_max: usize,
}

struct State {
    entries: Vec<Entry>,
    /// Batches and lone calls under way.
    in_flight: usize,
    /// The store was dropped: the task sends what is queued and ends.
    closed: bool,
}

/// A place among the batches in flight, given back when dropped (the call answered, failed, or
/// its caller gave up).
pub(crate) struct Slot(Arc<Batcher>);

impl Drop for Slot {
    fn drop(&mut self) {
        let wake = {
            let mut state = crate::rt::lock::lock(&self.0.state);
            state.in_flight -= 1;
            !state.entries.is_empty()
        };
        if wake {
            self.0.ready.notify_one();
        }
    }
}

impl Batcher {
    /// A batcher whose batches `sender` sends, its sending task started on the I/O runtime.
    /// `timeout` bounds a batch: by then each of its callers has given up.
    pub(crate) fn start(sender: Sender, timeout: Duration) -> Result<Arc<Batcher>, StoreError> {
        let batcher = Arc::new(Batcher {
            state: Mutex::new(State { entries: Vec::new(), in_flight: 0, closed: false }),
            ready: Notify::new(),
            in_flight_max: IN_FLIGHT,
        });
        io::handle()?.spawn(send_batches(batcher.clone(), sender, timeout));
        Ok(batcher)
    }

    /// How `call` (all its limits) goes, with its member: through a batch script if one can
    /// decide it, else as `general` builds its command.
    pub(crate) fn route(
        self: &Arc<Self>,
        call: &Call<'_>,
        member: &[u8; 16],
        general: impl FnOnce() -> (Cmd, &'static Script),
    ) -> Route {
        let all = 0..call.limits.len();
        let Some(kind) = batchable(call, all.clone()) else { return Route::Direct(general(), None) };
        let encoded = encode(call, all, member, kind);
        match self.alone() {
            Some(slot) => Route::Direct(one_command(&encoded), Some(slot)),
            None => Route::Queued(self.clone(), encoded),
        }
    }

    /// A slot for a call to go alone, as it is, when nothing is queued or under way: then
    /// nothing would join it, and it saves the hop through the sending task (a lone caller's
    /// calls all go this way, as fast as without batching). Only then: under load, the first
    /// caller answered would otherwise take a free slot for itself alone each time a batch comes
    /// back, and half the batches would be of one call.
    fn alone(self: &Arc<Self>) -> Option<Slot> {
        let mut state = crate::rt::lock::lock(&self.state);
        if state.in_flight == 0 && state.entries.is_empty() && !state.closed {
            state.in_flight += 1;
            return Some(Slot(self.clone()));
        }
        None
    }

    /// Decides `call`, whose member is `member`, in the next batch. The caller's timeout is the
    /// caller's: dropping this future only stops the waiting (the call may still be decided, as
    /// any call whose reply never came).
    pub(crate) async fn decide(&self, call: Encoded, member: [u8; 16]) -> Result<Decision, StoreError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut state = crate::rt::lock::lock(&self.state);
            if state.closed {
                return Err(StoreError::other("the Redis store was dropped"));
            }
            state.entries.push(Entry { call, reply });
        }
        self.ready.notify_one();
        let reply = answer.await.map_err(|_| StoreError::other("the Redis store's batch task ended"))??;
        let mut decision = Decision::from_script(reply);
        decision.member = member;
        Ok(decision)
    }

    /// The store is dropped: the task sends what is queued, then ends.
    pub(crate) fn close(&self) {
        crate::rt::lock::lock(&self.state).closed = true;
        self.ready.notify_one();
    }

    /// The next batch and its slot: the calls queued first, up to [`MAX_CALLS`] and as long as
    /// they are of the first one's kind (one script decides a batch), as soon as there is
    /// anything and a slot is free; `None` once the store is dropped and nothing is left.
    async fn next(self: &Arc<Self>) -> Option<(Vec<Entry>, Slot)> {
        loop {
            {
                let mut state = crate::rt::lock::lock(&self.state);
                let queued = state.entries.len();
                if queued > 0 && state.in_flight < self.in_flight_max {
                    let kind = state.entries[0].call.kind;
                    let run = state.entries.iter().take(MAX_CALLS).take_while(|e| e.call.kind == kind).count();
                    let batch = if run == queued {
                        std::mem::take(&mut state.entries)
                    } else {
                        state.entries.drain(..run).collect()
                    };
                    state.in_flight += 1;
                    return Some((batch, Slot(self.clone())));
                }
                if queued == 0 && state.closed {
                    return None;
                }
            }
            // A call queued, or a slot freed, after the look above has stored a wake-up: none
            // is lost.
            self.ready.notified().await;
        }
    }
}

/// The sending task: a batch as soon as calls are queued and a slot is free ([`IN_FLIGHT`]).
async fn send_batches(batcher: Arc<Batcher>, sender: Sender, timeout: Duration) {
    while let Some((batch, slot)) = batcher.next().await {
        let sender = sender.clone();
        tokio::spawn(async move {
            send(&sender, batch, timeout).await;
            drop(slot);
        });
    }
}

/// Sends one batch and gives each call its reply; an error (the script's, the connection's, a
/// timeout) is every call's: the calls before the failing one may have been recorded, as a call
/// whose reply is lost may have been.
async fn send(sender: &Sender, batch: Vec<Entry>, timeout: Duration) {
    let Some(first) = batch.first() else { return };
    let kind = first.call.kind;
    let command = Arc::new((command(batch.iter().map(|e| &e.call), kind), kind.script()));
    let answer = io::timeout(timeout, sender(command)).await;
    match answer.and_then(|a| split(&a, batch.len())) {
        Ok(replies) => {
            for (entry, reply) in batch.into_iter().zip(replies) {
                // A caller that gave up has dropped its end.
                let _ = entry.reply.send(Ok(reply));
            }
        }
        Err(e) => {
            for entry in batch {
                let _ = entry.reply.send(Err(e.clone()));
            }
        }
    }
}

/// The `EVALSHA` that decides `call` alone: a batch of one.
pub(crate) fn one_command(call: &Encoded) -> (Cmd, &'static Script) {
    (command(std::iter::once(call), call.kind), call.kind.script())
}

/// The batch script's `EVALSHA` for `calls` (of one kind): every call's keys, then
/// decide_sw_batch.lua's one argument of every number, or decide_o1_batch.lua's arguments of
/// every call (see the scripts).
fn command<'a>(calls: impl Iterator<Item = &'a Encoded> + Clone, kind: Kind) -> Cmd {
    let (mut keys, mut args, mut bytes) = (0, 0, 0);
    for call in calls.clone() {
        keys += call.keys;
        args += call.args;
        bytes += call.buf.len() + 16;
    }
    let mut cmd = Cmd::with_capacity(4 + keys + args.max(1), 80 + bytes);
    cmd.arg("EVALSHA").arg(kind.script().sha()).arg(keys);
    for call in calls.clone() {
        for key in call.keys() {
            cmd.arg(key);
        }
    }
    match kind {
        Kind::Sliding => {
            cmd.arg(Numbers(calls));
        }
        Kind::O1 => {
            for call in calls {
                for arg in call.args() {
                    cmd.arg(arg);
                }
            }
        }
    }
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

/// The batch's reply, one packed reply per call in call order: 48 bytes, or (decide_sw_batch.lua
/// only) 24 for an admission by one limit of one rule, whose first value is `-1 - remaining`
/// (negative, where the long form's is `allowed`, 0 or 1: decide_o1_batch.lua's replies are all
/// of the long form).
fn split(answer: &redis::Value, calls: usize) -> Result<Vec<[i64; 8]>, StoreError> {
    let unexpected = || StoreError::Protocol(format!("unexpected batch reply for {calls} calls: {answer:?}"));
    let redis::Value::BulkString(bytes) = answer else { return Err(unexpected()) };
    let mut replies = Vec::with_capacity(calls);
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let short = double(rest) < 0.0;
        let len = if short { REPLY_ADMITTED_LEN } else { REPLY_LEN };
        let Some(one) = rest.get(..len) else { return Err(unexpected()) };
        replies.push(unpack(one));
        rest = &rest[len..];
    }
    if replies.len() != calls {
        return Err(unexpected());
    }
    Ok(replies)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn batch_replies_split_by_their_first_value() {
        let packed = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut bytes = packed(&[-42.0, 60e6, 9.0]);
        bytes.extend(packed(&[0.0, 1.0, 1.0, 0.0, 1234.0, 9.0]));
        bytes.extend(packed(&[1.0, 2.0, 1.0, 5.0, 30e6, 9.0]));
        bytes.extend(packed(&[-1.0, 10.0, 9.0]));
        let answer = redis::Value::BulkString(bytes);
        let replies = split(&answer, 4).unwrap();
        assert_eq!(replies[0], [1, 1, 1, 0, 41, 60_000_000, 9, 0]);
        assert_eq!(replies[1], [0, 1, 1, 1234, 0, 1234, 9, 0]);
        assert_eq!(replies[2], [1, 2, 1, 0, 5, 30_000_000, 9, 0]);
        assert_eq!(replies[3], [1, 1, 1, 0, 0, 10, 9, 0]);
        assert!(split(&answer, 3).is_err(), "a count that does not match");
        let redis::Value::BulkString(mut cut) = answer else { unreachable!() };
        cut.truncate(cut.len() - 8);
        assert!(split(&redis::Value::BulkString(cut), 4).is_err(), "a reply cut short");
        assert!(split(&redis::Value::Int(1), 1).is_err());
    }
}
