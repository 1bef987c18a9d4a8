//! When the store fails, on real servers: the circuit breaker stops the waiting on a hung Redis
//! (only its trials reach the store: `ratelimit_store_errors_total`), `on_error = local` keeps the limits exact per
//! process during the outage, and decisions return to Redis (or to Sentinel's new primary) once
//! it answers. The example server runs as a child process of this binary (see
//! tests/support/server_process.rs), its stderr read line by line for the breaker's log lines.

#[path = "support/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;
#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use ratelimit::{rate_limiter, Cause, FailurePolicy, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::server_process::Server;
use support::RedisServer;

/// What the breaker logs (see ratelimit-runtime/src/store/breaker.rs).
const OPENED: &str = "circuit open:";
const CLOSED: &str = "circuit closed";
const STAYS_OPEN: &str = "the circuit stays open";
/// The example server's store timeout (the library's default).
const TIMEOUT: Duration = Duration::from_millis(250);

/// Not a test of its own: the body of the server processes the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

/// The example server in a child process with `env`, its stderr lines kept.
fn start_server(env: &[(&str, &str)]) -> Server {
    // The breaker's trial outcomes are debug events: they say how long each pause is.
    let mut all = vec![("RUST_LOG", "info,ratelimit_runtime::store::breaker=debug")];
    all.extend_from_slice(env);
    Server::start(&[], &all)
}

impl Server {
    /// Waits up to `limit` for `count` log lines containing `text`; how long it took.
    async fn wait_logged(&self, text: &str, count: usize, limit: Duration) -> Duration {
        let started = Instant::now();
        while self.logged(text) < count {
            assert!(started.elapsed() < limit, "no {text:?} line within {limit:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.elapsed()
    }

    /// The pause (ms) of the breaker's last failed trial, if any.
    fn last_pause_ms(&self) -> Option<u64> {
        let line = self.last_logged(STAYS_OPEN)?;
        line.split("pause_ms=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    }

    /// The failed calls to `store` so far, of every kind (`ratelimit_store_errors_total{store}`
    /// from `/metrics`). A call the open breaker answers is not a call, and not counted.
    async fn store_errors(&self, store: &str) -> f64 {
        let r = request(self.addr, ip(2, 1), "/metrics").await;
        assert_eq!(r.0, 200);
        let s = prometheus::Scrape::parse(&r.1).unwrap_or_else(|e| panic!("{e}\n{}", r.1));
        s.sum("ratelimit_store_errors_total", &[("store", store)])
    }

    /// `ratelimit_store_circuit_open{store}` from `/metrics`, parsed.
    async fn circuit_gauge(&self, store: &str) -> Option<f64> {
        let r = request(self.addr, ip(2, 1), "/metrics").await;
        assert_eq!(r.0, 200);
        let s = prometheus::Scrape::parse(&r.1).unwrap_or_else(|e| panic!("{e}\n{}", r.1));
        s.value("ratelimit_store_circuit_open", &[("store", store)])
    }
}

/// 127.0.`a`.`b`: a client address of its own (any 127.0.0.0/8 address is loopback).
fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::from([127, 0, a, b])
}

/// One `GET` over a fresh connection from `from`: the status and the body.
async fn request(server: SocketAddr, from: IpAddr, path: &str) -> (u16, String) {
    let reply = support::server_process::request(server, from, "GET", path, &[]).await;
    (reply.status, reply.body)
}

/// Background requests to `/api/hello` until dropped: the traffic the outage happens under.
struct Traffic(Arc<AtomicBool>);

impl Traffic {
    fn start(addr: SocketAddr, subnet: u8, workers: u8) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        for w in 0..workers {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let host = 1 + ((u32::from(w) + i * u32::from(workers)) % 250) as u8;
                    request(addr, ip(subnet, host), "/api/hello").await;
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
        Traffic(stop)
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Redis hung (`SIGSTOP`) under load: the breaker opens once, requests stop going to the hung
/// store (only the breaker's trials do), one process keeps `/api/hello` exact in memory (`local`), and after `SIGCONT`
/// decisions go back to Redis within the pause, the breaker closing once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_hung_under_load() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = start_server(&[("REDIS_URL", url.as_str()), ("RATELIMIT_ON_ERROR", "local")]);
    let addr = server.addr;
    // Decided by Redis.
    assert_eq!(request(addr, ip(0, 2), "/api/hello").await.0, 200);
    assert!(redis.calls("evalsha") >= 1, "the first decision went to Redis");
    assert_eq!(server.circuit_gauge("redis").await, Some(0.0), "the gauge shows the closed breaker");

    redis.pause();
    let paused = Instant::now();
    let opened = {
        let _traffic = Traffic::start(addr, 2, 4);
        server.wait_logged(OPENED, 1, Duration::from_secs(10)).await
    };
    eprintln!("breaker opened {opened:?} after SIGSTOP");
    assert_eq!(server.circuit_gauge("redis").await, Some(1.0), "the gauge shows the open breaker");

    // One process, deciding in memory: exactly 20 per 10 s for a client it never saw. Without
    // the breaker each request would go to the hung store and fail after its 250 ms timeout;
    // now only the breaker's trials do, one per pause (1 s, then longer). (How fast the
    // requests are meanwhile is the benchmark harness's to measure.)
    let errors = server.store_errors("redis").await;
    let started = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..30 {
        statuses.push(request(addr, ip(0, 250), "/api/hello").await.0);
    }
    let took = started.elapsed();
    // Within the 10 s window (30 requests waiting out the timeout would take 7.5 s).
    assert!(took < Duration::from_secs(9), "30 requests took {took:?}");
    let failed = server.store_errors("redis").await - errors;
    assert!(
        failed <= (took.as_secs() + 1) as f64,
        "{failed} calls of 30 went to the hung store in {took:?}: not only the breaker's trials"
    );
    let expected: Vec<u16> = (0..30).map(|i| if i < 20 { 200 } else { 429 }).collect();
    assert_eq!(statuses, expected, "exactly 20 of 30 pass during the outage");
    assert_eq!(server.logged(OPENED), 1, "the opening is logged once, not per call");
    assert_eq!(server.logged(CLOSED), 0);

    // Back: the first trial after SIGCONT closes the breaker, and decisions go to Redis.
    redis.resume();
    eprintln!("Redis stopped for {:?}", paused.elapsed());
    let closed = {
        let _traffic = Traffic::start(addr, 4, 2);
        server.wait_logged(CLOSED, 1, Duration::from_secs(35)).await
    };
    // The pause SIGCONT fell in: the one the last failed trial announced.
    let pause = Duration::from_millis(server.last_pause_ms().unwrap_or(1000));
    eprintln!("breaker closed {closed:?} after SIGCONT (pause {pause:?})");
    assert!(closed <= pause + TIMEOUT * 2 + Duration::from_secs(1), "closed after {closed:?}, pause {pause:?}");
    let evalsha = redis.calls("evalsha");
    for _ in 0..5 {
        assert_eq!(request(addr, ip(0, 251), "/api/hello").await.0, 200);
    }
    let decided = redis.calls("evalsha") - evalsha;
    assert!(decided >= 5, "decisions are back on Redis: {decided} EVALSHA for 5 requests");
    assert_eq!(server.circuit_gauge("redis").await, Some(0.0), "the gauge shows the closed breaker");

    assert_eq!((server.logged(OPENED), server.logged(CLOSED)), (1, 1), "one line per opening and closing");
}

/// A Sentinel failover of a hung primary, under traffic, with the breaker on: decisions are
/// back on the new primary within seconds of the promotion, not after a 30 s pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_traffic() {
    use support::sentinel::{cli, SentinelSet, MASTER};
    let set = SentinelSet::start();
    let url = set.sentinel_url();
    let env =
        [("REDIS_SENTINEL_URLS", url.as_str()), ("REDIS_SENTINEL_MASTER", MASTER), ("RATELIMIT_ON_ERROR", "deny")];
    let server = start_server(&env);
    let addr = server.addr;
    let deadline = Instant::now() + Duration::from_secs(10);
    while request(addr, ip(0, 2), "/api/hello").await.0 != 200 {
        assert!(Instant::now() < deadline, "no decision from the primary within 10s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let evalsha = |port: u16| {
        let info = cli(port, &["INFO", "commandstats"]).unwrap_or_default();
        support::command_stat(&info, "evalsha", "calls") as u64
    };
    let old = set.first_primary();
    let _traffic = Traffic::start(addr, 2, 4);
    set.sync_replica(old);
    set.pause(old);
    let paused = Instant::now();
    let opened = server.wait_logged(OPENED, 1, Duration::from_secs(10)).await;
    let new = set.wait_for_new_primary(old, Duration::from_secs(30));
    let promoted = paused.elapsed();
    let on_new = evalsha(new);
    let waited = Instant::now();
    while evalsha(new) <= on_new {
        assert!(waited.elapsed() < Duration::from_secs(10), "no decision on the new primary 10s after its promotion");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back = waited.elapsed();
    server.wait_logged(CLOSED, 1, Duration::from_secs(5)).await;
    eprintln!(
        "sentinel: breaker opened {opened:?} after SIGSTOP, promotion after {promoted:?}, decisions on the new \
         primary {back:?} later"
    );
    assert!(back < Duration::from_secs(5), "decisions came back {back:?} after the promotion");
    assert_eq!(server.circuit_gauge("sentinel").await, Some(0.0));
    // The traffic is decided by the new primary: 200s again (deny would answer 503).
    assert_eq!(request(addr, ip(0, 3), "/api/hello").await.0, 200);
}

/// `on_error = local` in the attribute and on a limiter: with the store down, each process
/// decides exactly by the rules, in memory; reads (peek) still report the failure.
#[tokio::test]
async fn local_decisions_are_exact_while_the_store_is_down() {
    // Nothing listens there: every call fails at once (connection refused).
    let down = format!("redis://127.0.0.1:{}/", support::free_port());
    ratelimit::init(ratelimit::Config::redis(&down).timeout(TIMEOUT)).expect("init");

    #[rate_limiter(type = Key, key = who, rules = [(10s, 3)], on_error = local)]
    async fn attributed(who: &str) -> Result<(), RateLimited> {
        Ok(())
    }
    let mut results = Vec::new();
    for _ in 0..5 {
        results.push(attributed("alice").await.map_err(|e| e.cause()));
    }
    let exceeded = Err(Cause::Exceeded);
    assert_eq!(results, [Ok(()), Ok(()), Ok(()), exceeded, exceeded], "3 per 10 s, in memory");
    assert!(attributed("bob").await.is_ok(), "each subject its own count");

    // By hand, at pinned times: the local store keeps the same time as the call.
    let limiter = Limiter::builder("failure::local")
        .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(10), 2).unwrap()]))
        .on_error(FailurePolicy::Local)
        .build()
        .unwrap();
    let who = [Subject::ip(support::addr("203.0.113.9"))];
    let t0 = 1_700_000_000_000_000;
    assert!(limiter.check(&who).at(support::at(t0)).await.is_ok());
    let quota = limiter.check(&who).at(support::at(t0 + 1)).await.unwrap().quota().expect("decided in memory");
    assert_eq!(quota.remaining, 0);
    let refused = limiter.check(&who).at(support::at(t0 + 2)).await.unwrap_err();
    assert_eq!(refused.cause(), Cause::Exceeded);
    assert_eq!(refused.retry_after(), Duration::from_micros(10_000_000 - 2));
    assert!(limiter.check(&who).at(support::at(t0 + 10_000_000)).await.is_ok(), "the window slid");
    assert!(limiter.peek(&who).await.is_err(), "reads report the store's failure");

    // What was taken in memory is given back in memory: a refund, and a concurrency slot.
    let limiter = Limiter::builder("failure::local_give_back")
        .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(10), 1).unwrap()]))
        .limit(Limit::concurrency(LimitType::Ip, 1))
        .on_error(FailurePolicy::Local)
        .build()
        .unwrap();
    let both = [who[0].clone(), who[0].clone()];
    let permit = limiter.check(&both).await.expect("decided in memory");
    let busy = limiter.check(&both).await.unwrap_err();
    assert!(matches!(busy.cause(), Cause::Exceeded | Cause::Concurrency), "{busy}");
    permit.refund().await.expect("refunded in memory");
    let again = limiter.check(&both).await.expect("the unit and the slot are free again");
    drop(again);
    assert!(limiter.check(&both).await.is_err(), "the unit stays counted once not refunded");
}
