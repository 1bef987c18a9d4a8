//! Waiting for room: `Check::wait` and the attribute's `wait = …`, on
//! memory, a real Redis shared by two processes, and a real Redis Cluster. Windows are short
//! and the bounds generous (2-core machines under load).

mod support;

use ratelimit::{
    rate_limiter, store::MemoryStore, store::RedisStore, store::StoreHandle, Cause, Limit, LimitType, Limiter,
    RateLimited, Rule, Subject,
};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::RedisServer;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

/// At most `count` of the sorted `times` (µs) in any span of `span_us`.
fn most_in_any_span(times: &[u64], span_us: u64) -> usize {
    (0..times.len()).map(|i| times[i..].iter().take_while(|t| **t < times[i] + span_us).count()).max().unwrap_or(0)
}

#[rate_limiter(type = Global, rules = [(300ms, 3)], wait = 5s)]
async fn outbound() -> Result<Instant, RateLimited> {
    Ok(Instant::now())
}

#[rate_limiter(type = Key, rules = [(300ms, 2)], key = tenant, wait = 5s, name = "wait::sync_outbound")]
fn sync_outbound(tenant: &str) -> Result<Instant, RateLimited> {
    Ok(Instant::now())
}

#[rate_limiter(type = Global, rules = [(1m, 1)], wait = 2s)]
async fn patient_but_not_that_patient() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, rules = [(1m, 100)], key = who, wait = 1s)]
#[rate_limiter(type = Global, rules = [(200ms, 1)], wait = 1s)]
async fn stacked_wait(who: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_waits_for_room_async() {
    let start = Instant::now();
    let mut times = Vec::new();
    for _ in 0..9 {
        times.push(outbound().await.expect("waits instead of failing"));
    }
    // 9 calls at 3 per 300ms: the last one waited two whole windows.
    assert!(start.elapsed() >= Duration::from_millis(600), "{:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(4), "{:?}", start.elapsed());
    let us: Vec<u64> = times.iter().map(|t| t.duration_since(start).as_micros() as u64).collect();
    assert!(most_in_any_span(&us, 280_000) <= 3, "{us:?}");
}

#[test]
fn attribute_waits_for_room_blocking() {
    let start = Instant::now();
    let times: Vec<Instant> = (0..6).map(|_| sync_outbound("acme").expect("waits")).collect();
    assert!(start.elapsed() >= Duration::from_millis(600), "{:?}", start.elapsed());
    let us: Vec<u64> = times.iter().map(|t| t.duration_since(start).as_micros() as u64).collect();
    assert!(most_in_any_span(&us, 280_000) <= 2, "{us:?}");
    // Another key has its own budget: no wait.
    let t = Instant::now();
    sync_outbound("globex").unwrap();
    assert!(t.elapsed() < Duration::from_millis(250));
}

#[tokio::test]
async fn a_wait_longer_than_allowed_refuses_at_once() {
    patient_but_not_that_patient().await.unwrap();
    let start = Instant::now();
    let e = patient_but_not_that_patient().await.unwrap_err();
    assert_eq!(e.cause(), Cause::Exceeded);
    assert!(e.retry_after() > Duration::from_secs(50));
    assert!(start.elapsed() < Duration::from_millis(500), "refused without sleeping: {:?}", start.elapsed());
}

#[tokio::test]
async fn stacked_attributes_share_one_wait() {
    let start = Instant::now();
    for who in ["a", "b", "c"] {
        stacked_wait(who).await.unwrap();
    }
    assert!(start.elapsed() >= Duration::from_millis(400), "{:?}", start.elapsed());
}

#[tokio::test]
async fn missing_subjects_and_store_failures_are_not_waited_out() {
    let l = Limiter::builder("wait::missing")
        .limit(Limit::new(LimitType::User, [rule(1_000, 1)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let start = Instant::now();
    let e = l.check(&[Subject::missing()]).wait(Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(e.cause(), Cause::SubjectMissing);
    assert!(start.elapsed() < Duration::from_millis(500));

    // A store that does not answer: fail closed, the refusal comes back after one timeout.
    let down = Limiter::builder("wait::down")
        .limit(Limit::new(LimitType::Global, [rule(1_000, 1)]))
        .on_error(ratelimit::FailurePolicy::Deny)
        .store(Arc::new(RedisStore::open("redis://127.0.0.1:1/", Duration::from_millis(200)).unwrap()))
        .build()
        .unwrap();
    let start = Instant::now();
    let e = down.check(&[Subject::global()]).wait(Duration::from_secs(10)).await.unwrap_err();
    assert_eq!(e.cause(), Cause::StoreUnavailable);
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
}

/// Waiting works from a runtime without a timer, and from no runtime at all.
#[test]
fn waiting_needs_no_timer_of_the_callers() {
    let l = Limiter::builder("wait::no_timer")
        .limit(Limit::new(LimitType::Global, [rule(100, 1)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let start = Instant::now();
    rt.block_on(async {
        for _ in 0..3 {
            l.check(&[Subject::global()]).wait(Duration::from_secs(5)).await.unwrap();
        }
    });
    assert!(start.elapsed() >= Duration::from_millis(200));
}

const CHILD_ENV: &str = "RATELIMIT_WAIT_CHILD_REDIS";
const CALLS_PER_CHILD: usize = 12;

/// Not a test on its own: the body of each worker process of
/// `two_processes_share_one_budget_by_waiting` (a no-op unless that test starts it).
#[test]
fn wait_child_worker() {
    let Ok(url) = std::env::var(CHILD_ENV) else { return };
    let start_at: u64 = std::env::var("RATELIMIT_WAIT_CHILD_START").unwrap().parse().unwrap();
    let store: StoreHandle = Arc::new(RedisStore::open(&url, Duration::from_secs(2)).unwrap());
    let l = Limiter::builder("wait::fleet")
        .limit(Limit::new(LimitType::Global, [rule(500, 4)]))
        .store(store)
        .build()
        .unwrap();
    // Warm the connection, then start together.
    l.peek(&[Subject::global()]).blocking().unwrap();
    std::thread::sleep(Duration::from_micros(start_at.saturating_sub(unix_us())));
    for _ in 0..CALLS_PER_CHILD {
        match l.check(&[Subject::global()]).wait(Duration::from_secs(20)).blocking() {
            Ok(_) => println!("ADMITTED {}", unix_us()),
            Err(e) => println!("REFUSED {e}"),
        }
    }
}

/// Two processes (this test binary, twice) wait on one Redis budget of 4 per 500ms: every call
/// gets through, never more than 4 in any window, and the fleet keeps the budget busy.
#[test]
fn two_processes_share_one_budget_by_waiting() {
    let server = RedisServer::start();
    let exe = std::env::current_exe().unwrap();
    let start_at = unix_us() + 1_500_000;
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "wait_child_worker", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, server.url())
                .env("RATELIMIT_WAIT_CHILD_START", start_at.to_string())
                .spawn_output()
        })
        .collect();
    let mut admitted = Vec::new();
    for child in children {
        let out = child.join().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "worker failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains("REFUSED"), "{text}");
        // libtest may print `test wait_child_worker ... ` before the first line, on the same line.
        admitted
            .extend(text.lines().filter_map(|l| l.split("ADMITTED ").nth(1)).map(|t| t.trim().parse::<u64>().unwrap()));
    }
    admitted.sort_unstable();
    assert_eq!(admitted.len(), 2 * CALLS_PER_CHILD, "every call was admitted after waiting");
    // Redis decides on its own clock; the workers stamp theirs just after: allow 50ms of skew.
    assert!(most_in_any_span(&admitted, 450_000) <= 4, "more than 4 per window: {admitted:?}");
    // 24 calls at 4 per 500ms need at least 5 more windows after the first.
    let span = admitted[admitted.len() - 1] - admitted[0];
    assert!(span >= 2_400_000, "{span}µs");
    assert!(span < 8_000_000, "waiting wastes the budget: {span}µs");
}

trait SpawnOutput {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<std::process::Output>;
}

impl SpawnOutput for Command {
    fn spawn_output(&mut self) -> std::thread::JoinHandle<std::process::Output> {
        let child = self.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        std::thread::spawn(move || child.wait_with_output().unwrap())
    }
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waiting_across_slots() {
    use ratelimit::store::ClusterStore;
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let store: StoreHandle = Arc::new(ClusterStore::open(&cluster.urls(), Duration::from_secs(2)).unwrap());
    // Ip and User usually live in different slots; the tighter rule is the user's.
    let l = Limiter::builder("wait::cluster")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 100)]))
        .limit(Limit::new(LimitType::User, [rule(300, 2)]))
        .store(store)
        .build()
        .unwrap();
    let subjects = [Subject::ip("192.0.2.44".parse().unwrap()), Subject::bytes(&b"worker"[..])];
    let start = Instant::now();
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let l = l.clone();
            let subjects = subjects.clone();
            tokio::spawn(async move {
                let mut times = Vec::new();
                for _ in 0..2 {
                    l.check(&subjects).wait(Duration::from_secs(10)).await.unwrap();
                    times.push(unix_us());
                }
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        times.extend(t.await.unwrap());
    }
    times.sort_unstable();
    assert_eq!(times.len(), 6);
    assert!(start.elapsed() >= Duration::from_millis(600), "{:?}", start.elapsed());
    assert!(most_in_any_span(&times, 250_000) <= 2, "{times:?}");
    // Refused calls were released on the IP's slot: only the 6 admitted calls count there.
    assert_eq!(l.peek(&subjects).await.unwrap()[0].remaining, 94);
}
