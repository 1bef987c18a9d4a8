//! One connection shared by the calls that go alone, with no task of its own ([`Pipe`]).
//!
//! A caller writes its request whole (requests never interleave), then waits for its reply.
//! Redis answers in order, so the replies are matched to the requests by their place. One of
//! the callers waiting is the reader: it alone polls the socket, reads what came, hands each
//! reply to its request and wakes that request's caller. When its own reply has come it stops,
//! and wakes the next caller waiting, which reads next. A caller that gives up (its timeout)
//! leaves its place: its reply, when it comes, is read and dropped, and if it was reading, the
//! next caller waiting reads on. Nothing is lost to a caller that gave up, and no reply is ever
//! read as another request's.

use super::resp::parse;
use crate::rt::lock::lock;
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Value};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use tokio::net::TcpStream;

pub(super) struct Pipe {
    stream: TcpStream,
    db: i64,
    inner: Mutex<Inner>,
}

struct Inner {
    /// The requests written whose callers have not yet taken their replies (or whose replies
    /// have not yet been read), oldest first: `calls[0]` is request number `first`.
    calls: VecDeque<Waiting>,
    first: u64,
    /// The number of the request whose reply is read next.
    read: u64,
    /// What was read and not yet taken as replies.
    input: Vec<u8>,
    /// A caller is reading the replies: the others wait to be woken.
    reading: bool,
    /// Why the connection is no longer usable (read or written past an error, or a reply that
    /// could not be read): every call on it fails, and the lane connects anew.
    broken: Option<(io::ErrorKind, &'static str)>,
}

#[derive(Default)]
struct Waiting {
    reply: Option<Value>,
    waker: Option<Waker>,
    /// Its caller took its reply, or gave up: the place only waits for its reply to be read.
    done: bool,
}

impl Pipe {
    pub(super) fn new(stream: TcpStream, db: i64) -> Pipe {
        let inner =
            Inner { calls: VecDeque::new(), first: 0, read: 0, input: Vec::new(), reading: false, broken: None };
        Pipe { stream, db, inner: Mutex::new(inner) }
    }

    /// Whether the connection broke: the lane lets it go.
    pub(super) fn broken(&self) -> bool {
        lock(&self.inner).broken.is_some()
    }

    /// A connection to send commands on, as the store's requests take one.
    pub(super) fn handle(&self) -> Handle<'_> {
        Handle { pipe: self, out: Vec::new() }
    }

    /// Writes `command` (packed) and reads its reply.
    pub(super) async fn request(&self, command: &[u8]) -> Result<Value, RedisError> {
        let number = self.write(command).await?;
        Reply { pipe: self, number, reader: false, finished: false }.await
    }

    /// Writes `command` whole and takes its place among the requests waiting for a reply.
    async fn write(&self, command: &[u8]) -> Result<u64, RedisError> {
        loop {
            {
                let mut inner = lock(&self.inner);
                if let Some(broken) = inner.broken {
                    return Err(error(broken));
                }
                let mut at = 0;
                while at < command.len() {
                    match self.stream.try_write(&command[at..]) {
                        Ok(0) => return Err(inner.fail(io::ErrorKind::WriteZero, "the connection took no more")),
                        Ok(n) => at += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // Nothing written: wait until the socket takes it (below).
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock && at == 0 => break,
                        // Half a request on the wire: the server would read the next one as
                        // its end. A full socket midway means the server is not reading anyway.
                        Err(e) => return Err(inner.fail(e.kind(), "a request could not be written whole")),
                    }
                }
                if at == command.len() {
                    let number = inner.first + inner.calls.len() as u64;
                    inner.calls.push_back(Waiting::default());
                    return Ok(number);
                }
            }
            self.stream.writable().await?;
        }
    }

    /// Request `number`'s reply, reading the socket if no other caller is.
    fn poll_reply(&self, number: u64, reader: &mut bool, cx: &mut Context<'_>) -> Poll<Result<Value, RedisError>> {
        let mut inner = lock(&self.inner);
        loop {
            let at = inner.place(number);
            if let Some(value) = inner.calls[at].reply.take() {
                inner.calls[at].done = true;
                if std::mem::take(reader) {
                    inner.hand_over();
                }
                inner.trim();
                return Poll::Ready(Ok(value));
            }
            if let Some(broken) = inner.broken {
                if std::mem::take(reader) {
                    inner.reading = false;
                }
                return Poll::Ready(Err(error(broken)));
            }
            if inner.reading && !*reader {
                let waiting = &mut inner.calls[at];
                if !waiting.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    waiting.waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            inner.reading = true;
            *reader = true;
            if let Err(e) = inner.take_replies() {
                inner.fail(io::ErrorKind::InvalidData, e);
                continue;
            }
            if inner.calls[at].reply.is_some() {
                continue;
            }
            match self.stream.try_read_buf(&mut inner.input) {
                Ok(0) => {
                    inner.fail(io::ErrorKind::UnexpectedEof, "the server closed the connection");
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => match self.stream.poll_read_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => {
                        inner.fail(e.kind(), "the connection failed");
                    }
                    Poll::Pending => return Poll::Pending,
                },
                Err(e) => {
                    inner.fail(e.kind(), "the connection failed");
                }
            }
        }
    }

    /// Request `number`'s caller gave up before taking its reply.
    fn give_up(&self, number: u64, reader: bool) {
        let mut inner = lock(&self.inner);
        let at = inner.place(number);
        inner.calls[at] = Waiting { reply: None, waker: None, done: true };
        if reader {
            inner.hand_over();
        }
        inner.trim();
    }
}

impl Inner {
    /// Where request `number` is in `calls`: a request's place is kept until its caller is
    /// done with it.
    fn place(&self, number: u64) -> usize {
        (number - self.first) as usize
    }

    /// The replies complete in `input`, each handed to its request.
    fn take_replies(&mut self) -> Result<(), &'static str> {
        let mut at = 0;
        while let Some((value, end)) = parse(&self.input, at, 0).map_err(|_| "a reply that could not be read")? {
            at = end;
            let place = (self.read - self.first) as usize;
            let waiting = self.calls.get_mut(place).ok_or("a reply to no request")?;
            self.read += 1;
            if !waiting.done {
                waiting.reply = Some(value);
                if let Some(waker) = waiting.waker.take() {
                    waker.wake();
                }
            }
        }
        self.input.drain(..at);
        Ok(())
    }

    /// The reader is done: the first caller still waiting for its reply reads next.
    fn hand_over(&mut self) {
        self.reading = false;
        if let Some(next) = self.calls.iter_mut().find(|w| !w.done && w.reply.is_none() && w.waker.is_some()) {
            if let Some(waker) = next.waker.take() {
                waker.wake();
            }
        }
    }

    /// Forgets the requests done with at the front.
    fn trim(&mut self) {
        while self.calls.front().is_some_and(|w| w.done) && self.first < self.read {
            self.calls.pop_front();
            self.first += 1;
        }
    }

    /// The connection broke: every caller waiting is woken to fail.
    fn fail(&mut self, kind: io::ErrorKind, why: &'static str) -> RedisError {
        self.broken = Some((kind, why));
        for waiting in &mut self.calls {
            if let Some(waker) = waiting.waker.take() {
                waker.wake();
            }
        }
        error((kind, why))
    }
}

fn error((kind, why): (io::ErrorKind, &'static str)) -> RedisError {
    io::Error::new(kind, why).into()
}

/// A reply awaited; gives its place up if dropped first.
struct Reply<'a> {
    pipe: &'a Pipe,
    number: u64,
    /// This caller is the one reading.
    reader: bool,
    finished: bool,
}

impl Future for Reply<'_> {
    type Output = Result<Value, RedisError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let answer = this.pipe.poll_reply(this.number, &mut this.reader, cx);
        this.finished = answer.is_ready();
        answer
    }
}

impl Drop for Reply<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.pipe.give_up(self.number, self.reader);
        }
    }
}

/// The connection as the store's requests use one: a command and its reply at a time.
pub(super) struct Handle<'a> {
    pipe: &'a Pipe,
    /// The request being written (kept: its capacity serves a retry after `NOSCRIPT`).
    out: Vec<u8>,
}

impl ConnectionLike for Handle<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.out.clear();
            cmd.write_packed_command(&mut self.out);
            self.pipe.request(&self.out).await?.extract_error()
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a redis::Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // A lone call sends single commands (its script, and `SCRIPT LOAD` on `NOSCRIPT`).
        Box::pin(async { Err(RedisError::from((ErrorKind::Client, "no pipelines on a lone call's connection"))) })
    }

    fn get_db(&self) -> i64 {
        self.pipe.db
    }
}
