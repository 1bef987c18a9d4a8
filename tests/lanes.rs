//! Calls awaited in a task of a Tokio runtime go on a connection that this runtime drives, so a
//! reply wakes the caller without a hop through the library's I/O thread. Each such runtime
//! gets its own connection, made in the background and closed when the runtime is dropped;
//! blocking calls, and calls awaited outside a task, keep the shared connection. A call that
//! goes alone (nothing to coalesce with) goes on a connection of its own, lent by its runtime's
//! lane and closed with it: one more connection for calls one after another. Every decision
//! stays one count on the same keys, whichever connection carried it. A real `redis-server`,
//! its own `CLIENT LIST` as the witness.

mod support;

use ratelimit::store::{RedisStore, StoreHandle};
use ratelimit::{Cause, FailurePolicy, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::{poll_until, RedisServer};

/// Generous: a 2-core machine busy with other builds connects within it.
const WITHIN: Duration = Duration::from_secs(20);

/// The connections the server has open (the test's own among them): each one's id and the
/// last command it ran.
fn clients(admin: &mut redis::Connection) -> Vec<(String, String)> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    let field = |line: &str, name: &str| {
        line.split_whitespace().find_map(|f| f.strip_prefix(name).map(str::to_owned)).unwrap_or_default()
    };
    list.lines().filter(|l| !l.trim().is_empty()).map(|l| (field(l, "id="), field(l, "cmd="))).collect()
}

/// A limiter of `limit` calls an hour on one global key, refusing when the store fails (so a
/// call that could not reach Redis in time is an error, not a silent admission).
fn limiter(server: &RedisServer, name: &str, limit: u64) -> Arc<Limiter> {
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).unwrap());
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

/// One call from a task spawned on the current runtime: admitted or refused (a store failure
/// fails the test).
async fn call_from_task(limiter: &Arc<Limiter>) -> bool {
    let limiter = limiter.clone();
    let answer = tokio::spawn(async move { limiter.check(&[Subject::global()]).await.map(drop) }).await.unwrap();
    match answer {
        Ok(()) => true,
        Err(refused) => {
            assert_eq!(refused.cause(), Cause::Exceeded, "a store failure, not a refusal: {refused:?}");
            false
        }
    }
}

/// Calls from tasks on this runtime until the server has exactly two connections more than
/// `base` and a decision went over the newest: this runtime's (made in the background: its
/// first command loads the scripts), and the one its lone calls borrow; returns the calls
/// admitted meanwhile.
async fn until_own_connection(limiter: &Arc<Limiter>, admin: &mut redis::Connection, base: usize) -> u64 {
    let deadline = std::time::Instant::now() + WITHIN;
    let mut admitted = 0;
    loop {
        admitted += u64::from(call_from_task(limiter).await);
        let now = clients(admin);
        if now.len() == base + 2 && now.last().is_some_and(|(_, cmd)| cmd == "evalsha") {
            return admitted;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no decision on a connection of the calling runtime after {WITHIN:?}"
        );
        tokio::task::yield_now().await;
    }
}

/// Two runtimes one after the other (multi-thread, then current-thread, as `#[tokio::test]`
/// makes): each gets connections of its own while it runs, closed when it is dropped, and
/// the calls of all of them and of a blocking caller are counted once each on one key.
#[test]
fn each_calling_runtime_gets_a_connection_that_ends_with_it() {
    const LIMIT: u64 = 60;
    let server = RedisServer::start();
    let mut admin = server.client();
    let limiter = limiter(&server, "lanes::runtimes", LIMIT);
    // A blocking call: the shared connection (on the library's I/O runtime), and no other.
    limiter.check(&[Subject::global()]).blocking().unwrap();
    let base = clients(&mut admin).len();
    let mut admitted = 1;
    let runtimes = [
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap(),
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
    ];
    for rt in runtimes {
        admitted += rt.block_on(async {
            // Awaited in `block_on`, outside any task: the shared connection; none is made.
            for _ in 0..5 {
                limiter.check(&[Subject::global()]).await.unwrap();
            }
            assert_eq!(clients(&mut admin).len(), base, "a call outside a task made a connection");
            5 + until_own_connection(&limiter, &mut admin, base).await
        });
        drop(rt);
        poll_until(WITHIN, Duration::from_millis(20), "the dropped runtime's connection stays open", || {
            (clients(&mut admin).len() == base).then_some(())
        });
        // The store still decides, on its shared connection, with the runtime gone.
        limiter.check(&[Subject::global()]).blocking().unwrap();
        admitted += 1;
    }
    // Every call counted once: exactly the rest of the limit is left.
    let rest = (admitted..LIMIT).filter(|_| limiter.check(&[Subject::global()]).blocking().is_ok()).count() as u64;
    assert_eq!(admitted + rest, LIMIT);
    assert!(limiter.check(&[Subject::global()]).blocking().is_err(), "over the limit");
}

/// A blocking call made from inside a task of a current-thread runtime, once that runtime has
/// its own connection: it must go on the shared one, since the runtime's connection is driven
/// only while the blocked task's thread runs the runtime.
#[test]
fn a_blocking_call_in_a_task_keeps_the_shared_connection() {
    let server = RedisServer::start();
    let mut admin = server.client();
    let limiter = limiter(&server, "lanes::blocking", 1_000);
    limiter.check(&[Subject::global()]).blocking().unwrap();
    let base = clients(&mut admin).len();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        until_own_connection(&limiter, &mut admin, base).await;
        let blocking = limiter.clone();
        let answer =
            tokio::spawn(async move { blocking.check(&[Subject::global()]).blocking().map(drop) }).await.unwrap();
        assert!(answer.is_ok(), "a blocking call in a task failed: {answer:?}");
    });
}

/// Dropping the store while its runtime lives closes that runtime's connection too.
#[test]
fn a_dropped_store_closes_its_runtime_connections() {
    let server = RedisServer::start();
    let mut admin = server.client();
    let base = clients(&mut admin).len();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let limiter = limiter(&server, "lanes::dropped", 1_000);
        limiter.check(&[Subject::global()]).await.unwrap();
        // The shared connection, then the runtime's.
        let shared = base + 1;
        until_own_connection(&limiter, &mut admin, shared).await;
        drop(limiter);
        let deadline = std::time::Instant::now() + WITHIN;
        while clients(&mut admin).len() != base {
            assert!(std::time::Instant::now() < deadline, "the dropped store's connections stay open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}
