//! Our GCRA next to a reference GCRA script on the same Redis, and what the lean O(1) script
//! saves each O(1) algorithm.
//!
//! The reference is the algorithm go-redis/redis_rate publishes, written here from its facts: one
//! string key per subject holding the theoretical arrival time (TAT, seconds since 2017-01-01 as
//! a float), the server's `TIME`, `GET` of the TAT, and when admitted `SET` of the new TAT with
//! an `EX` expiry of the time until it is reached; a refusal writes nothing. Emission interval =
//! period / rate, burst tolerance = interval × burst, a call of cost c moves the TAT by c
//! intervals and is refused when the new TAT lies beyond now + tolerance. Its answer carries the
//! retry-after and reset as text (floats), as the published script's does.
//!
//!     cargo run --release --manifest-path benches/Cargo.toml -- --gcra

use crate::report::{fmt, Figure, Report, Target, ROUNDS};
use crate::support::RedisServer;
use ratelimit::{rate_limiter, Config, RateLimited};
use redis::aio::MultiplexedConnection;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REFERENCE_SCRIPT: &str = include_str!("gcra_reference.lua");
/// The library's general decision script, as it sends it (checked in assembled from its parts).
const GENERAL_SCRIPT: &str = include_str!("../../ratelimit-runtime/src/store/redis/lua/decide.lua");

const HUGE: u64 = 1_000_000_000;
const SUBJECTS: usize = 1000;
const PERIOD_S: u64 = 60;

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], algorithm = Gcra, name = "bench::gcra")]
async fn ours(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], algorithm = FixedWindow, name = "bench::o1fw")]
async fn ours_fw(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], algorithm = SlidingWindowCounter, name = "bench::o1swc")]
async fn ours_swc(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], algorithm = TokenBucket, name = "bench::o1tb")]
async fn ours_tb(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], algorithm = LeakyBucket, name = "bench::o1lb")]
async fn ours_lb(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Who {
    /// `#[rate_limiter(algorithm = Gcra)]` through the library (the lean O(1) script).
    Ours,
    /// The reference script, `EVALSHA` on a multiplexed connection.
    Reference,
}

/// An O(1) algorithm: its code in the script's arguments, and the attribute that uses it.
#[derive(Clone, Copy)]
enum O1 {
    Fw,
    Swc,
    Tb,
    Lb,
    Gcra,
}

impl O1 {
    const ALL: [O1; 5] = [O1::Fw, O1::Swc, O1::Tb, O1::Lb, O1::Gcra];

    fn code(self) -> &'static str {
        match self {
            O1::Fw => "fw",
            O1::Swc => "swc",
            O1::Tb => "tb",
            O1::Lb => "lb",
            O1::Gcra => "gcra",
        }
    }

    fn label(self) -> &'static str {
        match self {
            O1::Fw => "FixedWindow",
            O1::Swc => "SlidingWindowCounter",
            O1::Tb => "TokenBucket",
            O1::Lb => "LeakyBucket",
            O1::Gcra => "Gcra",
        }
    }

    async fn call(self, ip: IpAddr) {
        match self {
            O1::Fw => ours_fw(ip).await,
            O1::Swc => ours_swc(ip).await,
            O1::Tb => ours_tb(ip).await,
            O1::Lb => ours_lb(ip).await,
            O1::Gcra => ours(ip).await,
        }
        .expect("allowed");
    }
}

struct Ctx {
    conn: MultiplexedConnection,
    reference_sha: String,
    general_sha: String,
    ips: Vec<IpAddr>,
}

/// `--gcra`: only these figures (its own server and global store).
pub fn run_alone() {
    let server = RedisServer::start();
    let mut report = Report::default();
    println!("GCRA next to the reference script — redis-server on 127.0.0.1:{}", server.port());
    run(&server, &mut report);
    report.print_targets();
}

pub fn run(server: &RedisServer, report: &mut Report) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run_async(server, report));
}

async fn context(server: &RedisServer) -> Arc<Ctx> {
    // Already done when the whole harness runs (the first init wins; the same server).
    let _ = ratelimit::init(Config::redis(server.url()).timeout(Duration::from_secs(2)));
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let reference_sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(REFERENCE_SCRIPT).query_async(&mut conn).await.expect("load");
    let general_sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(GENERAL_SCRIPT).query_async(&mut conn).await.expect("load general");
    let ips = (0..SUBJECTS).map(|i| IpAddr::from([10, 2, (i / 256) as u8, (i % 256) as u8])).collect();
    Arc::new(Ctx { conn, reference_sha, general_sha, ips })
}

async fn reference(ctx: &Ctx, i: usize) {
    let ip = ctx.ips[i % SUBJECTS];
    let answer: Vec<redis::Value> = redis::cmd("EVALSHA")
        .arg(&ctx.reference_sha)
        .arg(1)
        .arg(format!("rate:{ip}"))
        .arg(HUGE)
        .arg(HUGE)
        .arg(PERIOD_S)
        .arg(1)
        .query_async(&mut ctx.conn.clone())
        .await
        .expect("reference script");
    assert!(matches!(answer.first(), Some(redis::Value::Int(1))), "reference admitted: {answer:?}");
}

/// The general script on an O(1) limit, with the arguments the library sends for one rule.
async fn general(ctx: &Ctx, alg: O1, i: usize) {
    let ip = ctx.ips[i % SUBJECTS];
    // The script's reply: little-endian doubles, `allowed` first.
    let answer: Vec<u8> = redis::cmd("EVALSHA")
        .arg(&ctx.general_sha)
        .arg(1)
        .arg(format!("general:{{{ip}}}:{}", alg.code()))
        .arg(0)
        .arg(1)
        .arg(&[0u8; 16][..])
        .arg("d")
        // when admitted (a release's), then the limit: no block, no concurrency, no lease
        .arg(0)
        .arg(0)
        .arg(0)
        .arg(0)
        .arg(alg.code())
        .arg(1)
        .arg(0)
        .arg(PERIOD_S * 1_000_000)
        .arg(HUGE)
        .query_async(&mut ctx.conn.clone())
        .await
        .expect("general script");
    assert_eq!(answer.get(..8), Some(&1f64.to_le_bytes()[..]), "general admitted");
}

async fn call(ctx: &Ctx, who: Who, i: usize) {
    match who {
        Who::Ours => ours(ctx.ips[i % SUBJECTS]).await.expect("allowed"),
        Who::Reference => reference(ctx, i).await,
    }
}

async fn run_async(server: &RedisServer, report: &mut Report) {
    let ctx = context(server).await;
    for i in 0..2000 {
        call(&ctx, Who::Ours, i).await;
        call(&ctx, Who::Reference, i).await;
        for alg in O1::ALL {
            alg.call(ctx.ips[i % SUBJECTS]).await;
            general(&ctx, alg, i).await;
        }
    }

    println!("\n== GCRA next to the reference script (go-redis/redis_rate's algorithm) ==");
    let (mut tput, mut usec) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for _ in 0..ROUNDS {
        for (k, who) in [Who::Ours, Who::Reference].into_iter().enumerate() {
            tput[k].push(throughput(&ctx, who, 64, Duration::from_millis(1500)).await);
            usec[k].push(server_usec(&ctx, 3000, |i| call(&ctx, who, i)).await);
        }
    }
    let tput = tput.map(Figure::of);
    let usec = usec.map(Figure::of);
    for (k, label) in ["#[rate_limiter(algorithm = Gcra)]", "reference GCRA script"].into_iter().enumerate() {
        println!("{label:<36} 64 callers {:<28} server {} per decision", tput[k].show("/s"), usec[k].show("µs"));
    }
    report.target(Target {
        name: "GCRA throughput, 64 callers: ours / reference",
        measured: format!("{}/s", fmt(tput[0].median)),
        reference: format!("{}/s", fmt(tput[1].median)),
        ratio: tput[0].median / tput[1].median,
        bound: 1.0,
        at_most: false,
    });
    report.target(Target {
        name: "GCRA server µs per decision: ours / ref.",
        measured: format!("{} µs", fmt(usec[0].median)),
        reference: format!("{} µs", fmt(usec[1].median)),
        ratio: usec[0].median / usec[1].median,
        bound: 1.0,
        at_most: true,
    });

    // Redis's own time per decision when it is busy (64 callers), beside redis-cell's native
    // GCRA under the same load when a built module is named.
    let loaded = Figure::of({
        let mut xs = Vec::new();
        for _ in 0..ROUNDS {
            xs.push(server_usec_under_load(&ctx, Who::Ours, 64).await);
        }
        xs
    });
    println!("{:<36} 64 callers: server {} per decision", "#[rate_limiter(algorithm = Gcra)]", loaded.show("µs"));
    crate::redis_cell::compare(report).await;

    println!("\n== Server µs per decision of the O(1) algorithms: general script (before) / lean script (after) ==");
    for alg in O1::ALL {
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            before.push(server_usec(&ctx, 3000, |i| general(&ctx, alg, i)).await);
            after.push(server_usec(&ctx, 3000, |i| alg.call(ctx.ips[i % SUBJECTS])).await);
        }
        let (before, after) = (Figure::of(before), Figure::of(after));
        println!(
            "{:<22} before {:<26} after {:<26} {:.2}x",
            alg.label(),
            before.show("µs"),
            after.show("µs"),
            after.median / before.median
        );
    }
}

async fn throughput(ctx: &Arc<Ctx>, who: Who, callers: usize, run: Duration) -> f64 {
    let (decisions, elapsed) = load(ctx, who, callers, run).await;
    decisions as f64 / elapsed.as_secs_f64()
}

/// `callers` tasks deciding for `run`: how many decisions, in how long.
async fn load(ctx: &Arc<Ctx>, who: Who, callers: usize, run: Duration) -> (usize, Duration) {
    let deadline = Instant::now() + run;
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    call(&ctx, who, c * 7919 + n).await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    (total, started.elapsed())
}

/// µs of Redis time per decision with `callers` concurrent callers (coalesced into batches by
/// the library: one `EVALSHA` decides many), from INFO commandstats.
async fn server_usec_under_load(ctx: &Arc<Ctx>, who: Who, callers: usize) -> f64 {
    let mut conn = ctx.conn.clone();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.expect("resetstat");
    let (decisions, _) = load(ctx, who, callers, Duration::from_millis(1500)).await;
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.expect("info");
    let field = |name: &str| crate::support::command_stat(&info, "evalsha", name);
    // How well the calls coalesced: a run costs the server its dispatch and TIME whatever it
    // decides, so fewer decisions per run cost more each.
    println!("  {callers} callers: {:.1} decisions per EVALSHA", decisions as f64 / field("calls"));
    field("usec") / decisions as f64
}

/// µs of Redis time per `EVALSHA` over `decisions` sequential calls (INFO commandstats).
async fn server_usec<F, Fut>(ctx: &Ctx, decisions: usize, mut one: F) -> f64
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut conn = ctx.conn.clone();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.expect("resetstat");
    for i in 0..decisions {
        one(i).await;
    }
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.expect("info");
    let field = |name: &str| crate::support::command_stat(&info, "evalsha", name);
    let calls = field("calls");
    assert!(calls >= decisions as f64, "{calls} EVALSHA for {decisions} decisions");
    field("usec") / calls
}
