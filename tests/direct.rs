//! A lone call from a task (nothing else under way) goes on a connection of its own, lent by
//! its runtime's lane: it authenticates and selects the URL's database like the others, loads
//! the scripts again on `NOSCRIPT`, and a call that gave up midway drops its connection, so the
//! reply that still comes is never read as the next call's. A real `redis-server`, its `CLIENT
//! LIST` as the witness that the connection exists.

mod support;

use ratelimit::store::{RedisStore, StoreHandle};
use ratelimit::{Cause, FailurePolicy, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

/// Generous: a 2-core machine busy with other builds connects within it.
const WITHIN: Duration = Duration::from_secs(20);
const PASSWORD: &str = "direct-secret";

fn limiter(url: &str, name: &str, limit: u64, timeout: Duration) -> Arc<Limiter> {
    let store: StoreHandle = Arc::new(RedisStore::open(url, timeout).unwrap());
    Arc::new(
        Limiter::builder(name)
            .limit(Limit::new(LimitType::Global, [Rule::from_millis(3_600_000, limit).unwrap()]))
            .store(store)
            .on_error(FailurePolicy::Deny)
            .refusal_cache(false)
            .build()
            .unwrap(),
    )
}

/// A call from a task spawned on this runtime: its remaining quota, or the refusal.
async fn call(limiter: &Arc<Limiter>) -> Result<u64, ratelimit::RateLimited> {
    let limiter = limiter.clone();
    tokio::spawn(async move { limiter.check(&[Subject::global()]).await.map(|p| p.quota().unwrap().remaining) })
        .await
        .unwrap()
}

/// The server's connections: each one's database and last command.
fn clients(admin: &mut redis::Connection) -> Vec<(String, String)> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    let field = |line: &str, name: &str| {
        line.split_whitespace().find_map(|f| f.strip_prefix(name).map(str::to_owned)).unwrap_or_default()
    };
    list.lines().filter(|l| !l.trim().is_empty()).map(|l| (field(l, "db="), field(l, "cmd="))).collect()
}

/// Calls one after another from tasks until the server has three connections more than `base`
/// (counted before the store was opened: its shared connection, this runtime's lane, and the
/// newest, the one lone calls borrow) and a decision went over the newest; returns the calls
/// admitted meanwhile.
async fn until_direct(limiter: &Arc<Limiter>, admin: &mut redis::Connection, base: usize) -> u64 {
    let deadline = std::time::Instant::now() + WITHIN;
    let mut admitted = 0;
    loop {
        admitted += u64::from(call(limiter).await.is_ok());
        let now = clients(admin);
        if now.len() == base + 3 && now.last().is_some_and(|(_, cmd)| cmd == "evalsha") {
            return admitted;
        }
        assert!(std::time::Instant::now() < deadline, "no lone call on a connection of its own after {WITHIN:?}");
    }
}

fn authenticated(server: &RedisServer) -> redis::Connection {
    let mut admin = server.client();
    let _: () = redis::cmd("AUTH").arg(PASSWORD).query(&mut admin).unwrap();
    admin
}

/// Over a password and database 3: the lone calls' connection authenticates and selects the
/// database, every admitted call is one unit of the one key there, and the remaining quota
/// each call reads is the count left after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_calls_authenticate_and_select_the_database() {
    const LIMIT: u64 = 1_000;
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/3", server.port());
    let mut admin = authenticated(&server);
    let base = clients(&mut admin).len();
    let limiter = limiter(&url, "direct::auth", LIMIT, Duration::from_secs(2));
    let mut admitted = until_direct(&limiter, &mut admin, base).await;
    assert_eq!(clients(&mut admin).last().map(|(db, _)| db.as_str()), Some("3"), "the lone calls' database");
    for _ in 0..20 {
        let remaining = call(&limiter).await.unwrap();
        admitted += 1;
        assert_eq!(remaining, LIMIT - admitted, "call {admitted} read another call's reply");
    }
    let _: () = redis::cmd("SELECT").arg(3).query(&mut admin).unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*direct::auth*").query(&mut admin).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let units: u64 = redis::cmd("ZCARD").arg(&keys[0]).query(&mut admin).unwrap();
    assert_eq!(units, admitted);
}

/// The server forgot the scripts (a restart, a `SCRIPT FLUSH`): a lone call loads them again
/// on its own connection and is decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_call_loads_the_scripts_again() {
    let server = RedisServer::start();
    let mut admin = server.client();
    let base = clients(&mut admin).len();
    let limiter = limiter(&server.url(), "direct::noscript", 1_000, Duration::from_secs(2));
    let admitted = until_direct(&limiter, &mut admin, base).await;
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    assert_eq!(call(&limiter).await.unwrap(), 1_000 - admitted - 1);
    assert_eq!(clients(&mut admin).len(), base + 3, "the connection was kept");
}

/// A lone call that gives up while the server is busy drops its connection: the reply that
/// comes after is read by no one, and each next call reads its own (its remaining quota is the
/// count left after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_gave_up_leaves_no_reply_to_the_next() {
    const LIMIT: u64 = 1_000;
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let mut admin = server.client();
    let base = clients(&mut admin).len();
    let limiter = limiter(&server.url(), "direct::gave_up", LIMIT, Duration::from_millis(300));
    until_direct(&limiter, &mut admin, base).await;
    // The server busy for a second: the next call gives up after 300 ms.
    let busy = {
        let mut con = server.client();
        std::thread::spawn(move || redis::cmd("DEBUG").arg("SLEEP").arg(1).query::<()>(&mut con))
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = call(&limiter).await.unwrap_err();
    assert_eq!(refused.cause(), Cause::StoreUnavailable, "{refused:?}");
    busy.join().unwrap().unwrap();
    // The call that gave up was decided all the same once the server woke: count from the key.
    let key: Vec<String> = redis::cmd("KEYS").arg("*direct::gave_up*").query(&mut admin).unwrap();
    for _ in 0..20 {
        let remaining = call(&limiter).await.unwrap();
        let units: u64 = redis::cmd("ZCARD").arg(&key[0]).query(&mut admin).unwrap();
        assert_eq!(remaining, LIMIT - units, "a call read another call's reply");
    }
}
