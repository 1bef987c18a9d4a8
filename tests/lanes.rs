//! Calls awaited in a task of a Tokio runtime go on a connection that this runtime drives, so a
//! reply wakes the caller without a hop through the library's I/O thread. Each such runtime
//! gets its own connection, made in the background and closed when the runtime is dropped;
//! blocking calls, and calls awaited outside a task, keep the shared connection. Calls that go
//! alone share one more connection of their runtime's lane, written and read by their own
//! tasks and closed with it. It authenticates and selects the URL's database like the others,
//! loads the scripts again on `NOSCRIPT`, and each call reads its own reply, whoever reads the
//! socket and whichever calls gave up midway. Every decision stays one count on the same keys,
//! whichever connection carried it. A real `redis-server`, its own `CLIENT LIST` as the witness.

mod support;

use ratelimit::store::{RedisStore, StoreHandle};
use ratelimit::{Algorithm, Cause, FailurePolicy, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::{poll_until, RedisServer};

/// Generous: a 2-core machine busy with other builds connects within it.
const WITHIN: Duration = Duration::from_secs(20);

/// The connections the server has open (the test's own among them), oldest first: each one's
/// database and the last command it ran.
fn clients(admin: &mut redis::Connection) -> Vec<(String, String)> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    let field = |line: &str, name: &str| {
        line.split_whitespace().find_map(|f| f.strip_prefix(name).map(str::to_owned)).unwrap_or_default()
    };
    list.lines().filter(|l| !l.trim().is_empty()).map(|l| (field(l, "db="), field(l, "cmd="))).collect()
}

/// A limiter of `limit` calls an hour on one global key of the server at `url`, refusing when
/// the store fails (so a call that could not reach Redis within `timeout` is an error, not a
/// silent admission).
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
    let limiter = limiter(&server.url(), "lanes::runtimes", LIMIT, Duration::from_secs(2));
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
    let limiter = limiter(&server.url(), "lanes::blocking", 1_000, Duration::from_secs(2));
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
        let limiter = limiter(&server.url(), "lanes::dropped", 1_000, Duration::from_secs(2));
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

const PASSWORD: &str = "direct-secret";

/// A call from a task spawned on this runtime: its remaining quota, or the refusal.
async fn remaining_after(limiter: &Arc<Limiter>) -> Result<u64, RateLimited> {
    let limiter = limiter.clone();
    tokio::spawn(async move { limiter.check(&[Subject::global()]).await.map(|p| p.quota().unwrap().remaining) })
        .await
        .unwrap()
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
    // base + 1: the store's shared connection.
    let mut admitted = until_own_connection(&limiter, &mut admin, base + 1).await;
    assert_eq!(clients(&mut admin).last().map(|(db, _)| db.as_str()), Some("3"), "the lone calls' database");
    for _ in 0..20 {
        let remaining = remaining_after(&limiter).await.unwrap();
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
    let admitted = until_own_connection(&limiter, &mut admin, base + 1).await;
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    assert_eq!(remaining_after(&limiter).await.unwrap(), 1_000 - admitted - 1);
    assert_eq!(clients(&mut admin).len(), base + 3, "the connection was kept");
}

/// A lone call that gives up while the server is busy leaves its place: the reply that
/// comes after is read and dropped, and each next call reads its own (its remaining quota is the
/// count left after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_gave_up_leaves_no_reply_to_the_next() {
    const LIMIT: u64 = 1_000;
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let mut admin = server.client();
    let base = clients(&mut admin).len();
    let limiter = limiter(&server.url(), "direct::gave_up", LIMIT, Duration::from_millis(300));
    until_own_connection(&limiter, &mut admin, base + 1).await;
    // The server busy for a second: the next call gives up after 300 ms.
    let busy = {
        let mut con = server.client();
        std::thread::spawn(move || redis::cmd("DEBUG").arg("SLEEP").arg(1).query::<()>(&mut con))
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = remaining_after(&limiter).await.unwrap_err();
    assert_eq!(refused.cause(), Cause::StoreUnavailable, "{refused:?}");
    busy.join().unwrap().unwrap();
    // The call that gave up was decided all the same once the server woke: count from the key.
    let key: Vec<String> = redis::cmd("KEYS").arg("*direct::gave_up*").query(&mut admin).unwrap();
    for _ in 0..20 {
        let remaining = remaining_after(&limiter).await.unwrap();
        let units: u64 = redis::cmd("ZCARD").arg(&key[0]).query(&mut admin).unwrap();
        assert_eq!(remaining, LIMIT - units, "a call read another call's reply");
    }
}

/// Lone calls under way together share the lane's connection for lone calls: each writes its
/// request and one of them reads the replies for all. Two calls give up while the server is
/// busy (the one reading among them), and their replies, which come after, are read by no one;
/// then four tasks call at once, each on a subject of its own whose log holds a count no other
/// holds, and each reads the remaining quota of its own subject after each call. A reply read
/// as another call's would show another subject's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lone_calls_each_read_their_own_reply() {
    const SUBJECTS: u64 = 4;
    const CALLS: u64 = 300;
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let mut admin = server.client();
    // Counted before the store opens: the store's shared connection, its runtime's and the one
    // for lone calls come after.
    let base = clients(&mut admin).len();
    let limiter = counting_limiter(&server, "direct::shared", Duration::from_millis(300));
    let subject = |k: u64| Subject::ip(std::net::IpAddr::from([10, 0, 0, k as u8]));
    until_lone_connection(&limiter, &mut admin, base, subject(9)).await;
    let subjects: Vec<_> = (0..SUBJECTS).map(subject).collect();
    apart(&limiter, &subjects).await;
    // The server busy for a second: two calls under way together give up after 300 ms.
    let busy = {
        let mut con = server.client();
        std::thread::spawn(move || redis::cmd("DEBUG").arg("SLEEP").arg(1).query::<()>(&mut con))
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let gave_up: Vec<_> = (0..2)
        .map(|k| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check(&[subject(k)]).await.map(drop) })
        })
        .collect();
    for call in gave_up {
        let refused = call.await.unwrap().unwrap_err();
        assert_eq!(refused.cause(), Cause::StoreUnavailable, "{refused:?}");
    }
    busy.join().unwrap().unwrap();
    // The calls that gave up were decided all the same once the server woke: one unit each.
    each_reads_its_own_count(&limiter, &subjects, |k| u64::from(k < 2), CALLS).await;
    assert_eq!(clients(&mut admin).len(), base + 3, "the lone calls shared one connection");
}

/// Calls on `subject` from tasks until the runtime's lane and its connection for lone calls
/// are made: `base` and three connections (the first calls, on a fresh store, may give up
/// before the lane is ready).
async fn until_lone_connection(
    limiter: &Arc<Limiter>,
    admin: &mut redis::Connection,
    base: usize,
    subject: Subject<'static>,
) {
    let deadline = std::time::Instant::now() + WITHIN;
    while clients(admin).len() < base + 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "no connection for lone calls after {WITHIN:?}: {:?} (base {base})",
            clients(admin)
        );
        let limiter = limiter.clone();
        let subject = subject.clone();
        let _ = tokio::spawn(async move { limiter.check(&[subject]).await.map(drop) }).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The caller reading the replies stops once its own has come, and the next caller waiting
/// reads on. Two slow calls (100 000 units each into a sliding log, a fraction of a second of
/// the server's time), the second written while the server runs the first, so that their
/// replies come apart; the first caller calls no more. The second is answered within its
/// timeout only if someone reads its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_caller_reads_once_the_reader_has_its_reply() {
    const SLOW: u64 = 100_000;
    let server = RedisServer::start();
    let mut admin = server.client();
    let base = clients(&mut admin).len();
    // A timeout far longer than the calls take: a call whose reply nobody reads would still be
    // answered once its timeout wakes it (its own read then finds the reply), so the test
    // measures how long the second call took.
    const TIMEOUT: Duration = Duration::from_secs(30);
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), TIMEOUT).unwrap());
    let limiter = Arc::new(
        Limiter::builder("direct::hand_over")
            .limit(Limit::new(LimitType::Ip, [Rule::from_millis(3_600_000, 1_000_000).unwrap()]))
            .store(store)
            .on_error(FailurePolicy::Deny)
            .refusal_cache(false)
            .build()
            .unwrap(),
    );
    let subject = |k: u8| Subject::ip(std::net::IpAddr::from([10, 0, 1, k]));
    until_lone_connection(&limiter, &mut admin, base, subject(9)).await;
    let slow = |k: u8| {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let start = std::time::Instant::now();
            let remaining = limiter.check(&[subject(k)]).cost(SLOW).await.map(|p| p.quota().unwrap().remaining);
            (remaining, start.elapsed())
        })
    };
    let first = slow(1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = slow(2);
    assert_eq!(first.await.unwrap().0.unwrap(), 1_000_000 - SLOW);
    let (remaining, took) = second.await.unwrap();
    assert_eq!(remaining.unwrap(), 1_000_000 - SLOW);
    assert!(took < TIMEOUT / 2, "the second call's reply waited {took:?} for a reader");
    assert_eq!(clients(&mut admin).len(), base + 3, "both went on the connection for lone calls");
}

/// The server killed under four tasks' lone calls, then started again on its port: the calls
/// fail meanwhile (the store is unavailable, never a wrong answer), and afterwards the lone
/// calls' connection is made anew and each call again reads its own reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_calls_come_back_after_the_server_restarts() {
    const SUBJECTS: u64 = 4;
    let mut server = RedisServer::start();
    let mut admin = server.client();
    let base = clients(&mut admin).len();
    let limiter = counting_limiter(&server, "direct::restart", Duration::from_millis(500));
    let subject = |k: u64| Subject::ip(std::net::IpAddr::from([10, 0, 2, k as u8]));
    until_lone_connection(&limiter, &mut admin, base, subject(9)).await;
    // Four tasks call until told to stop, counting what was admitted and what failed.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..SUBJECTS)
        .map(|k| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut admitted, mut failed) = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match limiter.check(&[subject(k)]).await {
                        Ok(_) => admitted += 1,
                        Err(refused) => {
                            assert_eq!(refused.cause(), Cause::StoreUnavailable, "{refused:?}");
                            failed += 1;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                (admitted, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    // Back: a lone call from a task is decided again while the others call (the breaker may
    // hold calls a while).
    until_decided(&limiter, subject(8)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for caller in callers {
        let (admitted, failed) = caller.await.unwrap();
        assert!(admitted > 0 && failed > 0, "admitted {admitted}, failed {failed}");
    }
    // The callers' calls still in flight on the old sockets when the first call came back may
    // fail after it, and three such failures in a row open the breaker again for its pause:
    // decided again once they are over.
    until_decided(&limiter, subject(8)).await;
    // On subjects the callers above did not use.
    let fresh: Vec<_> = (SUBJECTS..2 * SUBJECTS).map(subject).collect();
    apart(&limiter, &fresh).await;
    each_reads_its_own_count(&limiter, &fresh, |_| 0, 200).await;
}

/// Waits (up to [`WITHIN`]) until a lone call from a task on `subject` is decided.
async fn until_decided(limiter: &Arc<Limiter>, subject: Subject<'static>) {
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let (limiter, subject) = (limiter.clone(), [subject.clone()]);
        if tokio::spawn(async move { limiter.check(&subject).await.is_ok() }).await.unwrap() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no decision after the restart within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The quota of [`counting_limiter`]: far above any test's calls.
const COUNTED: u64 = 100_000_000;

/// A limiter of [`COUNTED`] calls a week per IP on `server`, refusing when the store fails. A
/// fixed window, so that a call of a million units is one count, not a million log entries.
fn counting_limiter(server: &RedisServer, name: &'static str, timeout: Duration) -> Arc<Limiter> {
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), timeout).unwrap());
    Arc::new(
        Limiter::builder(name)
            .limit(
                Limit::new(LimitType::Ip, [Rule::from_millis(7 * 86_400_000, COUNTED).unwrap()])
                    .algorithm(Algorithm::FixedWindow),
            )
            .store(store)
            .on_error(FailurePolicy::Deny)
            .refusal_cache(false)
            .build()
            .unwrap(),
    )
}

/// Sets the `k`-th subject's count apart from every other's: (k + 1) million units, taken in
/// one call from a task.
async fn apart(limiter: &Arc<Limiter>, subjects: &[Subject<'static>]) {
    for (k, subject) in subjects.iter().enumerate() {
        let (limiter, subject) = (limiter.clone(), [subject.clone()]);
        let units = (k as u64 + 1) * 1_000_000;
        tokio::spawn(async move { limiter.check(&subject).cost(units).await.map(drop) }).await.unwrap().unwrap();
    }
}

/// One task per subject, all at once, each making `calls` calls on its own subject (set
/// [`apart`], then `extra(k)` units more) and checking the remaining quota after each: a reply
/// read as another call's shows another subject's count.
async fn each_reads_its_own_count(
    limiter: &Arc<Limiter>,
    subjects: &[Subject<'static>],
    extra: impl Fn(u64) -> u64,
    calls: u64,
) {
    let callers: Vec<_> = subjects
        .iter()
        .enumerate()
        .map(|(k, subject)| {
            let (limiter, subject) = (limiter.clone(), [subject.clone()]);
            let start = COUNTED - (k as u64 + 1) * 1_000_000 - extra(k as u64);
            tokio::spawn(async move {
                for j in 1..=calls {
                    let remaining = limiter.check(&subject).await.expect("admitted").quota().unwrap().remaining;
                    assert_eq!(remaining, start - j, "subject {k}, call {j} read another call's reply");
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
}
