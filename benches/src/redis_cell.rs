//! Redis's time per GCRA decision under load, ours against redis-cell's `CL.THROTTLE` (a GCRA
//! written in Rust as a Redis module, the base of Redis 8.8's `GCRA` command).
//!
//! The module is not this project's and is not built by it: `REDIS_CELL_MODULE` names a built
//! `libredis_cell.so` (BENCHMARKS.md says how to build it), which the harness loads into a
//! redis-server of its own. Without it, the row says so and is not a target.

use crate::report::{fmt, Figure, Report, Target, ROUNDS};
use crate::support::RedisServer;
use redis::aio::MultiplexedConnection;
use std::time::{Duration, Instant};

const SUBJECTS: usize = 1000;
const CALLERS: usize = 64;

/// Prints redis-cell's µs per decision under the load `ours_usec` was measured under, and the
/// target row comparing the two.
pub async fn compare(ours_usec: f64, report: &mut Report) {
    let Some(module) = std::env::var_os("REDIS_CELL_MODULE") else {
        println!("redis-cell: not measured (REDIS_CELL_MODULE names no built module; see BENCHMARKS.md)");
        return;
    };
    let module = module.to_string_lossy().into_owned();
    let server = RedisServer::start_with(&["--loadmodule", &module]);
    let client = redis::Client::open(server.url()).expect("client");
    let conn = client.get_multiplexed_async_connection().await.expect("connect");
    let cell = Figure::of({
        let mut xs = Vec::new();
        for _ in 0..ROUNDS {
            xs.push(usec_under_load(&conn).await);
        }
        xs
    });
    println!("{:<36} 64 callers: server {} per decision", "redis-cell CL.THROTTLE", cell.show("µs"));
    report.target(Target {
        name: "GCRA server µs per decision, 64 callers: ours / redis-cell",
        measured: format!("{} µs", fmt(ours_usec)),
        reference: format!("{} µs", fmt(cell.median)),
        ratio: ours_usec / cell.median,
        bound: 1.5,
        at_most: true,
    });
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
