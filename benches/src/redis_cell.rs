//! Redis's time per GCRA decision under load, ours against redis-cell's `CL.THROTTLE` (a GCRA
//! written in Rust as a Redis module, the base of Redis 8.8's `GCRA` command).
//!
//! The module is not this project's and is not built by it: `REDIS_CELL_MODULE` names a built
//! `libredis_cell.so` (BENCHMARKS.md says how to build it), which the harness loads into a
//! redis-server of its own. Without it, the row says so and is not a target.

use crate::report::{fmt, Figure, Report, Target, ROUNDS};
use crate::support::RedisServer;
use ratelimit::store::RedisStore;
use ratelimit::{Algorithm, Limit, LimitType, Limiter, Rule, Subject};
use redis::aio::MultiplexedConnection;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SUBJECTS: usize = 1000;
const CALLERS: usize = 64;

/// Measures, on one redis-server with the module loaded, Redis's µs per decision of our `Gcra`
/// (the attribute's limit, one rule that admits every call, through the library's store) and of
/// redis-cell's, round by round in turn, and adds the target row: the median of the rounds' own
/// ratios. One server and interleaved rounds: the other sections' keys on the harness's own
/// server, and the machine's drift from one minute to the next, are then the same for both.
pub async fn compare(report: &mut Report) {
    let Some(module) = std::env::var_os("REDIS_CELL_MODULE") else {
        println!("redis-cell: not measured (REDIS_CELL_MODULE names no built module; see BENCHMARKS.md)");
        return;
    };
    let module = module.to_string_lossy().into_owned();
    let server = RedisServer::start_with(&["--loadmodule", &module]);
    let client = redis::Client::open(server.url()).expect("client");
    let conn = client.get_multiplexed_async_connection().await.expect("connect");
    let store = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).expect("store"));
    let limiter = Limiter::builder("bench::gcra")
        .limit(
            Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 1_000_000_000).expect("rule")])
                .algorithm(Algorithm::Gcra),
        )
        .store(store)
        .build()
        .expect("limiter");
    let limiter = Arc::new(limiter);
    let (mut ours, mut cell, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let o = ours_under_load(&limiter, &conn).await;
        let c = usec_under_load(&conn).await;
        ours.push(o);
        cell.push(c);
        ratios.push(o / c);
    }
    let (ours, cell, ratios) = (Figure::of(ours), Figure::of(cell), Figure::of(ratios));
    println!("{:<36} 64 callers: server {} per decision (the module's server)", "ours, Gcra", ours.show("µs"));
    println!("{:<36} 64 callers: server {} per decision", "redis-cell CL.THROTTLE", cell.show("µs"));
    println!("{:<36} per round {}", "ours / redis-cell", ratios.show("x"));
    report.target(Target {
        name: "GCRA server µs per decision, 64 callers: ours / redis-cell",
        measured: format!("{} µs", fmt(ours.median)),
        reference: format!("{} µs", fmt(cell.median)),
        ratio: ratios.median,
        bound: 1.5,
        at_most: true,
    });
}

/// µs of Redis time per decision of `limiter` with 64 concurrent callers over 1000 subjects
/// (coalesced by the library), from INFO commandstats.
async fn ours_under_load(limiter: &Arc<Limiter>, conn: &MultiplexedConnection) -> f64 {
    let mut c = conn.clone();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.expect("resetstat");
    let deadline = Instant::now() + Duration::from_millis(1500);
    let tasks: Vec<_> = (0..CALLERS)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    let i = (t * 7919 + n) % SUBJECTS;
                    let ip = IpAddr::from([10, 3, (i / 256) as u8, (i % 256) as u8]);
                    limiter.check(&[Subject::ip(ip)]).await.expect("admitted");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut decisions = 0;
    for t in tasks {
        decisions += t.await.expect("task");
    }
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut c).await.expect("info");
    crate::support::command_stat(&info, "evalsha", "usec") / decisions as f64
}

/// µs of Redis time per `CL.THROTTLE` with 64 concurrent callers over 1000 subjects, each call
/// admitted (a burst and rate no call reaches), from INFO commandstats.
async fn usec_under_load(conn: &MultiplexedConnection) -> f64 {
    let mut c = conn.clone();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.expect("resetstat");
    let deadline = Instant::now() + Duration::from_millis(1500);
    let tasks: Vec<_> = (0..CALLERS)
        .map(|t| {
            let mut c = conn.clone();
            tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    let key = format!("cell:10.2.{}.{}", (t * 7919 + n) % SUBJECTS / 256, (t * 7919 + n) % 256);
                    let answer: Vec<i64> = redis::cmd("CL.THROTTLE")
                        .arg(key)
                        .arg(1_000_000_000u64)
                        .arg(1_000_000_000u64)
                        .arg(60)
                        .arg(1)
                        .query_async(&mut c)
                        .await
                        .expect("CL.THROTTLE");
                    assert_eq!(answer.first(), Some(&0), "redis-cell admitted");
                    n += 1;
                }
                n
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut c).await.expect("info");
    let field = |name: &str| crate::support::command_stat(&info, "cl.throttle", name);
    field("usec") / field("calls")
}
