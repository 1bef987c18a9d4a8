//! Redis Sentinel: one primary, found by asking the sentinels, followed through failovers.
//!
//! The decision is the Redis store's (`EVALSHA` of the same script, see `redis.rs`); only the
//! connection differs. The primary's address comes from `SENTINEL get-master-addr-by-name`, asked
//! of each sentinel in turn (the one that answered first is asked first next time), and is
//! confirmed with `ROLE` before any decision goes there. The connection is dropped, and the
//! primary looked up again, when:
//! - a call finds it broken (connection refused, reset, closed) or the node answers `READONLY`
//!   (the old primary came back as a replica): the call retries once on the new primary, within
//!   its timeout;
//! - a watcher on the I/O runtime, asking a sentinel once a second, sees another address (a
//!   failover of a primary that is still reachable, or one that hangs instead of closing).
//!
//! While no primary can be reached (between the primary's death and the promotion) every call
//! fails within the store timeout and the failure policy applies; lookups are then made at most
//! every [`RETRY_PAUSE`], however many calls arrive. After a few such failures the circuit
//! breaker (`breaker.rs`) stops calling for a pause of at most [`MAX_PAUSE`], and the watcher
//! ends that pause as soon as a sentinel names another primary.

use super::batch::{self, Batcher, Route};
use super::commands::{del_command, general_command, peek_command, redact, release_command, ScriptOp};
use super::error::redis_error;
use super::script::{eval, eval_raw, load_scripts, query_script};

use crate::error::StoreError;
use crate::metrics;
use crate::model::policy::RuleStatus;
use crate::rt::clock::{Clock, SystemClock};
use crate::rt::io;
use crate::store::breaker::Breaker;
use crate::store::peek_reset::{read_statuses, shapes, Targets};
use crate::store::{unique_member, Answer, Call, Internal, Operations, Pending, Release, Store};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    RedisFuture, ServerErrorKind, Value,
};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

/// The pause between two failed lookups of the primary: calls in between fail at once with the
/// last lookup's error.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How often the watcher asks a sentinel where the primary is.
const WATCH_PERIOD: Duration = Duration::from_secs(1);
/// The longest pause of the circuit breaker: a failover takes Sentinel a second or two (its
/// `down-after-milliseconds` plus the promotion), and must not be waited out for 30 s.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Where a Sentinel-managed primary is found: the sentinels, the name they monitor it under, and
/// the credentials of the data nodes (the sentinels' own go in their URLs).
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelSpec {
    pub(crate) urls: Vec<String>,
    pub(crate) master: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl SentinelSpec {
    /// Sentinels at `urls` (`redis://[:password@]host:port`, the password being the sentinels'
    /// own) monitoring the primary named `master`.
    pub fn new(urls: impl IntoIterator<Item = impl Into<String>>, master: impl Into<String>) -> SentinelSpec {
        SentinelSpec {
            urls: urls.into_iter().map(Into::into).collect(),
            master: master.into(),
            username: None,
            password: None,
        }
    }

    /// The credentials of the primary and replicas (`AUTH [username] password`).
    pub fn primary_auth(mut self, username: Option<String>, password: impl Into<String>) -> SentinelSpec {
        self.username = username;
        self.password = Some(password.into());
        self
    }

    fn sentinel_list(&self) -> String {
        self.urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
    }
}

/// The environment's store variables, checked: `REDIS_SENTINEL_URLS` (comma-separated) with
/// `REDIS_SENTINEL_MASTER`, and `REDIS_PASSWORD` / `REDIS_USERNAME` for the primary. `None`
/// when Sentinel is not asked for; an error when it is half asked for, or when more than one of
/// `REDIS_URL`, `REDIS_CLUSTER_URLS` and Sentinel is set (no silent pick).
pub(crate) fn spec_from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<SentinelSpec>, String> {
    let named: Vec<&str> = ["REDIS_URL", "REDIS_CLUSTER_URLS", "REDIS_SENTINEL_URLS"]
        .into_iter()
        .filter(|name| var(name).is_some())
        .collect();
    if named.len() > 1 {
        return Err(format!(
            "{} are set together: name one store (REDIS_URL for one Redis, REDIS_CLUSTER_URLS for a cluster, \
             REDIS_SENTINEL_URLS with REDIS_SENTINEL_MASTER for Sentinel)",
            named.join(" and ")
        ));
    }
    let (urls, master) = match (var("REDIS_SENTINEL_URLS"), var("REDIS_SENTINEL_MASTER")) {
        (None, None) => return Ok(None),
        (Some(urls), Some(master)) => (urls, master),
        (Some(_), None) => {
            return Err("REDIS_SENTINEL_URLS is set without REDIS_SENTINEL_MASTER (the name the sentinels \
                        monitor the primary under, e.g. mymaster)"
                .to_owned())
        }
        (None, Some(_)) => {
            return Err("REDIS_SENTINEL_MASTER is set without REDIS_SENTINEL_URLS (the sentinels, e.g. \
                        redis://10.0.0.1:26379,redis://10.0.0.2:26379)"
                .to_owned())
        }
    };
    let urls = urls.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    let mut spec = SentinelSpec::new(urls, master.trim());
    if let Some(password) = var("REDIS_PASSWORD") {
        spec = spec.primary_auth(var("REDIS_USERNAME"), password);
    }
    Ok(Some(spec))
}

/// Never shows a password.
impl fmt::Debug for SentinelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSpec")
            .field("urls", &self.sentinel_list())
            .field("master", &self.master)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A store on the primary that Redis Sentinel names, followed through failovers without a
/// restart.
pub struct SentinelStore {
    shared: Arc<Shared>,
    /// Concurrent sliding-window or O(1) decisions, coalesced into one script run on the
    /// primary (store/batch.rs). Its sender holds `shared`; `shared` does not hold it.
    batcher: Arc<Batcher>,
}

struct Shared {
    /// The sentinels' connection settings (always database 0: sentinels have no other).
    sentinels: Vec<ConnectionInfo>,
    master: String,
    /// The data nodes' credentials and database.
    data: RedisConnectionInfo,
    timeout: Duration,
    /// For `describe`: the sentinels without their passwords, and the monitored name.
    description: String,
    current: RwLock<Option<Primary>>,
    /// Connections made so far (their ids).
    connections: AtomicU64,
    /// Serialises lookups, with what the last one left.
    lookup: tokio::sync::Mutex<Lookup>,
    /// Its pause is capped at [`MAX_PAUSE`], about the time Sentinel takes to promote a replica,
    /// and ends when the watcher sees a new primary.
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

impl SentinelStore {
    /// Asks the sentinels of `spec` for the primary, in the background: they need not be up yet.
    /// Every call gives up after `timeout`, and the failure policy applies.
    pub fn open(spec: &SentinelSpec, timeout: Duration) -> Result<SentinelStore, StoreError> {
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
        let shared = Arc::new(Shared {
            sentinels,
            master: spec.master.clone(),
            data,
            timeout,
            description: format!("redis sentinel ({} master {})", spec.sentinel_list(), spec.master),
            current: RwLock::new(None),
            connections: AtomicU64::new(0),
            lookup: tokio::sync::Mutex::new(Lookup::default()),
            breaker: Breaker::new(
                format!("redis sentinel ({} master {})", spec.sentinel_list(), spec.master),
                &metrics::SENTINEL,
                MAX_PAUSE,
            ),
        });
        // Find the primary now and load the scripts there, so the first call does not pay for
        // it, and say how it went (the startup probe, as for one Redis); then watch it.
        let handle = io::handle()?;
        let first = shared.clone();
        super::probe::spawn(shared.description.clone(), super::probe::probe_timeout(timeout), async move {
            let mut conn = first.primary().await?.conn.clone();
            load_scripts(&mut conn).await
        });
        handle.spawn(watch(Arc::downgrade(&shared)));
        let sender: batch::Sender = {
            let shared = shared.clone();
            Arc::new(move |command| {
                Box::pin(run(shared.clone(), move |mut conn| {
                    let command = command.clone();
                    async move {
                        let result = query_script::<Value>(&mut conn, &command).await;
                        (result, conn.lost())
                    }
                }))
            })
        };
        let batcher = Batcher::start(sender, timeout)?;
        Ok(SentinelStore { shared, batcher })
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }
}

impl Drop for SentinelStore {
    fn drop(&mut self) {
        // The batching task sends what is queued, then ends (and drops its hold on `shared`).
        self.batcher.close();
    }
}

/// Runs `f` on the primary's connection within the store timeout: once, and once more on the
/// primary looked up again when the first try found the node gone or demoted. For every
/// command a store sends (decisions, and whatever else reads or writes counts).
fn run<T, F, Fut>(shared: Arc<Shared>, f: F) -> impl Future<Output = Result<T, StoreError>> + Send + 'static
where
    T: Send + 'static,
    F: Fn(Watched) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = (Result<T, StoreError>, bool)> + Send,
{
    let timeout = shared.timeout;
    io::timeout(timeout, async move {
        let mut retried = false;
        loop {
            let primary = shared.primary().await?;
            let (result, lost) = f(Watched { conn: primary.conn.clone(), lost: false }).await;
            if !lost {
                return result;
            }
            shared.forget(&primary);
            if retried {
                return result;
            }
            retried = true;
        }
    })
}

impl Shared {
    /// The primary's connection: the current one, else a fresh lookup (one at a time, at most
    /// one per [`RETRY_PAUSE`] after a failure). Runs on the I/O runtime, where the connection
    /// must live.
    async fn primary(self: &Arc<Self>) -> Result<Primary, StoreError> {
        if let Some(p) = self.current() {
            return Ok(p);
        }
        let shared = self.clone();
        io::run(async move {
            let mut lookup = shared.lookup.lock().await;
            if let Some(p) = shared.current() {
                return Ok(p);
            }
            if let Some((at, e)) = &lookup.failed {
                if at.elapsed() < RETRY_PAUSE {
                    return Err(e.clone());
                }
            }
            // Bounded here too: the caller may have given up, and the lock must not stay held.
            let tries = u32::try_from(shared.sentinels.len()).unwrap_or(u32::MAX).saturating_add(2);
            let budget = shared.timeout.saturating_mul(tries);
            match io::timeout(budget, shared.connect(&mut lookup)).await {
                Ok(p) => {
                    lookup.failed = None;
                    *crate::rt::lock::write(&shared.current) = Some(p.clone());
                    tracing::info!(store = %shared.description, primary = %format!("{}:{}", p.addr.0, p.addr.1), "ratelimit: connected to the Sentinel primary");
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
async fn watch(store: Weak<Shared>) {
    let mut sentinel: Option<MultiplexedConnection> = None;
    let mut next = 0;
    loop {
        tokio::time::sleep(WATCH_PERIOD).await;
        let Some(shared) = store.upgrade() else { return };
        let Some(current) = shared.current() else { continue };
        if sentinel.is_none() {
            next = (next + 1) % shared.sentinels.len();
            let Ok(client) = Client::open(shared.sentinels[next].clone()) else { continue };
            sentinel = client.get_multiplexed_async_connection_with_config(&shared.config()).await.ok();
        }
        let Some(conn) = sentinel.as_mut() else { continue };
        match master_addr(conn, &shared.master).await {
            Ok(addr) if addr != current.addr => {
                tracing::warn!(store = %shared.description, primary = %format!("{}:{}", addr.0, addr.1), "ratelimit: Sentinel names another primary; switching");
                shared.forget(&current);
                // The pause was for the old primary: the next call goes to the new one.
                shared.breaker.reset();
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
    conn: MultiplexedConnection,
    lost: bool,
}

impl Watched {
    /// Whether the node turned out gone or demoted.
    pub(crate) fn lost(&self) -> bool {
        self.lost
    }

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
            let answer = self.conn.req_packed_command(cmd).await;
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
            let answers = self.conn.req_packed_commands(pipeline, offset, count).await;
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
        self.conn.get_db()
    }
}

impl Operations for SentinelStore {
    fn decide(&self, call: &Call<'_>) -> Pending {
        self.shared.breaker.call(|| {
            let member = unique_member();
            // Coalesced as on one Redis (see RedisStore::decide).
            let route = self
                .batcher
                .route(call, &member, || general_command(call, 0..call.limits.len(), &member, ScriptOp::Decide));
            let shared = self.shared.clone();
            metrics::SENTINEL.timed(async move {
                match route {
                    Route::Queued(batcher, call) => io::timeout(shared.timeout, batcher.decide(call, member)).await,
                    // The slot, if any, is given back when this future ends.
                    Route::Direct(cmd, _slot) => {
                        let cmd = Arc::new(cmd);
                        run(shared, move |mut conn| {
                            let cmd = cmd.clone();
                            async move {
                                let result = eval(&mut conn, &cmd, member).await;
                                (result, conn.lost())
                            }
                        })
                        .await
                    }
                }
            })
        })
    }

    fn release(&self, release: &Release<'_>) -> Answer<()> {
        self.shared.breaker.call(|| {
            let cmd = Arc::new(release_command(release, release.indices.iter().copied()));
            run(self.shared.clone(), move |mut conn| {
                let cmd = cmd.clone();
                async move {
                    let result = eval(&mut conn, &cmd, [0; 16]).await.map(drop);
                    (result, conn.lost())
                }
            })
        })
    }

    fn peek(&self, targets: &Targets<'_>) -> Answer<Vec<RuleStatus>> {
        let indices: Vec<usize> = targets.present().map(|(i, _, _)| i).collect();
        if indices.is_empty() {
            return Answer::Ready(Ok(Vec::new()));
        }
        self.shared.breaker.call(|| {
            let cmd = Arc::new(peek_command(targets, &indices));
            let shapes = shapes(targets, &indices);
            let flat = run(self.shared.clone(), move |mut conn| {
                let cmd = cmd.clone();
                async move {
                    let result = eval_raw(&mut conn, &cmd).await;
                    (result, conn.lost())
                }
            });
            async move {
                let flat = flat.await?;
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
        self.shared.breaker.call(|| {
            let cmd = Arc::new(del_command(targets, &indices));
            run(self.shared.clone(), move |mut conn| {
                let cmd = cmd.clone();
                async move {
                    let result = cmd.query_async::<i64>(&mut conn).await.map(drop).map_err(redis_error);
                    (result, conn.lost())
                }
            })
        })
    }

    fn label(&self, _: Internal) -> &'static str {
        "sentinel"
    }

    /// Decisions travel to the primary: the refusal cache is on by default, as for one Redis.
    fn is_remote(&self, _: Internal) -> bool {
        true
    }

    fn now_us(&self, _: Internal) -> u64 {
        SystemClock.now_us()
    }
}

impl Store for SentinelStore {
    fn describe(&self) -> String {
        self.shared.description.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_debug_hides_passwords() {
        let spec = SentinelSpec::new(["redis://:sentinel-secret@10.0.0.1:26379"], "mymaster")
            .primary_auth(None, "data-secret");
        let shown = format!("{spec:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("10.0.0.1:26379") && shown.contains("mymaster"), "{shown}");
    }

    #[test]
    fn bad_specs_are_refused() {
        let t = Duration::from_millis(100);
        assert!(SentinelStore::open(&SentinelSpec::new(Vec::<String>::new(), "m"), t).is_err());
        assert!(SentinelStore::open(&SentinelSpec::new(["redis://127.0.0.1:26379"], " "), t).is_err());
        let e = SentinelStore::open(&SentinelSpec::new(["redis://:pw@127.0.0.1:notaport"], "m"), t).err();
        let shown = format!("{e:?}");
        assert!(shown.contains("invalid sentinel URL") && !shown.contains("pw@"), "{shown}");
    }

    #[test]
    fn environment_conflicts_are_errors() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(spec_from_env(&env(&[("REDIS_URL", "redis://a")])), Ok(None));
        let both = spec_from_env(&env(&[("REDIS_URL", "redis://a"), ("REDIS_SENTINEL_URLS", "redis://b")]));
        assert!(both.as_ref().is_err_and(|e| e.contains("REDIS_URL and REDIS_SENTINEL_URLS")), "{both:?}");
        let both = spec_from_env(&env(&[("REDIS_URL", "redis://a"), ("REDIS_CLUSTER_URLS", "redis://b")]));
        assert!(both.is_err());
        let half = spec_from_env(&env(&[("REDIS_SENTINEL_URLS", "redis://b")]));
        assert!(half.as_ref().is_err_and(|e| e.contains("without REDIS_SENTINEL_MASTER")), "{half:?}");
        let half = spec_from_env(&env(&[("REDIS_SENTINEL_MASTER", "m")]));
        assert!(half.as_ref().is_err_and(|e| e.contains("without REDIS_SENTINEL_URLS")), "{half:?}");
        let spec = spec_from_env(&env(&[
            ("REDIS_SENTINEL_URLS", " redis://a:26379, redis://b:26379 ,"),
            ("REDIS_SENTINEL_MASTER", "mymaster"),
            ("REDIS_PASSWORD", "pw"),
        ]));
        let expected = SentinelSpec::new(["redis://a:26379", "redis://b:26379"], "mymaster").primary_auth(None, "pw");
        assert_eq!(spec, Ok(Some(expected)));
    }

    #[test]
    fn readonly_script_errors_are_recognised() {
        assert!(is_readonly("READONLY You can't write against a read only replica. script: 1f0e"));
        assert!(!is_readonly("ERR wrong number of arguments"));
    }
}
