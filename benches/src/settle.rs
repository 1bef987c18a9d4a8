//! Section 12: what settling costs the store. A call settled to other units than its estimate
//! (`Permit::settle`, `settle = …`) costs exactly one more script run than the call alone: the
//! settle is one round trip, and a settle to the estimate itself costs none. Counted with
//! `INFO commandstats` (EVALSHA calls), by hand and through the attribute.

use crate::report::{Report, Target};
use crate::support::RedisServer;
use ratelimit::store::RedisStore;
use ratelimit::{rate_limiter, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

const CALLS: usize = 2000;
/// Never refuses: the counts measure round trips, not refusals.
const HUGE: u64 = 1_000_000_000;

/// The attribute's form: an estimate of 100, settled to the tokens of the reply.
#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], algorithm = Gcra, cost = 100, settle = |r| *r.as_ref().unwrap_or(&0))]
async fn decorated(ip: IpAddr, tokens: u64) -> Result<u64, RateLimited> {
    let _ = ip;
    Ok(tokens)
}

/// EVALSHA calls per call of `f` (run `CALLS` times).
async fn evalsha_per_call<F: std::future::Future<Output = ()>>(
    conn: &mut redis::aio::MultiplexedConnection,
    mut f: impl FnMut(usize) -> F,
) -> f64 {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(conn).await.expect("resetstat");
    for i in 0..CALLS {
        f(i).await;
    }
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.expect("info");
    crate::support::command_stat(&info, "evalsha", "calls") / CALLS as f64
}

pub fn run(server: &RedisServer, report: &mut Report) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run_async(server, report));
}

async fn run_async(server: &RedisServer, report: &mut Report) {
    println!("\n== 12. Settling: script calls per call (INFO commandstats) ==");
    let _ = ratelimit::init(ratelimit::Config::redis(server.url()).timeout(Duration::from_secs(2)));
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let store = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).expect("store"));
    let limiter = Limiter::builder("bench::settle")
        .limit(
            Limit::new(LimitType::Ip, [Rule::from_millis(60_000, HUGE).expect("rule")])
                .algorithm(ratelimit::Algorithm::Gcra),
        )
        .store(store)
        .build()
        .expect("limiter");
    let ip = |i: usize| IpAddr::from([10, 1, (i / 256 % 256) as u8, (i % 256) as u8]);
    let limiter = &limiter;
    let alone = evalsha_per_call(&mut conn, |i| async move {
        limiter.check(&[Subject::ip(ip(i))]).cost(100).await.expect("allowed");
    })
    .await;
    let settled = evalsha_per_call(&mut conn, |i| async move {
        let permit = limiter.check(&[Subject::ip(ip(i))]).cost(100).await.expect("allowed");
        // Below, above and far above the estimate.
        permit.settle([40, 250, 5000][i % 3]).await.expect("settled");
    })
    .await;
    let at_estimate = evalsha_per_call(&mut conn, |i| async move {
        let permit = limiter.check(&[Subject::ip(ip(i))]).cost(100).await.expect("allowed");
        permit.settle(100).await.expect("settled");
    })
    .await;
    let attribute = evalsha_per_call(&mut conn, |i| async move {
        decorated(ip(i), [40, 250, 5000][i % 3]).await.expect("allowed");
    })
    .await;
    println!("{:<48} {alone:.2} EVALSHA per call", "check(cost 100), not settled");
    println!("{:<48} {settled:.2} EVALSHA per call", "check(cost 100), settled to 40 / 250 / 5000");
    println!("{:<48} {at_estimate:.2} EVALSHA per call", "check(cost 100), settled to 100");
    println!("{:<48} {attribute:.2} EVALSHA per call", "#[rate_limiter(cost = 100, settle = …)]");
    let extra = settled - alone;
    report.target(Target {
        name: "12. extra script calls per settled call",
        measured: format!("{extra:.2}"),
        reference: "1".to_owned(),
        ratio: extra.max(attribute - alone),
        bound: 1.0,
        at_most: true,
    });
}
