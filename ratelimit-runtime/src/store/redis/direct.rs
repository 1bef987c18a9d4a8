//! A lone decision's own connection, written and read by its caller's task ([`Direct`]).
//!
//! A command on the multiplexed connection goes through a channel to the connection's task,
//! which writes it, reads the reply and sends the reply back through another channel: two more
//! task wake-ups per call than when the caller writes and reads a socket itself, about 3–5 µs of
//! a lone caller's 35–40 µs round trip on a 2-core machine (BENCHMARKS.md, "A lone call's own
//! socket"). So a call that goes alone and finds nothing else under way (see batch/) borrows
//! an idle connection of its runtime's lane, as a pool lends one, and gives it back once it has
//! read its reply. Calls under way together share the multiplexed connection instead: there the
//! server reads and answers several requests per system call, which counts once Redis's core is
//! the limit (at 4 callers, one connection each read 0.94–1.01× the decisions of a shared one). A call that fails, or is dropped midway (its timeout), drops the connection
//! instead: its reply may still come, and would be read as the next call's.
//!
//! Plain TCP and RESP2 only, the common case: TLS and Unix sockets, and RESP3, keep to the
//! multiplexed connection.

use super::error::redis_error;
use super::link::Request;
use crate::error::StoreError;
use crate::rt::lock::lock;
use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, ProtocolVersion, RedisError, RedisFuture, Value};
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Idle connections kept per lane at most. One call at a time goes on them (one that found
/// nothing else under way), but a call that gave up drops its connection while the next one
/// may already have taken another.
const IDLE: usize = 2;

/// The deepest reply read: the decision scripts answer a string, or an array of integers or of
/// strings, so a deeper nesting is a server (or something posing as one) talking nonsense.
const DEPTH: usize = 4;

/// Where and how to connect. No `Debug`: the handshake holds the password.
#[derive(Clone)]
pub(crate) struct DirectConfig {
    host: String,
    port: u16,
    /// The commands sent once connected, packed: `AUTH` and `SELECT`, if any.
    handshake: Vec<Vec<u8>>,
    db: i64,
}

impl DirectConfig {
    /// The way to connect to the server `info` names, if calls can have their own connections
    /// there (plain TCP, RESP2).
    pub(crate) fn of(info: &ConnectionInfo) -> Option<DirectConfig> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else { return None };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        let mut handshake = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            handshake.push(auth.arg(password).get_packed_command());
        }
        if settings.db() != 0 {
            handshake.push(redis::cmd("SELECT").arg(settings.db()).get_packed_command());
        }
        Some(DirectConfig { host: host.clone(), port: *port, handshake, db: settings.db() })
    }
}

/// One lane's connections for lone calls: those idle, lent one per call.
pub(crate) struct Direct {
    config: DirectConfig,
    idle: Mutex<Idle>,
}

struct Idle {
    conns: Vec<Conn>,
    /// The lane ended (its runtime, or the store): a connection given back is closed.
    closed: bool,
}

impl Direct {
    pub(crate) fn new(config: DirectConfig) -> Direct {
        Direct { config, idle: Mutex::new(Idle { conns: Vec::new(), closed: false }) }
    }

    /// Closes the idle connections, and those of the calls under way as they end: the lane
    /// ended, and its connections end with it.
    pub(crate) fn close(&self) {
        let mut idle = lock(&self.idle);
        idle.closed = true;
        idle.conns.clear();
    }

    /// Sends `request` on an idle connection, or on a new one, and keeps the connection for the
    /// next call if the reply was read (the caller's timeout covers it all, the connecting too).
    pub(crate) async fn send<R: Request>(&self, request: &R) -> Result<R::Reply, StoreError> {
        let idle = lock(&self.idle).conns.pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.connect().await.map_err(redis_error)?,
        };
        let reply = request.send_on(&mut conn).await;
        if reply.is_ok() {
            let mut idle = lock(&self.idle);
            if !idle.closed && idle.conns.len() < IDLE {
                idle.conns.push(conn);
            }
        }
        reply
    }

    /// Connects one connection ahead of the first lone call, so that no call pays for it (a
    /// failure here is left for that call to meet).
    pub(crate) async fn prepare(&self) {
        if let Ok(conn) = self.connect().await {
            let mut idle = lock(&self.idle);
            if !idle.closed && idle.conns.is_empty() {
                idle.conns.push(conn);
            }
        }
    }

    async fn connect(&self) -> Result<Conn, RedisError> {
        let stream = TcpStream::connect((self.config.host.as_str(), self.config.port)).await?;
        // A request is one write, and its reply is awaited: nothing to gain by delaying it.
        stream.set_nodelay(true)?;
        let mut conn = Conn { stream, out: Vec::new(), input: Vec::new(), db: self.config.db };
        for command in &self.config.handshake {
            conn.stream.write_all(command).await?;
            conn.read_value().await?.extract_error()?;
        }
        Ok(conn)
    }
}

/// A connection used by one call at a time.
struct Conn {
    stream: TcpStream,
    /// The request being written (kept: its capacity serves the next one).
    out: Vec<u8>,
    /// What was read and not yet taken as a reply.
    input: Vec<u8>,
    db: i64,
}

impl Conn {
    /// The next reply.
    async fn read_value(&mut self) -> Result<Value, RedisError> {
        loop {
            if let Some((value, end)) = parse(&self.input, 0, 0)? {
                self.input.drain(..end);
                return Ok(value);
            }
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.out.clear();
            cmd.write_packed_command(&mut self.out);
            self.stream.write_all(&self.out).await?;
            self.read_value().await?.extract_error()
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
        self.db
    }
}

/// The RESP2 reply starting at `at` in `input`, and where it ends; `None` while it is
/// incomplete. Written here, for the replies of the decision scripts: the client's own parser
/// of a whole buffer zeroes a large one first, which cost more than the rest of a call's work on
/// this side (about 6 600 instructions of memset per reply). An error reply is read by that
/// parser, which knows its codes (`NOSCRIPT` among them).
fn parse(input: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, RedisError> {
    let Some(&kind) = input.get(at) else { return Ok(None) };
    let Some(eol) = input[at..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    let (line, line_end) = (&input[at + 1..at + eol], at + eol + 2);
    let number = || {
        std::str::from_utf8(line)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| RedisError::from((ErrorKind::Parse, "a number that is not one")))
    };
    let value = match kind {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
        b'-' => redis::parse_redis_value(&input[at..line_end])?,
        b':' => Value::Int(number()?),
        b'$' => match usize::try_from(number()?) {
            // -1: nil.
            Err(_) => Value::Nil,
            Ok(n) => {
                let end = line_end.saturating_add(n);
                if input.len() < end.saturating_add(2) {
                    return Ok(None);
                }
                return Ok(Some((Value::BulkString(input[line_end..end].to_vec()), end + 2)));
            }
        },
        b'*' if depth < DEPTH => match usize::try_from(number()?) {
            Err(_) => Value::Nil,
            Ok(n) => {
                let (mut items, mut end) = (Vec::with_capacity(n.min(64)), line_end);
                for _ in 0..n {
                    match parse(input, end, depth + 1)? {
                        Some((item, next)) => {
                            items.push(item);
                            end = next;
                        }
                        None => return Ok(None),
                    }
                }
                return Ok(Some((Value::Array(items), end)));
            }
        },
        _ => return Err(RedisError::from((ErrorKind::Parse, "an unexpected reply"))),
    };
    Ok(Some((value, line_end)))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use redis::Value;

    fn read(b: &[u8]) -> Option<(Value, usize)> {
        parse(b, 0, 0).ok().flatten()
    }

    #[test]
    fn replies_are_read_whole_or_not_at_all() {
        assert_eq!(read(b"+OK\r\n"), Some((Value::Okay, 5)));
        assert_eq!(read(b"+PONG\r\n"), Some((Value::SimpleString("PONG".into()), 7)));
        assert_eq!(read(b"+OK\r"), None);
        assert_eq!(read(b":12\r\n:3"), Some((Value::Int(12), 5)));
        assert_eq!(read(b"$3\r\nabc\r\n"), Some((Value::BulkString(b"abc".to_vec()), 9)));
        assert_eq!(read(b"$3\r\nab"), None);
        assert_eq!(read(b"$3\r\nabc\r"), None);
        assert_eq!(read(b"$-1\r\n"), Some((Value::Nil, 5)));
        assert_eq!(
            read(b"*2\r\n:1\r\n$1\r\nx\r\n"),
            Some((Value::Array(vec![Value::Int(1), Value::BulkString(b"x".to_vec())]), 15))
        );
        assert_eq!(read(b"*2\r\n:1\r\n$1\r\n"), None);
        let (error, end) = read(b"-NOSCRIPT No matching script\r\n").unwrap();
        assert_eq!(end, 30);
        let error = error.extract_error().unwrap_err();
        assert_eq!(error.kind(), redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
        assert!(parse(b"?x\r\n", 0, 0).is_err());
        assert!(parse(b"$x\r\n", 0, 0).is_err());
        assert!(parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", 0, 0).is_err(), "nested past the depth");
        // A huge length is incomplete, never an overflow.
        assert_eq!(read(b"$9223372036854775807\r\n"), None);
    }
}
