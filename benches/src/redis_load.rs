//! The Redis figures: latency, throughput, server cost, memory per subject, growth.

use crate::report::{fmt, quantile, Figure, Report, Target, ROUNDS};
use crate::support::RedisServer;
use ratelimit::{
    rate_limiter, store::RedisStore, Algorithm, Config, Limit, LimitType, Limiter, RateLimited, Rule, Subject,
};
use redis::aio::MultiplexedConnection;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The seed documents' sliding window, as a reference: one ZSET per rule, client time in ms,
/// a 36-character UUID text member.
pub(crate) const SEED_SCRIPT: &str = r"
local now = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local window = tonumber(ARGV[1 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
  if redis.call('ZCARD', key) >= tonumber(ARGV[2 + 2 * i]) then return 0 end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[2])
  redis.call('PEXPIRE', key, ARGV[1 + 2 * i])
end
return 1
";

const HUGE: u64 = 1_000_000_000;
const WINDOWS_MS: [u64; 3] = [60_000, 30_000, 10_000];
/// Distinct client IPs the load rotates over (one log each).
const SUBJECTS: usize = 1000;

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], name = "bench::decorated1")]
async fn decorated_one(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000), (30s, 1_000_000_000), (10s, 1_000_000_000)], name = "bench::decorated3")]
async fn decorated_three(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], name = "bench::stacked")]
#[rate_limiter(type = Global, rules = [(60s, 1_000_000_000)])]
async fn decorated_stacked(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Ping,
    Seed1,
    Seed3,
    Lib1,
    Decorated1,
    Decorated3,
    Stacked,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Ping => "bare PING",
            Variant::Seed1 => "reference seed script, 1 rule",
            Variant::Seed3 => "reference seed script, 3 rules",
            Variant::Lib1 => "Limiter::check by hand, 1 rule",
            Variant::Decorated1 => "#[rate_limiter] async fn, 1 rule",
            Variant::Decorated3 => "#[rate_limiter] async fn, 3 rules",
            Variant::Stacked => "#[rate_limiter] Ip + Global stacked",
        }
    }
}

struct Ctx {
    conn: MultiplexedConnection,
    seed_sha: String,
    lib1: Limiter,
    ips: Vec<IpAddr>,
    /// The second octet of the subjects' IPs (0 unless the sweep set another): a fresh block of
    /// subjects, whose logs hold no earlier point's calls.
    block: AtomicU8,
}

/// The `i`-th of the current block's subjects.
fn subject(ctx: &Ctx, i: usize) -> IpAddr {
    match ctx.ips[i % SUBJECTS] {
        IpAddr::V4(ip) => {
            let [a, _, c, d] = ip.octets();
            IpAddr::from([a, ctx.block.load(Ordering::Relaxed), c, d])
        }
        ip => ip,
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

async fn seed(ctx: &Ctx, rules: usize, i: usize) {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&ctx.seed_sha).arg(rules);
    for w in &WINDOWS_MS[..rules] {
        cmd.arg(format!("seed:{}:{w}", subject(ctx, i)));
    }
    cmd.arg(now_ms()).arg(uuid::Uuid::new_v4().to_string());
    for w in &WINDOWS_MS[..rules] {
        cmd.arg(w).arg(HUGE);
    }
    let ok: i64 = cmd.query_async(&mut ctx.conn.clone()).await.expect("seed script");
    assert_eq!(ok, 1);
}

async fn call(ctx: &Ctx, v: Variant, i: usize) {
    let ip = subject(ctx, i);
    match v {
        Variant::Ping => {
            let _: String = redis::cmd("PING").query_async(&mut ctx.conn.clone()).await.expect("ping");
        }
        Variant::Seed1 => seed(ctx, 1, i).await,
        Variant::Seed3 => seed(ctx, 3, i).await,
        Variant::Lib1 => {
            let permit = ctx.lib1.check(&[Subject::ip(ip)]).await.expect("allowed");
            assert!(permit.quota().is_some(), "decided by Redis");
        }
        Variant::Decorated1 => decorated_one(ip).await.expect("allowed"),
        Variant::Decorated3 => decorated_three(ip).await.expect("allowed"),
        Variant::Stacked => decorated_stacked(ip).await.expect("allowed"),
    }
}

pub fn profile(server: &RedisServer) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let ctx = context(server).await;
        // PROFILE_CALLERS: the points (64 unless set, e.g. "1,4,16"); each point runs the two
        // variants in turn, PROFILE_ROUNDS times (1 unless set), and prints the median ratio.
        let callers: Vec<usize> = std::env::var("PROFILE_CALLERS")
            .ok()
            .map(|c| c.split(',').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_else(|| vec![64]);
        let rounds: usize = std::env::var("PROFILE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1);
        let only_seed = std::env::var_os("PROFILE_SEED").is_some();
        let variants: &[Variant] = match (rounds > 1, only_seed) {
            (true, _) => &[Variant::Decorated1, Variant::Seed1],
            (false, true) => &[Variant::Seed1],
            (false, false) => &[Variant::Decorated1],
        };
        for &v in variants {
            for i in 0..2000 {
                call(&ctx, v, i).await;
            }
        }
        // PROFILE_TAIL: instead, one caller's latencies in a worker task, 50 000 calls per
        // variant in alternating turns of 500, as quantiles and a mean (a throughput is a mean,
        // which a tail moves where a median does not).
        if std::env::var_os("PROFILE_TAIL").is_some() {
            let mut us = [Vec::new(), Vec::new()];
            for turn in 0..100 {
                for (s, &v) in [Variant::Decorated1, Variant::Seed1].iter().enumerate() {
                    us[s].extend(task_latencies(&ctx, v, 5000 + turn * 500, 500).await);
                }
            }
            for (s, mut xs) in us.into_iter().enumerate() {
                xs.sort_by(f64::total_cmp);
                let q = |p: f64| xs[((xs.len() - 1) as f64 * p) as usize];
                let mean = xs.iter().sum::<f64>() / xs.len() as f64;
                println!(
                    "{}: mean {mean:.1} p10 {:.1} p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.0}; sum above p99 {:.0} ms of {:.0}",
                    ["ours", "seed"][s], q(0.1), q(0.5), q(0.9), q(0.99), q(0.999), q(1.0),
                    xs.iter().filter(|&&x| x > q(0.99)).sum::<f64>() / 1000.0, xs.iter().sum::<f64>() / 1000.0
                );
            }
            return;
        }
        let run = if rounds > 1 { Duration::from_millis(1000) } else { Duration::from_secs(6) };
        for &c in &callers {
            let mut ratios = Vec::new();
            for _ in 0..rounds {
                let mut rates = Vec::new();
                for &v in variants {
                    let (client, server) = (process_cpu_us(), redis_cpu_us(&ctx).await);
                    let rate = throughput(&ctx, v, c, run).await;
                    let calls = rate * run.as_secs_f64();
                    // CPU per call: this process (callers, connection, library) and Redis.
                    println!(
                        "{c} callers, {}: CPU µs per call: here {:.2}, Redis {:.2}",
                        v.label(),
                        (process_cpu_us() - client) / calls,
                        (redis_cpu_us(&ctx).await - server) / calls
                    );
                    rates.push(rate);
                }
                if let [ours, seed] = rates[..] {
                    ratios.push(ours / seed);
                }
                println!("{c} callers: {:?}", rates.iter().map(|r| r.round()).collect::<Vec<_>>());
            }
            ratios.sort_by(f64::total_cmp);
            if !ratios.is_empty() {
                let shown: Vec<f64> = ratios.iter().map(|r| (r * 100.0).round() / 100.0).collect();
                println!("{c} callers: median ratio ours/seed {:.2} of {shown:?}", ratios[ratios.len() / 2]);
            }
        }
    });
}

pub fn run(server: &RedisServer, report: &mut Report) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(run_async(server, report));
}

async fn context(server: &RedisServer) -> Arc<Ctx> {
    // Once per process: the sweep builds a context again after the sections (same server).
    let _ = ratelimit::init(Config::redis(server.url()).timeout(Duration::from_secs(2)));
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let seed_sha: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(SEED_SCRIPT).query_async(&mut conn).await.expect("load");
    let store = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(2)).expect("store"));
    let lib1 = Limiter::builder("bench::lib1")
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, HUGE).expect("rule")]))
        .store(store)
        .build()
        .expect("limiter");
    let ips = (0..SUBJECTS).map(|i| IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8])).collect();
    Arc::new(Ctx { conn, seed_sha, lib1, ips, block: AtomicU8::new(0) })
}

async fn run_async(server: &RedisServer, report: &mut Report) {
    let ctx = context(server).await;
    latency_section(&ctx, report).await;
    throughput_section(&ctx, report).await;
    server_cost_section(&ctx, report).await;

    // 6. Memory per subject.
    println!("\n== 6. Redis memory per subject (sliding window) ==");
    memory_per_subject(server).await;

    // 7. Growth.
    println!("\n== 7. Decision cost as the window fills (one key) ==");
    growth(server).await;
}

/// Section 1 alone (`--latency`).
pub fn run_latency(server: &RedisServer, report: &mut Report) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let ctx = context(server).await;
        latency_section(&ctx, report).await;
    });
}

async fn latency_section(ctx: &Arc<Ctx>, report: &mut Report) {
    use Variant::*;
    let all = [Ping, Seed1, Seed3, Lib1, Decorated1, Decorated3, Stacked];
    // Warm up: connections, script caches, key populations.
    for v in all {
        for i in 0..2000 {
            call(ctx, v, i).await;
        }
    }

    // 1. Latency, one caller.
    println!("== 1. Latency, one sequential caller (µs) ==");
    let mut p50 = vec![Vec::new(); all.len()];
    let mut p99 = vec![Vec::new(); all.len()];
    for _ in 0..ROUNDS {
        for (k, &v) in all.iter().enumerate() {
            let mut samples = Vec::with_capacity(4000);
            for i in 0..4000 {
                let t = Instant::now();
                call(ctx, v, i).await;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
            samples.sort_by(f64::total_cmp);
            p50[k].push(quantile(&samples, 0.5));
            p99[k].push(quantile(&samples, 0.99));
        }
    }
    let lat: Vec<(Figure, Figure)> =
        (0..all.len()).map(|k| (Figure::of(p50[k].clone()), Figure::of(p99[k].clone()))).collect();
    for (k, v) in all.iter().enumerate() {
        println!("{:<40} p50 {:<26} p99 {}", v.label(), lat[k].0.show("µs"), lat[k].1.show("µs"));
    }
    let idx = |v: Variant| all.iter().position(|&x| x == v).expect("variant");
    // The median of the rounds' own ratios: a round's variants ran within a second of each
    // other, while the machine's speed drifts from round to round.
    let (ours, seed) = (idx(Decorated1), idx(Seed1));
    let ratios = Figure::of(p50[ours].iter().zip(&p50[seed]).map(|(o, s)| o / s).collect());
    println!("p50, decorated 1 rule / seed 1 rule, per round: {}", ratios.show("x"));
    report.target(Target {
        name: "1. latency p50: decorated 1 rule / seed 1 rule",
        measured: format!("{} µs", fmt(lat[ours].0.median)),
        reference: format!("{} µs", fmt(lat[seed].0.median)),
        ratio: ratios.median,
        bound: 1.1,
        at_most: true,
    });
}

async fn server_cost_section(ctx: &Arc<Ctx>, report: &mut Report) {
    use Variant::*;
    // 3. Server cost.
    println!("\n== 3. Server cost per decision (INFO commandstats) ==");
    for v in [Seed1, Seed3, Decorated1, Decorated3, Stacked] {
        let (usec, calls) = server_cost(ctx, v, 3000).await;
        println!("{:<40} {:>6.2} µs of Redis CPU, {:.2} EVALSHA per decision", v.label(), usec, calls);
        if v == Stacked {
            report.target(Target {
                name: "3. EVALSHA per decision, 2 stacked attributes",
                measured: format!("{calls:.2}"),
                reference: "1".to_owned(),
                ratio: calls,
                bound: 1.0,
                at_most: true,
            });
        }
    }
}

/// Section 2 alone (`--throughput`): a warm-up, then the interleaved rounds and their targets.
pub fn run_throughput(server: &RedisServer, report: &mut Report) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let ctx = context(server).await;
        for v in [Variant::Seed1, Variant::Seed3, Variant::Decorated1, Variant::Decorated3] {
            for i in 0..2000 {
                call(&ctx, v, i).await;
            }
        }
        throughput_section(&ctx, report).await;
    });
}

async fn throughput_section(ctx: &Arc<Ctx>, report: &mut Report) {
    use Variant::*;
    // 2. Throughput, 64 concurrent callers on the shared connection.
    println!("\n== 2. Throughput, 64 concurrent callers (decisions/s) ==");
    let tput_variants = [Seed1, Seed3, Decorated1, Decorated3];
    let mut tput = vec![Vec::new(); tput_variants.len()];
    for round in 0..ROUNDS {
        // Each round on subjects of its own (blocks 200 on, apart from the sweep's): a log keeps
        // a minute of calls, so on shared subjects the series that made more calls in the
        // rounds before would trim more units per call in this one (a cost of its earlier
        // speed), and every log would grow from round to round.
        ctx.block.store(200 + round as u8, Ordering::Relaxed);
        for (k, &v) in tput_variants.iter().enumerate() {
            tput[k].push(throughput(ctx, v, 64, Duration::from_millis(1500)).await);
        }
    }
    ctx.block.store(0, Ordering::Relaxed);
    for (name, ours, theirs) in
        [("2. throughput 1 rule: decorated / seed", 2, 0), ("2. throughput 3 rules: decorated / seed", 3, 1)]
    {
        // The median of the rounds' own ratios: a round's series ran within seconds of each
        // other, while the machine's speed drifts from round to round.
        let ratios = Figure::of(tput[ours].iter().zip(&tput[theirs]).map(|(o, t)| o / t).collect());
        let (o, t) = (Figure::of(tput[ours].clone()), Figure::of(tput[theirs].clone()));
        report.target(Target {
            name,
            measured: format!("{}/s", fmt(o.median)),
            reference: format!("{}/s", fmt(t.median)),
            ratio: ratios.median,
            bound: if ours == 2 { 1.05 } else { 1.5 },
            at_most: false,
        });
        println!("{name}: per round {}", ratios.show("x"));
    }
    for (k, v) in tput_variants.iter().enumerate() {
        println!("{:<40} {}", v.label(), Figure::of(tput[k].clone()).show("/s"));
    }
}

/// The sweep's Redis series (see sweep.rs): decisions/s of the decorated async fn and of the
/// seed script, 1 rule, at each number of callers; each point the median of `rounds` runs of
/// `run`, the two interleaved.
///
/// Then the targets of the low-concurrency points (decorated / seed: at least 1.0× at 1, 4 and
/// 16 callers, 1.3× at 256), and the p50 latency of one caller awaiting from a worker task, as a
/// handler does (section 1 awaits from `block_on`, where no worker has to be woken).
pub fn sweep(
    server: &RedisServer,
    callers: &[u32],
    run: Duration,
    rounds: usize,
    report: &mut Report,
) -> Vec<crate::plot::Series> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let ctx = context(server).await;
        let variants = [
            (Variant::Decorated1, "#[rate_limiter] async fn on Redis (exact, 1 rule)"),
            (Variant::Seed1, "seed-style script on Redis (1 rule)"),
        ];
        for (v, _) in variants {
            for i in 0..2000 {
                call(&ctx, v, i).await;
            }
        }
        let mut figures = vec![vec![Vec::new(); callers.len()]; variants.len()];
        // Each point, and each round of the p50 below, on subjects of its own, the same number
        // for both series: a log keeps a minute of calls, so on shared subjects the series that
        // made more calls in the minute before (ours, at 64 and 256 callers) would trim more
        // units per call at the next point, a cost of its earlier speed, not of this point.
        let mut block = 0u8;
        let mut fresh = || {
            block += 1;
            ctx.block.store(block, Ordering::Relaxed);
        };
        for _ in 0..rounds {
            for (k, &c) in callers.iter().enumerate() {
                fresh();
                // A round's `run` per variant, in SLICES turns: on a shared 2-core machine the
                // speed of both drifts over seconds, and turns a fifth as long expose the two to
                // the same drift (one turn each read up to ±15 % apart on the same build).
                let mut done = vec![(0.0, 0.0); variants.len()];
                for _ in 0..SLICES {
                    for (s, &(v, _)) in variants.iter().enumerate() {
                        let (calls, secs) = calls_in(&ctx, v, c as usize, run / SLICES).await;
                        done[s].0 += calls;
                        done[s].1 += secs;
                    }
                }
                for (s, (calls, secs)) in done.into_iter().enumerate() {
                    figures[s][k].push(calls / secs);
                }
            }
        }
        let mut p50 = [Vec::new(), Vec::new()];
        let mut switches = [0.0; 2];
        for _ in 0..rounds {
            fresh();
            // 2000 calls per series, in turns of 200 (as the points' slices, for the same drift).
            let mut us = [Vec::new(), Vec::new()];
            for turn in 0..10 {
                for (s, &(v, _)) in variants.iter().enumerate() {
                    let before = thread_switches();
                    us[s].extend(task_latencies(&ctx, v, turn * 200, 200).await);
                    switches[s] += (thread_switches() - before) as f64 / (2000 * rounds) as f64;
                }
            }
            for (s, mut us) in us.into_iter().enumerate() {
                us.sort_by(f64::total_cmp);
                p50[s].push(us[us.len() / 2]);
            }
        }
        let [ours, seed] = p50.map(Figure::of);
        println!("p50 µs, one caller in a worker task: decorated {}, seed {}", ours.show("µs"), seed.show("µs"));
        // Each time a thread of this process sleeps and is woken counts once: the hops a call
        // takes between threads, which no load on the machine changes.
        println!(
            "threads put to sleep per call, one caller in a worker task: decorated {:.2}, seed {:.2}",
            switches[0], switches[1]
        );
        report.target(Target {
            name: "sweep: p50 µs, 1 task caller: decorated / seed",
            measured: format!("{} µs", fmt(ours.median)),
            reference: format!("{} µs", fmt(seed.median)),
            ratio: ours.median / seed.median,
            bound: 1.0,
            at_most: true,
        });
        let points: [(u32, &'static str, f64); 4] = [
            (1, "sweep 1 caller: decorated / seed", 1.0),
            (4, "sweep 4 callers: decorated / seed", 1.0),
            (16, "sweep 16 callers: decorated / seed", 1.0),
            (256, "sweep 256 callers: decorated / seed", 1.3),
        ];
        for (c, name, bound) in points {
            let Some(k) = callers.iter().position(|&x| x == c) else { continue };
            let (ours, seed) = (Figure::of(figures[0][k].clone()).median, Figure::of(figures[1][k].clone()).median);
            // The ratio is the median of the rounds' own ratios: the two series of a round ran in
            // the same seconds, interleaved, while the machine's speed drifts from round to round
            // (a ratio of the two medians can pair a fast round of one with a slow one of the
            // other).
            let ratios = Figure::of(figures[0][k].iter().zip(&figures[1][k]).map(|(o, s)| o / s).collect());
            println!("{c} callers: decorated / seed per round, median {}", ratios.show("x"));
            report.target(Target {
                name,
                measured: format!("{}/s", fmt(ours)),
                reference: format!("{}/s", fmt(seed)),
                ratio: ratios.median,
                bound,
                at_most: false,
            });
        }
        variants
            .iter()
            .zip(figures)
            .map(|(&(_, name), mut per)| crate::plot::Series {
                name: name.to_owned(),
                points: callers
                    .iter()
                    .zip(per.iter_mut())
                    .map(|(&c, xs)| (c, Figure::of(std::mem::take(xs)).median))
                    .collect(),
            })
            .collect()
    })
}

/// The voluntary context switches of every thread of this process so far (Linux; 0 elsewhere).
fn thread_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .filter_map(|status| {
            status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|n| n.trim().parse::<u64>().ok())
        })
        .sum()
}

/// The µs of each of `n` calls one after another (subjects `from` on), from one task spawned on
/// the runtime.
async fn task_latencies(ctx: &Arc<Ctx>, v: Variant, from: usize, n: usize) -> Vec<f64> {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let mut us = Vec::with_capacity(n);
        for i in from..from + n {
            let start = Instant::now();
            call(&ctx, v, i).await;
            us.push(start.elapsed().as_secs_f64() * 1e6);
        }
        us
    })
    .await
    .expect("task")
}

/// Turns per variant in one round of a sweep point.
const SLICES: u32 = 5;

async fn throughput(ctx: &Arc<Ctx>, v: Variant, callers: usize, run: Duration) -> f64 {
    let (calls, secs) = calls_in(ctx, v, callers, run).await;
    calls / secs
}

/// The calls `callers` tasks complete in about `run`, and the seconds they took.
async fn calls_in(ctx: &Arc<Ctx>, v: Variant, callers: usize, run: Duration) -> (f64, f64) {
    let deadline = Instant::now() + run;
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let mut n = 0usize;
                while Instant::now() < deadline {
                    call(&ctx, v, c * 7919 + n).await;
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
    (total as f64, started.elapsed().as_secs_f64())
}

/// This process's CPU time so far (user and system, every thread), in µs (Linux; 0 elsewhere).
fn process_cpu_us() -> f64 {
    // Fields 14 and 15 of /proc/self/stat, after the command name's closing parenthesis, in
    // clock ticks of 10 ms (USER_HZ is 100 on Linux).
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let f: Vec<f64> = rest.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
    f.iter().sum::<f64>() * 10_000.0
}

/// Redis's CPU time so far (user and system), in µs.
async fn redis_cpu_us(ctx: &Ctx) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut ctx.conn.clone()).await.expect("info");
    info.lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| l.split_once(':').and_then(|(_, v)| v.trim().parse::<f64>().ok()))
        .sum::<f64>()
        * 1e6
}

/// (µs of server time per decision, EVALSHA calls per decision).
async fn server_cost(ctx: &Ctx, v: Variant, decisions: usize) -> (f64, f64) {
    let mut conn = ctx.conn.clone();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.expect("resetstat");
    for i in 0..decisions {
        call(ctx, v, i).await;
    }
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.expect("info");
    let field = |name: &str| crate::support::command_stat(&info, "evalsha", name);
    (field("usec") / decisions as f64, field("calls") / decisions as f64)
}

async fn memory_per_subject(server: &RedisServer) {
    let store = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(5)).expect("store"));
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let now = now_ms() * 1000;
    for limit in [100u64, 10_000] {
        let limiter = Limiter::builder(format!("bench::mem{limit}"))
            .limit(Limit::new(LimitType::Ip, [Rule::from_millis(600_000, limit).expect("rule")]))
            .store(store.clone())
            .build()
            .expect("limiter");
        let ip = Subject::ip(IpAddr::from([192, 0, 2, 1]));
        for i in 0..limit {
            limiter.check(std::slice::from_ref(&ip)).at(crate::support::at(now + i)).await.expect("fill");
        }
        let key = format!("rate_limit:{{bench::mem{limit}|ip|192.0.2.1}}:sw:10mx{limit}");
        let ours: u64 = redis::cmd("MEMORY").arg("USAGE").arg(&key).query_async(&mut conn).await.expect("usage");
        // The same population with 36-character text members, as the seed's UUID strings.
        let text_key = format!("bench:text{limit}");
        for chunk in (0..limit).collect::<Vec<_>>().chunks(1000) {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(&text_key);
            for &i in chunk {
                cmd.arg(now + i).arg(uuid::Uuid::new_v4().to_string());
            }
            let _: i64 = cmd.query_async(&mut conn).await.expect("zadd");
        }
        let text: u64 = redis::cmd("MEMORY").arg("USAGE").arg(&text_key).query_async(&mut conn).await.expect("usage");
        println!(
            "limit {limit:>6}: {ours:>8} bytes with 16-byte members ({:.0} B/entry), {text:>8} with 36-char text ({:.0} B/entry)",
            ours as f64 / limit as f64,
            text as f64 / limit as f64
        );
    }
}

async fn growth(server: &RedisServer) {
    let store = Arc::new(RedisStore::open(&server.url(), Duration::from_secs(10)).expect("store"));
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let start = now_ms() * 1000;
    for (alg, label) in [(Algorithm::SlidingWindow, "SlidingWindow"), (Algorithm::Gcra, "Gcra")] {
        for population in [10u64, 1000, 100_000] {
            let limiter = Limiter::builder(format!("bench::growth::{label}::{population}"))
                .limit(
                    Limit::new(LimitType::Global, [Rule::from_millis(3_600_000, HUGE).expect("rule")])
                        .algorithm(alg)
                        .prefix("g:"),
                )
                .store(store.clone())
                .build()
                .expect("limiter");
            let g = [Subject::global()];
            limiter.check(&g).cost(population).at(crate::support::at(start)).await.expect("fill");
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.expect("reset");
            let mut samples = Vec::new();
            for i in 0..2000 {
                let t = Instant::now();
                limiter.check(&g).at(crate::support::at(start + 1 + i)).await.expect("allowed");
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
            samples.sort_by(f64::total_cmp);
            let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await.expect("info");
            let usec = crate::support::command_stat(&info, "evalsha", "usec_per_call");
            println!(
                "{label:<14} population {population:>7}: p50 {:>6} µs, server {:>6} µs per decision",
                fmt(quantile(&samples, 0.5)),
                fmt(usec)
            );
        }
    }
}
