//! Concurrent decisions on one Redis server ([`RedisStore`](super::super::RedisStore), or the
//! primary of a [`SentinelStore`](super::super::SentinelStore)), coalesced: the calls queue, and
//! one task on the I/O runtime sends what is queued as one run of a batch script, which decides
//! them one after another: decide_sw_batch.lua for sliding windows, decide_o1_batch.lua for O(1)
//! algorithms (a batch holds calls of one kind; `encode.rs` writes them). The same scripts decide
//! a lone call, as a batch of one ([`one_command`]), on any Redis-backed store.
//!
//! Under load Redis is the bottleneck (one core), so throughput is the server's work per
//! decision; a run costs the server, whatever it decides, its dispatch and arguments, its reply
//! and `TIME` (the time must be the server's): a batch pays them once for all its calls. The
//! batching is natural: nothing waits for a batch to fill. While fewer than
//! [`BATCHES_IN_FLIGHT`] batches (and [`IN_FLIGHT`] lone calls and batches in all) are under
//! way, everything queued (up to [`MAX_CALLS`]) goes at once. A call that finds nothing queued,
//! no batch under way and a slot free goes alone, as a batch of one sent from the caller's own
//! task (no hop through the sending task, so a few callers' latency is that of calls without
//! batching); the others queue, and the busier the connection, the larger its batches. Calls of
//! the other kind queued between two runs of one kind split a batch: it takes the longest run of
//! one kind at the head of the queue, which keeps the calls' order.

mod encode;

use super::commands::Run;
use super::link::Link;
use super::script::Script;
use crate::error::StoreError;
use crate::model::decision::Decision;
use crate::model::member::Member;
use crate::rt::io;
use crate::store::Call;
pub(crate) use encode::{batchable, encode, one_command, Encoded};
use encode::{command, split};
use redis::Cmd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};

/// Lone calls and batches under way at once on one connection: up to four callers go alone,
/// pipelined as plain commands would be. With two, a third and fourth caller waited a round trip
/// in the queue and then went through the sending task, and 4 callers made 0.79–0.89× the
/// decisions of a plain script (BENCHMARKS.md, "Batches in flight"); eight made 4 and 16 callers
/// slower again.
const IN_FLIGHT: usize = 4;

/// Batches under way at once, within [`IN_FLIGHT`]. One would leave Redis idle while a batch's
/// reply travels back and the next is sent; two keep it busy. More make each batch smaller under
/// load, and Redis's time per decision larger: with four, 64 callers cost it 7.4–7.9 µs per
/// decision instead of 5.0–6.5 µs.
const BATCHES_IN_FLIGHT: usize = 2;

/// The most calls one batch decides: Redis runs nothing else while a script runs, so a batch
/// must stay short (64 one-rule decisions take the server about 1 ms).
const MAX_CALLS: usize = 64;

/// One call's reply, as `Decision::from_script` takes it.
type Reply = Result<[i64; 8], StoreError>;

/// How a decision goes: queued with the calls concurrent with it, or as a command of its own
/// sent from its caller's task, either a batch of one (it found nothing to join; it holds a slot
/// among the batches in flight while it runs) or the general script's.
pub(crate) enum Route {
    Queued(Arc<Batcher>, Encoded),
    Direct((Cmd, &'static Script), Option<Slot>),
}

/// A call made ready to send, before its connection is chosen: what a batch script takes, or
/// the general script's command.
pub(crate) enum Prepared {
    Batchable(Encoded),
    General((Cmd, &'static Script)),
}

/// `call` (all its limits) with its member, for a batch script if one can decide it, else as
/// `general` builds its command.
pub(crate) fn prepare(call: &Call<'_>, member: Member, general: impl FnOnce() -> (Cmd, &'static Script)) -> Prepared {
    let all = 0..call.limits.len();
    match batchable(call, all.clone()) {
        Some(kind) => Prepared::Batchable(encode(call, all, member, kind)),
        None => Prepared::General(general()),
    }
}

struct Entry {
    call: Encoded,
    reply: oneshot::Sender<Reply>,
}

/// The queue of one store's calls and the task that sends them.
pub(crate) struct Batcher {
    state: Mutex<State>,
    /// Wakes the sending task: a call was queued, a batch slot freed with calls queued, or the
    /// store was dropped.
    ready: Notify,
}

struct State {
    entries: Vec<Entry>,
    /// Batches and lone calls under way.
    in_flight: usize,
    /// Batches under way, of `in_flight`.
    batches: usize,
    /// The store was dropped: the task sends what is queued and ends.
    closed: bool,
}

/// A place among the batches in flight, given back when dropped (the call answered, failed, or
/// its caller gave up).
pub(crate) struct Slot {
    batcher: Arc<Batcher>,
    batch: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let wake = {
            let mut state = crate::rt::lock::lock(&self.batcher.state);
            state.in_flight -= 1;
            state.batches -= usize::from(self.batch);
            !state.entries.is_empty()
        };
        if wake {
            self.batcher.ready.notify_one();
        }
    }
}

impl Batcher {
    /// A batcher whose batches go through `link`, as the store sends its commands (and as it
    /// does when the node is gone), its sending task started on `runtime` (the one driving the
    /// link's connection). `timeout` bounds a batch: by then each of its callers has given up.
    pub(crate) fn start<L: Link>(link: L, timeout: Duration, runtime: &Handle) -> Arc<Batcher> {
        let batcher = Arc::new(Batcher {
            state: Mutex::new(State { entries: Vec::new(), in_flight: 0, batches: 0, closed: false }),
            ready: Notify::new(),
        });
        runtime.spawn(send_batches(batcher.clone(), link, timeout));
        batcher
    }

    /// How a call prepared by [`prepare`] goes on this batcher's connection: queued, or alone
    /// when nothing is queued or under way.
    pub(crate) fn route(self: &Arc<Self>, call: Prepared) -> Route {
        match call {
            Prepared::General(command) => Route::Direct(command, None),
            Prepared::Batchable(encoded) => match self.alone() {
                Some(slot) => Route::Direct(one_command(&encoded), Some(slot)),
                None => Route::Queued(self.clone(), encoded),
            },
        }
    }

    /// A slot for a call to go alone, as it is, when nothing is queued, no batch is under way
    /// and a slot is free: then it saves the hop through the sending task and the wait for a
    /// batch (a few callers' calls all go this way, as fast as without batching). Never past a
    /// queue, so calls queued first keep their order. Never beside a batch: once the load has
    /// made batches, a run of its own costs Redis about twice what the call costs in the next
    /// batch (a GCRA decision: 53 000 instructions alone, 26 000 in a batch of 32), and at 64
    /// callers one run in three was such a call (11 decisions per run; 21 since).
    fn alone(self: &Arc<Self>) -> Option<Slot> {
        let mut state = crate::rt::lock::lock(&self.state);
        if state.in_flight < IN_FLIGHT && state.batches == 0 && state.entries.is_empty() && !state.closed {
            state.in_flight += 1;
            return Some(Slot { batcher: self.clone(), batch: false });
        }
        None
    }

    /// Decides `call`, whose member is `member`, in the next batch. The caller's timeout is the
    /// caller's: dropping this future only stops the waiting (the call may still be decided, as
    /// any call whose reply never came).
    pub(crate) async fn decide(&self, call: Encoded, member: Member) -> Result<Decision, StoreError> {
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
                if queued > 0 && state.in_flight < IN_FLIGHT && state.batches < BATCHES_IN_FLIGHT {
                    let kind = state.entries[0].call.kind;
                    let run = state.entries.iter().take(MAX_CALLS).take_while(|e| e.call.kind == kind).count();
                    let batch = if run == queued {
                        std::mem::take(&mut state.entries)
                    } else {
                        state.entries.drain(..run).collect()
                    };
                    state.in_flight += 1;
                    state.batches += 1;
                    return Some((batch, Slot { batcher: self.clone(), batch: true }));
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
async fn send_batches<L: Link>(batcher: Arc<Batcher>, link: L, timeout: Duration) {
    while let Some((batch, slot)) = batcher.next().await {
        let link = link.clone();
        tokio::spawn(async move {
            send(&link, batch, timeout).await;
            drop(slot);
        });
    }
}

/// Sends one batch and gives each call its reply; an error (the script's, the connection's, a
/// timeout) is every call's: the calls before the failing one may have been recorded, as a call
/// whose reply is lost may have been.
async fn send<L: Link>(link: &L, batch: Vec<Entry>, timeout: Duration) {
    let Some(first) = batch.first() else { return };
    let kind = first.call.kind;
    // One `EVALSHA` of the batch script (loaded again on `NOSCRIPT`), answered with its reply.
    let run = Run((command(batch.iter().map(|e| &e.call), kind), kind.script()));
    let answer = io::timeout(timeout, link.send(&run)).await;
    let times: Vec<Option<u64>> = batch.iter().map(|e| e.call.now).collect();
    match answer.and_then(|a| split(&a, kind, &times)) {
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
