//! The lone calls' connection of a runtime's lane ([`Direct`]), written and read by the callers'
//! own tasks.
//!
//! A command on the multiplexed connection goes through a channel to the connection's task,
//! which writes it, reads the reply and sends the reply back through another channel: two more
//! task wake-ups per call than when the caller writes and reads the socket itself, about 3–5 µs
//! of a lone caller's 35–40 µs round trip on a 2-core machine (BENCHMARKS.md, "A lone call's own
//! socket"). So the calls that go alone (up to four under way at once, see batch/) share one
//! connection with no task of its own ([`pipe`]): each writes its request, and one of those
//! waiting reads the replies, in order, waking each caller whose reply came. Sharing it keeps
//! what one connection gives the server under load: it reads and answers several requests with
//! one system call (at 4 callers, one connection each read 0.94–1.01× the decisions of a shared
//! one). A call that gives up midway leaves its reply to be read and dropped by the next reader.
//!
//! Plain TCP and RESP2 only, the common case: TLS and Unix sockets, and RESP3, keep to the
//! multiplexed connection.

mod pipe;
mod resp;

use super::error::redis_error;
use super::link::Request;
use crate::error::StoreError;
use crate::rt::lock::lock;
use pipe::Pipe;
use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisError};
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;

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

/// One lane's connection for lone calls, made when first needed and again after it broke.
pub(crate) struct Direct {
    config: DirectConfig,
    state: Mutex<State>,
}

struct State {
    pipe: Option<Arc<Pipe>>,
    /// The lane ended (its runtime, or the store): no new connection is made, and the calls
    /// under way end with the one they hold.
    closed: bool,
}

impl Direct {
    pub(crate) fn new(config: DirectConfig) -> Direct {
        Direct { config, state: Mutex::new(State { pipe: None, closed: false }) }
    }

    /// Lets the connection go: it closes once the calls under way on it have ended.
    pub(crate) fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        state.pipe = None;
    }

    /// Sends `request` on the lane's connection, connecting it first if there is none (the
    /// caller's timeout covers it all, the connecting too). A connection that broke is let go,
    /// and the next call connects anew.
    pub(crate) async fn send<R: Request>(&self, request: &R) -> Result<R::Reply, StoreError> {
        let current = lock(&self.state).pipe.clone();
        let pipe = match current {
            Some(pipe) => pipe,
            None => self.connect().await.map_err(redis_error)?,
        };
        let reply = request.send_on(&mut pipe.handle()).await;
        if pipe.broken() {
            let mut state = lock(&self.state);
            if state.pipe.as_ref().is_some_and(|p| Arc::ptr_eq(p, &pipe)) {
                state.pipe = None;
            }
        }
        reply
    }

    /// Connects ahead of the first lone call, so that no call pays for it (a failure here is
    /// left for that call to meet).
    pub(crate) async fn prepare(&self) {
        let _ = self.connect().await;
    }

    /// A new connection, made the lane's own unless another call made one meanwhile (then
    /// that one is used, and this one closed).
    async fn connect(&self) -> Result<Arc<Pipe>, RedisError> {
        let stream = TcpStream::connect((self.config.host.as_str(), self.config.port)).await?;
        // A request is one write, and its reply is awaited: nothing to gain by delaying it.
        stream.set_nodelay(true)?;
        let pipe = Arc::new(Pipe::new(stream, self.config.db));
        for command in &self.config.handshake {
            pipe.request(command).await?.extract_error()?;
        }
        let mut state = lock(&self.state);
        match &state.pipe {
            Some(made) if !made.broken() => Ok(made.clone()),
            _ => {
                if !state.closed {
                    state.pipe = Some(pipe.clone());
                }
                Ok(pipe)
            }
        }
    }
}
