//! Waiting for room: `Check::wait` and the attribute's `wait = …`, on
//! memory, a real Redis shared by two processes, and a real Redis Cluster. Waiting sleeps on the
//! real clock, so windows are a second long and the times a caller stamps after its admission
//! are given a quarter of a window of slack (2-core machines under load). Only lower bounds on
//! how long a wait took, and upper bounds equal to the wait allowed (a caller that slept it
//! out), are asserted: how fast a wait comes back is the benchmark harness's to measure.

mod support;

use ratelimit::{
    rate_limiter, store::MemoryStore, store::RedisStore, store::StoreHandle, Cause, Limit, LimitType, Limiter,
    RateLimited, Rule, Subject,
};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::{busiest_span, RedisServer};

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

/// A window of the tests' limits, and the part of it their stamps are checked over: a stamp is
/// taken after its call was admitted, late by up to the rest of the window on a busy machine.
const WINDOW_US: u64 = 1_000_000;
const STAMPED_SPAN_US: u64 = WINDOW_US * 3 / 4;

#[rate_limiter(type = Global, rules = [(1s, 3)], wait = 5s)]
async fn outbound() -> Result<Instant, RateLimited> {
    Ok(Instant::now())
}

#[rate_limiter(type = Key, rules = [(1s, 2)], key = tenant, wait = 5s, name = "wait::sync_outbound")]
fn sync_outbound(tenant: &str) -> Result<Instant, RateLimited> {
    Ok(Instant::now())
}

#[rate_limiter(type = Global, rules = [(1h, 1)], wait = 30s)]
async fn patient_but_not_that_patient() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, rules = [(1m, 100)], key = who, wait = 1s, name = "wait::stacked")]
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
    // 9 calls at 3 per second: the last one waited two whole windows.
    assert!(start.elapsed() >= Duration::from_secs(2), "{:?}", start.elapsed());
    let us: Vec<u64> = times.iter().map(|t| t.duration_since(start).as_micros() as u64).collect();
    assert!(busiest_span(&us, STAMPED_SPAN_US) <= 3, "{us:?}");
}

#[test]
fn attribute_waits_for_room_blocking() {
    let start = Instant::now();
    let times: Vec<Instant> = (0..6).map(|_| sync_outbound("acme").expect("waits")).collect();
    assert!(start.elapsed() >= Duration::from_secs(2), "{:?}", start.elapsed());
    let us: Vec<u64> = times.iter().map(|t| t.duration_since(start).as_micros() as u64).collect();
    assert!(busiest_span(&us, STAMPED_SPAN_US) <= 2, "{us:?}");
    // Another key has its own budget, whole: its call has nothing to wait for.
    let l = ratelimit::limiter("wait::sync_outbound").expect("built by the calls above");
    let globex = [Subject::bytes(&b"globex"[..])];
    assert_eq!(l.peek(&globex).blocking().unwrap()[0].remaining, 2);
    sync_outbound("globex").unwrap();
    assert_eq!(l.peek(&globex).blocking().unwrap()[0].remaining, 1);
}

#[tokio::test]
async fn a_wait_longer_than_allowed_refuses_at_once() {
    patient_but_not_that_patient().await.unwrap();
    let start = Instant::now();
    let e = patient_but_not_that_patient().await.unwrap_err();
    assert_eq!(e.cause(), Cause::Exceeded);
    assert!(e.retry_after() > Duration::from_secs(50 * 60));
    // Had it slept, it would have slept its whole 30 s wait before refusing.
    assert!(start.elapsed() < Duration::from_secs(30), "refused without sleeping: {:?}", start.elapsed());
}

/// The two attributes make one limiter with one wait: a call refused by the global limit waits
/// for it and is then decided by both limits at once, so the tries refused while it waited
/// count in neither (each key holds its one admitted call).
#[tokio::test]
async fn stacked_attributes_share_one_wait() {
    let start = Instant::now();
    for who in ["a", "b", "c"] {
        stacked_wait(who).await.expect("waits for the global limit");
    }
    // One call per 200 ms globally: the second and third waited.
    assert!(start.elapsed() >= Duration::from_millis(400), "{:?}", start.elapsed());
    let l = ratelimit::limiter("wait::stacked").expect("one limiter of both attributes");
    for who in ["a", "b", "c"] {
        let statuses = l.peek(&[Subject::bytes(who.as_bytes()), Subject::global()]).await.unwrap();
        assert_eq!(statuses.len(), 2, "both limits in the one limiter");
        assert_eq!(statuses[0].remaining, 99, "{who}: only the admitted call counts on its key");
    }
}

#[tokio::test]
async fn missing_subjects_and_store_failures_are_not_waited_out() {
    let l = Limiter::builder("wait::missing")
        .limit(Limit::new(LimitType::User, [rule(1_000, 1)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    // Waited out, either refusal would come only at the end of the wait allowed.
    let wait = Duration::from_secs(60);
    let start = Instant::now();
    let e = l.check(&[Subject::missing()]).wait(wait).await.unwrap_err();
    assert_eq!(e.cause(), Cause::SubjectMissing);
    assert!(start.elapsed() < wait, "{:?}", start.elapsed());

    // A store that does not answer: fail closed, the refusal comes back after one timeout.
    let down = Limiter::builder("wait::down")
        .limit(Limit::new(LimitType::Global, [rule(1_000, 1)]))
        .on_error(ratelimit::FailurePolicy::Deny)
        .store(Arc::new(RedisStore::open("redis://127.0.0.1:1/", Duration::from_millis(200)).unwrap()))
        .build()
        .unwrap();
    let start = Instant::now();
    let e = down.check(&[Subject::global()]).wait(wait).await.unwrap_err();
    assert_eq!(e.cause(), Cause::StoreUnavailable);
    assert!(start.elapsed() < wait, "{:?}", start.elapsed());
}

/// Waiting works from a runtime without a timer, and from no runtime at all.
#[test]
fn waiting_needs_no_timer_of_the_callers() {
    let l = Limiter::builder("wait::no_timer")
        .limit(Limit::new(LimitType::Global, [rule(100, 1)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    // A runtime without a timer (no `enable_time`): each call after the first waits 100 ms.
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let start = Instant::now();
    rt.block_on(async {
        for _ in 0..3 {
            l.check(&[Subject::global()]).wait(Duration::from_secs(5)).await.unwrap();
        }
    });
    assert!(start.elapsed() >= Duration::from_millis(200));
    drop(rt);
    // No runtime at all: a blocking wait on this thread.
    assert!(tokio::runtime::Handle::try_current().is_err(), "no runtime here");
    let start = Instant::now();
    for _ in 0..3 {
        l.check(&[Subject::global()]).wait(Duration::from_secs(5)).blocking().unwrap();
    }
    assert!(start.elapsed() >= Duration::from_millis(200));
}

const CHILD_ENV: &str = "RATELIMIT_WAIT_CHILD_REDIS";
const CALLS_PER_CHILD: usize = 8;

/// Not a test of its own: the body of each worker process of
/// `two_processes_share_one_budget_by_waiting` (see tests/support/child.rs).
#[test]
#[ignore = "the worker processes of two_processes_share_one_budget_by_waiting"]
fn wait_child_worker() {
    let Some(url) = support::child::given(CHILD_ENV) else { return };
    let start_at: u64 = std::env::var("RATELIMIT_WAIT_CHILD_START").unwrap().parse().unwrap();
    let store: StoreHandle = Arc::new(RedisStore::open(&url, Duration::from_secs(2)).unwrap());
    let l = Limiter::builder("wait::fleet")
        .limit(Limit::new(LimitType::Global, [rule(1_000, 4)]))
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

/// Two processes (this test binary, twice) wait on one Redis budget of 4 per second: every call
/// gets through, never more than 4 in any window, and the fleet keeps the budget busy.
#[test]
fn two_processes_share_one_budget_by_waiting() {
    let server = RedisServer::start();
    let start_at = unix_us() + 1_500_000;
    let children: Vec<_> = (0..2)
        .map(|_| {
            support::child::command("wait_child_worker")
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
    // Redis decides on its own clock; the workers stamp theirs just after.
    assert!(busiest_span(&admitted, STAMPED_SPAN_US) <= 4, "more than 4 per window: {admitted:?}");
    // 16 calls at 4 per second need at least 3 more windows after the first (less the slack of
    // a late first stamp).
    let span = admitted[admitted.len() - 1] - admitted[0];
    assert!(span >= 3 * WINDOW_US - (WINDOW_US - STAMPED_SPAN_US), "{span}µs");
    // Waiters that slept far past their retry-after would leave the budget idle: 4 s of work
    // taking five times that.
    assert!(span < 20 * WINDOW_US, "waiting wastes the budget: {span}µs");
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
        .limit(Limit::new(LimitType::User, [rule(1_000, 2)]))
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
    assert!(start.elapsed() >= Duration::from_secs(2), "{:?}", start.elapsed());
    assert!(busiest_span(&times, STAMPED_SPAN_US) <= 2, "{times:?}");
    // Refused calls were released on the IP's slot: only the 6 admitted calls count there.
    assert_eq!(l.peek(&subjects).await.unwrap()[0].remaining, 94);
}
