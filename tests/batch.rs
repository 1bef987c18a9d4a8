//! Concurrent sliding-window decisions on one `RedisStore` go to Redis coalesced (several calls
//! per script run): each is still decided exactly as alone, on a real `redis-server`.

mod support;

use ratelimit::store::DEFAULT_PREFIX;
use ratelimit::store::{MemoryStore, RedisStore, StoreHandle};
use ratelimit::{Algorithm, Cause, LimitType, Limiter, RateLimited, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;
use support::{command_stat, RedisServer};

/// `EVALSHA` runs since the last `CONFIG RESETSTAT`, but those refused with `NOSCRIPT` (the
/// store loads the scripts in the background when it opens, and again on `NOSCRIPT`).
fn evalsha_calls(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    (command_stat(&info, "evalsha", "calls") - command_stat(&info, "evalsha", "failed_calls")) as u64
}

/// 64 tasks calling at once on one key of limit 500: exactly 500 admitted, each with its own
/// remaining (every reply reached its own caller), the log holding 500 entries, and fewer script
/// runs than calls. The scripts are flushed first: the batches load them again (`NOSCRIPT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_on_one_key_admit_exactly_the_limit() {
    const LIMIT: u64 = 500;
    const TASKS: usize = 64;
    const CALLS: usize = 20;
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let limiter = Arc::new(
        Limiter::builder("batch::one_key")
            .limit(LimitType::Global, [Rule::from_millis(600_000, LIMIT).unwrap()])
            .store(store.clone())
            .refusal_cache(false)
            .build()
            .unwrap(),
    );
    // Connected and warm (another key), then the scripts gone as after a server restart.
    let warm_up = Limiter::builder("batch::warm_up")
        .limit(LimitType::Global, [Rule::from_millis(1_000, 1).unwrap()])
        .store(store.clone())
        .build()
        .unwrap();
    warm_up.check(&[Subject::global()], 1).await.unwrap();
    let mut con = server.client();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();

    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut remaining = Vec::new();
                for _ in 0..CALLS {
                    match limiter.check(&[Subject::global()], 1).await {
                        Ok(permit) => remaining.push(permit.quota().expect("a quota").remaining),
                        Err(e) => assert!(e.cause() == Cause::Exceeded && e.retry_after() > Duration::ZERO, "{e}"),
                    }
                }
                remaining
            })
        })
        .collect();
    let mut remaining = Vec::new();
    for t in tasks {
        remaining.extend(t.await.unwrap());
    }
    remaining.sort_unstable();
    assert_eq!(remaining, (0..LIMIT).collect::<Vec<_>>(), "each admitted call has its own place in the window");

    let calls = (TASKS * CALLS) as u64;
    let runs = evalsha_calls(&mut con);
    assert!(runs < calls / 2, "{runs} script runs for {calls} concurrent calls: not coalesced");
    let key = "rate_limit:{batch::one_key|global|}:sw:10mx500";
    let logged: u64 = redis::cmd("ZCARD").arg(key).query(&mut con).unwrap();
    assert_eq!(logged, LIMIT);
}

/// What a call answered, comparable between stores.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Admitted { remaining: u64, reset_us: u128, policy: LimitType },
    Refused { retry_us: u128, limit_type: LimitType },
}

fn answer(r: Result<ratelimit::Permit<'_>, RateLimited>) -> Answer {
    match r {
        Ok(p) => {
            let q = p.quota().expect("a quota");
            Answer::Admitted { remaining: q.remaining, reset_us: q.reset.as_micros(), policy: q.policy.limit_type }
        }
        Err(e) => Answer::Refused { retry_us: e.retry_after().as_micros(), limit_type: e.limit_type() },
    }
}

/// The limiters of one store: one rule on a `Key`; an `Ip` limit of two rules stacked with a
/// `Key` limit of one; a single rule whose calls cost several units. The calls of every
/// task mix in the same batches: short and long replies, one and several keys per call.
fn limiters(store: &StoreHandle) -> [Limiter; 3] {
    let sw = |w: u64, n: u64| Rule::from_millis(w, n).unwrap();
    let build = |b: ratelimit::LimiterBuilder| b.store(store.clone()).refusal_cache(false).build().unwrap();
    [
        build(Limiter::builder("batch::single").limit(LimitType::Key, [sw(1_000, 5)])),
        build(
            Limiter::builder("batch::stacked")
                .limit_with(LimitType::Ip, [sw(10_000, 8), sw(1_000, 3)], Algorithm::SlidingWindow, DEFAULT_PREFIX)
                .limit(LimitType::Key, [sw(2_000, 4)]),
        ),
        build(Limiter::builder("batch::costly").limit(LimitType::Key, [sw(5_000, 10)])),
    ]
}

/// One task's calls, at pinned times (µs): which limiter, its cost, its time.
fn schedule(task: u64) -> Vec<(usize, u64, u64)> {
    let t0 = 1_900_000_000_000_000 + task * 7;
    (0..40u64).map(|i| ((i % 3) as usize, 1 + (i * task) % 3, t0 + i * 150_000 + (i % 4) * 1_000)).collect()
}

/// Each task's own subjects (no other task's calls touch them): its answers must be the
/// memory store's for the same calls in the same order, though Redis decided them in batches
/// with other tasks' calls.
async fn run_task(limiters: &[Limiter; 3], task: u64) -> Vec<Answer> {
    let ip = std::net::IpAddr::from([10, 1, (task / 256) as u8, (task % 256) as u8]);
    let key = format!("task-{task}");
    let mut out = Vec::new();
    for (which, cost, at) in schedule(task) {
        let l = &limiters[which];
        let r = match which {
            1 => l.check_at(&[Subject::ip(ip), Subject::bytes(key.as_bytes())], cost, support::at(at)).await,
            _ => l.check_at(&[Subject::bytes(key.as_bytes())], cost, support::at(at)).await,
        };
        out.push(answer(r));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_mixed_calls_decides_each_as_alone() {
    const TASKS: u64 = 48;
    let server = RedisServer::start();
    let redis: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let memory: StoreHandle = Arc::new(MemoryStore::new());
    let on_redis = Arc::new(limiters(&redis));
    let in_memory = limiters(&memory);
    let mut con = server.client();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();

    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let on_redis = on_redis.clone();
            tokio::spawn(async move { run_task(&on_redis, task).await })
        })
        .collect();
    let mut refused = 0;
    for (task, t) in tasks.into_iter().enumerate() {
        let got = t.await.unwrap();
        let expected = run_task(&in_memory, task as u64).await;
        refused += expected.iter().filter(|a| matches!(a, Answer::Refused { .. })).count();
        assert_eq!(got, expected, "task {task}");
    }
    let calls = TASKS * 40;
    assert!(refused > 0 && refused < calls as usize / 2, "the schedule both admits and refuses ({refused})");
    let runs = evalsha_calls(&mut con);
    assert!(runs < calls / 2, "{runs} script runs for {calls} concurrent calls: not coalesced");
}

/// A call at a time, from a plain thread: each alone in its batch, answered as before.
#[test]
fn blocking_calls_one_at_a_time() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let limiter = Limiter::builder("batch::blocking")
        .limit(LimitType::Global, [Rule::from_millis(60_000, 3).unwrap()])
        .store(store)
        .refusal_cache(false)
        .build()
        .unwrap();
    let mut con = server.client();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
    for left in [2, 1, 0] {
        let permit = limiter.check_blocking(&[Subject::global()], 1).unwrap();
        assert_eq!(permit.quota().unwrap().remaining, left);
    }
    let refused = limiter.check_blocking(&[Subject::global()], 1).unwrap_err();
    assert!(refused.retry_after() > Duration::from_secs(59), "{refused}");
    assert_eq!(evalsha_calls(&mut con), 4, "one script run per call");
}

/// Concurrent calls with a shadow limit beside the enforced one are never coalesced as if both
/// were enforced: the shadow limit (50 per 10 min) fills up and every call still passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_a_shadow_limit_are_never_refused_by_it() {
    let server = RedisServer::start();
    let store: StoreHandle = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).unwrap());
    let rule = |count| Rule::from_millis(600_000, count).unwrap();
    let limiter = Arc::new(
        Limiter::builder("batch::shadowed")
            .limit(LimitType::Key, [rule(10_000)])
            .limit(LimitType::Global, [rule(50)])
            .mode(ratelimit::Mode::Shadow)
            .store(store.clone())
            .refusal_cache(false)
            .build()
            .unwrap(),
    );
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let subjects = [Subject::bytes(&b"k"[..]), Subject::global()];
                let mut refused = 0;
                for _ in 0..10 {
                    if limiter.check(&subjects, 1).await.is_err() {
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let mut refused = 0;
    for t in tasks {
        refused += t.await.unwrap();
    }
    assert_eq!(refused, 0, "a shadow limit refused calls");
    // The shadow limit counted exactly what it admitted: its quota, no more.
    let mut con = server.client();
    let key = format!("{DEFAULT_PREFIX}{{batch::shadowed|global|}}:sw:10mx50");
    let logged: u64 = redis::cmd("ZCARD").arg(&key).query(&mut con).unwrap();
    assert_eq!(logged, 50, "{key}");
}
