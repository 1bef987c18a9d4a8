//! The [`Link`] of the Sentinel store ([`Sentinels`]): the sentinels, the primary they named
//! (looked up, confirmed and forgotten as the module above says), and the watcher.

use super::super::error::redis_error;
use super::super::link::{Link, Request};
use super::spec::SentinelSpec;
use crate::error::StoreError;
use crate::rt::io;
use crate::store::breaker::Breaker;
use crate::store::redis::commands::redact;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    RedisFuture, ServerErrorKind, Value,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

/// The pause between two failed lookups of the primary: calls in between fail at once with the
/// last lookup's error.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How often the watcher asks a sentinel where the primary is.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// The sentinels, and the primary they named: what the Sentinel store's calls go through.
pub(crate) struct Sentinels {
    /// The sentinels' connection settings (always database 0: sentinels have no other).
    sentinels: Vec<ConnectionInfo>,
    master: String,
    /// The data nodes' credentials and database.
    data: RedisConnectionInfo,
    timeout: Duration,
    /// For logs: the sentinels without their passwords, and the monitored name.
    description: String,
    current: RwLock<Option<Primary>>,
    /// Connections made so far (their ids).
    connections: AtomicU64,
    /// Serialises lookups, with what the last one left.
    lookup: tokio::sync::Mutex<Lookup>,
    /// The store's breaker: the watcher ends its pause when the sentinels name a new primary.
    breaker: Arc<Breaker>,
}

/// A connection to the node believed to be the primary.
#[derive(Clone)]
struct Primary {
    /// Which connection this is (a node restarted at the same address gets a new one).
    id: u64,
    addr: (String, u16),
    conn: MultiplexedConnection,
}

#[derive(Default)]
struct Lookup {
    /// When the last lookup failed, and why.
    failed: Option<(Instant, StoreError)>,
    /// The sentinel to ask first.
    first: usize,
}

impl Sentinels {
    /// The sentinels of `spec`, checked, with no primary known yet; the watcher started. Calls
    /// through them give up after `timeout`; `breaker` is the store's.
    pub(crate) fn open(
        spec: &SentinelSpec,
        timeout: Duration,
        breaker: Arc<Breaker>,
    ) -> Result<Arc<Sentinels>, StoreError> {
        let invalid = |what: String| StoreError::misconfigured(format!("Redis Sentinel: {what}"));
        if spec.urls.is_empty() {
            return Err(invalid("no sentinel URL given".to_owned()));
        }
        if spec.master.trim().is_empty() {
            return Err(invalid("no master name given".to_owned()));
        }
        let mut db = 0;
        let mut sentinels = Vec::with_capacity(spec.urls.len());
        for url in &spec.urls {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|e| invalid(format!("invalid sentinel URL {:?}: {e}", redact(url))))?;
            if matches!(info.addr(), ConnectionAddr::Unix(_)) {
                return Err(invalid(format!("a sentinel is reached over TCP, not {:?}", redact(url))));
            }
            // A database in a sentinel URL is the data nodes' (sentinels have none).
            db = db.max(info.redis_settings().db());
            let settings = info.redis_settings().clone().set_db(0);
            sentinels.push(info.set_redis_settings(settings));
        }
        let mut data = RedisConnectionInfo::default().set_db(db);
        if let Some(password) = &spec.password {
            data = data.set_password(password);
        }
        if let Some(username) = &spec.username {
            data = data.set_username(username);
        }
        let handle = io::handle()?;
        let opened = Arc::new(Sentinels {
            sentinels,
            master: spec.master.clone(),
            data,
            timeout,
            description: spec.describe(),
            current: RwLock::new(None),
            connections: AtomicU64::new(0),
            lookup: tokio::sync::Mutex::new(Lookup::default()),
            breaker,
        });
        handle.spawn(watch(Arc::downgrade(&opened)));
        Ok(opened)
    }

    /// The primary's connection: the current one, else a fresh lookup (one at a time, at most
    /// one per [`RETRY_PAUSE`] after a failure). Runs on the I/O runtime, where the connection
    /// must live.
    async fn primary(self: &Arc<Self>) -> Result<Primary, StoreError> {
        if let Some(p) = self.current() {
            return Ok(p);
        }
        let this = self.clone();
        io::run(async move {
            let mut lookup = this.lookup.lock().await;
            if let Some(p) = this.current() {
                return Ok(p);
            }
            if let Some((at, e)) = &lookup.failed {
                if at.elapsed() < RETRY_PAUSE {
                    return Err(e.clone());
                }
            }
            // Bounded here too: the caller may have given up, and the lock must not stay held.
            let tries = u32::try_from(this.sentinels.len()).unwrap_or(u32::MAX).saturating_add(2);
            let budget = this.timeout.saturating_mul(tries);
            match io::timeout(budget, this.connect(&mut lookup)).await {
                Ok(p) => {
                    lookup.failed = None;
                    *crate::rt::lock::write(&this.current) = Some(p.clone());
                    tracing::info!(store = %this.description, primary = %format!("{}:{}", p.addr.0, p.addr.1), "ratelimit: connected to the Sentinel primary");
                    Ok(p)
                }
                Err(e) => {
                    lookup.failed = Some((Instant::now(), e.clone()));
                    Err(e)
                }
            }
        })
        .await
    }

    fn current(&self) -> Option<Primary> {
        crate::rt::lock::read(&self.current).clone()
    }

    /// Drops the connection to `stale` (if it is still the current one): the next call looks up.
    fn forget(&self, stale: &Primary) {
        let mut current = crate::rt::lock::write(&self.current);
        if current.as_ref().is_some_and(|p| p.id == stale.id) {
            *current = None;
        }
    }

    /// For the sentinels, asked on the I/O runtime only.
    fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new().set_connection_timeout(Some(self.timeout)).set_response_timeout(Some(self.timeout))
    }

    /// For the primary: the per-call timeout is ours (`io::timeout`), as for one Redis: the
    /// client's own would use the timer of whichever runtime polls the call.
    fn data_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new().set_connection_timeout(Some(self.timeout)).set_response_timeout(None)
    }

    /// Asks the sentinels where the primary is, starting with the one that answered last.
    async fn ask_sentinels(&self, lookup: &mut Lookup) -> Result<(String, u16), StoreError> {
        let mut errors = Vec::new();
        for k in 0..self.sentinels.len() {
            let i = (lookup.first + k) % self.sentinels.len();
            match self.ask_sentinel(i).await {
                Ok(addr) => {
                    lookup.first = i;
                    return Ok(addr);
                }
                Err(e) => errors.push(e),
            }
        }
        // The last sentinel's error says what kind of failure it was; the others' are its context.
        let last = errors.pop().unwrap_or_else(|| StoreError::misconfigured("no sentinel"));
        let mut context = format!("no sentinel said where the primary {:?} is", self.master);
        for e in &errors {
            context.push_str(&format!("; {e}"));
        }
        Err(last.within(&context))
    }

    async fn ask_sentinel(&self, i: usize) -> Result<(String, u16), StoreError> {
        let info = &self.sentinels[i];
        let name = info.addr().to_string();
        let failed = |e: redis::RedisError| redis_error(e).within(&name);
        let client = Client::open(info.clone()).map_err(failed)?;
        let mut conn = client.get_multiplexed_async_connection_with_config(&self.config()).await.map_err(failed)?;
        master_addr(&mut conn, &self.master).await.map_err(|e| e.within(&name))
    }

    /// Looks the primary up and connects to it, checking that it is one.
    async fn connect(&self, lookup: &mut Lookup) -> Result<Primary, StoreError> {
        let (host, port) = self.ask_sentinels(lookup).await?;
        let addr = match self.sentinels[lookup.first].addr() {
            // The data nodes are reached as the sentinels are (TLS or not).
            ConnectionAddr::TcpTls { insecure, tls_params, .. } => {
                ConnectionAddr::TcpTls { host: host.clone(), port, insecure: *insecure, tls_params: tls_params.clone() }
            }
            _ => ConnectionAddr::Tcp(host.clone(), port),
        };
        let info = self.sentinels[lookup.first].clone().set_addr(addr).set_redis_settings(self.data.clone());
        let at = format!("primary {host}:{port} of {:?}", self.master);
        let failed = |e: redis::RedisError| redis_error(e).within(&at);
        let client = Client::open(info).map_err(failed)?;
        let mut conn =
            client.get_multiplexed_async_connection_with_config(&self.data_config()).await.map_err(failed)?;
        let role = redis::cmd("ROLE").query_async::<Vec<Value>>(&mut conn).await;
        let id = self.connections.fetch_add(1, Ordering::Relaxed);
        match role {
            Ok(role) if role.first().is_some_and(is_master) => Ok(Primary { id, addr: (host, port), conn }),
            Ok(_) => Err(StoreError::Connection {
                context: format!("{at} is not a primary yet (the sentinels are failing over)"),
                source: None,
            }),
            // Some managed services forbid ROLE: the sentinels' word is taken then.
            Err(e) if e.code() == Some("NOPERM") || e.to_string().contains("unknown command") => {
                Ok(Primary { id, addr: (host, port), conn })
            }
            Err(e) => Err(failed(e)),
        }
    }
}

/// The first element of `ROLE`'s answer on a primary.
fn is_master(role: &Value) -> bool {
    match role {
        Value::BulkString(r) => r == b"master",
        Value::SimpleString(r) => r == "master",
        _ => false,
    }
}

/// `SENTINEL get-master-addr-by-name`.
async fn master_addr(conn: &mut MultiplexedConnection, master: &str) -> Result<(String, u16), StoreError> {
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query_async(conn)
        .await
        .map_err(redis_error)?;
    addr.ok_or_else(|| StoreError::Connection { context: format!("no primary named {master:?}"), source: None })
}

/// Asks a sentinel once a period where the primary is, and forgets the connection when the
/// answer is another node. Ends when the store is dropped.
async fn watch(store: Weak<Sentinels>) {
    let mut sentinel: Option<MultiplexedConnection> = None;
    let mut next = 0;
    loop {
        tokio::time::sleep(WATCH_PERIOD).await;
        let Some(link) = store.upgrade() else { return };
        let Some(current) = link.current() else { continue };
        if sentinel.is_none() {
            next = (next + 1) % link.sentinels.len();
            let Ok(client) = Client::open(link.sentinels[next].clone()) else { continue };
            sentinel = client.get_multiplexed_async_connection_with_config(&link.config()).await.ok();
        }
        let Some(conn) = sentinel.as_mut() else { continue };
        match master_addr(conn, &link.master).await {
            Ok(addr) if addr != current.addr => {
                tracing::warn!(store = %link.description, primary = %format!("{}:{}", addr.0, addr.1), "ratelimit: Sentinel names another primary; switching");
                link.forget(&current);
                // The pause was for the old primary: the next call goes to the new one.
                link.breaker.reset();
            }
            Ok(_) => {}
            Err(_) => sentinel = None,
        }
    }
}

/// A connection to the primary that notes whether an answer showed the node gone (the
/// connection broken or refused) or demoted (`READONLY`): the call is then retried once on the
/// primary looked up again.
pub(crate) struct Watched {
    primary: Primary,
    lost: bool,
}

impl Watched {
    fn note(&mut self, answer: &redis::RedisResult<Value>) {
        self.lost |= match answer {
            Err(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_unrecoverable_error()
                    || is_readonly(&e.to_string())
            }
            Ok(Value::ServerError(e)) => {
                e.kind() == Some(ServerErrorKind::ReadOnly) || is_readonly(e.details().unwrap_or_default())
            }
            Ok(_) => false,
        };
    }
}

/// A script's write refused by a replica reads `… READONLY You can't write against a read only
/// replica …` inside the script error.
fn is_readonly(message: &str) -> bool {
    message.contains("READONLY")
}

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let answer = self.primary.conn.req_packed_command(cmd).await;
            self.note(&answer);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let answers = self.primary.conn.req_packed_commands(pipeline, offset, count).await;
            match &answers {
                Err(e) => self.note(&Err(e.clone())),
                Ok(values) => values.iter().for_each(|v| {
                    if let Value::ServerError(_) = v {
                        self.note(&Ok(v.clone()));
                    }
                }),
            }
            answers
        })
    }

    fn get_db(&self) -> i64 {
        self.primary.conn.get_db()
    }
}

/// The primary, looked up when none is known. A command whose answer showed it gone or demoted
/// is sent once more, to the primary looked up again.
impl Link for Arc<Sentinels> {
    async fn send<R: Request>(&self, request: &R) -> Result<R::Reply, StoreError> {
        let mut retried = false;
        loop {
            let mut conn = Watched { primary: self.primary().await?, lost: false };
            let reply = request.send_on(&mut conn).await;
            if conn.lost {
                self.forget(&conn.primary);
            }
            if !conn.lost || retried {
                return reply;
            }
            retried = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readonly_script_errors_are_recognised() {
        assert!(is_readonly("READONLY You can't write against a read only replica. script: 1f0e"));
        assert!(!is_readonly("ERR wrong number of arguments"));
    }
}
